// Admin API transport: AdminServer and the blocking client against each other on Unix sockets in
// a fresh temp dir and on 127.0.0.1, plus raw sockets for malformed input and timeouts.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "control/admin_client.h"
#include "control/admin_server.h"

namespace sluice::control {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

// Echoes the request as JSON so tests see exactly what the handler received.
AdminResponse echo(const AdminRequest& r) {
  if (r.path == "/throw") throw std::runtime_error("boom");
  nlohmann::json j = {{"method", r.method}, {"path", r.path}, {"body", r.body}};
  j["query"] = nlohmann::json::object();
  for (const auto& [k, v] : r.query)
    j["query"][k] = v;
  return {200, "application/json", j.dump()};
}

AdminReply reply_of(const Result<AdminReply>& r) {
  if (!r) {
    ADD_FAILURE() << "admin call failed: " << r.error().message;
    return {};
  }
  return *r;
}

std::string error_of(const Result<AdminReply>& r) {
  if (r) {
    ADD_FAILURE() << "admin call succeeded with status " << r->status;
    return {};
  }
  return r.error().message;
}

// What a listen said when it failed; "" when it listened.
std::string listen_error(const Result<>& r) {
  return r ? std::string() : r.error().message;
}

// A plain blocking Unix socket, so tests can send bytes no well-behaved client would.
int connect_raw(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes or the deadline passes; `closed` says which.
std::string read_until_close(int fd, uint32_t timeout_ms, bool* closed = nullptr) {
  std::string out;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  if (closed) *closed = false;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, int(std::max<int64_t>(left, 1))) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, size_t(n));
  }
  return out;
}

std::string exchange_raw(const std::string& path, const std::string& bytes, uint32_t timeout_ms) {
  const int fd = connect_raw(path);
  if (fd < 0) return "connect failed";
  EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  std::string out = read_until_close(fd, timeout_ms);
  ::close(fd);
  return out;
}

class AdminServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-admin-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/admin.sock";
  }

  void TearDown() override {
    stop_io();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  void make_server(AdminServerLimits limits = {}, AdminHandler handler = echo) {
    server_ = std::make_unique<AdminServer>(io_, std::move(handler), limits);
  }

  void start_io() {
    io_thread_ = std::thread([this] { io_.run(); });
  }

  void stop_io() {
    if (!io_thread_.joinable()) return;
    on_io([this] {
      if (server_) server_->close();
    });
    work_.reset();
    io_.stop();
    io_thread_.join();
  }

  // Runs fn on the io thread (server calls belong there) and waits for it.
  void on_io(std::function<void()> fn) {
    std::promise<void> done;
    boost::asio::post(io_, [&] {
      fn();
      done.set_value();
    });
    ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }

  // Polls a counter the io thread changes; bounded.
  bool eventually(const std::function<bool()>& condition) {
    for (int i = 0; i < 1000; ++i) {
      if (condition()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return condition();
  }

  AdminEndpoint endpoint() const { return {path_, "", 0}; }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_ =
      boost::asio::make_work_guard(io_);
  std::unique_ptr<AdminServer> server_;
  std::thread io_thread_;
  std::string dir_;
  std::string path_;
};

TEST_F(AdminServerTest, UnixRequestReachesHandlerDecoded) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const auto reply = reply_of(
      admin_call(endpoint(), "PUT", "/nodes/a%2Fb?name=x%20y&flag&p=1+2&v=1&v=" + url_encode("3&4"),
                 R"({"state":"drain"})"));
  EXPECT_EQ(reply.status, 200u);
  EXPECT_EQ(reply.content_type, "application/json");
  const auto j = nlohmann::json::parse(reply.body);
  EXPECT_EQ(j["method"], "PUT");
  EXPECT_EQ(j["path"], "/nodes/a/b");
  EXPECT_EQ(j["body"], R"({"state":"drain"})");
  EXPECT_EQ(j["query"]["name"], "x y");
  EXPECT_EQ(j["query"]["flag"], "");
  EXPECT_EQ(j["query"]["p"], "1 2");
  EXPECT_EQ(j["query"]["v"], "3&4");  // last wins
  EXPECT_EQ(server_->counters().requests, 1u);
}

TEST_F(AdminServerTest, HandlerStatusAndContentTypeReachClient) {
  make_server({}, [](const AdminRequest&) {
    return AdminResponse{404, "text/plain", "no such node"};
  });
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const auto reply = reply_of(admin_call(endpoint(), "GET", "/nodes/x", ""));
  EXPECT_EQ(reply.status, 404u);
  EXPECT_EQ(reply.content_type, "text/plain");
  EXPECT_EQ(reply.body, "no such node");
}

TEST_F(AdminServerTest, UnixSocketHasMode0660) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  struct stat st {};
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0660u);
}

