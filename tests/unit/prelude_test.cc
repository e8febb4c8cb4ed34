// Prelude: CONNECT negotiation, buffering to the destination, limits, deadlines, bind plan.
#include "dataplane/session/prelude.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dataplane/session/parser.h"
#include "tests/unit/stomp_frames.h"

namespace sluice::session {
namespace {

using testing::frame;
using namespace std::string_literals;
constexpr Nanos kMs = kNanosPerMilli;

std::string connect12(std::string_view host = "vh1") {
  return frame("CONNECT", {{"accept-version", "1.0,1.1,1.2"},
                           {"host", host},
                           {"login", "alice"},
                           {"passcode", "secret"},
                           {"heart-beat", "10000,20000"}});
}

// Parses exactly one frame out of `bytes` (for checking what the prelude wrote).
struct Parsed {
  Command command;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};
Parsed parse_one(std::string_view bytes, Version v = Version::k1_2) {
  Parser p(FrameLimits{});
  p.set_version(v);
  ParseResult r = p.parse(bytes);
  EXPECT_EQ(r.status, ParseResult::Status::kFrame);
  EXPECT_EQ(r.consumed, bytes.size());
  Parsed out{p.frame().command(), {}, std::string(p.frame().body())};
  for (size_t i = 0; i < p.frame().header_count(); ++i) {
    Header h = p.frame().header(i);
    out.headers.emplace_back(std::string(h.name), std::string(h.value));
  }
  return out;
}

std::string header_of(const Parsed& p, std::string_view name) {
  for (const auto& [n, v] : p.headers) {
    if (n == name) return v;
  }
  return "<absent>";
}

class PreludeTest : public ::testing::Test {
 protected:
  void make(Nanos now = 0) {
    buffer_.assign(config_.prelude_bytes_max, '\0');
    prelude_.emplace(config_, buffer_, now);
  }
  // Feeds everything (it must fit) and collects events until the prelude waits, binds or closes.
  std::vector<PreludeEvent> feed(std::string_view bytes, Nanos now = 0) {
    EXPECT_EQ(prelude_->feed(bytes, now), bytes.size());
    return drain();
  }
  std::vector<PreludeEvent> drain() {
    std::vector<PreludeEvent> events;
    for (int i = 0; i < 100; ++i) {
      PreludeEvent e = prelude_->next();
      if (e.kind == PreludeEvent::Kind::kReply) replies_ += e.to_client;
      events.push_back(e);
      if (e.kind != PreludeEvent::Kind::kReply) break;
    }
    return events;
  }
  PreludeEvent last(std::string_view bytes, Nanos now = 0) { return feed(bytes, now).back(); }

  SessionConfig config_;
  std::vector<char> buffer_;
  std::optional<Prelude> prelude_;
  std::string replies_;
};

TEST_F(PreludeTest, ConnectGetsConnectedWithHighestCommonVersion) {
  make();
  auto events = feed(connect12());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, PreludeEvent::Kind::kReply);
  EXPECT_EQ(events[1].kind, PreludeEvent::Kind::kNeedMore);
  Parsed c = parse_one(events[0].to_client);
  EXPECT_EQ(c.command, Command::kConnected);
  EXPECT_EQ(header_of(c, "version"), "1.2");
  EXPECT_EQ(header_of(c, "heart-beat"), "0,0");
  EXPECT_EQ(header_of(c, "server"), "sluice/" SLUICE_VERSION);
}

TEST_F(PreludeTest, VersionIsHighestCommonWithConfiguredSet) {
  config_.versions = VersionSet();
  config_.versions.add(Version::k1_0);
  config_.versions.add(Version::k1_1);
  make();
  PreludeEvent e = feed(connect12())[0];
  EXPECT_EQ(header_of(parse_one(e.to_client), "version"), "1.1");
}

TEST_F(PreludeTest, AcceptVersionIgnoresUnknownVersionsAndSpaces) {
  make();
  PreludeEvent e = feed(frame("STOMP", {{"accept-version", "1.3, 1.1 ,2.0"}, {"host", "h"}}))[0];
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kReply);
  EXPECT_EQ(header_of(parse_one(e.to_client), "version"), "1.1");
}

