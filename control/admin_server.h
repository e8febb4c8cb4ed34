// Transport of the admin API: HTTP/1.1 + JSON on a Unix socket and optionally a loopback TCP
// port. The routes are someone else's: every request goes to one AdminHandler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/result.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace sluice::control {

struct AdminRequest {
  std::string method;                        // "GET", "PUT", "POST", "DELETE", ...
  std::string path;                          // target before '?', percent-decoded
  std::map<std::string, std::string> query;  // percent-decoded ('+' is a space); last wins
  std::string body;
};

struct AdminResponse {
  unsigned status = 200;  // 200..599; anything else is answered as a 500
  std::string content_type = "application/json";
  std::string body;
};

// Runs on the io_context's thread, one request at a time. An exception becomes a 500.
using AdminHandler = std::function<AdminResponse(const AdminRequest&)>;

struct AdminServerLimits {
  size_t connections_max = 64;  // more are accepted and closed at once with a 503 answer
  size_t header_bytes_max = 16 * 1024;
  size_t body_bytes_max = 64u << 20;  // a batch of pins can be large
  uint32_t read_timeout_ms = 10'000;  // one request must arrive (and its answer leave) within this
  uint32_t idle_timeout_ms = 60'000;  // keep-alive connection with no request is closed
};

struct AdminServerState;  // defined in admin_server.cc; outlives the server while I/O drains

// All member functions except counters() must be called on the io_context's thread, or while
// the io_context is not running. Destroy the server before its io_context.
class AdminServer {
 public:
  AdminServer(boost::asio::io_context& io, AdminHandler handler, AdminServerLimits limits = {});
  ~AdminServer();  // closes
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Unix socket: if the path exists and is a socket nobody accepts on (stale, from a crashed
  // daemon), remove it; if something answers there, refuse; if it exists and is not a socket,
  // refuse. Binds, chmod 0660, listens. An error names the path.
  Result<> listen_unix(const std::string& path);
  // TCP: host must be a loopback address (127.0.0.0/8, "localhost", or ::1), since the API has
  // no authentication. Port 0 picks a free port (see tcp_port()).
  Result<> listen_tcp(const std::string& host, uint16_t port);
  // Port of the first TCP listener, 0 when there is none.
  uint16_t tcp_port() const;
  // Stops accepting, closes open connections, removes the socket files it created. Idempotent.
  // A handler that calls close() gets its answer dropped.
  void close();

  struct Counters {
    uint64_t requests = 0;              // reached the handler
    uint64_t bad_requests = 0;          // answered 400 / 413 / 431 without the handler
    uint64_t connections_rejected = 0;  // over connections_max, answered 503
    size_t connections_open = 0;
  };
  // Safe to call from any thread.
  Counters counters() const;

 private:
  std::shared_ptr<AdminServerState> state_;
};

}  // namespace sluice::control
