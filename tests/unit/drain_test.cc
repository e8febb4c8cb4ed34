// The drainer's STOMP client protocol (CONNECT, pipelined SENDs in a window, RECEIPTs in order,
// header rewriting, failures) and its pacing (backoff with jitter, rate limit).
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>
#include <vector>

#include "dataplane/session/parser.h"
#include "queue/drain_connection.h"
#include "queue/drain_pacing.h"

namespace sluice::queue {
namespace {

using Kind = DrainEvent::Kind;

DrainSettings settings(uint32_t window = 4) {
  DrainSettings s;
  s.login = "sluice";
  s.passcode = "secret";
  s.vhost = "edge";
  s.gateway_id = "gw1";
  s.window = window;
  return s;
}

// Parses one frame our side wrote, with a STOMP 1.2 parser as the broker would.
struct Parsed {
  std::string command;
  std::vector<std::pair<std::string, std::string>> headers;  // raw, as on the wire
  std::string body;
};
Parsed parse_frame(std::string_view bytes, session::Version v) {
  session::Parser p{session::FrameLimits{}};
  p.set_version(v);
  session::ParseResult r = p.parse(bytes);
  EXPECT_EQ(r.status, session::ParseResult::Status::kFrame);
  EXPECT_EQ(r.consumed, bytes.size());
  Parsed out;
  if (r.status != session::ParseResult::Status::kFrame) return out;
  const session::Frame& f = p.frame();
  out.command = std::string(session::command_name(f.command()));
  for (size_t i = 0; i < f.header_count(); ++i) {
    out.headers.emplace_back(std::string(f.header(i).name), std::string(f.header(i).value));
  }
  out.body = std::string(f.body());
  return out;
}

// Feeds `bytes` whole and returns the events until kNeedMore.
std::vector<DrainEvent> feed(DrainConnection& c, std::string& pending, std::string_view bytes) {
  pending += bytes;
  std::vector<DrainEvent> out;
  for (int guard = 0; guard < 10'000; ++guard) {
    DrainEvent e = c.on_bytes(pending);
    pending.erase(0, e.consumed);
    if (e.kind == Kind::kNeedMore) break;
    out.push_back(e);
    if (e.kind == Kind::kFailed) break;
  }
  return out;
}

std::string receipt(uint64_t seq) {
  return "RECEIPT\nreceipt-id:" + std::to_string(seq) + "\n\n" + std::string(1, '\0');
}
const std::string kConnected =
    std::string("CONNECTED\nversion:1.2\nserver:RabbitMQ/3.10\n\n") + '\0';

TEST(DrainConnectionTest, ConnectCarriesCredentialsVhostAndNoHeartBeats) {
  DrainConnection c(settings());
  std::array<char, 512> buf;
  auto frame = c.connect(buf);
  ASSERT_TRUE(frame);
  Parsed p = parse_frame(*frame, session::Version::k1_0);
  EXPECT_EQ(p.command, "CONNECT");
  EXPECT_EQ(p.headers, (std::vector<std::pair<std::string, std::string>>{{"accept-version", "1.2"},
                                                                         {"host", "edge"},
                                                                         {"login", "sluice"},
                                                                         {"passcode", "secret"},
                                                                         {"heart-beat", "0,0"}}));
  std::array<char, 16> small;
  EXPECT_FALSE(c.connect(small));
}

TEST(DrainConnectionTest, SendsWaitForConnectedThenFillTheWindowAndReceiptsFreeIt) {
  DrainConnection c(settings(3));
  std::array<char, 1024> buf;
  size_t n = 0;
  DrainMessage m{1, "destination:/queue/orders\n", "hello"};
  EXPECT_EQ(c.send(m, buf, &n), DrainConnection::SendResult::kNotReady);
  std::string pending;
  auto ev = feed(c, pending, kConnected);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kConnected);
  for (uint64_t seq = 10; seq < 13; ++seq) {
    m.seq = seq;
    ASSERT_EQ(c.send(m, buf, &n), DrainConnection::SendResult::kSent);
  }
  EXPECT_FALSE(c.window_open());
  m.seq = 13;
  EXPECT_EQ(c.send(m, buf, &n), DrainConnection::SendResult::kWindowFull);
  EXPECT_EQ(c.unconfirmed(), (std::vector<uint64_t>{10, 11, 12}));
  ev = feed(c, pending, receipt(10) + "\n" + receipt(11));
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].kind, Kind::kDelivered);
  EXPECT_EQ(ev[0].seq, 10u);
  EXPECT_EQ(ev[1].kind, Kind::kSkip);  // the heart-beat EOL between frames
  EXPECT_EQ(ev[2].seq, 11u);
  EXPECT_EQ(c.unconfirmed(), (std::vector<uint64_t>{12}));
  EXPECT_TRUE(c.window_open());
  EXPECT_EQ(c.send(m, buf, &n), DrainConnection::SendResult::kSent);
  EXPECT_EQ(c.in_flight(), 2u);
}

