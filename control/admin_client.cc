// Blocking admin API client: Beast over a private io_context, run only until the answer or the
// deadline, so every call is bounded in time.
#include "control/admin_client.h"

#include <sys/un.h>

#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "control/beast.h"

namespace sluice::control {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using unix_stream = asio::local::stream_protocol;
using generic_stream = asio::generic::stream_protocol;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

struct AdminConnection::Io {
  AdminEndpoint endpoint;
  uint32_t timeout_ms = 0;
  asio::io_context io;
  generic_stream::socket socket{io};
  beast::flat_buffer buffer;
  bool connected = false;  // open, and sluiced kept it alive after the last answer
};

namespace {

using Io = AdminConnection::Io;

// Answers can be large (the whole ownership table) but not unbounded.
constexpr uint32_t kReplyHeaderBytesMax = 64 * 1024;
constexpr uint64_t kReplyBodyBytesMax = uint64_t(1) << 30;

std::string describe(const AdminEndpoint& e) {
  if (!e.unix_path.empty()) return e.unix_path;
  const bool v6 = e.host.find(':') != std::string::npos;
  return (v6 ? "[" + e.host + "]" : e.host) + ":" + std::to_string(e.port);
}

std::string timeout_text(uint32_t timeout_ms) {
  return "sluiced did not answer within " + std::to_string(timeout_ms) + " ms";
}

void disconnect(Io& s) {
  error_code ec;
  s.socket.close(ec);
  s.buffer.clear();
  s.connected = false;
}

// Runs the private io_context until `done` or the deadline. On the deadline the socket is
// closed, so the pending operations finish (cancelled) before their locals go away.
bool run_until(Io& s, Clock::time_point deadline, const bool& done) {
  s.io.restart();
  while (!done && Clock::now() < deadline) {
    if (s.io.run_one_until(deadline) == 0 && s.io.stopped()) break;
  }
  if (done) return true;
  disconnect(s);
  s.io.restart();
  s.io.run();
  return false;
}

Result<> connect(Io& s, Clock::time_point deadline) {
  disconnect(s);
  const std::string where = describe(s.endpoint);
  std::vector<generic_stream::endpoint> targets;
  if (!s.endpoint.unix_path.empty()) {
    constexpr size_t kPathMax = sizeof(sockaddr_un::sun_path) - 1;
    if (s.endpoint.unix_path.size() > kPathMax) {
      return failure("cannot connect to sluiced at " + where + ": the path is longer than " +
                     std::to_string(kPathMax) + " bytes");
    }
    targets.emplace_back(unix_stream::endpoint(s.endpoint.unix_path));
  } else if (s.endpoint.host.empty()) {
    return failure("no admin endpoint: neither a Unix socket path nor a TCP host is given");
  } else {
    error_code ec;
    const auto address = asio::ip::make_address(s.endpoint.host, ec);
    if (!ec) {
      targets.emplace_back(tcp::endpoint(address, s.endpoint.port));
    } else {
      // Admin TCP is loopback only, so names are "localhost" and friends from /etc/hosts.
      tcp::resolver resolver(s.io);
      const auto results = resolver.resolve(s.endpoint.host, std::to_string(s.endpoint.port), ec);
      if (ec) return failure("cannot connect to sluiced at " + where + ": " + ec.message());
      for (const auto& r : results)
        targets.emplace_back(r.endpoint());
    }
  }
  error_code last = asio::error::host_not_found;
  for (const auto& target : targets) {
    disconnect(s);
    bool done = false;
    error_code result;
    s.socket.async_connect(target, [&](error_code ec) {
      result = ec;
      done = true;
    });
    if (!run_until(s, deadline, done)) return failure(timeout_text(s.timeout_ms));
    if (!result) {
      s.connected = true;
      return {};
    }
    last = result;
  }
  disconnect(s);
  std::string text = "cannot connect to sluiced at " + where + ": " + last.message();
  if (last == boost::system::errc::no_such_file_or_directory ||
      last == boost::system::errc::connection_refused) {
    text += " (is sluiced running?)";
  }
  return failure(std::move(text));
}

bool closed_before_answer(error_code ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

Result<AdminReply> call_until(Io& s, std::string_view method, std::string_view target,
                              std::string_view body, Clock::time_point deadline) {
  // Two attempts: the second only after sluiced closed a kept-alive connection unanswered.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = s.connected;
    if (!reused) {
      if (Result<> r = connect(s, deadline); !r) return tl::unexpected(std::move(r.error()));
    }
    http::request<http::string_body> req;
    req.version(11);
    req.method_string({method.data(), method.size()});
    req.target({target.data(), target.size()});
    req.set(http::field::host, "sluiced");
    req.set(http::field::user_agent, "sluicectl");
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body().assign(body.data(), body.size());
    }
    req.prepare_payload();

    http::response_parser<http::string_body> parser;
    parser.header_limit(kReplyHeaderBytesMax);
    parser.body_limit(kReplyBodyBytesMax);
    bool done = false;
    error_code write_ec;
    error_code read_ec;
    http::async_write(s.socket, req, [&](error_code ec, size_t) {
      write_ec = ec;
      // Read even when the write failed: sluiced may have answered early (413) and closed.
      http::async_read(s.socket, s.buffer, parser, [&](error_code rec, size_t) {
        read_ec = rec;
        done = true;
      });
    });
    if (!run_until(s, deadline, done)) return failure(timeout_text(s.timeout_ms));

    if (read_ec) {
      const bool nothing = !parser.got_some();
      disconnect(s);
      if (reused && attempt == 0 && nothing && closed_before_answer(read_ec)) continue;
      const std::string where = describe(s.endpoint);
      if (nothing && closed_before_answer(read_ec)) {
        return failure("sluiced at " + where + " closed the connection without answering");
      }
      const error_code& ec = write_ec && nothing ? write_ec : read_ec;
      return failure("connection to sluiced at " + where + " failed: " + ec.message());
    }
    http::response<http::string_body> res = parser.release();
    AdminReply reply;
    reply.status = res.result_int();
    const auto content_type = res[http::field::content_type];
    reply.content_type.assign(content_type.data(), content_type.size());
    reply.body = std::move(res.body());
    if (write_ec || !res.keep_alive()) disconnect(s);
    return reply;
  }
  return failure("sluiced at " + describe(s.endpoint) + " closed the connection without answering");
}

}  // namespace

