// The management API poll: one attempt per base URL, each a small state machine (resolve,
// connect, write the request, read the head, read the body) under its own deadline, and the
// parse of the /api/queues answer into (vhost, queue) -> node.
#include "control/rabbit_feed.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "control/beast.h"
#include "control/peer_text.h"

namespace sluice::control {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kQueuesPath = "/api/queues?columns=name,vhost,node,leader,type";
// A management API response head is a few hundred bytes; anything near this is not one.
constexpr uint32_t kHeaderBytesMax = 64u << 10;

std::string printable(std::string_view s) {
  return control::printable(s, kQuotedBytesMax);
}

struct FeedUrl {
  std::string host;  // without brackets for IPv6
  uint16_t port = 80;
  std::string prefix;  // "" or "/x/y" (no trailing slash)
  std::string host_header;
};

bool host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

bool ipv6_char(char c) {
  return (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') || c == ':' ||
         c == '.';
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? char(s[i] - 'A' + 'a') : s[i];
    if (c != prefix[i]) return false;
  }
  return true;
}

// The messages never quote the whole URL: it might hold credentials.
Result<FeedUrl> parse_feed_url(std::string_view url) {
  if (starts_with_nocase(url, "https://")) {
    return failure("https is not supported: use an http:// URL");
  }
  if (!starts_with_nocase(url, "http://")) {
    return failure("must start with http:// (e.g. http://127.0.0.1:15672)");
  }
  std::string_view rest = url.substr(7);
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return failure("a query or fragment is not allowed: give the base URL only");
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (authority.find('@') != std::string_view::npos) {
    return failure("credentials in the URL are not allowed: use the login and passcode_file keys");
  }
  FeedUrl out;
  std::string_view host;
  std::optional<std::string_view> port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return failure("IPv6 host lacks its closing ']'");
    host = authority.substr(1, close - 1);
    if (!std::all_of(host.begin(), host.end(), ipv6_char)) {
      return failure("bad IPv6 host '" + printable(host) + "'");
    }
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return failure("unexpected text after the IPv6 host");
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
    if (!std::all_of(host.begin(), host.end(), host_char)) {
      return failure("bad host '" + printable(host) + "' (an IPv6 address goes in brackets)");
    }
  }
  if (host.empty()) return failure("missing host");
  if (port) {
    uint32_t value = 0;
    const bool digits =
        !port->empty() && port->size() <= 5 &&
        std::all_of(port->begin(), port->end(), [](char c) { return c >= '0' && c <= '9'; });
    for (char c : *port)
      value = value * 10 + uint32_t(c - '0');
    if (!digits || value == 0 || value > 65535) {
      return failure("bad port '" + printable(*port) + "': must be 1 to 65535");
    }
    out.port = uint16_t(value);
  }
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return failure("the path holds a space or control octet");
  }
  std::string_view prefix = path;
  while (!prefix.empty() && prefix.back() == '/')
    prefix.remove_suffix(1);
  out.host = std::string(host);
  out.prefix = std::string(prefix);
  out.host_header = std::string(authority);
  return out;
}

class FeedPollOp;

// One URL: resolve, connect, GET, read the head (any status but 200 ends it there), read the body.
class Attempt : public std::enable_shared_from_this<Attempt> {
 public:
  Attempt(asio::io_context& io, std::shared_ptr<FeedPollOp> op, FeedUrl target,
          const std::string& authorization, const RabbitFeedSettings& settings)
      : op_(std::move(op)),
        target_(std::move(target)),
        timeout_ms_(settings.timeout_ms),
        body_bytes_max_(settings.body_bytes_max),
        resolver_(io),
        socket_(io),
        timer_(io) {
    request_.method(http::verb::get);
    request_.target(target_.prefix + std::string(kQueuesPath));
    request_.version(11);
    request_.set(http::field::host, target_.host_header);
    request_.set(http::field::authorization, authorization);
    request_.set(http::field::accept, "application/json");
    request_.set(http::field::user_agent, "sluice");
    request_.set(http::field::connection, "close");
    parser_.header_limit(kHeaderBytesMax);
    parser_.body_limit(uint64_t(body_bytes_max_));
  }

  void start();

