// sluice-load's per-connection STOMP client state machine, and the benchmark sink's server side,
// driven with byte strings (no sockets).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/session/parser.h"
#include "tests/unit/stomp_frames.h"
#include "tools/sluice-load/client.h"
#include "tools/sluice-load/sink.h"

namespace sluice::load {
namespace {

using session::testing::frame;

struct Out {
  std::string command;
  std::map<std::string, std::string> headers;
  size_t body = 0;
};

// Every frame in `bytes`, parsed as STOMP 1.2 (CONNECT's headers never escape anyway).
std::vector<Out> frames(const std::string& bytes) {
  session::FrameLimits limits;
  session::Parser p(limits);
  p.set_version(session::Version::k1_2);
  std::vector<Out> out;
  std::string_view rest(bytes);
  while (!rest.empty()) {
    session::ParseResult r = p.parse(rest);
    if (r.status == session::ParseResult::Status::kFrame) {
      Out o;
      o.command = std::string(session::command_name(p.frame().command()));
      for (size_t i = 0; i < p.frame().header_count(); ++i)
        o.headers.emplace(std::string(p.frame().header(i).name),
                          std::string(p.frame().header(i).value));
      o.body = p.frame().body().size();
      out.push_back(o);
    } else if (r.status != session::ParseResult::Status::kHeartbeat) {
      ADD_FAILURE() << "unparsable output";
      break;
    }
    rest.remove_prefix(r.consumed);
  }
  return out;
}

class LoadClient : public ::testing::Test {
 protected:
  void SetUp() override {
    o_.login = "guest";
    o_.passcode = "pw";
    o_.vhost = "/v";
    o_.queues = 2;
    o_.window = 3;
    o_.size.min = o_.size.max = o_.size.mean = 10;
    plan_.options = &o_;
    plan_.destinations = {"/queue/a", "/queue/b"};
    plan_.run_id = 77;
  }
  std::unique_ptr<Client> make(uint32_t producers, uint32_t consumers) {
    checker_ = std::make_unique<Checker>(o_.queues, std::max(producers, 1u));
    return std::make_unique<Client>(plan_, checker_.get(), &stats_, 0, producers, 0, consumers);
  }
  std::string take(Client& c) {
    std::unique_ptr<char[]> buf;
    size_t len = 0;
    c.take_output(&buf, &len);
    return std::string(buf.get(), len);
  }
  void feed(Client& c, const std::string& bytes) {
    EXPECT_EQ(c.on_bytes(bytes, now_), bytes.size());
  }
  std::string connected() { return frame("CONNECTED", {{"version", "1.2"}}); }

  LoadOptions o_;
  RunPlan plan_;
  RunStats stats_;
  std::unique_ptr<Checker> checker_;
  uint64_t now_ = 1'000'000;
};

TEST_F(LoadClient, OpensWithConnectCarryingCredentialsAndVhost) {
  auto c = make(1, 0);
  c->open();
  const auto f = frames(take(*c));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].command, "CONNECT");
  EXPECT_EQ(f[0].headers.at("host"), "/v");
  EXPECT_EQ(f[0].headers.at("login"), "guest");
  EXPECT_EQ(f[0].headers.at("passcode"), "pw");
  EXPECT_EQ(f[0].headers.at("accept-version"), "1.2");
  EXPECT_EQ(c->state(), Client::State::kConnecting);
}

TEST_F(LoadClient, SendsNothingBeforeConnectedThenFillsTheWindow) {
  auto c = make(1, 0);
  c->open();
  take(*c);
  c->fill(now_);
  EXPECT_EQ(c->pending_bytes(), 0u);
  feed(*c, connected());
  EXPECT_EQ(c->state(), Client::State::kReady);
  c->fill(now_);
  const auto f = frames(take(*c));
  ASSERT_EQ(f.size(), 3u);  // the window
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(f[i].command, "SEND");
    EXPECT_EQ(f[i].headers.at("destination"), "/queue/a");  // fixed spread: producer 0 -> 0
    EXPECT_EQ(f[i].headers.at(std::string(kSeqHeader)), std::to_string(i));
    EXPECT_EQ(f[i].headers.at(std::string(kProducerHeader)), "0");
    EXPECT_EQ(f[i].headers.at(std::string(kRunHeader)), "77");
    EXPECT_EQ(f[i].body, 10u);
    EXPECT_TRUE(f[i].headers.count("receipt"));
  }
  EXPECT_EQ(c->in_flight(), 3u);
  c->fill(now_);
  EXPECT_EQ(c->pending_bytes(), 0u);  // window full
  // A receipt (any order) frees a slot and acknowledges exactly that message.
  feed(*c, frame("RECEIPT", {{"receipt-id", f[1].headers.at("receipt")}}));
  EXPECT_EQ(c->in_flight(), 2u);
  EXPECT_EQ(checker_->counts().acknowledged, 1u);
  EXPECT_EQ(stats_.receipt_latency_ns.count(), 1u);
  c->fill(now_);
  EXPECT_EQ(frames(take(*c)).size(), 1u);
}

