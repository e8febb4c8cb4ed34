// Admin API transport with Boost.Beast: accepts on Unix and loopback TCP sockets, parses bounded
// HTTP/1.1 requests, calls the handler synchronously and writes its answer.
#include "control/admin_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <nlohmann/json.hpp>

#include "control/beast.h"
#include "control/log.h"

namespace sluice::control {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using unix_stream = asio::local::stream_protocol;
using generic_stream = asio::generic::stream_protocol;
using error_code = boost::system::error_code;

// After an answer that ends the connection the client may still be sending (a body we refused);
// closing with unread bytes makes the kernel reset the connection and the client can lose the
// answer. So shut down our side and read a bounded amount for a bounded time first.
constexpr size_t kLingerBytesMax = 1u << 20;
constexpr uint32_t kLingerMs = 1000;
// accept() failing (EMFILE, ENFILE) must not spin the control thread.
constexpr uint32_t kAcceptRetryMs = 100;

std::string error_json(std::string_view message) {
  const nlohmann::json j = {{"error", message}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string system_message(int err) {
  return std::error_code(err, std::system_category()).message();
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      const int hi = hex_value(s[i + 1]);
      const int lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(char(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Fills path and query from an origin-form target; the error is text for the client.
Result<> parse_target(std::string_view target, AdminRequest& out) {
  if (target.empty() || target.front() != '/') {
    return failure("request target must start with '/'");
  }
  const size_t q = target.find('?');
  auto path = percent_decode(target.substr(0, q), false);
  if (!path) return failure("malformed percent-encoding in the request path");
  out.path = std::move(*path);
  if (q == std::string_view::npos) return {};
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view part = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    auto key = percent_decode(part.substr(0, eq), true);
    auto value = percent_decode(eq == std::string_view::npos ? "" : part.substr(eq + 1), true);
    if (!key || !value) return failure("malformed percent-encoding in the query string");
    out.query[std::move(*key)] = std::move(*value);
  }
  return {};
}

class Connection;

}  // namespace

struct AdminServerState : std::enable_shared_from_this<AdminServerState> {
  struct SocketFile {
    std::string path;
    dev_t dev = 0;
    ino_t ino = 0;
  };

  AdminServerState(asio::io_context& io_context, AdminHandler h, AdminServerLimits l)
      : io(io_context), handler(std::move(h)), limits(l) {}

  void admit(generic_stream::socket socket);

  asio::io_context& io;
  AdminHandler handler;
  AdminServerLimits limits;
  bool closed = false;
  uint16_t tcp_port = 0;
  std::vector<std::shared_ptr<tcp::acceptor>> tcp_acceptors;
  std::vector<std::shared_ptr<unix_stream::acceptor>> unix_acceptors;
  std::vector<SocketFile> socket_files;
  uint64_t next_connection_id = 1;
  std::map<uint64_t, std::weak_ptr<Connection>> connections;

  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> bad_requests{0};
  std::atomic<uint64_t> connections_rejected{0};
  std::atomic<size_t> connections_open{0};
};

namespace {

// One accepted socket. Every asynchronous step holds a shared_ptr to it, and every completion
// first checks whether the connection or the server was closed meanwhile.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<AdminServerState> state, generic_stream::socket socket, uint64_t id,
             bool counted)
      : state_(std::move(state)),
        socket_(std::move(socket)),
        timer_(state_->io),
        id_(id),
        counted_(counted) {}
  // asio's cancel() throws on a failure it never has on Linux; a destructor logs it instead.
  ~Connection() {
    try {
      stop();
    } catch (const std::exception& e) {
      log_event(LogLevel::kWarn, "admin_connection_close_failed", {{"error", e.what()}});
    }
  }

  void start() { wait_request(); }

  void reject() {
    state_->connections_rejected++;
    answer_error(503, "too many admin connections (limit " +
                          std::to_string(state_->limits.connections_max) + "); try again later");
  }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    error_code ec;
    socket_.close(ec);
    timer_.cancel();
    state_->connections.erase(id_);
    if (counted_) state_->connections_open--;
  }

 private:
  bool gone() const { return stopped_ || state_->closed; }

  // Each arming cancels the previous wait; the generation guards against an expiry that was
  // already queued when the timer was re-armed.
  void arm_timer(uint32_t ms) {
    timer_.expires_after(std::chrono::milliseconds(ms));
    const uint64_t generation = ++timer_generation_;
    timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (ec || generation != self->timer_generation_) return;
      self->stop();
    });
  }