TEST(DrainConnectionTest, SendKeepsClientHeadersRewritesOursAndAddsTheMessageId) {
  DrainConnection c(settings());
  std::string pending;
  feed(c, pending, kConnected);
  const std::string headers =
      "destination:/queue/orders\ncontent-type:text/plain\ncontent-length:999\n"
      "receipt:client-7\ntransaction:tx1\nx-odd:a\\cb\\nc\\\\d\nx-empty:\n";
  std::array<char, 1024> buf;
  size_t n = 0;
  DrainMessage m{42, headers, std::string_view("bo\0dy", 5)};
  ASSERT_EQ(c.send(m, buf, &n), DrainConnection::SendResult::kSent);
  Parsed p = parse_frame(std::string_view(buf.data(), n), session::Version::k1_2);
  EXPECT_EQ(p.command, "SEND");
  EXPECT_EQ(p.headers, (std::vector<std::pair<std::string, std::string>>{
                           {"destination", "/queue/orders"},
                           {"content-type", "text/plain"},
                           {"x-odd", "a\\cb\\nc\\\\d"},  // still escaped as STOMP 1.2 does
                           {"x-empty", ""},
                           {"sluice-message-id", "gw1-42"},
                           {"receipt", "42"},
                           {"content-length", "5"}}));
  EXPECT_EQ(p.body, std::string("bo\0dy", 5));

  // A message that already has an id (it came from a peer gateway) keeps it.
  m = DrainMessage{43, "sluice-message-id:gw0-7\ndestination:/queue/orders\n", ""};
  ASSERT_EQ(c.send(m, buf, &n), DrainConnection::SendResult::kSent);
  p = parse_frame(std::string_view(buf.data(), n), session::Version::k1_2);
  EXPECT_EQ(
      p.headers,
      (std::vector<std::pair<std::string, std::string>>{
          {"sluice-message-id", "gw0-7"}, {"destination", "/queue/orders"}, {"receipt", "43"}}));
  EXPECT_EQ(c.in_flight(), 2u);
}

TEST(DrainConnectionTest, HeaderBlocksThatAreNotStomp12LinesAreRefused) {
  DrainConnection c(settings());
  std::string pending;
  feed(c, pending, kConnected);
  std::array<char, 1024> buf;
  size_t n = 0;
  for (std::string_view bad : {
           std::string_view("content-type:text/plain\n"),        // no destination
           std::string_view("destination:/queue/a"),             // no final LF
           std::string_view("destination:/queue/a\nnocolon\n"),  // not name:value
           std::string_view("destination:/queue/a\n:empty-name\n"),
           std::string_view("destination:/queue/a\nx:bad\\tescape\n"),
           std::string_view("destination:/queue/a\nx:cr\r\n"),
       }) {
    EXPECT_EQ(c.send(DrainMessage{1, bad, ""}, buf, &n), DrainConnection::SendResult::kBadHeaders)
        << bad;
  }
  EXPECT_EQ(c.in_flight(), 0u);
}

TEST(DrainConnectionTest, FrameThatDoesNotFitIsRefusedAndNotCountedInFlight) {
  DrainConnection c(settings());
  std::string pending;
  feed(c, pending, kConnected);
  std::array<char, 64> buf;
  size_t n = 0;
  std::string body(100, 'x');
  DrainMessage m{1, "destination:/queue/orders\n", body};
  EXPECT_EQ(c.send(m, buf, &n), DrainConnection::SendResult::kTooLarge);
  EXPECT_EQ(c.in_flight(), 0u);
}