TEST_F(LoadClient, AReceiptForNothingInFlightFailsTheConnection) {
  auto c = make(1, 0);
  c->open();
  take(*c);
  feed(*c, connected());
  c->fill(now_);
  const auto f = frames(take(*c));
  feed(*c, frame("RECEIPT", {{"receipt-id", f[0].headers.at("receipt")}}));
  feed(*c, frame("RECEIPT", {{"receipt-id", f[0].headers.at("receipt")}}));  // again
  EXPECT_EQ(c->state(), Client::State::kFailed);
  EXPECT_NE(stats_.first_error.find("RECEIPT for no SEND"), std::string::npos);
}

TEST_F(LoadClient, AnErrorFrameFailsWithTheBrokersMessage) {
  auto c = make(1, 0);
  c->open();
  feed(*c, frame("ERROR", {{"message", "access refused"}}));
  EXPECT_EQ(c->state(), Client::State::kFailed);
  EXPECT_NE(stats_.first_error.find("access refused"), std::string::npos);
  EXPECT_EQ(stats_.errors, 1u);
}

TEST_F(LoadClient, CountAndStopEndProducing) {
  o_.count = 2;
  auto c = make(1, 0);
  c->open();
  take(*c);
  feed(*c, connected());
  c->fill(now_);
  EXPECT_EQ(frames(take(*c)).size(), 2u);
  EXPECT_TRUE(c->producing_done());
  auto d = make(1, 0);
  d->open();
  take(*d);
  feed(*d, connected());
  d->stop_producing();
  d->fill(now_);
  EXPECT_EQ(d->pending_bytes(), 0u);
}

TEST_F(LoadClient, RateLimitsSendsToTheSchedule) {
  o_.rate = 1000;  // one per ms
  o_.receipts = false;
  plan_.start_ns = now_;
  auto c = make(1, 0);
  c->open();
  feed(*c, connected());
  take(*c);
  c->fill(now_);
  EXPECT_EQ(frames(take(*c)).size(), 1u);
  EXPECT_EQ(c->next_due_ns(), now_ + 1'000'000);
  c->fill(now_ + 5'500'000);
  EXPECT_EQ(frames(take(*c)).size(), 5u);
  // Without receipts, written counts as acknowledged.
  EXPECT_EQ(checker_->counts().acknowledged, 6u);
}

TEST_F(LoadClient, ConsumersSubscribeCheckAndAck) {
  o_.ack = AckMode::kClientIndividual;
  o_.prefetch = 5;
  auto c = make(0, 2);
  c->open();
  take(*c);
  feed(*c, connected());
  const auto subs = frames(take(*c));
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(subs[0].headers.at("destination"), "/queue/a");
  EXPECT_EQ(subs[1].headers.at("destination"), "/queue/b");
  EXPECT_EQ(subs[0].headers.at("ack"), "client-individual");
  EXPECT_EQ(subs[0].headers.at("prefetch-count"), "5");
  EXPECT_FALSE(c->subscribed());
  feed(*c, frame("RECEIPT", {{"receipt-id", subs[1].headers.at("receipt")}}));
  EXPECT_TRUE(c->subscribed());
  // Producer 0 of another Checker would not do: use this connection's checker for two sends.
  Checker& k = *checker_;
  ASSERT_EQ(k.next_seq(0, 1), 0u);
  ASSERT_EQ(k.next_seq(0, 1), 1u);
  auto msg = [](std::string seq, std::string ack) {
    return frame("MESSAGE",
                 {{"subscription", "1"},
                  {"destination", "/queue/b"},
                  {"ack", ack},
                  {"sluice-load-run", "77"},
                  {"sluice-load-producer", "0"},
                  {"sluice-load-queue", "1"},
                  {"sluice-load-seq", seq},
                  {"sluice-load-ts", "5"}},
                 "0123456789");
  };
  feed(*c, msg("1", "m1") + msg("0", "m0") + msg("1", "m1b"));
  const CheckTotals t = k.totals();
  EXPECT_EQ(t.received, 2u);
  EXPECT_EQ(t.out_of_order, 1u);
  EXPECT_EQ(t.duplicated, 1u);
  const auto acks = frames(take(*c));
  ASSERT_EQ(acks.size(), 3u);
  EXPECT_EQ(acks[0].command, "ACK");
  EXPECT_EQ(acks[0].headers.at("id"), "m1");
  EXPECT_EQ(acks[2].headers.at("id"), "m1b");
  EXPECT_EQ(stats_.delivery_latency_ns.count(), 3u);
}