  // A new connection has read_timeout_ms for its first request; between keep-alive requests the
  // idle timeout runs until the first byte of the next one arrives.
  void wait_request() {
    if (gone()) return stop();
    if (first_request_ || buffer_.size() > 0) return read_header();
    arm_timer(state_->limits.idle_timeout_ms);
    socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this()](error_code ec) {
      if (ec || self->gone()) return self->stop();
      self->read_header();
    });
  }

  void read_header() {
    first_request_ = false;
    arm_timer(state_->limits.read_timeout_ms);
    parser_.emplace();
    const size_t header_max = std::min<size_t>(state_->limits.header_bytes_max, UINT32_MAX);
    parser_->header_limit(uint32_t(header_max));
    parser_->body_limit(uint64_t(state_->limits.body_bytes_max));
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (gone()) return stop();
    if (ec) return on_read_error(ec);
    const auto& req = parser_->get();
    const bool expects_continue =
        req.version() >= 11 && beast::iequals(req[http::field::expect], "100-continue");
    if (!expects_continue || parser_->is_done()) return read_body();
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self = shared_from_this()](error_code wec, size_t) {
                        if (wec || self->gone()) return self->stop();
                        self->read_body();
                      });
  }

  void read_body() {
    if (parser_->is_done()) return on_body({});
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_read_error(error_code ec) {
    const auto& limits = state_->limits;
    if (ec == http::error::header_limit) {
      return answer_error(431, "request header is larger than the limit of " +
                                   std::to_string(limits.header_bytes_max) + " bytes");
    }
    if (ec == http::error::body_limit) {
      return answer_error(413, "request body is larger than the limit of " +
                                   std::to_string(limits.body_bytes_max) + " bytes");
    }
    // The peer went away (cleanly or mid-request): nobody to answer.
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec.category() != http::make_error_code(http::error::bad_target).category()) {
      return stop();
    }
    answer_error(400, "malformed HTTP request: " + ec.message());
  }

  void on_body(error_code ec) {
    if (gone()) return stop();
    if (ec) return on_read_error(ec);
    http::request<http::string_body> req = parser_->release();
    parser_.reset();
    AdminRequest request;
    request.method = std::string(req.method_string());
    const auto target = req.target();
    if (Result<> r = parse_target({target.data(), target.size()}, request); !r) {
      return answer_error(400, r.error().message);
    }
    request.body = std::move(req.body());
    const bool keep_alive = req.keep_alive();
    state_->requests++;

    AdminResponse out;
    try {
      out = state_->handler(request);
    } catch (const std::exception& e) {
      out = {500, "application/json", error_json(std::string("internal error: ") + e.what())};
    } catch (...) {
      out = {500, "application/json", error_json("internal error: unknown exception")};
    }
    if (gone()) return stop();  // the handler closed the server
    if (out.status < 200 || out.status > 599) {
      out = {
          500, "application/json",
          error_json("internal error: handler answered with status " + std::to_string(out.status))};
    }
    write(out.status, out.content_type, std::move(out.body), req.version(), keep_alive);
  }

  void write(unsigned status, const std::string& content_type, std::string body, unsigned version,
             bool keep_alive) {
    response_ = {};
    response_.version(version == 10 ? 10 : 11);
    response_.result(status);
    response_.set(http::field::server, "sluiced");
    if (status == 204 || status == 304) {
      body.clear();  // these carry no body by definition
    } else if (!content_type.empty()) {
      response_.set(http::field::content_type, content_type);
    }
    response_.body() = std::move(body);
    response_.keep_alive(keep_alive);
    response_.prepare_payload();
    arm_timer(state_->limits.read_timeout_ms);  // a client that does not read is cut off
    http::async_write(socket_, response_,
                      [self = shared_from_this(), keep_alive](error_code ec, size_t) {
                        if (ec || self->gone()) return self->stop();
                        if (keep_alive) return self->wait_request();
                        self->linger();
                      });
  }

  void answer_error(unsigned status, const std::string& message) {
    if (status != 503) state_->bad_requests++;
    write(status, "application/json", error_json(message), 11, false);
  }

  void linger() {
    error_code ec;
    socket_.shutdown(asio::socket_base::shutdown_send, ec);
    if (ec) return stop();
    arm_timer(kLingerMs);
    drain();
  }

  void drain() {
    socket_.async_read_some(asio::buffer(drain_buffer_),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->lingered_bytes_ += n;
                              if (ec || self->gone() || self->lingered_bytes_ > kLingerBytesMax) {
                                return self->stop();
                              }
                              self->drain();
                            });
  }

  std::shared_ptr<AdminServerState> state_;
  generic_stream::socket socket_;
  asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  const uint64_t id_;
  const bool counted_;  // in connections_open (a rejected one is not)
  bool stopped_ = false;
  bool first_request_ = true;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;  // alive while async_write runs
  size_t lingered_bytes_ = 0;
  std::array<char, 4096> drain_buffer_;
};