TEST_F(AdminServerTest, TcpOnLoopbackWithPortZero) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_tcp("127.0.0.1", 0)), "");
  ASSERT_NE(server_->tcp_port(), 0);
  start_io();
  const auto reply =
      reply_of(admin_call({"", "127.0.0.1", server_->tcp_port()}, "GET", "/health", ""));
  EXPECT_EQ(reply.status, 200u);
  EXPECT_EQ(nlohmann::json::parse(reply.body)["path"], "/health");
  const auto by_name =
      reply_of(admin_call({"", "localhost", server_->tcp_port()}, "GET", "/health", ""));
  EXPECT_EQ(by_name.status, 200u);
}

TEST_F(AdminServerTest, NonLoopbackTcpHostRefused) {
  make_server();
  for (const char* host : {"0.0.0.0", "8.8.8.8", "::", "192.168.1.1"}) {
    const std::string error = listen_error(server_->listen_tcp(host, 0));
    ASSERT_NE(error, "") << host;
    EXPECT_THAT(error, HasSubstr(host));
    EXPECT_THAT(error, HasSubstr("not a loopback address"));
  }
  const std::string junk = listen_error(server_->listen_tcp("example.org", 0));
  ASSERT_NE(junk, "");
  EXPECT_THAT(junk, HasSubstr("example.org"));
  EXPECT_EQ(server_->tcp_port(), 0);
}

TEST_F(AdminServerTest, StaleSocketFileReplaced) {
  // A socket bound and closed without unlink: what a crashed daemon leaves behind.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  ASSERT_TRUE(std::filesystem::is_socket(path_));

  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  EXPECT_EQ(reply_of(admin_call(endpoint(), "GET", "/", "")).status, 200u);
}

TEST_F(AdminServerTest, LiveSocketRefusedAndKeepsServing) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  AdminServer second(io_, echo);
  const std::string error = listen_error(second.listen_unix(path_));
  ASSERT_NE(error, "");
  EXPECT_EQ(error, "admin socket " + path_ + " is in use by another process");
  second.close();  // must not remove the first server's file
  ASSERT_TRUE(std::filesystem::is_socket(path_));
  start_io();
  EXPECT_EQ(reply_of(admin_call(endpoint(), "GET", "/", "")).status, 200u);
}

TEST_F(AdminServerTest, RegularFileAtPathRefused) {
  std::ofstream(path_) << "not a socket";
  make_server();
  const std::string error = listen_error(server_->listen_unix(path_));
  ASSERT_NE(error, "");
  EXPECT_THAT(error, HasSubstr(path_));
  EXPECT_THAT(error, HasSubstr("not a socket"));
  EXPECT_TRUE(std::filesystem::is_regular_file(path_));
}

TEST_F(AdminServerTest, KeepAliveServesManyRequestsOnOneConnection) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  auto opened = AdminConnection::open(endpoint(), 5000);
  ASSERT_TRUE(opened) << opened.error().message;
  auto& conn = **opened;
  for (int i = 0; i < 20; ++i) {
    const auto reply = reply_of(conn.call("POST", "/pins?i=" + std::to_string(i), "[1,2]"));
    ASSERT_EQ(reply.status, 200u);
    EXPECT_EQ(nlohmann::json::parse(reply.body)["query"]["i"], std::to_string(i));
  }
  EXPECT_EQ(server_->counters().requests, 20u);
  EXPECT_EQ(server_->counters().connections_open, 1u);
}

TEST_F(AdminServerTest, BodyOverLimitAnswered413) {
  AdminServerLimits limits;
  limits.body_bytes_max = 1024;
  make_server(limits);
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  EXPECT_EQ(reply_of(admin_call(endpoint(), "POST", "/pins", std::string(1024, 'x'))).status, 200u);
  const auto reply = reply_of(admin_call(endpoint(), "POST", "/pins", std::string(4096, 'x')));
  EXPECT_EQ(reply.status, 413u);
  EXPECT_THAT(nlohmann::json::parse(reply.body)["error"].get<std::string>(),
              HasSubstr("larger than the limit of 1024 bytes"));
  EXPECT_EQ(server_->counters().bad_requests, 1u);
  EXPECT_EQ(server_->counters().requests, 1u);
}

