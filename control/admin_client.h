// Client side of the admin API: blocking HTTP/1.1 calls to sluiced over its Unix socket or
// loopback TCP port, for sluicectl, tests and benchmarks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"

namespace sluice::control {

struct AdminEndpoint {
  std::string unix_path;  // used when not empty
  std::string host;       // else TCP host:port
  uint16_t port = 0;
};

struct AdminReply {
  unsigned status = 0;
  std::string content_type;
  std::string body;
};

// Blocking: one request on a new connection, bounded by timeout_ms overall (connect included).
// The error is one clear line, e.g.
//   "cannot connect to sluiced at /run/sluice/admin.sock: No such file or directory (is sluiced
//   running?)", "cannot connect to sluiced at /x.sock: Permission denied",
//   "sluiced did not answer within 5000 ms".
// A non-empty body is sent with Content-Type: application/json.
Result<AdminReply> admin_call(const AdminEndpoint& endpoint, std::string_view method,
                              std::string_view target, std::string_view body,
                              uint32_t timeout_ms = 5000);

// A kept-alive connection for many requests. If sluiced closed it between calls (idle timeout,
// "Connection: close"), the next call reconnects; a request is sent again only when the old
// connection closed before any byte of the answer arrived.
class AdminConnection {
 public:
  struct Io;  // defined in admin_client.cc

  // timeout_ms bounds the connect, and then each call on its own.
  static Result<std::unique_ptr<AdminConnection>> open(const AdminEndpoint& endpoint,
                                                       uint32_t timeout_ms);
  ~AdminConnection();
  AdminConnection(const AdminConnection&) = delete;
  AdminConnection& operator=(const AdminConnection&) = delete;

  Result<AdminReply> call(std::string_view method, std::string_view target, std::string_view body);

 private:
  explicit AdminConnection(std::unique_ptr<Io> io);
  std::unique_ptr<Io> io_;
};

// Percent-encodes a query component (everything except unreserved A-Z a-z 0-9 - . _ ~).
std::string url_encode(std::string_view s);

}  // namespace sluice::control