TEST_F(LoadClient, ClientAckModeAcksOncePerBatch) {
  o_.ack = AckMode::kClient;
  o_.queues = 1;
  auto c = make(0, 1);
  c->open();
  feed(*c, connected());
  take(*c);
  std::string batch;
  for (int i = 0; i < 3; ++i)
    batch += frame("MESSAGE", {{"subscription", "0"}, {"ack", "a" + std::to_string(i)}}, "x");
  feed(*c, batch);
  const auto acks = frames(take(*c));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].headers.at("id"), "a2");
  EXPECT_EQ(stats_.foreign, 3u);  // no sluice-load headers: not checked
}

TEST_F(LoadClient, NewSessionModeDisconnectsAfterItsQuotaAndReopens) {
  o_.session_messages = 2;
  auto c = make(1, 0);
  c->open();
  feed(*c, connected());
  take(*c);
  c->fill(now_);
  const auto f = frames(take(*c));
  ASSERT_EQ(f.size(), 2u);
  EXPECT_FALSE(c->session_complete());
  for (const Out& s : f)
    feed(*c, frame("RECEIPT", {{"receipt-id", s.headers.at("receipt")}}));
  ASSERT_TRUE(c->session_complete());
  c->disconnect();
  const auto d = frames(take(*c));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].command, "DISCONNECT");
  feed(*c, frame("RECEIPT", {{"receipt-id", d[0].headers.at("receipt")}}));
  EXPECT_EQ(c->state(), Client::State::kClosed);
  EXPECT_EQ(stats_.sessions, 1u);
  c->open();
  feed(*c, connected());
  take(*c);
  c->fill(now_);
  const auto g = frames(take(*c));
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].headers.at(std::string(kSeqHeader)), "2");  // sequence continues
}

TEST_F(LoadClient, GarbageFromThePeerFailsCleanly) {
  auto c = make(1, 0);
  c->open();
  c->on_bytes(std::string("HELLO\n\n\0", 8), now_);
  EXPECT_EQ(c->state(), Client::State::kFailed);
  EXPECT_EQ(stats_.errors, 1u);
}

TEST(LoadSink, DeliversSendsToSubscribersAndAnswersReceipts) {
  Sink sink(4);
  const uint32_t prod = sink.open();
  const uint32_t cons = sink.open();
  std::string in =
      frame("CONNECT", {{"accept-version", "1.2"}}) +
      frame("SUBSCRIBE",
            {{"id", "7"}, {"destination", "/queue/a"}, {"ack", "client"}, {"receipt", "s"}});
  EXPECT_EQ(sink.on_bytes(cons, in), in.size());
  in = frame("CONNECT", {{"accept-version", "1.1,1.2"}}) +
       frame("SEND", {{"destination", "/queue/a"}, {"receipt", "r1"}, {"x", "y"}}, "hello") +
       frame("SEND", {{"destination", "/queue/none"}}, "dropped");
  EXPECT_EQ(sink.on_bytes(prod, in), in.size());
  std::string out;
  sink.take_output(prod, &out);
  auto p = frames(out);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].command, "CONNECTED");
  EXPECT_EQ(p[0].headers.at("version"), "1.2");
  EXPECT_EQ(p[1].command, "RECEIPT");
  EXPECT_EQ(p[1].headers.at("receipt-id"), "r1");
  sink.take_output(cons, &out);
  auto c = frames(out);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[1].headers.at("receipt-id"), "s");
  EXPECT_EQ(c[2].command, "MESSAGE");
  EXPECT_EQ(c[2].headers.at("subscription"), "7");
  EXPECT_EQ(c[2].headers.at("x"), "y");
  EXPECT_TRUE(c[2].headers.count("ack"));
  EXPECT_FALSE(c[2].headers.count("receipt"));
  EXPECT_EQ(c[2].body, 5u);
  EXPECT_EQ(sink.stats().delivered, 1u);
  EXPECT_EQ(sink.stats().dropped, 1u);
}

TEST(LoadSink, RefusesAFirstFrameOtherThanConnectAndLimitsConnections) {
  Sink sink(1);
  const uint32_t id = sink.open();
  EXPECT_EQ(sink.open(), ~uint32_t(0));
  const std::string in = frame("SEND", {{"destination", "/queue/a"}}, "x");
  sink.on_bytes(id, in);
  EXPECT_TRUE(sink.closing(id));
  std::string out;
  sink.take_output(id, &out);
  EXPECT_EQ(frames(out)[0].command, "ERROR");
  sink.close(id);
  EXPECT_EQ(sink.open(), id);
}

}  // namespace
}  // namespace sluice::load