TEST_F(AdminServerTest, HeaderOverLimitAnswered431) {
  AdminServerLimits limits;
  limits.header_bytes_max = 1024;
  make_server(limits);
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const auto reply =
      reply_of(admin_call(endpoint(), "GET", "/nodes?x=" + std::string(4096, 'a'), ""));
  EXPECT_EQ(reply.status, 431u);
  EXPECT_THAT(nlohmann::json::parse(reply.body)["error"].get<std::string>(),
              HasSubstr("header is larger than the limit of 1024 bytes"));
  EXPECT_EQ(reply_of(admin_call(endpoint(), "GET", "/", "")).status, 200u);
}

TEST_F(AdminServerTest, GarbageAnswered400AndServerKeepsServing) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const std::string answer = exchange_raw(path_, std::string("\x01\x02 garbage\r\n\r\n"), 5000);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(answer, HasSubstr("{\"error\":\"malformed HTTP request"));
  EXPECT_EQ(server_->counters().bad_requests, 1u);
  EXPECT_EQ(reply_of(admin_call(endpoint(), "GET", "/", "")).status, 200u);
}

TEST_F(AdminServerTest, BadPercentEncodingAnswered400) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const auto reply = reply_of(admin_call(endpoint(), "GET", "/nodes/%zz", ""));
  EXPECT_EQ(reply.status, 400u);
  EXPECT_THAT(reply.body, HasSubstr("percent-encoding"));
  EXPECT_EQ(reply_of(admin_call(endpoint(), "GET", "/q?a=%4", "")).status, 400u);
  EXPECT_EQ(server_->counters().requests, 0u);
}

TEST_F(AdminServerTest, Http10AnsweredWithContentLengthAndClosed) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const std::string answer = exchange_raw(path_, "GET /v HTTP/1.0\r\n\r\n", 5000);
  EXPECT_THAT(answer, StartsWith("HTTP/1.0 200"));
  EXPECT_THAT(answer, HasSubstr("Content-Length: "));
  EXPECT_THAT(answer, HasSubstr("\"path\":\"/v\""));
}

TEST_F(AdminServerTest, ConnectionCloseHonoured) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  // Without Connection: close the server would wait for more and read_until_close time out.
  bool closed = false;
  const int fd = connect_raw(path_);
  ASSERT_GE(fd, 0);
  const std::string req = "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), ssize_t(req.size()));
  const std::string answer = read_until_close(fd, 5000, &closed);
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200"));
}

TEST_F(AdminServerTest, ExpectContinueGetsInterimAnswerBeforeBody) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const int fd = connect_raw(path_);
  ASSERT_GE(fd, 0);
  const std::string head =
      "PUT /p HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
  std::string interim;
  for (int i = 0; i < 100 && interim.find("\r\n\r\n") == std::string::npos; ++i) {
    pollfd p{fd, POLLIN, 0};
    char buf[256];
    if (::poll(&p, 1, 50) == 1) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      interim.append(buf, size_t(n));
    }
  }
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(::send(fd, "{}", 2, MSG_NOSIGNAL), 2);
  ::shutdown(fd, SHUT_WR);
  const std::string answer = read_until_close(fd, 5000);
  ::close(fd);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(answer, HasSubstr("\"body\":\"{}\""));
}

TEST_F(AdminServerTest, HandlerThrowingAnswered500AndServerKeepsServing) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const auto reply = reply_of(admin_call(endpoint(), "GET", "/throw", ""));
  EXPECT_EQ(reply.status, 500u);
  EXPECT_EQ(nlohmann::json::parse(reply.body)["error"], "internal error: boom");
  EXPECT_EQ(reply_of(admin_call(endpoint(), "GET", "/", "")).status, 200u);
}

TEST_F(AdminServerTest, ConnectionsOverMaxAnswered503) {
  AdminServerLimits limits;
  limits.connections_max = 2;
  make_server(limits);
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  std::unique_ptr<AdminConnection> held[2];
  for (auto& h : held) {
    auto opened = AdminConnection::open(endpoint(), 5000);
    ASSERT_TRUE(opened) << opened.error().message;
    h = std::move(*opened);
    ASSERT_EQ(reply_of(h->call("GET", "/", "")).status, 200u);  // accepted by now
  }
  const auto reply = reply_of(admin_call(endpoint(), "GET", "/", ""));
  EXPECT_EQ(reply.status, 503u);
  EXPECT_THAT(reply.body, HasSubstr("too many admin connections (limit 2)"));
  EXPECT_EQ(server_->counters().connections_rejected, 1u);

  held[0].reset();
  ASSERT_TRUE(eventually([&] { return server_->counters().connections_open == 1; }));
  EXPECT_EQ(reply_of(admin_call(endpoint(), "GET", "/", "")).status, 200u);
}

