// One probe as a small state machine on the io_context: resolve, connect, and for STOMP write
// CONNECT and read the reply through the session parser, all under one deadline timer.
#include "control/probe.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "control/peer_text.h"
#include "dataplane/session/builder.h"
#include "dataplane/session/parser.h"
#include "dataplane/session/stomp.h"

namespace sluice::control {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

// The first word of a reply that is not STOMP, quoted in the error.
constexpr size_t kTokenBytesMax = 32;

// The ERROR frame's message header, decoded when it holds escapes: brokers answer in the highest
// version offered, and 1.2's escapes are a superset of 1.1's.
std::string decoded_message(std::string_view raw) {
  if (!session::header_needs_unescape(raw) ||
      !session::header_escapes_valid(raw, session::Version::k1_2)) {
    return printable(raw, kQuotedBytesMax);
  }
  std::string out(raw.size(), '\0');
  const std::optional<size_t> n = session::unescape_header(raw, std::span<char>(out));
  if (!n) return printable(raw, kQuotedBytesMax);
  out.resize(*n);
  return printable(out, kQuotedBytesMax);
}

session::FrameLimits reply_limits() {
  session::FrameLimits limits;
  limits.frame_bytes_max = uint32_t(kProbeReplyBytesMax);
  limits.body_bytes_max = uint32_t(kProbeReplyBytesMax);
  return limits;
}

class Probe : public std::enable_shared_from_this<Probe> {
 public:
  Probe(asio::io_context& io, std::string host, uint16_t port, ProbeSettings settings,
        std::function<void(ProbeResult)> done)
      : host_(std::move(host)),
        port_(port),
        settings_(std::move(settings)),
        done_(std::move(done)),
        resolver_(io),
        socket_(io),
        timer_(io),
        started_(Clock::now()),
        parser_(reply_limits()) {}

