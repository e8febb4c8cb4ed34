// The RabbitMQ feed: parsing GET /api/queues answers, checking base URLs, and polling a Beast
// HTTP server the test runs on 127.0.0.1 in the poll's own io_context.
#include "control/rabbit_feed.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "control/beast.h"
#include "tests/unit/run_until.h"

namespace sluice::control {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;

constexpr std::string_view kTarget = "/api/queues?columns=name,vhost,node,leader,type";

std::vector<LearnedQueue> parse_ok(std::string_view json, size_t* skipped = nullptr) {
  Result<RabbitQueues> r = parse_rabbit_queues(json);
  if (!r) {
    ADD_FAILURE() << "parse failed: " << r.error().message;
    return {};
  }
  if (skipped != nullptr) *skipped = r->skipped;
  return r->queues;
}

std::string parse_error(std::string_view json) {
  Result<RabbitQueues> r = parse_rabbit_queues(json);
  if (!r) return r.error().message;
  ADD_FAILURE() << "parse unexpectedly succeeded";
  return {};
}

// What check_feed_url says is wrong; "" for a good URL.
std::string url_error(std::string_view url) {
  Result<> r = check_feed_url(url);
  return r ? std::string() : r.error().message;
}

bool same(const LearnedQueue& q, std::string_view vhost, std::string_view queue,
          std::string_view node) {
  return q.vhost == vhost && q.queue == queue && q.broker_node == node;
}

TEST(RabbitFeedParseTest, ClassicQueueOwnedByItsNode) {
  size_t skipped = 9;
  auto qs =
      parse_ok(R"([{"name":"orders","vhost":"/","node":"rabbit@mq1","type":"classic"}])", &skipped);
  ASSERT_EQ(qs.size(), 1u);
  EXPECT_TRUE(same(qs[0], "/", "orders", "rabbit@mq1"));
  EXPECT_EQ(skipped, 0u);
}

TEST(RabbitFeedParseTest, QuorumQueueOwnedByLeaderEvenWhenNodePresent) {
  auto qs = parse_ok(R"([
    {"name":"q1","vhost":"prod","leader":"rabbit@mq2","type":"quorum"},
    {"name":"q2","vhost":"prod","node":"rabbit@mq1","leader":"rabbit@mq3","type":"quorum"}])");
  ASSERT_EQ(qs.size(), 2u);
  EXPECT_TRUE(same(qs[0], "prod", "q1", "rabbit@mq2"));
  EXPECT_TRUE(same(qs[1], "prod", "q2", "rabbit@mq3"));
}

TEST(RabbitFeedParseTest, StreamOwnedByLeader) {
  auto qs = parse_ok(
      R"([{"name":"events","vhost":"/","node":"rabbit@a","leader":"rabbit@b","type":"stream"}])");
  ASSERT_EQ(qs.size(), 1u);
  EXPECT_TRUE(same(qs[0], "/", "events", "rabbit@b"));
}

TEST(RabbitFeedParseTest, EmptyOrNullLeaderFallsBackToNode) {
  auto qs = parse_ok(R"([{"name":"a","vhost":"/","leader":"","node":"rabbit@x"},
                         {"name":"b","vhost":"/","leader":null,"node":"rabbit@y"}])");
  ASSERT_EQ(qs.size(), 2u);
  EXPECT_TRUE(same(qs[0], "/", "a", "rabbit@x"));
  EXPECT_TRUE(same(qs[1], "/", "b", "rabbit@y"));
}

TEST(RabbitFeedParseTest, ObjectsWithoutUsableOwnerNameOrVhostAreSkippedAndCounted) {
  size_t skipped = 0;
  auto qs = parse_ok(R"([
    {"name":"no-owner","vhost":"/"},
    {"name":"null-owner","vhost":"/","node":null,"leader":null},
    {"name":"number-owner","vhost":"/","node":7},
    {"vhost":"/","node":"rabbit@a"},
    {"name":"","vhost":"/","node":"rabbit@a"},
    {"name":"no-vhost","node":"rabbit@a"},
    {"name":["x"],"vhost":"/","node":"rabbit@a"},
    {"name":"kept","vhost":"/","node":"rabbit@a"}])",
                     &skipped);
  ASSERT_EQ(qs.size(), 1u);
  EXPECT_TRUE(same(qs[0], "/", "kept", "rabbit@a"));
  EXPECT_EQ(skipped, 7u);
}