TEST_F(AdminServerTest, CloseRemovesSocketAndClientSaysNotRunning) {
  make_server();
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  EXPECT_EQ(reply_of(admin_call(endpoint(), "GET", "/", "")).status, 200u);
  on_io([this] { server_->close(); });
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_EQ(error_of(admin_call(endpoint(), "GET", "/", "")),
            "cannot connect to sluiced at " + path_ +
                ": No such file or directory (is sluiced running?)");
  on_io([this] { server_->close(); });  // idempotent
  std::string again;
  on_io([&] { again = listen_error(server_->listen_unix(path_)); });
  EXPECT_THAT(again, HasSubstr("closed"));
}

TEST_F(AdminServerTest, CloseWithConnectionsInFlightIsSafe) {
  AdminServerLimits limits;
  make_server(limits);
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  auto opened = AdminConnection::open(endpoint(), 5000);
  ASSERT_TRUE(opened) << opened.error().message;
  auto& idle = **opened;
  ASSERT_EQ(reply_of(idle.call("GET", "/", "")).status, 200u);
  const int partial = connect_raw(path_);
  ASSERT_GE(partial, 0);
  ASSERT_EQ(::send(partial, "GET / HT", 8, MSG_NOSIGNAL), 8);
  ASSERT_TRUE(eventually([&] { return server_->counters().connections_open == 2; }));

  on_io([this] { server_.reset(); });  // destroy, not just close, with both in flight
  bool closed = false;
  read_until_close(partial, 5000, &closed);
  ::close(partial);
  EXPECT_TRUE(closed);
  EXPECT_THAT(error_of(idle.call("GET", "/", "")), HasSubstr("cannot connect to sluiced"));
}

TEST_F(AdminServerTest, MissingSocketPathGivesNotRunningError) {
  const std::string missing = dir_ + "/nope.sock";
  EXPECT_EQ(error_of(admin_call({missing, "", 0}, "GET", "/", "")),
            "cannot connect to sluiced at " + missing +
                ": No such file or directory (is sluiced running?)");
}

TEST_F(AdminServerTest, ClientTimesOutOnServerThatNeverAnswers) {
  // Listening but never accepting: the kernel completes the connect, nobody answers.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  const auto start = Clock::now();
  EXPECT_EQ(error_of(admin_call(endpoint(), "GET", "/", "", 200)),
            "sluiced did not answer within 200 ms");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));  // bounded, not a benchmark
  ::close(fd);
}

TEST_F(AdminServerTest, ReadTimeoutClosesSlowRequest) {
  AdminServerLimits limits;
  limits.read_timeout_ms = 100;
  make_server(limits);
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  const int fd = connect_raw(path_);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, "GET / HTTP/1.1\r\n", 16, MSG_NOSIGNAL), 16);
  bool closed = false;
  EXPECT_EQ(read_until_close(fd, 5000, &closed), "");
  ::close(fd);
  EXPECT_TRUE(closed);
  EXPECT_TRUE(eventually([&] { return server_->counters().connections_open == 0; }));
}

TEST_F(AdminServerTest, IdleKeepAliveClosedAndClientReconnects) {
  AdminServerLimits limits;
  limits.idle_timeout_ms = 100;
  make_server(limits);
  ASSERT_EQ(listen_error(server_->listen_unix(path_)), "");
  start_io();
  auto opened = AdminConnection::open(endpoint(), 5000);
  ASSERT_TRUE(opened) << opened.error().message;
  auto& conn = **opened;
  ASSERT_EQ(reply_of(conn.call("GET", "/", "")).status, 200u);
  ASSERT_TRUE(eventually([&] { return server_->counters().connections_open == 0; }));
  EXPECT_EQ(reply_of(conn.call("GET", "/again", "")).status, 200u);
  EXPECT_EQ(server_->counters().requests, 2u);
}

TEST(AdminUrlEncode, EncodesAllButUnreserved) {
  EXPECT_EQ(url_encode("/"), "%2F");
  EXPECT_EQ(url_encode("a b"), "a%20b");
  EXPECT_EQ(url_encode("\xC3\xA9"), "%C3%A9");  // é in UTF-8
  EXPECT_EQ(url_encode("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(url_encode("q+&=%?#"), "q%2B%26%3D%25%3F%23");
  EXPECT_EQ(url_encode(std::string("\0", 1)), "%00");
  EXPECT_EQ(url_encode(""), "");
}

}  // namespace
}  // namespace sluice::control
