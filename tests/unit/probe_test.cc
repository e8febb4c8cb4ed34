// Health probes against servers the test starts on 127.0.0.1 in the probe's own io_context:
// TCP connects, STOMP CONNECT answered by CONNECTED, ERROR, garbage, silence or a hang-up.
#include "control/probe.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "tests/unit/run_until.h"

namespace sluice::control {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;

using test_support::run_until;

// A one-connection STOMP peer: accepts, reads the client's first frame (up to its NUL), then
// answers, hangs up or stays silent; keeps reading afterwards to record what else arrives.
class StompPeer {
 public:
  enum class Mode { kReply, kReplyThenClose, kCloseAfterFrame, kSilent };

  StompPeer(asio::io_context& io, Mode mode, std::string reply = {})
      : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        socket_(io),
        mode_(mode),
        reply_(std::move(reply)) {
    acceptor_.async_accept(socket_, [this](const error_code& ec) {
      if (ec) return;
      accepted_ = true;
      read();
    });
  }

  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  const std::string& received() const { return received_; }
  bool accepted() const { return accepted_; }
  bool got_frame() const { return answered_; }
  // The probe closed its end (EOF or reset).
  bool client_gone() const { return client_gone_; }

 private:
  void read() {
    socket_.async_read_some(asio::buffer(chunk_), [this](const error_code& ec, size_t n) {
      if (ec) {
        client_gone_ = true;
        return;
      }
      received_.append(chunk_.data(), n);
      if (!answered_ && received_.find('\0') != std::string::npos) {
        answered_ = true;
        if (mode_ == Mode::kCloseAfterFrame) {
          socket_.close();
          return;
        }
        if (mode_ == Mode::kReply) {
          asio::async_write(socket_, asio::buffer(reply_), [](const error_code&, size_t) {});
        }
        if (mode_ == Mode::kReplyThenClose) {
          // Everything the client sent has been read, so the close sends FIN, not a reset.
          asio::async_write(socket_, asio::buffer(reply_),
                            [this](const error_code&, size_t) { socket_.close(); });
          return;
        }
      }
      if (received_.size() < (1u << 20)) read();
    });
  }