 private:
  void on_resolved(const error_code& ec, const tcp::resolver::results_type& results);
  void on_connected(const error_code& ec);
  void on_written(const error_code& ec);
  void on_head(const error_code& ec);
  void on_body(const error_code& ec);
  std::string read_failure(const error_code& ec) const;
  // Ends the attempt: stops every pending operation (their handlers see finished_) and reports.
  bool end();
  void fail(const std::string& reason);

  std::shared_ptr<FeedPollOp> op_;
  const FeedUrl target_;
  const uint32_t timeout_ms_;
  const size_t body_bytes_max_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  http::request<http::empty_body> request_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  bool finished_ = false;
};

class FeedPollOp : public std::enable_shared_from_this<FeedPollOp> {
 public:
  FeedPollOp(asio::io_context& io, RabbitFeedSettings settings, std::function<void(FeedPoll)> done)
      : io_(io), settings_(std::move(settings)), done_(std::move(done)), started_(Clock::now()) {
    const std::string credentials = settings_.login + ":" + settings_.passcode;
    std::string encoded(beast::detail::base64::encoded_size(credentials.size()), '\0');
    encoded.resize(
        beast::detail::base64::encode(encoded.data(), credentials.data(), credentials.size()));
    authorization_ = "Basic " + encoded;
  }

  // Deferred so that `done` never runs inside poll_rabbit_feed, even when no URL can be tried.
  void start() {
    asio::post(io_, [self = shared_from_this()] { self->next(); });
  }

  void attempt_failed(const std::string& reason) {
    errors_ += (errors_.empty() ? "" : "; ") + current_url() + ": " + reason;
    next();
  }

  void attempt_answered(std::string_view body) {
    Result<RabbitQueues> parsed = parse_rabbit_queues(body);
    if (!parsed) return attempt_failed("bad /api/queues answer: " + parsed.error().message);
    FeedPoll poll;
    poll.ok = true;
    poll.queues = std::move(parsed->queues);
    poll.skipped = parsed->skipped;
    finish(std::move(poll));
  }

 private:
  const std::string& current_url() const { return settings_.urls[index_ - 1]; }

  void next() {
    if (index_ == settings_.urls.size()) {
      FeedPoll poll;
      poll.error = settings_.urls.empty() ? "no management API URLs configured" : errors_;
      return finish(std::move(poll));
    }
    ++index_;
    Result<FeedUrl> target = parse_feed_url(current_url());
    if (!target) return attempt_failed(target.error().message);
    std::make_shared<Attempt>(io_, shared_from_this(), std::move(*target), authorization_,
                              settings_)
        ->start();
  }

  void finish(FeedPoll poll) {
    if (index_ > 0) poll.url = current_url();
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_).count();
    poll.latency_us = uint32_t(std::clamp<int64_t>(elapsed, 0, UINT32_MAX));
    std::function<void(FeedPoll)> done = std::move(done_);
    done_ = nullptr;
    done(std::move(poll));
  }

  asio::io_context& io_;
  const RabbitFeedSettings settings_;
  std::function<void(FeedPoll)> done_;
  const Clock::time_point started_;
  std::string authorization_;  // holds the passcode: goes on the wire only
  size_t index_ = 0;           // URLs tried so far; the current one is index_ - 1
  std::string errors_;
};

void Attempt::start() {
  timer_.expires_after(std::chrono::milliseconds(timeout_ms_));
  timer_.async_wait([self = shared_from_this()](const error_code& ec) {
    if (self->finished_ || ec == asio::error::operation_aborted) return;
    self->fail("timed out after " + std::to_string(self->timeout_ms_) + " ms");
  });
  resolver_.async_resolve(target_.host, std::to_string(target_.port),
                          tcp::resolver::numeric_service,
                          [self = shared_from_this()](const error_code& ec,
                                                      const tcp::resolver::results_type& results) {
                            self->on_resolved(ec, results);
                          });
}

void Attempt::on_resolved(const error_code& ec, const tcp::resolver::results_type& results) {
  if (finished_) return;
  if (ec) return fail("resolve: " + ec.message());
  asio::async_connect(socket_, results,
                      [self = shared_from_this()](const error_code& e, const tcp::endpoint&) {
                        self->on_connected(e);
                      });
}