TEST_F(PreludeTest, Stomp10ClientWithoutAcceptVersionGets10) {
  make();
  PreludeEvent e = feed(frame("CONNECT", {{"login", "a"}}))[0];
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kReply);
  EXPECT_EQ(header_of(parse_one(e.to_client, Version::k1_0), "version"), "1.0");
  EXPECT_EQ(last(frame("SEND", {{"destination", "/queue/q"}}, "x")).kind,
            PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->version(), Version::k1_0);
}

TEST_F(PreludeTest, NoCommonVersionGetsErrorWithVersionHeaderAndCloses) {
  config_.versions = VersionSet();
  config_.versions.add(Version::k1_2);
  make();
  PreludeEvent e = last(frame("CONNECT", {{"accept-version", "1.0,1.1"}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kVersion);
  Parsed err = parse_one(e.to_client, Version::k1_0);
  EXPECT_EQ(err.command, Command::kError);
  EXPECT_EQ(header_of(err, "version"), "1.2");
  EXPECT_EQ(header_of(err, "message"), "unsupported STOMP version");
  EXPECT_NE(err.body.find("1.2"), std::string::npos);
}

TEST_F(PreludeTest, InvalidHeartBeatIsRefused) {
  for (std::string_view hb : {"", "1", "1,", ",1", "a,b", "1;2", "-1,0"}) {
    make();
    PreludeEvent e = last(frame("CONNECT", {{"accept-version", "1.2"}, {"heart-beat", hb}}));
    ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose) << hb;
    EXPECT_EQ(e.end, PreludeEnd::kBadHeader) << hb;
    EXPECT_EQ(header_of(parse_one(e.to_client, Version::k1_0), "message"),
              "invalid heart-beat header");
  }
}

TEST_F(PreludeTest, FirstFrameOtherThanConnectIsRefused) {
  make();
  PreludeEvent e = last(frame("SEND", {{"destination", "/queue/a"}}, "hi"));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kNotConnectFirst);
  Parsed err = parse_one(e.to_client, Version::k1_0);
  EXPECT_EQ(header_of(err, "message"), "expected CONNECT");
  EXPECT_NE(err.body.find("SEND"), std::string::npos);
}

TEST_F(PreludeTest, HeartBeatEolsBeforeConnectAreAccepted) {
  make();
  EXPECT_EQ(feed("\n\r\n" + connect12())[0].kind, PreludeEvent::Kind::kReply);
}