  tcp::acceptor acceptor_;
  tcp::socket socket_;
  Mode mode_;
  std::string reply_;
  std::array<char, 4096> chunk_{};
  std::string received_;
  bool accepted_ = false;
  bool answered_ = false;
  bool client_gone_ = false;
};

// A frame's text with its terminating NUL.
std::string with_nul(std::string_view text) {
  return std::string(text) + '\0';
}

ProbeSettings stomp_settings() {
  ProbeSettings s;
  s.kind = ProbeKind::kStomp;
  s.timeout_ms = 10'000;
  s.login = "guest";
  s.passcode = "s3cret-pass";
  s.vhost = "/";
  return s;
}

// Starts a probe, checks `done` is not called from inside start_probe, and runs io to the verdict.
std::optional<ProbeResult> run_probe(asio::io_context& io, const std::string& host, uint16_t port,
                                     const ProbeSettings& settings, int* calls) {
  std::optional<ProbeResult> result;
  start_probe(io, host, port, settings, [&result, calls](ProbeResult r) {
    ++*calls;
    result = std::move(r);
  });
  EXPECT_EQ(*calls, 0) << "done ran inside start_probe";
  run_until(io, [&] { return result.has_value(); });
  return result;
}

TEST(ProbeTest, TcpProbeSucceedsAgainstListener) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kSilent);
  int calls = 0;
  ProbeSettings s;
  s.kind = ProbeKind::kTcp;
  s.timeout_ms = 10'000;
  auto r = run_probe(io, "127.0.0.1", peer.port(), s, &calls);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ok) << r->error;
  EXPECT_EQ(r->error, "");
  EXPECT_GT(r->latency_us, 0u);
  // The probe closes its connection, and done is never called again.
  EXPECT_TRUE(run_until(io, [&] { return peer.client_gone(); }));
  EXPECT_TRUE(peer.accepted());
  EXPECT_EQ(peer.received(), "");
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, TcpProbeReportsConnectionRefused) {
  asio::io_context io;
  uint16_t port = 0;
  {
    tcp::acceptor closed(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = closed.local_endpoint().port();
  }
  int calls = 0;
  ProbeSettings s;
  s.timeout_ms = 10'000;
  auto r = run_probe(io, "127.0.0.1", port, s, &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "connect 127.0.0.1:" + std::to_string(port) + ": Connection refused");
  EXPECT_GT(r->latency_us, 0u);
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, UnresolvableHostFailsAtResolve) {
  asio::io_context io;
  int calls = 0;
  ProbeSettings s;
  s.timeout_ms = 15'000;
  auto r = run_probe(io, "nonexistent.invalid", 61613, s, &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error.rfind("resolve nonexistent.invalid: ", 0), 0u) << r->error;
  EXPECT_GT(r->latency_us, 0u);
}

TEST(ProbeTest, StompProbeSendsConnectAndAcceptsConnected) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReply,
                 with_nul("CONNECTED\nversion:1.2\nheart-beat:0,0\nserver:RabbitMQ/3.13\n\n"));
  int calls = 0;
  ProbeSettings s = stomp_settings();
  s.vhost = "prod";
  auto r = run_probe(io, "127.0.0.1", peer.port(), s, &calls);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ok) << r->error;
  EXPECT_EQ(r->error, "");
  EXPECT_GT(r->latency_us, 0u);
  ASSERT_TRUE(run_until(io, [&] { return peer.client_gone(); }));
  const std::string& got = peer.received();
  EXPECT_EQ(got.rfind("CONNECT\n", 0), 0u) << got;
  EXPECT_NE(got.find("\naccept-version:1.0,1.1,1.2\n"), std::string::npos) << got;
  EXPECT_NE(got.find("\nhost:prod\n"), std::string::npos) << got;
  EXPECT_NE(got.find("\nlogin:guest\n"), std::string::npos) << got;
  EXPECT_NE(got.find("\npasscode:s3cret-pass\n"), std::string::npos) << got;
  EXPECT_NE(got.find("\nheart-beat:0,0\n"), std::string::npos) << got;
  // A clean goodbye after CONNECTED.
  EXPECT_NE(got.find(with_nul("DISCONNECT\n\n")), std::string::npos) << got;
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, StompProbeOmitsEmptyLoginAndPasscode) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReply, with_nul("CONNECTED\nversion:1.2\n\n"));
  int calls = 0;
  ProbeSettings s = stomp_settings();
  s.login.clear();
  s.passcode.clear();
  auto r = run_probe(io, "127.0.0.1", peer.port(), s, &calls);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ok) << r->error;
  EXPECT_EQ(peer.received().find("login:"), std::string::npos);
  EXPECT_EQ(peer.received().find("passcode:"), std::string::npos);
  EXPECT_NE(peer.received().find("\nhost:/\n"), std::string::npos);
}

TEST(ProbeTest, StompProbeSkipsHeartbeatsBeforeConnected) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReply, with_nul("\n\r\n\nCONNECTED\nversion:1.1\n\n"));
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->ok) << r->error;
}

TEST(ProbeTest, StompErrorFrameFailsWithItsMessage) {
  asio::io_context io;
  const std::string reply = with_nul(
      "ERROR\nmessage:Access refused for user 'guest'\ncontent-type:text/plain\n"
      "content-length:9\n\nbad login");
  StompPeer peer(io, StompPeer::Mode::kReply, reply);
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "stomp: broker answered ERROR: Access refused for user 'guest'");
  EXPECT_EQ(r->error.find("s3cret-pass"), std::string::npos);
  EXPECT_GT(r->latency_us, 0u);
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, StompErrorMessageIsUnescapedAndKeptOnOneLine) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReply,
                 with_nul("ERROR\nmessage:vhost\\cprod\\nnot found\n\n"));
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "stomp: broker answered ERROR: vhost:prod?not found");
}

TEST(ProbeTest, StompErrorFrameWithoutMessageSaysSo) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReply, with_nul("ERROR\n\n"));
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->error, "stomp: broker answered ERROR: (no message header)");
}