template <class Acceptor>
void accept_next(std::shared_ptr<AdminServerState> state, std::shared_ptr<Acceptor> acceptor) {
  auto socket = std::make_shared<generic_stream::socket>(state->io);
  acceptor->async_accept(*socket, [state, acceptor, socket](error_code ec) {
    if (state->closed || ec == asio::error::operation_aborted) return;
    if (ec) {
      auto timer = std::make_shared<asio::steady_timer>(state->io);
      timer->expires_after(std::chrono::milliseconds(kAcceptRetryMs));
      timer->async_wait([state, acceptor, timer](error_code) {
        if (!state->closed) accept_next(state, acceptor);
      });
      return;
    }
    state->admit(std::move(*socket));
    accept_next(state, acceptor);
  });
}

std::string describe(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
}

}  // namespace

void AdminServerState::admit(generic_stream::socket socket) {
  const bool over = connections_open.load() >= limits.connections_max;
  const uint64_t id = next_connection_id++;
  auto conn = std::make_shared<Connection>(shared_from_this(), std::move(socket), id, !over);
  connections[id] = conn;
  if (over) {
    conn->reject();
  } else {
    connections_open++;
    conn->start();
  }
}

AdminServer::AdminServer(asio::io_context& io, AdminHandler handler, AdminServerLimits limits)
    : state_(std::make_shared<AdminServerState>(io, std::move(handler), limits)) {}

AdminServer::~AdminServer() {
  try {
    close();
  } catch (const std::exception& e) {
    log_event(LogLevel::kWarn, "admin_server_close_failed", {{"error", e.what()}});
  }
}

