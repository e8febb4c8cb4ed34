// `sluice-load serve`: the benchmark sink's io_uring loop (accept, recv, send) around Sink.
#include "tools/sluice-load/serve.h"

#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tools/sluice-load/sink.h"
#include "tools/sluice-load/uring.h"

namespace sluice::load {

namespace {

constexpr size_t kRecvBytesInitial = 256u << 10;
constexpr size_t kRecvBytesMax = 4u << 20;  // > the largest frame the sink parses
constexpr int kListenBacklog = 1024;
constexpr uint64_t kSinkWaitNs = 100'000'000;  // signals and the deadline are checked this often
constexpr uint32_t kListenerId = 0xffffffffu;

volatile std::sig_atomic_t g_stop = 0;
void on_sink_signal(int) {
  g_stop = 1;
}

struct SinkConn {
  int fd = -1;
  uint32_t gen = 0;
  bool recv_armed = false;
  bool send_armed = false;
  bool dead = false;    // shut down; closed once no operation is armed
  bool paused = false;  // input held back while the sink is congested
  std::vector<char> in;
  size_t in_len = 0;
  std::string flight;
  size_t flight_off = 0;
};

class SinkLoop {
 public:
  explicit SinkLoop(const ServeOptions& o) : o_(o), sink_(o.connections_max) {}

  int run() {
    listen_fd_ = tcp_listen(o_.host, o_.port, kListenBacklog);
    if (listen_fd_ < 0) {
      std::fprintf(stderr, "sluice-load serve: --listen %s:%u: %s\n", o_.host.c_str(), o_.port,
                   errno_text(listen_fd_).c_str());
      return 1;
    }
    std::fprintf(stderr, "sluice-load serve: listening on %s:%u (benchmark sink, not a broker)\n",
                 o_.host.c_str(), o_.port);
    arm_accept();
    const uint64_t end = o_.duration_s > 0 ? now_ns() + uint64_t(o_.duration_s * 1e9) : 0;
    while (!g_stop && (end == 0 || now_ns() < end)) {
      if (!ring_.submit_and_wait(kSinkWaitNs)) break;
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(ring_.get(), head, cqe) {
        ++seen;
        complete(cqe->user_data, cqe->res);
      }
      io_uring_cq_advance(ring_.get(), seen);
      if (!sink_.congested() && !paused_.empty()) {
        std::vector<uint32_t> resume;
        resume.swap(paused_);
        for (uint32_t id : resume) {
          conns_[id].paused = false;
          process(id);
        }
      }
      for (uint32_t id : sink_.dirty())
        flush(id);
      sink_.clear_dirty();
    }
    const Sink::Stats& s = sink_.stats();
    std::fprintf(stderr,
                 "sluice-load serve: connections=%llu sends=%llu delivered=%llu dropped=%llu "
                 "receipts=%llu errors=%llu\n",
                 (unsigned long long)s.connections, (unsigned long long)s.sends,
                 (unsigned long long)s.delivered, (unsigned long long)s.dropped,
                 (unsigned long long)s.receipts, (unsigned long long)s.errors);
    ::close(listen_fd_);
    for (SinkConn& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
    return 0;
  }

 private:
  void arm_accept() {
    io_uring_sqe* s = ring_.sqe();
    io_uring_prep_accept(s, listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(s, pack(kListenerId, 0, Op::kAccept));
  }

  void arm_recv(uint32_t id) {
    SinkConn& c = conns_[id];
    if (c.recv_armed || c.dead) return;
    if (c.in_len == c.in.size()) {
      if (c.in.size() >= kRecvBytesMax) return kill(id);  // a frame over every limit
      c.in.resize(std::min(c.in.size() * 2, kRecvBytesMax));
    }
    io_uring_sqe* s = ring_.sqe();
    io_uring_prep_recv(s, c.fd, c.in.data() + c.in_len, c.in.size() - c.in_len, 0);
    io_uring_sqe_set_data64(s, pack(id, c.gen, Op::kRecv));
    c.recv_armed = true;
  }

  void flush(uint32_t id) {
    SinkConn& c = conns_[id];
    if (c.dead || c.send_armed) return;
    if (sink_.pending_bytes(id) > 0) {
      sink_.take_output(id, &c.flight);
      c.flight_off = 0;
      io_uring_sqe* s = ring_.sqe();
      io_uring_prep_send(s, c.fd, c.flight.data(), c.flight.size(), MSG_NOSIGNAL);
      io_uring_sqe_set_data64(s, pack(id, c.gen, Op::kSend));
      c.send_armed = true;
    } else if (sink_.closing(id)) {
      kill(id);
    }
  }

  void process(uint32_t id) {
    SinkConn& c = conns_[id];
    if (c.dead) return;
    if (c.in_len > 0) {
      const size_t used = sink_.on_bytes(id, std::string_view(c.in.data(), c.in_len));
      std::memmove(c.in.data(), c.in.data() + used, c.in_len - used);
      c.in_len -= used;
    }
    if (sink_.closing(id)) return flush(id);
    if (sink_.congested()) {
      if (!c.paused) paused_.push_back(id);
      c.paused = true;
      return;
    }
    arm_recv(id);
  }

  void kill(uint32_t id) {
    SinkConn& c = conns_[id];
    if (!c.dead) {
      c.dead = true;
      ::shutdown(c.fd, SHUT_RDWR);
    }
    if (c.recv_armed || c.send_armed) return;  // closed when they complete
    ::close(c.fd);
    c.fd = -1;
    ++c.gen;
    sink_.close(id);
  }

  void complete(uint64_t ud, int res) {
    if (op_of(ud) == Op::kAccept) {
      if (res >= 0) {
        const uint32_t id = sink_.open();
        if (id == ~uint32_t(0)) {
          ::close(res);  // --connections-max reached
        } else {
          if (id >= conns_.size()) conns_.resize(id + 1);
          SinkConn& c = conns_[id];
          const uint32_t gen = c.gen;
          c = SinkConn{};
          c.gen = gen;
          c.fd = res;
          c.in.resize(kRecvBytesInitial);
          arm_recv(id);
        }
      }
      if (!g_stop) arm_accept();
      return;
    }
    const uint32_t id = conn_of(ud);
    SinkConn& c = conns_[id];
    if (op_of(ud) == Op::kRecv) {
      c.recv_armed = false;
      if (res <= 0 || c.dead) return kill(id);
      c.in_len += size_t(res);
      return process(id);
    }
    c.send_armed = false;
    if (res < 0 || c.dead) return kill(id);
    c.flight_off += size_t(res);
    if (c.flight_off < c.flight.size()) {
      io_uring_sqe* s = ring_.sqe();
      io_uring_prep_send(s, c.fd, c.flight.data() + c.flight_off, c.flight.size() - c.flight_off,
                         MSG_NOSIGNAL);
      io_uring_sqe_set_data64(s, pack(id, c.gen, Op::kSend));
      c.send_armed = true;
      return;
    }
    flush(id);
    // Input held back because the output had no room is taken up again.
    if (!c.dead && !c.paused && c.in_len > 0 && !sink_.congested()) process(id);
  }

  const ServeOptions& o_;
  Ring ring_;
  Sink sink_;
  int listen_fd_ = -1;
  std::vector<SinkConn> conns_;
  std::vector<uint32_t> paused_;
};

}  // namespace

int run_serve(const ServeOptions& options) {
  std::signal(SIGINT, on_sink_signal);
  std::signal(SIGTERM, on_sink_signal);
  std::signal(SIGPIPE, SIG_IGN);
  SinkLoop loop(options);
  return loop.run();
}

}  // namespace sluice::load