TEST(ProbeTest, StompGarbageReplyNamesWhatCame) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReply,
                 "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "stomp: expected CONNECTED, got 'HTTP/1.1'");
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, StompOtherFrameThanConnectedFails) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReply, with_nul("RECEIPT\nreceipt-id:1\n\n"));
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "stomp: expected CONNECTED, got 'RECEIPT'");
}

TEST(ProbeTest, StompPeerClosingBeforeReplyFails) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kCloseAfterFrame);
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_TRUE(peer.got_frame());
  // A close may reach the probe as EOF or, with its CONNECT unread, as a reset.
  EXPECT_TRUE(r->error == "stomp: connection closed before the broker answered CONNECT" ||
              r->error == "stomp: read: Connection reset by peer")
      << r->error;
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, StompPeerClosingMidFrameFails) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReplyThenClose, "CONNECTED\nversi");
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "stomp: connection closed in the middle of the reply to CONNECT");
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, StompTimesOutWhenBrokerNeverAnswers) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kSilent);
  int calls = 0;
  ProbeSettings s = stomp_settings();
  s.timeout_ms = 200;
  auto r = run_probe(io, "127.0.0.1", peer.port(), s, &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "timed out after 200 ms");
  EXPECT_GT(r->latency_us, 0u);
  EXPECT_TRUE(peer.got_frame());
  // The probe's socket is closed at the deadline; done stays called once.
  EXPECT_TRUE(run_until(io, [&] { return peer.client_gone(); }));
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, StompReplyOverLimitWithoutNulFails) {
  asio::io_context io;
  std::string reply = "ERROR\nmessage:x\n\n";
  reply.append(kProbeReplyBytesMax + 8192, 'y');
  StompPeer peer(io, StompPeer::Mode::kReply, reply);
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_NE(r->error.find("larger than 65536 bytes"), std::string::npos) << r->error;
  EXPECT_EQ(calls, 1);
}

TEST(ProbeTest, StompHeartbeatsAloneCannotGrowPastLimit) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kReply, std::string(kProbeReplyBytesMax + 100, '\n'));
  int calls = 0;
  auto r = run_probe(io, "127.0.0.1", peer.port(), stomp_settings(), &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "stomp: no complete frame in the first 65536 bytes of the reply");
}

TEST(ProbeTest, StompLoginWithNewlineIsRefusedWithoutLeakingPasscode) {
  asio::io_context io;
  StompPeer peer(io, StompPeer::Mode::kSilent);
  int calls = 0;
  ProbeSettings s = stomp_settings();
  s.passcode = "pass\nword";
  auto r = run_probe(io, "127.0.0.1", peer.port(), s, &calls);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->error, "stomp: cannot build CONNECT: login, passcode or vhost holds CR, LF or NUL");
  EXPECT_EQ(r->error.find("word"), std::string::npos);
}

TEST(ProbeTest, DestroyingIoContextWithProbeInFlightNeverCallsDone) {
  int calls = 0;
  {
    asio::io_context io;
    StompPeer peer(io, StompPeer::Mode::kSilent);
    start_probe(io, "127.0.0.1", peer.port(), stomp_settings(),
                [&calls](const ProbeResult&) { ++calls; });
    ASSERT_TRUE(run_until(io, [&] { return peer.got_frame(); }));
  }
  EXPECT_EQ(calls, 0);
}

TEST(ProbeTest, ManyProbesEachCompleteOnce) {
  asio::io_context io;
  StompPeer a(io, StompPeer::Mode::kSilent);
  int calls = 0;
  int ok = 0;
  ProbeSettings s;
  s.timeout_ms = 10'000;
  for (int i = 0; i < 8; ++i) {
    start_probe(io, "127.0.0.1", a.port(), s, [&](const ProbeResult& r) {
      ++calls;
      ok += r.ok ? 1 : 0;
    });
  }
  ASSERT_TRUE(run_until(io, [&] { return calls == 8; }));
  EXPECT_EQ(ok, 8);  // the kernel completes handshakes from the backlog without accept()
}

}  // namespace
}  // namespace sluice::control