void Attempt::on_connected(const error_code& ec) {
  if (finished_) return;
  if (ec) return fail("connect: " + ec.message());
  http::async_write(socket_, request_, [self = shared_from_this()](const error_code& e, size_t) {
    self->on_written(e);
  });
}

void Attempt::on_written(const error_code& ec) {
  if (finished_) return;
  if (ec) return fail("send request: " + ec.message());
  http::async_read_header(
      socket_, buffer_, parser_,
      [self = shared_from_this()](const error_code& e, size_t) { self->on_head(e); });
}

void Attempt::on_head(const error_code& ec) {
  if (finished_) return;
  if (ec) return fail(read_failure(ec));
  const auto& head = parser_.get();
  if (head.result_int() != 200) {
    beast::string_view reason = head.reason();
    if (reason.empty()) reason = http::obsolete_reason(head.result());
    return fail("HTTP " + std::to_string(head.result_int()) + " " +
                printable({reason.data(), reason.size()}));
  }
  http::async_read(socket_, buffer_, parser_,
                   [self = shared_from_this()](const error_code& e, size_t) { self->on_body(e); });
}

void Attempt::on_body(const error_code& ec) {
  if (finished_) return;
  if (ec) return fail(read_failure(ec));
  if (!end()) return;
  op_->attempt_answered(parser_.release().body());
}

std::string Attempt::read_failure(const error_code& ec) const {
  if (ec == http::error::body_limit) {
    return "response body larger than " + std::to_string(body_bytes_max_) +
           " bytes (body_bytes_max)";
  }
  if (ec == http::error::header_limit) {
    return "response header larger than " + std::to_string(kHeaderBytesMax) + " bytes";
  }
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == asio::error::eof) {
    return "connection closed before the response was complete";
  }
  if (ec.category() == http::make_error_code(http::error::body_limit).category()) {
    return "bad HTTP response: " + ec.message();
  }
  return "read response: " + ec.message();
}

bool Attempt::end() {
  if (finished_) return false;
  finished_ = true;
  error_code ignored;
  timer_.cancel();
  resolver_.cancel();
  socket_.close(ignored);
  return true;
}

void Attempt::fail(const std::string& reason) {
  if (!end()) return;
  op_->attempt_failed(reason);
}

}  // namespace

Result<RabbitQueues> parse_rabbit_queues(std::string_view json) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::parse_error& e) {
    // Drop the "[json.exception.parse_error.101] " tag: the rest says where and what.
    std::string_view what = e.what();
    if (const size_t tag_end = what.find("] "); tag_end != std::string_view::npos) {
      what.remove_prefix(tag_end + 2);
    }
    return failure("invalid JSON: " + printable(what));
  }
  if (!doc.is_array()) {
    return failure(std::string("expected a JSON array of queues, got ") + doc.type_name());
  }
  RabbitQueues out;
  out.queues.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& q = doc[i];
    if (!q.is_object()) {
      return failure("expected a JSON array of queue objects, element " + std::to_string(i) +
                     " is " + q.type_name());
    }
    // A field is usable when it is a non-empty string.
    auto field = [&q](const char* key) -> const std::string* {
      const auto it = q.find(key);
      if (it == q.end() || !it->is_string()) return nullptr;
      const std::string* s = it->get_ptr<const std::string*>();
      return s->empty() ? nullptr : s;
    };
    const std::string* name = field("name");
    const std::string* vhost = field("vhost");
    const std::string* owner = field("leader");
    if (!owner) owner = field("node");
    if (!name || !vhost || !owner) {
      ++out.skipped;
      continue;
    }
    out.queues.push_back(LearnedQueue{*vhost, *name, *owner});
  }
  return out;
}

Result<> check_feed_url(std::string_view url) {
  Result<FeedUrl> parsed = parse_feed_url(url);
  if (!parsed) return tl::unexpected(std::move(parsed.error()));
  return {};
}

void poll_rabbit_feed(boost::asio::io_context& io, const RabbitFeedSettings& settings,
                      std::function<void(FeedPoll)> done) {
  std::make_shared<FeedPollOp>(io, settings, std::move(done))->start();
}

}  // namespace sluice::control