Result<AdminReply> admin_call(const AdminEndpoint& endpoint, std::string_view method,
                              std::string_view target, std::string_view body, uint32_t timeout_ms) {
  Io s;
  s.endpoint = endpoint;
  s.timeout_ms = timeout_ms;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  if (Result<> r = connect(s, deadline); !r) return tl::unexpected(std::move(r.error()));
  return call_until(s, method, target, body, deadline);
}

AdminConnection::AdminConnection(std::unique_ptr<Io> io) : io_(std::move(io)) {}

AdminConnection::~AdminConnection() = default;

Result<std::unique_ptr<AdminConnection>> AdminConnection::open(const AdminEndpoint& endpoint,
                                                               uint32_t timeout_ms) {
  auto io = std::make_unique<Io>();
  io->endpoint = endpoint;
  io->timeout_ms = timeout_ms;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  if (Result<> r = connect(*io, deadline); !r) return tl::unexpected(std::move(r.error()));
  return std::unique_ptr<AdminConnection>(new AdminConnection(std::move(io)));
}

Result<AdminReply> AdminConnection::call(std::string_view method, std::string_view target,
                                         std::string_view body) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(io_->timeout_ms);
  return call_until(*io_, method, target, body, deadline);
}

std::string url_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    const bool unreserved = (u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') ||
                            (u >= '0' && u <= '9') || u == '-' || u == '.' || u == '_' || u == '~';
    if (unreserved) {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

}  // namespace sluice::control