TEST_F(PreludeTest, DisconnectBeforeDestinationWithReceiptGetsReceipt) {
  make();
  feed(connect12());
  PreludeEvent e = last(frame("DISCONNECT", {{"receipt", "77"}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kDisconnect);
  Parsed r = parse_one(e.to_client);
  EXPECT_EQ(r.command, Command::kReceipt);
  EXPECT_EQ(header_of(r, "receipt-id"), "77");
}

TEST_F(PreludeTest, DisconnectWithoutReceiptClosesSilently) {
  make();
  feed(connect12());
  PreludeEvent e = last(frame("DISCONNECT", {}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kDisconnect);
  EXPECT_TRUE(e.to_client.empty());
}

TEST_F(PreludeTest, SendBindsWithVhostAndQueueAfterOwnedPrefix) {
  make();
  feed(connect12("vh1"));
  PreludeEvent e = last(frame("SEND", {{"destination", "/queue/orders"}}, "x"));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->key().vhost, "vh1");
  EXPECT_EQ(prelude_->key().queue, "orders");
  EXPECT_FALSE(prelude_->key().default_route);
  EXPECT_EQ(prelude_->bind_command(), Command::kSend);
}

TEST_F(PreludeTest, SubscribeBindsOnAmqQueuePrefix) {
  make();
  feed(connect12());
  PreludeEvent e = last(frame("SUBSCRIBE", {{"id", "0"}, {"destination", "/amq/queue/jobs"}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->key().queue, "jobs");
  EXPECT_EQ(prelude_->bind_command(), Command::kSubscribe);
}

TEST_F(PreludeTest, OtherDestinationsTakeTheDefaultRoute) {
  make();
  feed(connect12());
  ASSERT_EQ(last(frame("SEND", {{"destination", "/topic/news"}})).kind, PreludeEvent::Kind::kBind);
  EXPECT_TRUE(prelude_->key().default_route);
  EXPECT_EQ(prelude_->key().queue, "/topic/news");
}

TEST_F(PreludeTest, ConfiguredPrefixesReplaceTheDefaults) {
  config_.owned_prefixes = {"/q/"};
  make();
  feed(connect12());
  ASSERT_EQ(last(frame("SEND", {{"destination", "/queue/a"}})).kind, PreludeEvent::Kind::kBind);
  EXPECT_TRUE(prelude_->key().default_route);
  make();
  feed(connect12());
  ASSERT_EQ(last(frame("SEND", {{"destination", "/q/a"}})).kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->key().queue, "a");
}

TEST_F(PreludeTest, MissingHostUsesDefaultVhost) {
  config_.default_vhost = "/";
  make();
  feed(frame("CONNECT", {{"accept-version", "1.2"}}));
  ASSERT_EQ(last(frame("SEND", {{"destination", "/queue/a"}})).kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->key().vhost, "/");
}

TEST_F(PreludeTest, EscapedDestinationIsDecodedIn12) {
  make();
  feed(connect12());
  ASSERT_EQ(last(frame("SEND", {{"destination", "/queue/a\\cb\\\\c"}})).kind,
            PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->key().queue, "a:b\\c");
}

TEST_F(PreludeTest, MissingDestinationIsRefused) {
  make();
  feed(connect12());
  PreludeEvent e = last(frame("SEND", {{"receipt", "1"}}, "x"));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kBadHeader);
  EXPECT_EQ(header_of(parse_one(e.to_client), "message"), "missing destination header");
}

TEST_F(PreludeTest, EmptyDestinationIsRefused) {
  make();
  feed(connect12());
  PreludeEvent e = last(frame("SEND", {{"destination", ""}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kBadHeader);
  EXPECT_EQ(header_of(parse_one(e.to_client), "message"), "empty destination header");
}

TEST_F(PreludeTest, CarriageReturnInsideAReceiptIsAProtocolError) {
  make();
  feed(connect12());
  PreludeEvent e = last("DISCONNECT\nreceipt:a\rb\n\n\0"s);
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kProtocolError);
  EXPECT_EQ(header_of(parse_one(e.to_client), "message"), "malformed header line");
}

TEST_F(PreludeTest, PrefixWithoutQueueNameIsRefused) {
  make();
  feed(connect12());
  PreludeEvent e = last(frame("SEND", {{"destination", "/queue/"}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kBadHeader);
}

TEST_F(PreludeTest, OverlongDestinationAndHostAreRefused) {
  make();
  feed(connect12());
  std::string dest = "/queue/" + std::string(kDestinationBytesMax, 'q');
  PreludeEvent e = last(frame("SEND", {{"destination", dest}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(header_of(parse_one(e.to_client), "message"), "destination header too long");

  make();
  std::string host(kVhostBytesMax + 1, 'h');
  e = last(frame("CONNECT", {{"accept-version", "1.2"}, {"host", host}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kBadHeader);
  make();
  host.pop_back();
  EXPECT_EQ(feed(frame("CONNECT", {{"accept-version", "1.2"}, {"host", host}}))[0].kind,
            PreludeEvent::Kind::kReply);
}

TEST_F(PreludeTest, FramesBeforeTheDestinationAreBufferedInOrder) {
  make();
  feed(connect12());
  std::string begin = frame("BEGIN", {{"transaction", "t1"}});
  std::string ack = frame("ACK", {{"id", "9"}});
  EXPECT_EQ(last(begin + "\n" + ack).kind, PreludeEvent::Kind::kNeedMore);
  std::string send = frame("SEND", {{"destination", "/queue/a"}, {"transaction", "t1"}}, "m");
  ASSERT_EQ(last(send).kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->after_connect(), begin + "\n" + ack + send);
}

TEST_F(PreludeTest, SecondConnectAndServerFramesAreRefused) {
  make();
  feed(connect12());
  EXPECT_EQ(last(connect12()).end, PreludeEnd::kProtocolError);
  for (std::string_view cmd : {"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"}) {
    make();
    feed(connect12());
    PreludeEvent e = last(frame(cmd, {}));
    ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose) << cmd;
    EXPECT_EQ(e.end, PreludeEnd::kProtocolError) << cmd;
    EXPECT_EQ(header_of(parse_one(e.to_client), "message"), "unexpected frame");
  }
}

TEST_F(PreludeTest, MalformedFrameGetsErrorNamingTheProblem) {
  make();
  feed(connect12());
  PreludeEvent e = last("SEND\nno-colon-here\n\n\0"s);
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kProtocolError);
  EXPECT_EQ(header_of(parse_one(e.to_client), "message"), "malformed header line");
}

TEST_F(PreludeTest, PreludeOverLimitIsRefusedAndExtraBytesAreLeftToTheCaller) {
  config_.prelude_bytes_max = 256;
  make();
  feed(connect12());
  std::string many;
  while (many.size() < 400)
    many += frame("BEGIN", {{"transaction", "t"}});
  size_t taken = prelude_->feed(many, 0);
  EXPECT_EQ(taken, 256 - connect12().size());
  PreludeEvent e = drain().back();
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kTooLarge);
  Parsed err = parse_one(e.to_client);
  EXPECT_EQ(header_of(err, "message"), "prelude too large");
  EXPECT_NE(err.body.find("256"), std::string::npos);
}

TEST_F(PreludeTest, PreludeExactlyAtLimitStillBinds) {
  std::string c = connect12();
  std::string s = frame("SEND", {{"destination", "/queue/a"}}, "body");
  config_.prelude_bytes_max = uint32_t(c.size() + s.size());
  make();
  feed(c);
  EXPECT_EQ(last(s).kind, PreludeEvent::Kind::kBind);
  // Bytes after the prelude's capacity are not taken: they belong to the spliced stream.
  EXPECT_EQ(prelude_->feed("more", 0), 0u);
}

TEST_F(PreludeTest, BindsAsSoonAsTheSendHeadersAreComplete) {
  config_.prelude_bytes_max = 1024;
  make();
  feed(connect12());
  std::string head = "SEND\ndestination:/queue/big\ncontent-length:200000\n\n";
  std::string first = "SEND\ndestination:/queue/big\ncont";
  EXPECT_EQ(last(first).kind, PreludeEvent::Kind::kNeedMore);
  std::string body(200000, 'b');
  std::string rest = "ent-length:200000\n\n" + body;
  size_t taken = prelude_->feed(rest, 0);
  EXPECT_EQ(taken, 1024 - connect12().size() - first.size());
  ASSERT_EQ(drain().back().kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->key().queue, "big");
  // The replay carries the partial SEND; the engine splices the rest of the body after it.
  BindPlan plan = prelude_->take_bind_plan();
  EXPECT_EQ(plan.rest, (head + body).substr(0, plan.rest.size()));
  EXPECT_EQ(plan.rest.size(), 1024 - connect12().size());
}

TEST_F(PreludeTest, StartedFrameMustCompleteWithinFrameTimeout) {
  config_.frame_timeout_ns = 5000 * kMs;
  make(0);
  feed(connect12(), 100 * kMs);
  EXPECT_EQ(last("SEND\ndestination:/qu", 1000 * kMs).kind, PreludeEvent::Kind::kNeedMore);
  EXPECT_EQ(prelude_->deadline(), 6000 * kMs);
  EXPECT_EQ(last("eue/a\n", 3000 * kMs).kind, PreludeEvent::Kind::kNeedMore);
  EXPECT_EQ(prelude_->deadline(), 6000 * kMs);  // more bytes do not extend a started frame
  EXPECT_EQ(prelude_->on_time(5999 * kMs).kind, PreludeEvent::Kind::kNeedMore);
  PreludeEvent e = prelude_->on_time(6000 * kMs);
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kFrameTimeout);
  EXPECT_EQ(header_of(parse_one(e.to_client), "message"), "frame timeout");
  EXPECT_EQ(prelude_->deadline(), kNever);
}

TEST_F(PreludeTest, SlowConnectFrameTimesOutToo) {
  make(0);
  EXPECT_EQ(last("CONN", 10 * kMs).kind, PreludeEvent::Kind::kNeedMore);
  EXPECT_EQ(prelude_->deadline(), 10 * kMs + config_.frame_timeout_ns);
  EXPECT_EQ(prelude_->on_time(10 * kMs + config_.frame_timeout_ns).end, PreludeEnd::kFrameTimeout);
}

TEST_F(PreludeTest, IdleSessionWithoutDestinationTimesOut) {
  config_.prelude_idle_timeout_ns = 60'000 * kMs;
  make(0);
  feed(connect12(), 1000 * kMs);
  EXPECT_EQ(prelude_->deadline(), 61'000 * kMs);
  // Heart-beat EOLs are not frames: they do not keep a prelude alive.
  EXPECT_EQ(last("\n", 30'000 * kMs).kind, PreludeEvent::Kind::kNeedMore);
  EXPECT_EQ(prelude_->deadline(), 61'000 * kMs);
  EXPECT_EQ(prelude_->on_time(60'999 * kMs).kind, PreludeEvent::Kind::kNeedMore);
  PreludeEvent e = prelude_->on_time(61'000 * kMs);
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kIdleTimeout);
}

TEST_F(PreludeTest, CompleteFramesKeepThePreludeAlive) {
  config_.prelude_idle_timeout_ns = 60'000 * kMs;
  make(0);
  feed(connect12(), 0);
  feed(frame("BEGIN", {{"transaction", "t"}}), 50'000 * kMs);
  EXPECT_EQ(prelude_->deadline(), 110'000 * kMs);
  EXPECT_EQ(prelude_->on_time(100'000 * kMs).kind, PreludeEvent::Kind::kNeedMore);
}

TEST_F(PreludeTest, ByteByByteFeedingGivesTheSameOutcome) {
  std::string in = "\n" + connect12() + frame("BEGIN", {{"transaction", "t"}}) +
                   frame("SEND", {{"destination", "/queue/x"}, {"receipt", "r"}}, "hello");
  make();
  std::string connected;
  PreludeEvent e;
  for (char c : in) {
    ASSERT_EQ(prelude_->feed(std::string_view(&c, 1), 0), 1u);
    for (e = prelude_->next(); e.kind == PreludeEvent::Kind::kReply; e = prelude_->next()) {
      connected += e.to_client;
    }
    if (e.kind != PreludeEvent::Kind::kNeedMore) break;
  }
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(parse_one(connected).command, Command::kConnected);
  EXPECT_EQ(prelude_->key().queue, "x");
}

TEST_F(PreludeTest, CredentialsStayRightAfterTheConnectIsRewritten) {
  // accept-version comes before login and passcode and shrinks: their spans move with them.
  make();
  feed(connect12());
  last(frame("SEND", {{"destination", "/queue/a"}}));
  EXPECT_EQ(prelude_->login(), "alice");
  EXPECT_EQ(prelude_->passcode(), "secret");
  BindPlan plan = prelude_->take_bind_plan();
  EXPECT_GT(plan.connect_bytes_removed, 0u);
  EXPECT_EQ(prelude_->login(), "alice");
  EXPECT_EQ(prelude_->passcode(), "secret");
}

TEST_F(PreludeTest, BindPlanForcesHeartBeatAndNarrowsAcceptVersion) {
  make();
  std::string c =
      "CONNECT\r\naccept-version:1.0,1.1,1.2\r\nhost:vh\r\nheart-beat:10000,20000\r\n"
      "login:u\r\nx-custom:a:b\r\n\r\n"s +
      '\0';
  std::string rest = frame("BEGIN", {{"transaction", "t"}}) + "\n" +
                     frame("SEND", {{"destination", "/queue/a"}}, "body") + "partial";
  feed(c);
  ASSERT_EQ(last(rest).kind, PreludeEvent::Kind::kBind);
  BindPlan plan = prelude_->take_bind_plan();
  std::string want =
      "CONNECT\r\naccept-version:1.2\r\nhost:vh\r\nheart-beat:0,0\r\n"
      "login:u\r\nx-custom:a:b\r\n\r\n"s +
      '\0';
  EXPECT_EQ(plan.connect, want);
  EXPECT_EQ(plan.rest, rest);
  EXPECT_EQ(plan.connect_bytes_removed, c.size() - want.size());
}

TEST_F(PreludeTest, BindPlanDropsRepeatedRewrittenHeadersAndKeepsOthers) {
  make();
  std::string c = frame("STOMP", {{"accept-version", "1.1"},
                                  {"heart-beat", "0,0"},
                                  {"accept-version", "1.0"},
                                  {"host", "a"},
                                  {"heart-beat", "5,5"},
                                  {"host", "b"}});
  feed("\n\n" + c);
  ASSERT_EQ(last(frame("SEND", {{"destination", "/queue/a"}})).kind, PreludeEvent::Kind::kBind);
  BindPlan plan = prelude_->take_bind_plan();
  EXPECT_EQ(
      plan.connect,
      frame("STOMP",
            {{"accept-version", "1.1"}, {"heart-beat", "0,0"}, {"host", "a"}, {"host", "b"}}));
  // The two heart-beat EOLs before STOMP are not replayed either.
  EXPECT_EQ(plan.connect_bytes_removed, 2 + c.size() - plan.connect.size());
  EXPECT_EQ(prelude_->key().vhost, "a");
}

TEST_F(PreludeTest, BindPlanOfA10ClientKeepsItsConnectUnchanged) {
  make();
  std::string c = frame("CONNECT", {{"login", "u"}, {"passcode", "p"}});
  feed(c);
  ASSERT_EQ(last(frame("SEND", {{"destination", "/queue/a"}})).kind, PreludeEvent::Kind::kBind);
  BindPlan plan = prelude_->take_bind_plan();
  EXPECT_EQ(plan.connect, c);
  EXPECT_EQ(plan.connect_bytes_removed, 0u);
}

TEST_F(PreludeTest, EventsAfterTheEndRepeatTheOutcome) {
  make();
  EXPECT_EQ(last("GARBAGE\n").kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(prelude_->next().kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(prelude_->feed("x", 0), 0u);
  EXPECT_EQ(prelude_->on_time(kNever - 1).kind, PreludeEvent::Kind::kNeedMore);
}

// ---- login check (login_check eager) and heart-beats ------------------------------------------

class PreludeEagerTest : public PreludeTest {
 protected:
  void SetUp() override { config_ = SessionConfig::gateway_defaults(); }
};

TEST_F(PreludeEagerTest, ConnectAsksForALoginCheckAndWaitsForIt) {
  make();
  PreludeEvent e = last(connect12());
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kLogin);
  EXPECT_EQ(replies_, "");
  // Frames after the CONNECT wait: nothing binds before a node accepted the login.
  EXPECT_EQ(last(frame("SEND", {{"destination", "/queue/a"}}, "x")).kind,
            PreludeEvent::Kind::kNeedMore);
  // The CONNECT the node gets: version narrowed, heart-beat as the client sent it.
  EXPECT_EQ(prelude_->connect_frame(), frame("CONNECT", {{"accept-version", "1.2"},
                                                         {"host", "vh1"},
                                                         {"login", "alice"},
                                                         {"passcode", "secret"},
                                                         {"heart-beat", "10000,20000"}}));
  EXPECT_FALSE(prelude_->accepted());
  prelude_->login_accepted(HeartBeat{20000, 10000});
  EXPECT_TRUE(prelude_->accepted());
  EXPECT_EQ(prelude_->told_heart_beat(), (HeartBeat{20000, 10000}));
  EXPECT_EQ(prelude_->heart_beat_intervals(), (HeartBeatIntervals{10000, 20000}));
  ASSERT_EQ(drain().back().kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(prelude_->key().queue, "a");
  // The bind plan's CONNECT is the one the node already saw.
  BindPlan plan = prelude_->take_bind_plan();
  EXPECT_EQ(plan.connect, prelude_->connect_frame());
  EXPECT_EQ(plan.rest, frame("SEND", {{"destination", "/queue/a"}}, "x"));
  EXPECT_EQ(prelude_->login(), "alice");
}

TEST_F(PreludeEagerTest, GatewaysOwnAnswerCarriesTheNegotiatedHeartBeatAndSession) {
  make();
  ASSERT_EQ(last(connect12()).kind, PreludeEvent::Kind::kLogin);
  PreludeEvent e = prelude_->answer_connect("RabbitMQ/3.10.8", "sluice-1");
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kReply);
  Parsed c = parse_one(e.to_client);
  EXPECT_EQ(c.command, Command::kConnected);
  EXPECT_EQ(header_of(c, "version"), "1.2");
  EXPECT_EQ(header_of(c, "heart-beat"), "20000,10000");  // the client's rates, echoed
  EXPECT_EQ(header_of(c, "session"), "sluice-1");
  EXPECT_EQ(header_of(c, "server"), "RabbitMQ/3.10.8");
  EXPECT_FALSE(prelude_->accepted());
}

TEST_F(PreludeEagerTest, HeartBeatAnswerIsClampedToTheBounds) {
  config_.heartbeat_min_ms = 5000;
  config_.heartbeat_max_ms = 15000;
  make();
  ASSERT_EQ(last(frame("CONNECT", {{"accept-version", "1.2"}, {"heart-beat", "100,60000"}})).kind,
            PreludeEvent::Kind::kLogin);
  Parsed c = parse_one(prelude_->answer_connect("s", {}).to_client);
  EXPECT_EQ(header_of(c, "heart-beat"), "15000,5000");
  EXPECT_EQ(prelude_->heart_beat_intervals(), (HeartBeatIntervals{5000, 60000}));
}

TEST_F(PreludeEagerTest, Stomp10SessionsKeepNoHeartBeats) {
  make();
  ASSERT_EQ(last(frame("CONNECT", {{"heart-beat", "1000,1000"}})).kind, PreludeEvent::Kind::kLogin);
  Parsed c = parse_one(prelude_->answer_connect("s", {}).to_client, Version::k1_0);
  EXPECT_EQ(header_of(c, "heart-beat"), "0,0");
  EXPECT_EQ(prelude_->heart_beat_intervals(), (HeartBeatIntervals{0, 0}));
}

TEST_F(PreludeEagerTest, DisconnectGetsItsReceiptOnlyWhenANodeAcceptedTheLogin) {
  make();
  ASSERT_EQ(last(connect12()).kind, PreludeEvent::Kind::kLogin);
  prelude_->answer_connect("s", {});  // no node could check it
  PreludeEvent e = last(frame("DISCONNECT", {{"receipt", "77"}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kDisconnect);
  EXPECT_TRUE(e.to_client.empty());

  make();
  ASSERT_EQ(last(connect12()).kind, PreludeEvent::Kind::kLogin);
  prelude_->login_accepted(HeartBeat{});
  e = last(frame("DISCONNECT", {{"receipt", "77"}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  Parsed r = parse_one(e.to_client);
  EXPECT_EQ(r.command, Command::kReceipt);
  EXPECT_EQ(header_of(r, "receipt-id"), "77");
}

TEST_F(PreludeEagerTest, SilentClientIsClosedAfterTheHeartBeatGrace) {
  make(0);
  ASSERT_EQ(last(connect12(), 0).kind, PreludeEvent::Kind::kLogin);
  // No heart-beat deadline while the login is checked.
  EXPECT_EQ(prelude_->deadline(), kNever);
  prelude_->login_accepted(HeartBeat{20000, 10000});  // the client sends every 10 s
  drain();
  const Nanos grace = 10000 * kMs * kHeartBeatGraceFactor;
  EXPECT_EQ(prelude_->deadline(), grace);
  EXPECT_EQ(prelude_->on_time(grace - 1).kind, PreludeEvent::Kind::kNeedMore);
  // A heart-beat EOL moves the deadline.
  EXPECT_EQ(last("\n", grace - 1).kind, PreludeEvent::Kind::kNeedMore);
  EXPECT_EQ(prelude_->deadline(), 2 * grace - 1);
  EXPECT_EQ(prelude_->on_time(2 * grace - 2).kind, PreludeEvent::Kind::kNeedMore);
  PreludeEvent e = prelude_->on_time(2 * grace - 1);
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(e.end, PreludeEnd::kHeartBeatTimeout);
  EXPECT_EQ(header_of(parse_one(e.to_client), "message"), "heart-beat timeout");
}

TEST_F(PreludeTest, ErrorsForAFrameWithAReceiptCarryItsReceiptId) {
  make();
  feed(connect12());
  // An owned prefix with no queue name after it is refused.
  PreludeEvent e = last(frame("SEND", {{"destination", "/queue/"}, {"receipt", "r-9"}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  Parsed err = parse_one(e.to_client);
  EXPECT_EQ(err.command, Command::kError);
  EXPECT_EQ(header_of(err, "receipt-id"), "r-9");

  make();
  feed(connect12());
  e = last(frame("CONNECT", {{"receipt", "r-10"}}));
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kClose);
  EXPECT_EQ(header_of(parse_one(e.to_client), "receipt-id"), "r-10");
}

TEST_F(PreludeTest, HeartBeatsOnTheReplayTellsTheOwnerWhatTheClientSent) {
  config_.heartbeat_max_ms = SessionConfig::kHeartBeatMaxMs;
  make();
  PreludeEvent e = feed(connect12())[0];
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kReply);
  EXPECT_EQ(header_of(parse_one(e.to_client), "heart-beat"), "20000,10000");
  ASSERT_EQ(last(frame("SEND", {{"destination", "/queue/a"}})).kind, PreludeEvent::Kind::kBind);
  EXPECT_EQ(header_of(parse_one(prelude_->take_bind_plan().connect), "heart-beat"), "10000,20000");
}

// The error's message, or "" for a success.
std::string error_of(const Result<>& r) {
  return r ? std::string() : r.error().message;
}

TEST(SessionConfigTest, ValidateNamesTheBadSetting) {
  SessionConfig c;
  EXPECT_EQ(error_of(c.validate()), "");
  c.prelude_bytes_max = 10;
  EXPECT_NE(error_of(c.validate()).find("prelude_bytes_max"), std::string::npos);
  c = SessionConfig{};
  c.versions = VersionSet();
  EXPECT_NE(error_of(c.validate()).find("versions"), std::string::npos);
  c = SessionConfig{};
  c.server = std::string(256, 's');
  EXPECT_NE(error_of(c.validate()).find("server"), std::string::npos);
  c.server = "sluice\n";
  EXPECT_NE(error_of(c.validate()).find("server"), std::string::npos);
  c = SessionConfig{};
  c.owned_prefixes = {""};
  EXPECT_NE(error_of(c.validate()).find("owned_prefixes"), std::string::npos);
  c = SessionConfig{};
  c.frame_limits.frame_bytes_max = 4096;
  c.frame_limits.body_bytes_max = 4096;
  c.frame_limits.header_line_bytes_max = 1024;
  EXPECT_NE(error_of(c.validate()).find("prelude_bytes_max must not exceed frame_bytes_max"),
            std::string::npos);
  c = SessionConfig{};
  c.frame_limits.header_count_max = 0;
  EXPECT_NE(error_of(c.validate()).find("header_count_max"), std::string::npos);
}

}  // namespace
}  // namespace sluice::session