TEST(DrainConnectionTest, FailuresNameTheCause) {
  struct Case {
    std::string bytes;
    std::string reason;
  };
  std::vector<Case> cases = {
      {std::string("ERROR\nmessage:Access refused for user 'sluice'\n\n") + '\0',
       "the owner answered ERROR: Access refused for user 'sluice'"},
      {std::string("RECEIPT\nreceipt-id:1\n\n") + '\0', "the owner's first frame is not CONNECTED"},
      {std::string("CONNECTED\nversion:1.1\n\n") + '\0', "the owner did not agree to STOMP 1.2"},
      {"BOGUS\n\n", "unparsable frame from the owner: unknown command"},
  };
  for (const Case& k : cases) {
    DrainConnection c(settings());
    std::string pending;
    auto ev = feed(c, pending, k.bytes);
    ASSERT_FALSE(ev.empty()) << k.bytes;
    EXPECT_EQ(ev.back().kind, Kind::kFailed);
    EXPECT_EQ(ev.back().reason, k.reason);
    EXPECT_TRUE(c.failed());
  }
  // After CONNECTED with SENDs 1 and 2 in flight: a receipt for no SEND in flight (never sent,
  // or confirmed already), a MESSAGE, an ERROR.
  std::vector<Case> later = {
      {receipt(9), "RECEIPT for no SEND in flight"},
      {receipt(1) + receipt(1), "RECEIPT for no SEND in flight"},
      {std::string("RECEIPT\nreceipt-id:x1\n\n") + '\0',
       "RECEIPT without a receipt-id the drainer sent"},
      {std::string("MESSAGE\ndestination:/queue/a\n\n") + '\0',
       "unexpected frame from the owner (only RECEIPT and ERROR are expected)"},
      {std::string("ERROR\nmessage:queue deleted\n\nbody") + '\0',
       "the owner answered ERROR: queue deleted"},
  };
  for (const Case& k : later) {
    DrainConnection c(settings());
    std::string pending;
    feed(c, pending, kConnected);
    std::array<char, 256> buf;
    size_t n = 0;
    for (uint64_t seq : {1, 2}) {
      ASSERT_EQ(c.send(DrainMessage{seq, "destination:/queue/a\n", ""}, buf, &n),
                DrainConnection::SendResult::kSent);
    }
    auto ev = feed(c, pending, k.bytes);
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back().kind, Kind::kFailed) << k.bytes;
    EXPECT_EQ(ev.back().reason, k.reason);
    EXPECT_EQ(c.send(DrainMessage{3, "destination:/queue/a\n", ""}, buf, &n),
              DrainConnection::SendResult::kNotReady);
    const bool one_confirmed = k.bytes == receipt(1) + receipt(1);
    const std::vector<uint64_t> left =
        one_confirmed ? std::vector<uint64_t>{2} : std::vector<uint64_t>{1, 2};
    EXPECT_EQ(c.unconfirmed(), left);
  }
}

// RabbitMQ confirms (and so answers receipts) per queue: receipts of SENDs to different queues
// come in any order.
TEST(DrainConnectionTest, ReceiptsAreMatchedInAnyOrder) {
  DrainConnection c(settings(4));
  std::string pending;
  feed(c, pending, kConnected);
  std::array<char, 256> buf;
  size_t n = 0;
  for (uint64_t seq : {7, 3, 9, 4}) {
    ASSERT_EQ(c.send(DrainMessage{seq, "destination:/queue/a\n", ""}, buf, &n),
              DrainConnection::SendResult::kSent);
  }
  EXPECT_EQ(c.unconfirmed(), (std::vector<uint64_t>{7, 3, 9, 4}));  // in the order sent
  auto ev = feed(c, pending, receipt(9) + receipt(7));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].seq, 9u);
  EXPECT_EQ(ev[1].seq, 7u);
  EXPECT_EQ(c.unconfirmed(), (std::vector<uint64_t>{3, 4}));
  EXPECT_TRUE(c.window_open());
  ASSERT_EQ(c.send(DrainMessage{11, "destination:/queue/a\n", ""}, buf, &n),
            DrainConnection::SendResult::kSent);
  EXPECT_EQ(c.unconfirmed(), (std::vector<uint64_t>{3, 4, 11}));
}