TEST(RabbitFeedParseTest, VhostAndUnicodeNamesKeptExactly) {
  auto qs = parse_ok(
      "[{\"name\":\"commandes \xc3\xa9t\xc3\xa9 "
      "\xe2\x9c\x93\",\"vhost\":\"/\",\"node\":\"rabbit@a\"},"
      "{\"name\":\"q\\u00e9/x \",\"vhost\":\"/team a/\",\"node\":\"rabbit@b\"}]");
  ASSERT_EQ(qs.size(), 2u);
  EXPECT_TRUE(same(qs[0], "/", "commandes \xc3\xa9t\xc3\xa9 \xe2\x9c\x93", "rabbit@a"));
  EXPECT_TRUE(same(qs[1], "/team a/", "q\xc3\xa9/x ", "rabbit@b"));
}

TEST(RabbitFeedParseTest, EmptyArrayIsNoQueues) {
  size_t skipped = 5;
  EXPECT_TRUE(parse_ok("[]", &skipped).empty());
  EXPECT_EQ(skipped, 0u);
}

TEST(RabbitFeedParseTest, NonArrayDocumentIsAnError) {
  EXPECT_EQ(parse_error(R"({"error":"not_authorised"})"),
            "expected a JSON array of queues, got object");
  EXPECT_EQ(parse_error("42"), "expected a JSON array of queues, got number");
}

TEST(RabbitFeedParseTest, ArrayOfNonObjectsIsAnError) {
  EXPECT_EQ(parse_error(R"([{"name":"a","vhost":"/","node":"n"}, "b"])"),
            "expected a JSON array of queue objects, element 1 is string");
}

TEST(RabbitFeedParseTest, MalformedJsonIsAnErrorOnOneLine) {
  for (std::string_view bad : {"[{\"name\":", "<html>\n<body>404</body></html>", "", "[1,]"}) {
    const std::string e = parse_error(bad);
    EXPECT_EQ(e.rfind("invalid JSON: ", 0), 0u) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_EQ(e.find("json.exception"), std::string::npos) << e;
  }
}

TEST(RabbitFeedUrlTest, AcceptsHttpWithHostPortAndPrefix) {
  EXPECT_EQ(url_error("http://127.0.0.1:15672"), "");
  EXPECT_EQ(url_error("http://mq1.example.com"), "");
  EXPECT_EQ(url_error("HTTP://mq1:15672/"), "");
  EXPECT_EQ(url_error("http://mq1:15672/rabbitmq/api-proxy"), "");
  EXPECT_EQ(url_error("http://[::1]:15672"), "");
}

TEST(RabbitFeedUrlTest, RefusesHttps) {
  EXPECT_EQ(url_error("https://mq1:15671"), "https is not supported: use an http:// URL");
}

TEST(RabbitFeedUrlTest, RefusesOtherSchemesAndBareHosts) {
  EXPECT_NE(url_error("ftp://mq1"), "");
  EXPECT_NE(url_error("mq1:15672"), "");
  EXPECT_NE(url_error(""), "");
}

TEST(RabbitFeedUrlTest, RefusesMissingHost) {
  EXPECT_EQ(url_error("http://"), "missing host");
  EXPECT_EQ(url_error("http://:15672"), "missing host");
  EXPECT_EQ(url_error("http:///api"), "missing host");
}

TEST(RabbitFeedUrlTest, RefusesBadPorts) {
  EXPECT_EQ(url_error("http://mq1:0"), "bad port '0': must be 1 to 65535");
  EXPECT_EQ(url_error("http://mq1:65536"), "bad port '65536': must be 1 to 65535");
  EXPECT_EQ(url_error("http://mq1:15x72"), "bad port '15x72': must be 1 to 65535");
  EXPECT_EQ(url_error("http://mq1:"), "bad port '': must be 1 to 65535");
  EXPECT_EQ(url_error("http://mq1:0000015672"), "bad port '0000015672': must be 1 to 65535");
}

TEST(RabbitFeedUrlTest, RefusesCredentialsWithoutEchoingThem) {
  const std::string e = url_error("http://guest:hunter2@mq1:15672");
  ASSERT_NE(e, "");
  EXPECT_EQ(e.find("hunter2"), std::string::npos) << e;
}

TEST(RabbitFeedUrlTest, RefusesQueryFragmentSpacesAndUnbracketedIpv6) {
  EXPECT_NE(url_error("http://mq1:15672/?x=1"), "");
  EXPECT_NE(url_error("http://mq1:15672/#top"), "");
  EXPECT_NE(url_error("http://mq1:15672/a b"), "");
  EXPECT_NE(url_error("http://m q1"), "");
  EXPECT_NE(url_error("http://::1:15672"), "");
  EXPECT_NE(url_error("http://[::1"), "");
}

using test_support::run_until;

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// A management API stand-in: answers each request with what `answer` returns, or holds the
// connection open without answering when it returns nothing.
class ApiServer {
 public:
  using Answer = std::function<std::optional<Response>(const Request&)>;