Result<> AdminServer::listen_unix(const std::string& path) {
  if (state_->closed) return failure("admin server is closed; cannot listen on " + path);
  if (path.empty()) return failure("admin socket path is empty");
  constexpr size_t kPathMax = sizeof(sockaddr_un::sun_path) - 1;
  if (path.size() > kPathMax) {
    return failure("admin socket path " + path + " is too long (" + std::to_string(path.size()) +
                   " bytes, at most " + std::to_string(kPathMax) + ")");
  }
  const unix_stream::endpoint endpoint(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return failure("admin socket " + path +
                     " exists and is not a socket; remove it or choose another path");
    }
    // Non-blocking, so a live server with a full backlog counts as live instead of hanging us.
    unix_stream::socket probe(state_->io);
    error_code ec;
    probe.open(unix_stream(), ec);
    if (!ec) probe.non_blocking(true, ec);
    if (!ec) probe.connect(endpoint, ec);
    if (!ec || ec == asio::error::would_block || ec == asio::error::try_again) {
      return failure("admin socket " + path + " is in use by another process");
    }
    if (ec != asio::error::connection_refused) {
      return failure("cannot check admin socket " + path + ": " + ec.message());
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return failure("cannot remove stale admin socket " + path + ": " + system_message(errno));
    }
  } else if (errno != ENOENT) {
    return failure("cannot check admin socket " + path + ": " + system_message(errno));
  }

  auto acceptor = std::make_shared<unix_stream::acceptor>(state_->io);
  error_code ec;
  acceptor->open(unix_stream(), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (ec) return failure("cannot bind admin socket " + path + ": " + ec.message());
  // Before listen(), so nobody outside the group ever connects.
  if (::chmod(path.c_str(), 0660) != 0 || ::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    acceptor->close(ec);
    ::unlink(path.c_str());
    return failure("cannot set mode 0660 on admin socket " + path + ": " + system_message(err));
  }
  acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    acceptor->close(ec);
    ::unlink(path.c_str());
    return failure("cannot listen on admin socket " + path + ": " + ec.message());
  }
  state_->socket_files.push_back({path, st.st_dev, st.st_ino});
  state_->unix_acceptors.push_back(acceptor);
  accept_next(state_, acceptor);
  return {};
}

Result<> AdminServer::listen_tcp(const std::string& host, uint16_t port) {
  if (state_->closed) return failure("admin server is closed; cannot listen on " + host);
  asio::ip::address address;
  if (host == "localhost") {
    address = asio::ip::address_v4::loopback();
  } else {
    error_code ec;
    address = asio::ip::make_address(host, ec);
    if (ec) return failure("admin TCP host '" + host + "' is not an IP address or 'localhost'");
  }
  if (!address.is_loopback()) {
    return failure("admin TCP host " + host +
                   " is not a loopback address; the admin API has no authentication, so it listens "
                   "only on 127.0.0.0/8, ::1 or localhost");
  }
  const tcp::endpoint endpoint(address, port);
  auto acceptor = std::make_shared<tcp::acceptor>(state_->io);
  error_code ec;
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(asio::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = acceptor->local_endpoint(ec);
  if (ec)
    return failure("cannot listen for the admin API on " + describe(endpoint) + ": " +
                   ec.message());
  if (state_->tcp_port == 0) state_->tcp_port = bound.port();
  state_->tcp_acceptors.push_back(acceptor);
  accept_next(state_, acceptor);
  return {};
}

uint16_t AdminServer::tcp_port() const {
  return state_->tcp_port;
}

void AdminServer::close() {
  AdminServerState& s = *state_;
  if (s.closed) return;
  s.closed = true;
  error_code ec;
  for (auto& a : s.tcp_acceptors)
    a->close(ec);
  for (auto& a : s.unix_acceptors)
    a->close(ec);
  s.tcp_acceptors.clear();
  s.unix_acceptors.clear();
  // Only our own file: another daemon may have replaced it meanwhile.
  for (const auto& f : s.socket_files) {
    struct stat st {};
    if (::lstat(f.path.c_str(), &st) == 0 && st.st_dev == f.dev && st.st_ino == f.ino) {
      ::unlink(f.path.c_str());
    }
  }
  s.socket_files.clear();
  auto connections = std::move(s.connections);
  s.connections.clear();
  for (auto& [id, weak] : connections) {
    if (auto c = weak.lock()) c->stop();
  }
}

AdminServer::Counters AdminServer::counters() const {
  Counters c;
  c.requests = state_->requests.load();
  c.bad_requests = state_->bad_requests.load();
  c.connections_rejected = state_->connections_rejected.load();
  c.connections_open = state_->connections_open.load();
  return c;
}

}  // namespace sluice::control