  void start() {
    timer_.expires_after(std::chrono::milliseconds(settings_.timeout_ms));
    timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (self->finished_ || ec == asio::error::operation_aborted) return;
      self->finish(false, "timed out after " + std::to_string(self->settings_.timeout_ms) + " ms");
    });
    resolver_.async_resolve(host_, std::to_string(port_), tcp::resolver::numeric_service,
                            [self = shared_from_this()](
                                const error_code& ec, const tcp::resolver::results_type& results) {
                              self->on_resolved(ec, results);
                            });
  }

 private:
  // "host:port", with an IPv6 literal in brackets.
  std::string address() const {
    const bool v6 = host_.find(':') != std::string::npos;
    return (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
  }

  void on_resolved(const error_code& ec, const tcp::resolver::results_type& results) {
    if (finished_) return;
    if (ec) return finish(false, "resolve " + host_ + ": " + ec.message());
    asio::async_connect(socket_, results,
                        [self = shared_from_this()](const error_code& e, const tcp::endpoint&) {
                          self->on_connected(e);
                        });
  }

  void on_connected(const error_code& ec) {
    if (finished_) return;
    if (ec) return finish(false, "connect " + address() + ": " + ec.message());
    if (settings_.kind == ProbeKind::kTcp) return finish(true, {});
    send_connect();
  }

  void send_connect() {
    // CONNECT headers are never escaped: the writer refuses octets that would break the frame.
    // Room for the fixed headers plus the configured values, so only such octets can fail it.
    request_.resize(256 + settings_.login.size() + settings_.passcode.size() +
                    settings_.vhost.size());
    session::FrameWriter w(std::span<char>(request_), session::Command::kConnect,
                           session::Version::k1_2);
    w.header("accept-version", "1.0,1.1,1.2").header("host", settings_.vhost);
    if (!settings_.login.empty()) w.header("login", settings_.login);
    if (!settings_.passcode.empty()) w.header("passcode", settings_.passcode);
    w.header("heart-beat", "0,0");
    const std::optional<std::string_view> frame = w.finish();
    if (!frame) {
      return finish(false,
                    "stomp: cannot build CONNECT: login, passcode or vhost holds CR, LF or NUL");
    }
    request_.resize(frame->size());
    reply_.resize(kProbeReplyBytesMax);
    asio::async_write(socket_, asio::buffer(request_),
                      [self = shared_from_this()](const error_code& ec, size_t) {
                        if (self->finished_) return;
                        if (ec) return self->finish(false, "stomp: send CONNECT: " + ec.message());
                        self->read_reply();
                      });
  }

  void read_reply() {
    socket_.async_read_some(
        asio::buffer(reply_.data() + end_, reply_.size() - end_),
        [self = shared_from_this()](const error_code& ec, size_t n) { self->on_read(ec, n); });
  }

  void on_read(const error_code& ec, size_t n) {
    if (finished_) return;
    if (ec == asio::error::eof) {
      return finish(false, end_ > begin_
                               ? "stomp: connection closed in the middle of the reply to CONNECT"
                               : "stomp: connection closed before the broker answered CONNECT");
    }
    if (ec) return finish(false, "stomp: read: " + ec.message());
    end_ += n;
    // Heart-beats may precede the frame; the buffer's bound covers them too.
    for (;;) {
      const std::string_view pending(reply_.data() + begin_, end_ - begin_);
      const session::ParseResult r = parser_.parse(pending);
      switch (r.status) {
        case session::ParseResult::Status::kHeartbeat:
          begin_ += r.consumed;
          continue;
        case session::ParseResult::Status::kFrame:
          return judge(parser_.frame());
        case session::ParseResult::Status::kError:
          return finish(false, parse_failure(r.error, pending));
        case session::ParseResult::Status::kNeedMore:
          break;
      }
      break;
    }
    if (end_ == reply_.size()) {
      return finish(false, "stomp: no complete frame in the first " +
                               std::to_string(kProbeReplyBytesMax) + " bytes of the reply");
    }
    read_reply();
  }

  static std::string parse_failure(session::ParseError e, std::string_view pending) {
    if (e == session::ParseError::kUnknownCommand) {
      const size_t end = std::min(pending.find_first_of(std::string_view(" \t\r\n\0", 5)),
                                  std::min(pending.size(), kTokenBytesMax));
      return "stomp: expected CONNECTED, got '" + printable(pending.substr(0, end), end) + "'";
    }
    if (e == session::ParseError::kFrameTooLarge || e == session::ParseError::kBodyTooLarge) {
      return "stomp: reply to CONNECT larger than " + std::to_string(kProbeReplyBytesMax) +
             " bytes";
    }
    return "stomp: bad reply to CONNECT: " + std::string(session::parse_error_message(e));
  }

  void judge(const session::Frame& frame) {
    if (frame.command() == session::Command::kConnected) {
      // A clean goodbye keeps "client closed the connection unexpectedly" out of broker logs.
      // The socket's send buffer is empty, so this small write completes without blocking.
      static constexpr std::string_view kDisconnect("DISCONNECT\n\n\0", 13);
      error_code ignored;
      socket_.non_blocking(true, ignored);
      socket_.write_some(asio::buffer(kDisconnect.data(), kDisconnect.size()), ignored);
      return finish(true, {});
    }
    if (frame.command() == session::Command::kError) {
      const std::optional<std::string_view> message = frame.find("message");
      return finish(false, "stomp: broker answered ERROR: " +
                               (message ? decoded_message(*message) : "(no message header)"));
    }
    finish(false, "stomp: expected CONNECTED, got '" +
                      std::string(session::command_name(frame.command())) + "'");
  }

  // The verdict: stops every pending operation (their handlers see finished_ and return) and
  // hands the result over once.
  void finish(bool ok, std::string error) {
    if (finished_) return;
    finished_ = true;
    error_code ignored;
    timer_.cancel();
    resolver_.cancel();
    socket_.close(ignored);
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
    ProbeResult result;
    result.ok = ok;
    result.latency_us = uint32_t(std::clamp<int64_t>(elapsed, 0, UINT32_MAX));
    result.error = std::move(error);
    std::function<void(ProbeResult)> done = std::move(done_);
    done_ = nullptr;
    done(std::move(result));
  }

  const std::string host_;
  const uint16_t port_;
  const ProbeSettings settings_;
  std::function<void(ProbeResult)> done_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  const Clock::time_point started_;
  bool finished_ = false;
  std::string request_;  // the CONNECT frame while it is written
  // The reply: bytes [begin_, end_) not yet consumed by the parser; never grows past the bound.
  std::vector<char> reply_;
  size_t begin_ = 0;
  size_t end_ = 0;
  session::Parser parser_;
};

}  // namespace

void start_probe(boost::asio::io_context& io, const std::string& host, uint16_t port,
                 const ProbeSettings& settings, std::function<void(ProbeResult)> done) {
  std::make_shared<Probe>(io, host, port, settings, std::move(done))->start();
}

}  // namespace sluice::control