TEST(DrainConnectionTest, AnySplitOfTheOwnersBytesGivesTheSameEvents) {
  const std::string stream = kConnected + "\n" + receipt(5) + receipt(6) + "\r\n" + receipt(7);
  std::mt19937_64 rng(7);
  for (int round = 0; round < 500; ++round) {
    DrainConnection c(settings(8));
    std::string pending;
    std::vector<uint64_t> delivered;
    bool connected = false;
    size_t at = 0;
    while (at < stream.size()) {
      const size_t n = std::min(stream.size() - at, size_t(rng() % 9 + 1));
      for (const DrainEvent& e : feed(c, pending, stream.substr(at, n))) {
        if (e.kind == Kind::kConnected) {
          connected = true;
          std::array<char, 256> buf;
          size_t w = 0;
          for (uint64_t seq : {5, 6, 7}) {
            ASSERT_EQ(c.send(DrainMessage{seq, "destination:/queue/a\n", ""}, buf, &w),
                      DrainConnection::SendResult::kSent);
          }
        }
        ASSERT_NE(e.kind, Kind::kFailed) << e.reason;
        if (e.kind == Kind::kDelivered) delivered.push_back(e.seq);
      }
      at += n;
    }
    EXPECT_TRUE(connected);
    EXPECT_EQ(delivered, (std::vector<uint64_t>{5, 6, 7}));
    EXPECT_TRUE(pending.empty());
  }
}

TEST(BackoffTest, DoublesFromTheBaseUpToTheCapWithJitterAndResets) {
  Backoff b(100, 2'000, 42);
  const uint32_t nominal[] = {100, 200, 400, 800, 1600, 2000, 2000, 2000};
  for (uint32_t want : nominal) {
    const uint32_t d = b.next_delay_ms();
    EXPECT_GE(d, want - want / 2);
    EXPECT_LE(d, want);
  }
  EXPECT_EQ(b.failures(), 8u);
  b.reset();
  const uint32_t d = b.next_delay_ms();
  EXPECT_GE(d, 50u);
  EXPECT_LE(d, 100u);
  // Jitter: two gateways with other seeds do not retry in step.
  Backoff x(1'000, 30'000, 1), y(1'000, 30'000, 2);
  int same = 0;
  for (int i = 0; i < 20; ++i)
    same += x.next_delay_ms() == y.next_delay_ms() ? 1 : 0;
  EXPECT_LT(same, 5);
}

TEST(RateLimitTest, ZeroIsUnlimitedOtherwiseTokensArriveAtTheRate) {
  RateLimit none(0, 0);
  for (int i = 0; i < 1000; ++i)
    EXPECT_TRUE(none.take(0));
  RateLimit r(10, 2);  // 10 per second, bursts of 2
  const session::Nanos t0 = 5'000'000'000;
  EXPECT_TRUE(r.take(t0));
  EXPECT_TRUE(r.take(t0));
  EXPECT_FALSE(r.take(t0));
  const session::Nanos next = r.next_at(t0);
  EXPECT_GT(next, t0 + 99'000'000);
  EXPECT_LE(next, t0 + 101'000'000);
  EXPECT_FALSE(r.take(next - 2'000'000));
  EXPECT_TRUE(r.take(next));
  EXPECT_FALSE(r.take(next));
  // Idle time never saves up more than the burst.
  const session::Nanos later = t0 + 60'000'000'000;
  EXPECT_TRUE(r.take(later));
  EXPECT_TRUE(r.take(later));
  EXPECT_FALSE(r.take(later));
}

// drain.rate_per_second changed while the drainer runs.
TEST(RateLimitTest, ANewRateAppliesFromTheNextToken) {
  RateLimit r(10, 1);
  const session::Nanos t0 = 5'000'000'000;
  EXPECT_TRUE(r.take(t0));
  EXPECT_FALSE(r.take(t0));
  r.set_rate(1000);  // a token every millisecond
  EXPECT_LE(r.next_at(t0), t0 + 1'001'000);
  EXPECT_TRUE(r.take(t0 + 1'001'000));
  r.set_rate(0);  // no limit
  for (int i = 0; i < 100; ++i)
    EXPECT_TRUE(r.take(t0 + 1'001'000));
  r.set_rate(1);  // limited again: a full bucket (one token), then one a second
  EXPECT_TRUE(r.take(t0 + 2'000'000));
  EXPECT_FALSE(r.take(t0 + 2'000'000));
  EXPECT_GT(r.next_at(t0 + 2'000'000), t0 + 900'000'000);
}

}  // namespace
}  // namespace sluice::queue