  ApiServer(asio::io_context& io, Answer answer)
      : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        answer_(std::move(answer)) {
    accept();
  }

  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  const std::vector<Request>& requests() const { return requests_; }

 private:
  struct Connection {
    explicit Connection(tcp::socket s) : socket(std::move(s)) {}
    tcp::socket socket;
    beast::flat_buffer buffer;
    Request request;
    Response response;
  };

  void accept() {
    acceptor_.async_accept([this](const error_code& ec, tcp::socket socket) {
      if (ec) return;
      auto c = std::make_shared<Connection>(std::move(socket));
      connections_.push_back(c);  // keeps silent connections open until the server goes
      http::async_read(c->socket, c->buffer, c->request, [this, c](const error_code& e, size_t) {
        if (e) return;
        requests_.push_back(c->request);
        std::optional<Response> r = answer_(c->request);
        if (!r) return;
        c->response = std::move(*r);
        c->response.prepare_payload();
        http::async_write(c->socket, c->response, [c](const error_code&, size_t) {
          error_code ignored;
          c->socket.shutdown(tcp::socket::shutdown_send, ignored);
        });
      });
      accept();
    });
  }

  tcp::acceptor acceptor_;
  Answer answer_;
  std::vector<Request> requests_;
  std::vector<std::shared_ptr<Connection>> connections_;
};

Response respond(http::status status, std::string body) {
  Response r{status, 11};
  r.set(http::field::content_type, "application/json");
  r.body() = std::move(body);
  return r;
}

RabbitFeedSettings feed_settings(std::vector<std::string> urls) {
  RabbitFeedSettings s;
  s.urls = std::move(urls);
  s.login = "guest";
  s.passcode = "s3cret";
  s.timeout_ms = 10'000;
  return s;
}

// Starts a poll, checks `done` is not called from inside poll_rabbit_feed, runs io to the end.
std::optional<FeedPoll> run_poll(asio::io_context& io, const RabbitFeedSettings& settings) {
  std::optional<FeedPoll> result;
  int calls = 0;
  poll_rabbit_feed(io, settings, [&](FeedPoll p) {
    ++calls;
    result = std::move(p);
  });
  EXPECT_EQ(calls, 0) << "done ran inside poll_rabbit_feed";
  run_until(io, [&] { return result.has_value(); });
  EXPECT_EQ(calls, result ? 1 : 0);
  return result;
}

constexpr std::string_view kTwoQueues =
    R"([{"name":"orders","vhost":"/","node":"rabbit@mq1","leader":null,"type":"classic"},
        {"name":"billing","vhost":"prod","node":"rabbit@mq1","leader":"rabbit@mq2","type":"quorum"},
        {"name":"lost","vhost":"/","type":"classic"}])";

TEST(RabbitFeedPollTest, AnswersQueuesWithBasicAuth) {
  asio::io_context io;
  ApiServer server(
      io, [](const Request&) { return respond(http::status::ok, std::string(kTwoQueues)); });
  auto p = run_poll(io, feed_settings({server.url()}));
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->ok) << p->error;
  EXPECT_EQ(p->error, "");
  EXPECT_EQ(p->url, server.url());
  EXPECT_GT(p->latency_us, 0u);
  ASSERT_EQ(p->queues.size(), 2u);
  EXPECT_TRUE(same(p->queues[0], "/", "orders", "rabbit@mq1"));
  EXPECT_TRUE(same(p->queues[1], "prod", "billing", "rabbit@mq2"));
  EXPECT_EQ(p->skipped, 1u);
  ASSERT_EQ(server.requests().size(), 1u);
  const Request& req = server.requests()[0];
  EXPECT_EQ(req.method(), http::verb::get);
  EXPECT_EQ(std::string(req.target()), kTarget);
  EXPECT_EQ(std::string(req[http::field::authorization]),
            "Basic Z3Vlc3Q6czNjcmV0");  // guest:s3cret
  EXPECT_EQ(std::string(req[http::field::host]), "127.0.0.1:" + std::to_string(server.port()));
}

TEST(RabbitFeedPollTest, PathPrefixGoesBeforeApi) {
  asio::io_context io;
  ApiServer server(io, [](const Request&) { return respond(http::status::ok, "[]"); });
  auto p = run_poll(io, feed_settings({server.url() + "/rabbit/"}));
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->ok) << p->error;
  EXPECT_EQ(p->url, server.url() + "/rabbit/");
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(std::string(server.requests()[0].target()), "/rabbit" + std::string(kTarget));
}

