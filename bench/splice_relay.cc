// The least a TCP relay can do: accept, connect upstream, and move each direction's bytes with
// blocking splice(2) through a pipe, one thread per direction. No parsing, no event loop, no
// limits, no user-space copy. The scenario harness runs it as the `relay` arrangement, the floor
// of any proxy that splices on the same cores (bench/SCENARIOS.md): what the machine leaves for a
// gateway, next to what sluiced and HAProxy reach. A benchmark tool only; never a gateway.
// Usage: splice_relay --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT [--pipe-bytes N]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

namespace {

bool parse_endpoint(std::string_view text, sockaddr_in& out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  const std::string host(text.substr(0, colon));
  unsigned port = 0;
  const std::string_view p = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc{} || end != p.data() + p.size() || port == 0 || port > 65535) return false;
  out = {};
  out.sin_family = AF_INET;
  out.sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, host.c_str(), &out.sin_addr) == 1;
}

// One direction until EOF or an error, then a half close of `to`, as a proxy passes a FIN on.
void pump(int from, int to, int pipe_bytes) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    shutdown(to, SHUT_WR);
    return;
  }
  fcntl(p[1], F_SETPIPE_SZ, pipe_bytes);
  for (;;) {
    const ssize_t in = splice(from, nullptr, p[1], nullptr, size_t(pipe_bytes), SPLICE_F_MOVE);
    if (in <= 0) break;
    ssize_t left = in;
    while (left > 0) {
      const ssize_t out = splice(p[0], nullptr, to, nullptr, size_t(left), SPLICE_F_MOVE);
      if (out <= 0) goto done;
      left -= out;
    }
  }
done:
  shutdown(to, SHUT_WR);
  close(p[0]);
  close(p[1]);
}

void relay(int client, sockaddr_in upstream, int pipe_bytes) {
  const int one = 1;
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (server < 0 ||
      connect(server, reinterpret_cast<const sockaddr*>(&upstream), sizeof upstream) != 0) {
    if (server >= 0) close(server);
    close(client);
    return;
  }
  setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::thread back(pump, server, client, pipe_bytes);
  pump(client, server, pipe_bytes);
  back.join();
  close(server);
  close(client);
}

}  // namespace

int main(int argc, char** argv) {
  sockaddr_in listen_at{}, upstream{};
  bool have_listen = false, have_upstream = false;
  int pipe_bytes = 1 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i], value = argv[i + 1];
    if (flag == "--listen") {
      have_listen = parse_endpoint(value, listen_at);
    } else if (flag == "--upstream") {
      have_upstream = parse_endpoint(value, upstream);
    } else if (flag == "--pipe-bytes") {
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), pipe_bytes);
      if (ec != std::errc{} || end != value.data() + value.size() || pipe_bytes < 4096) {
        have_listen = false;
      }
    } else {
      have_listen = false;
    }
  }
  if (argc % 2 == 0 || !have_listen || !have_upstream) {
    std::fprintf(stderr,
                 "usage: splice_relay --listen IPV4:PORT --upstream IPV4:PORT "
                 "[--pipe-bytes N (>= 4096)]\n");
    return 2;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, reinterpret_cast<const sockaddr*>(&listen_at), sizeof listen_at) != 0 ||
      listen(fd, 4096) != 0) {
    std::fprintf(stderr, "splice_relay: cannot listen: %s\n", std::strerror(errno));
    return 1;
  }
  for (;;) {
    const int client = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) {
        usleep(1000);  // out of descriptors: the harness asked for more sessions than fit
        continue;
      }
      std::fprintf(stderr, "splice_relay: accept: %s\n", std::strerror(errno));
      return 1;
    }
    std::thread(relay, client, upstream, pipe_bytes).detach();
  }
}