TEST(RabbitFeedPollTest, UnauthorizedNamesStatusWithoutPasscode) {
  asio::io_context io;
  ApiServer server(io, [](const Request&) {
    return respond(http::status::unauthorized, R"({"error":"not_authorized"})");
  });
  auto p = run_poll(io, feed_settings({server.url()}));
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->ok);
  EXPECT_EQ(p->error, server.url() + ": HTTP 401 Unauthorized");
  EXPECT_EQ(p->error.find("s3cret"), std::string::npos);
  EXPECT_EQ(p->url, server.url());
  EXPECT_TRUE(p->queues.empty());
}

TEST(RabbitFeedPollTest, RefusedFirstUrlFallsBackToSecond) {
  asio::io_context io;
  std::string closed_url;
  {
    tcp::acceptor closed(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    closed_url = "http://127.0.0.1:" + std::to_string(closed.local_endpoint().port());
  }
  ApiServer server(
      io, [](const Request&) { return respond(http::status::ok, std::string(kTwoQueues)); });
  auto p = run_poll(io, feed_settings({closed_url, server.url()}));
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->ok) << p->error;
  EXPECT_EQ(p->url, server.url());
  EXPECT_EQ(p->queues.size(), 2u);
}

TEST(RabbitFeedPollTest, EveryUrlFailingJoinsTheirErrors) {
  asio::io_context io;
  std::string closed_url;
  {
    tcp::acceptor closed(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    closed_url = "http://127.0.0.1:" + std::to_string(closed.local_endpoint().port());
  }
  ApiServer server(io, [](const Request&) { return respond(http::status::unauthorized, ""); });
  auto p = run_poll(io, feed_settings({server.url(), "https://mq9:15671", closed_url}));
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->ok);
  EXPECT_EQ(p->error, server.url() + ": HTTP 401 Unauthorized; " +
                          "https://mq9:15671: https is not supported: use an http:// URL; " +
                          closed_url + ": connect: Connection refused");
  EXPECT_EQ(p->url, closed_url);
}

TEST(RabbitFeedPollTest, ServerThatNeverAnswersTimesOut) {
  asio::io_context io;
  ApiServer server(io, [](const Request&) -> std::optional<Response> { return std::nullopt; });
  RabbitFeedSettings s = feed_settings({server.url()});
  s.timeout_ms = 300;
  auto p = run_poll(io, s);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->ok);
  EXPECT_EQ(p->error, server.url() + ": timed out after 300 ms");
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(RabbitFeedPollTest, BodyOverLimitFails) {
  asio::io_context io;
  ApiServer server(io, [](const Request&) {
    return respond(http::status::ok, "[" + std::string(4096, ' ') + "]");
  });
  RabbitFeedSettings s = feed_settings({server.url()});
  s.body_bytes_max = 1024;
  auto p = run_poll(io, s);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->ok);
  EXPECT_EQ(p->error, server.url() + ": response body larger than 1024 bytes (body_bytes_max)");
}

TEST(RabbitFeedPollTest, ChunkedBodyOverLimitFails) {
  asio::io_context io;
  ApiServer server(io, [](const Request&) {
    Response r = respond(http::status::ok, "[" + std::string(4096, ' ') + "]");
    r.chunked(true);
    return r;
  });
  RabbitFeedSettings s = feed_settings({server.url()});
  s.body_bytes_max = 1024;
  auto p = run_poll(io, s);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->ok);
  EXPECT_NE(p->error.find("response body larger than 1024 bytes"), std::string::npos) << p->error;
}

TEST(RabbitFeedPollTest, BadJsonIsAFailureOfThatUrl) {
  asio::io_context io;
  ApiServer server(io, [](const Request&) {
    return respond(http::status::ok, "<html>RabbitMQ Management</html>");
  });
  auto p = run_poll(io, feed_settings({server.url()}));
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->ok);
  EXPECT_EQ(p->error.rfind(server.url() + ": bad /api/queues answer: invalid JSON: ", 0), 0u)
      << p->error;
}

TEST(RabbitFeedPollTest, NoUrlsFailsWithoutCallingDoneInline) {
  asio::io_context io;
  auto p = run_poll(io, feed_settings({}));
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->ok);
  EXPECT_EQ(p->error, "no management API URLs configured");
}

TEST(RabbitFeedPollTest, DestroyingIoContextWithPollInFlightNeverCallsDone) {
  int calls = 0;
  {
    asio::io_context io;
    ApiServer server(io, [](const Request&) -> std::optional<Response> { return std::nullopt; });
    poll_rabbit_feed(io, feed_settings({server.url()}), [&calls](const FeedPoll&) { ++calls; });
    ASSERT_TRUE(run_until(io, [&] { return !server.requests().empty(); }));
  }
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace sluice::control
