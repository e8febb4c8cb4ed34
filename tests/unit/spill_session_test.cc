// Spill session: authentication, appends with receipts released in order after durability,
// refusals, transactions as one atomic batch, DISCONNECT and the end of a spill session.
#include "dataplane/session/spill_session.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "dataplane/session/prelude.h"
#include "tests/unit/stomp_frames.h"

namespace sluice::session {
namespace {

using testing::frame;
using namespace std::string_literals;

class FakeHooks : public SpillHooks {
 public:
  // `later`: answers kPending (or `later_answer`) and keeps the ticket; the test answers.
  AuthAnswer authenticate(std::optional<std::string_view> login,
                          std::optional<std::string_view> passcode, uint64_t ticket) override {
    tickets.push_back(ticket);
    if (later) return later_answer;
    return login == "alice" && passcode == "secret" ? AuthAnswer::kAccepted : AuthAnswer::kRefused;
  }
  bool later = false;
  AuthAnswer later_answer = AuthAnswer::kPending;
  std::vector<uint64_t> tickets;
  bool authorize(std::string_view login, const QueueKey& key) override {
    checked.emplace_back(std::string(login) + "@" + std::string(key.vhost) + "/" +
                         std::string(key.queue));
    return denied.count(std::string(key.queue)) == 0;
  }
  std::set<std::string> denied;
  std::vector<std::string> checked;
};

// What the engine saw: appends (token, queue, body), replies, batches, the close.
struct Seen {
  std::vector<std::tuple<uint64_t, std::string, std::string>> appends;
  std::string replies;
  std::vector<std::string> batch_marks;
  bool closed = false;
  std::string close_bytes;
  SpillEnd end = SpillEnd::kNone;
  SpillEvent::Kind stopped = SpillEvent::Kind::kNeedMore;
};

class SpillSessionTest : public ::testing::Test {
 protected:
  // Runs a prelude over `connect` + `first`, which must bind, then starts the spill session.
  void start(const std::string& connect, const std::string& first) {
    prelude_buf_.assign(config_.prelude_bytes_max, '\0');
    prelude_.emplace(config_, prelude_buf_, 0);
    std::string in = connect + first;
    ASSERT_EQ(prelude_->feed(in, 0), in.size());
    PreludeEvent e = prelude_->next();
    ASSERT_EQ(e.kind, PreludeEvent::Kind::kReply);
    ASSERT_EQ(prelude_->next().kind, PreludeEvent::Kind::kBind);
    spill_buf_.assign(spill_buffer_bytes(config_, limits_.txn_bytes_max), '\0');
    session_.emplace(config_, limits_, spill_buf_, hooks_);
    session_->start(*prelude_, kTicket);
  }
  static constexpr uint64_t kTicket = 0x1234'5678'9abcULL;
  void start_default(const std::string& first) { start(connect(), first); }
  static std::string connect(std::string_view login = "alice", std::string_view pass = "secret") {
    return frame("CONNECT",
                 {{"accept-version", "1.2"}, {"host", "vh"}, {"login", login}, {"passcode", pass}});
  }
  void feed(std::string_view bytes) { ASSERT_EQ(session_->feed(bytes), bytes.size()); }
  // Collects events until the session needs more input, waits for durability, or closes.
  void run() {
    for (int i = 0; i < 10000; ++i) {
      SpillEvent e = session_->next();
      switch (e.kind) {
        case SpillEvent::Kind::kNeedMore:
        case SpillEvent::Kind::kWaitDurable:
        case SpillEvent::Kind::kWaitLogin:
          seen_.stopped = e.kind;
          return;
        case SpillEvent::Kind::kReply:
          seen_.replies += e.to_client;
          continue;
        case SpillEvent::Kind::kAppend:
          seen_.appends.emplace_back(e.token, std::string(e.key.queue),
                                     std::string(e.frame->body()));
          continue;
        case SpillEvent::Kind::kBatchBegin:
          seen_.batch_marks.push_back("begin " + std::to_string(e.batch_count));
          continue;
        case SpillEvent::Kind::kBatchEnd:
          seen_.batch_marks.push_back("end " + std::to_string(e.token));
          continue;
        case SpillEvent::Kind::kClose:
          seen_.closed = true;
          seen_.close_bytes = std::string(e.to_client);
          seen_.end = e.end;
          seen_.stopped = e.kind;
          return;
      }
    }
    FAIL() << "session did not settle";
  }
  std::string receipt(std::string_view id) { return frame("RECEIPT", {{"receipt-id", id}}); }
  static std::string send(std::string_view queue, std::string_view body,
                          std::string_view receipt_id = {}, std::string_view tx = {}) {
    std::string dest = "/queue/" + std::string(queue);
    if (!receipt_id.empty() && !tx.empty()) {
      return frame("SEND", {{"destination", dest}, {"receipt", receipt_id}, {"transaction", tx}},
                   body);
    }
    if (!receipt_id.empty()) {
      return frame("SEND", {{"destination", dest}, {"receipt", receipt_id}}, body);
    }
    if (!tx.empty()) return frame("SEND", {{"destination", dest}, {"transaction", tx}}, body);
    return frame("SEND", {{"destination", dest}}, body);
  }

  SessionConfig config_;
  SpillLimits limits_;
  FakeHooks hooks_;
  std::vector<char> prelude_buf_;
  std::vector<char> spill_buf_;
  std::optional<Prelude> prelude_;
  std::optional<SpillSession> session_;
  Seen seen_;
};

TEST_F(SpillSessionTest, BadCredentialsCloseWithAuthenticationError) {
  start(connect("alice", "wrong"), send("a", "m1", "r1"));
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kAuthFailed);
  EXPECT_NE(seen_.close_bytes.find("message:authentication failed"), std::string::npos);
  EXPECT_TRUE(seen_.appends.empty());
}

TEST_F(SpillSessionTest, TheHooksGetTheTicketTheSessionWasStartedWith) {
  start_default(send("a", "m1", "r1"));
  EXPECT_EQ(hooks_.tickets, std::vector<uint64_t>{kTicket});
}

TEST_F(SpillSessionTest, PendingLoginReadsNoFrameUntilAccepted) {
  hooks_.later = true;
  start_default(send("a", "m1", "r1"));
  run();
  EXPECT_EQ(seen_.stopped, SpillEvent::Kind::kWaitLogin);
  feed(send("b", "m2", "r2"));
  run();
  EXPECT_EQ(seen_.stopped, SpillEvent::Kind::kWaitLogin);
  EXPECT_TRUE(seen_.appends.empty());
  EXPECT_TRUE(hooks_.checked.empty()) << "no ACL check before the login is accepted";
  session_->on_login_checked(true);
  run();
  ASSERT_EQ(seen_.appends.size(), 2u);
  EXPECT_EQ(std::get<1>(seen_.appends[0]), "a");
  EXPECT_EQ(std::get<1>(seen_.appends[1]), "b");
  EXPECT_EQ(hooks_.checked, (std::vector<std::string>{"alice@vh/a", "alice@vh/b"}));
  EXPECT_EQ(seen_.stopped, SpillEvent::Kind::kNeedMore);
}

TEST_F(SpillSessionTest, PendingLoginRefusedClosesWithoutReadingAFrame) {
  hooks_.later = true;
  start_default(send("a", "m1", "r1"));
  run();
  session_->on_login_checked(false);
  run();
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kAuthFailed);
  EXPECT_NE(seen_.close_bytes.find("message:authentication failed"), std::string::npos);
  EXPECT_TRUE(seen_.appends.empty());
  EXPECT_TRUE(hooks_.checked.empty());
  session_->on_login_checked(true);  // a late, duplicate answer changes nothing
  EXPECT_EQ(session_->next().kind, SpillEvent::Kind::kClose);
  EXPECT_TRUE(seen_.appends.empty());
}

TEST_F(SpillSessionTest, EndRequestedWhileTheLoginIsCheckedClosesAtOnce) {
  hooks_.later = true;
  start_default(send("a", "m1", "r1"));
  run();
  session_->request_end();
  run();
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kOwnerAvailable);
  session_->on_login_checked(true);
  EXPECT_EQ(session_->next().kind, SpillEvent::Kind::kClose);
  EXPECT_TRUE(seen_.appends.empty());
}

TEST_F(SpillSessionTest, BusyLoginCheckClosesTellingTheClientToRetry) {
  hooks_.later = true;
  hooks_.later_answer = AuthAnswer::kBusy;
  start_default(send("a", "m1", "r1"));
  run();
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kAuthFailed);
  EXPECT_NE(seen_.close_bytes.find("connect again later"), std::string::npos);
  EXPECT_TRUE(seen_.appends.empty());
}

TEST_F(SpillSessionTest, TheBindingSendIsTheFirstAppend) {
  start_default(send("orders", "m1", "r1"));
  run();
  ASSERT_EQ(seen_.appends.size(), 1u);
  EXPECT_EQ(seen_.appends[0],
            std::make_tuple(uint64_t{1}, std::string("orders"), std::string("m1")));
  EXPECT_EQ(hooks_.checked, std::vector<std::string>{"alice@vh/orders"});
  EXPECT_EQ(seen_.stopped, SpillEvent::Kind::kNeedMore);
}

TEST_F(SpillSessionTest, BindingSendWithOnlyItsHeadersCompletesHere) {
  start_default("SEND\ndestination:/queue/big\ncontent-length:5\nreceipt:rb\n\nab");
  run();
  EXPECT_TRUE(seen_.appends.empty());
  feed("cde"s + '\0');
  run();
  ASSERT_EQ(seen_.appends.size(), 1u);
  EXPECT_EQ(seen_.appends[0],
            std::make_tuple(uint64_t{1}, std::string("big"), std::string("abcde")));
}

TEST_F(SpillSessionTest, ReceiptWaitsForDurability) {
  start_default(send("a", "m1", "r1"));
  run();
  EXPECT_EQ(seen_.replies, "");
  session_->on_durable(1);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1"));
}

TEST_F(SpillSessionTest, ReceiptsAreReleasedStrictlyInOrder) {
  start_default(send("a", "m1", "r1"));
  feed(send("b", "m2", "r2") + send("a", "m3") + send("c", "m4", "r4"));
  run();
  ASSERT_EQ(seen_.appends.size(), 4u);
  EXPECT_EQ(std::get<0>(seen_.appends[3]), 4u);
  session_->on_durable(2);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1") + receipt("r2"));
  session_->on_durable(3);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1") + receipt("r2"));
  session_->on_durable(4);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1") + receipt("r2") + receipt("r4"));
}

TEST_F(SpillSessionTest, ReceiptOnANonSendFrameDoesNotOvertakeEarlierSends) {
  start_default(send("a", "m1", "r1"));
  feed(frame("BEGIN", {{"transaction", "t"}, {"receipt", "rb"}}));
  run();
  EXPECT_EQ(seen_.replies, "");
  session_->on_durable(1);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1") + receipt("rb"));
}

TEST_F(SpillSessionTest, ReceiptForAFrameWithNothingPendingIsImmediate) {
  start_default(frame("BEGIN", {{"transaction", "t"}, {"receipt", "rb"}}) +
                send("a", "m", {}, "t"));
  run();
  EXPECT_EQ(seen_.replies, receipt("rb"));
}

TEST_F(SpillSessionTest, SubscribeGetsOwnerUnavailableAfterPendingReceipts) {
  start_default(send("a", "m1", "r1"));
  feed(frame("SUBSCRIBE", {{"id", "0"}, {"destination", "/queue/a"}, {"receipt", "rs"}}));
  run();
  EXPECT_FALSE(seen_.closed);
  EXPECT_EQ(seen_.stopped, SpillEvent::Kind::kWaitDurable);
  session_->on_durable(1);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1"));
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kSubscribeRefused);
  EXPECT_NE(seen_.close_bytes.find("message:owner unavailable, retry later"), std::string::npos);
  EXPECT_NE(seen_.close_bytes.find("receipt-id:rs"), std::string::npos);
}

TEST_F(SpillSessionTest, SubscribeAsTheBindingFrameIsRefused) {
  start_default(frame("SUBSCRIBE", {{"id", "0"}, {"destination", "/queue/a"}}));
  run();
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kSubscribeRefused);
}

TEST_F(SpillSessionTest, AckNackAndUnsubscribeOutsideASubscriptionAreRefused) {
  for (std::string_view cmd : {"ACK", "NACK", "UNSUBSCRIBE"}) {
    seen_ = Seen{};
    start_default(send("a", "m"));
    feed(frame(cmd, {{"id", "1"}}));
    run();
    ASSERT_TRUE(seen_.closed) << cmd;
    EXPECT_EQ(seen_.end, SpillEnd::kProtocolError);
    EXPECT_NE(seen_.close_bytes.find("message:no subscription"), std::string::npos);
  }
}

TEST_F(SpillSessionTest, AclRefusalClosesWithAccessRefused) {
  hooks_.denied = {"secret"};
  start_default(send("a", "m1", "r1"));
  feed(send("secret", "m2", "r2"));
  run();
  EXPECT_EQ(seen_.appends.size(), 1u);
  session_->on_durable(1);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1"));
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kAccessDenied);
  EXPECT_NE(seen_.close_bytes.find("receipt-id:r2"), std::string::npos);
}

TEST_F(SpillSessionTest, EverySendIsKeyedByItsOwnDestination) {
  start_default(send("a", "1"));
  feed(frame("SEND", {{"destination", "/topic/t"}}, "2") + send("b", "3"));
  run();
  ASSERT_EQ(seen_.appends.size(), 3u);
  EXPECT_EQ(std::get<1>(seen_.appends[1]), "/topic/t");
  EXPECT_EQ(std::get<1>(seen_.appends[2]), "b");
}

TEST_F(SpillSessionTest, SendWithoutDestinationIsRefused) {
  start_default(send("a", "1"));
  feed(frame("SEND", {{"receipt", "x"}}, "2"));
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kProtocolError);
  EXPECT_NE(seen_.close_bytes.find("missing destination header"), std::string::npos);
}

TEST_F(SpillSessionTest, CommittedTransactionIsOneBatch) {
  start_default(frame("BEGIN", {{"transaction", "t1"}}) + send("a", "x1", "rx1", "t1"));
  feed(send("b", "x2", {}, "t1") + send("c", "plain") +
       frame("COMMIT", {{"transaction", "t1"}, {"receipt", "rc"}}));
  run();
  // The non-transactional SEND goes first; the transaction's SENDs come at COMMIT, together.
  ASSERT_EQ(seen_.appends.size(), 3u);
  EXPECT_EQ(std::get<2>(seen_.appends[0]), "plain");
  EXPECT_EQ(seen_.appends[1], std::make_tuple(uint64_t{2}, std::string("a"), std::string("x1")));
  EXPECT_EQ(seen_.appends[2], std::make_tuple(uint64_t{3}, std::string("b"), std::string("x2")));
  EXPECT_EQ(seen_.batch_marks, (std::vector<std::string>{"begin 2", "end 3"}));
  EXPECT_EQ(seen_.replies, receipt("rx1"));  // a transactional SEND's receipt means "received"
  session_->on_durable(2);
  run();
  EXPECT_EQ(seen_.replies, receipt("rx1"));
  session_->on_durable(3);
  run();
  EXPECT_EQ(seen_.replies, receipt("rx1") + receipt("rc"));
}

TEST_F(SpillSessionTest, AbortedTransactionAppendsNothing) {
  start_default(frame("BEGIN", {{"transaction", "t1"}}) + send("a", "x1", {}, "t1"));
  feed(frame("ABORT", {{"transaction", "t1"}, {"receipt", "ra"}}) + send("a", "after"));
  run();
  ASSERT_EQ(seen_.appends.size(), 1u);
  EXPECT_EQ(std::get<2>(seen_.appends[0]), "after");
  EXPECT_TRUE(seen_.batch_marks.empty());
  EXPECT_EQ(seen_.replies, receipt("ra"));
}

TEST_F(SpillSessionTest, UnknownTransactionIsRefused) {
  start_default(send("a", "x1", {}, "nope"));
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_NE(seen_.close_bytes.find("message:unknown transaction"), std::string::npos);
  seen_ = Seen{};
  start_default(send("a", "m"));
  feed(frame("COMMIT", {{"transaction", "t9"}}));
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_NE(seen_.close_bytes.find("message:unknown transaction"), std::string::npos);
}

TEST_F(SpillSessionTest, SecondOpenTransactionIsRefusedAndNothingIsHalfApplied) {
  start_default(frame("BEGIN", {{"transaction", "t1"}}) + send("a", "x1", {}, "t1"));
  feed(frame("BEGIN", {{"transaction", "t2"}}) + frame("COMMIT", {{"transaction", "t1"}}));
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kTransactionRefused);
  EXPECT_TRUE(seen_.appends.empty());
}

TEST_F(SpillSessionTest, TransactionOverFrameLimitIsRefusedWhole) {
  limits_.txn_frames_max = 2;
  start_default(frame("BEGIN", {{"transaction", "t"}}) + send("a", "1", {}, "t"));
  feed(send("a", "2", {}, "t") + send("a", "3", {}, "t") + frame("COMMIT", {{"transaction", "t"}}));
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kTransactionRefused);
  EXPECT_TRUE(seen_.appends.empty());
}

TEST_F(SpillSessionTest, TransactionOverByteLimitIsRefusedWhole) {
  limits_.txn_bytes_max = 300;
  start_default(frame("BEGIN", {{"transaction", "t"}}) + send("a", std::string(100, 'x'), {}, "t"));
  feed(send("a", std::string(100, 'y'), {}, "t") + send("a", std::string(100, 'z'), {}, "t") +
       frame("COMMIT", {{"transaction", "t"}}));
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kTransactionRefused);
  EXPECT_TRUE(seen_.appends.empty());
}

TEST_F(SpillSessionTest, TransactionsSurviveBufferCompaction) {
  limits_.txn_bytes_max = 4096;
  config_.frame_limits.frame_bytes_max = 4096;
  config_.frame_limits.body_bytes_max = 2048;
  config_.frame_limits.header_line_bytes_max = 1024;
  config_.prelude_bytes_max = 4096;
  start_default(send("a", "first"));
  run();
  // Push enough non-transactional traffic through the small buffer to force compactions, then
  // a transaction whose frames must survive them.
  for (int i = 0; i < 50; ++i) {
    feed(send("a", std::string(1000, char('a' + i % 26))));
    run();
  }
  feed(frame("BEGIN", {{"transaction", "t"}}));
  for (int i = 0; i < 3; ++i) {
    feed(send("q", "tx" + std::to_string(i), {}, "t"));
    run();
  }
  feed(frame("COMMIT", {{"transaction", "t"}}));
  run();
  ASSERT_EQ(seen_.appends.size(), 54u);
  EXPECT_EQ(std::get<2>(seen_.appends[51]), "tx0");
  EXPECT_EQ(std::get<2>(seen_.appends[53]), "tx2");
}

TEST_F(SpillSessionTest, DisconnectReceiptComesAfterEveryEarlierSendIsDurable) {
  start_default(send("a", "m1", "r1"));
  feed(send("a", "m2") + frame("DISCONNECT", {{"receipt", "bye"}}));
  run();
  EXPECT_FALSE(seen_.closed);
  session_->on_durable(1);
  run();
  EXPECT_FALSE(seen_.closed);
  EXPECT_EQ(seen_.replies, receipt("r1"));
  session_->on_durable(2);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1") + receipt("bye"));
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kDisconnect);
  EXPECT_EQ(seen_.close_bytes, "");
}

TEST_F(SpillSessionTest, DisconnectAbortsAnOpenTransaction) {
  start_default(frame("BEGIN", {{"transaction", "t"}}) + send("a", "x", {}, "t"));
  feed(frame("DISCONNECT", {}));
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_TRUE(seen_.appends.empty());
}

TEST_F(SpillSessionTest, FailedAppendSendsErrorAndWithholdsLaterReceipts) {
  start_default(send("a", "m1", "r1"));
  feed(send("a", "m2", "r2") + send("a", "m3", "r3"));
  run();
  session_->on_durable(1);
  session_->on_append_failed(2, "spill full");
  run();
  EXPECT_EQ(seen_.replies, receipt("r1"));
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kAppendFailed);
  EXPECT_NE(seen_.close_bytes.find("message:spill full"), std::string::npos);
}

TEST_F(SpillSessionTest, FailedAppendOverridesAGracefulDisconnect) {
  start_default(send("a", "m1"));
  feed(frame("DISCONNECT", {{"receipt", "bye"}}));
  run();
  session_->on_append_failed(1, "spill full");
  run();
  EXPECT_EQ(seen_.replies, "");
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kAppendFailed);
}

TEST_F(SpillSessionTest, RequestEndAnswersPendingThenTellsClientToReconnect) {
  start_default(send("a", "m1", "r1"));
  run();
  session_->request_end();
  feed(send("a", "ignored", "r9"));
  run();
  EXPECT_EQ(seen_.stopped, SpillEvent::Kind::kWaitDurable);
  session_->on_durable(1);
  run();
  EXPECT_EQ(seen_.replies, receipt("r1"));
  ASSERT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kOwnerAvailable);
  EXPECT_NE(seen_.close_bytes.find("message:owner available, reconnect"), std::string::npos);
  EXPECT_EQ(seen_.appends.size(), 1u);
}

TEST_F(SpillSessionTest, FullReceiptQueueStopsReadingUntilDurable) {
  limits_.receipts_pending_max = 2;
  start_default(send("a", "1", "r1"));
  feed(send("a", "2", "r2") + send("a", "3", "r3"));
  run();
  EXPECT_EQ(seen_.appends.size(), 2u);
  EXPECT_EQ(seen_.stopped, SpillEvent::Kind::kWaitDurable);
  session_->on_durable(2);
  run();
  EXPECT_EQ(seen_.appends.size(), 3u);
  EXPECT_EQ(seen_.replies, receipt("r1") + receipt("r2"));
}

TEST_F(SpillSessionTest, ManyReceiptsGoOutInOneReply) {
  start_default(send("a", "0", "r0"));
  std::string in;
  for (int i = 1; i < 20; ++i)
    in += send("a", std::to_string(i), "r" + std::to_string(i));
  feed(in);
  run();
  session_->on_durable(20);
  SpillEvent e = session_->next();
  ASSERT_EQ(e.kind, SpillEvent::Kind::kReply);
  std::string want;
  for (int i = 0; i < 20; ++i)
    want += receipt("r" + std::to_string(i));
  EXPECT_EQ(e.to_client, want);
}

TEST_F(SpillSessionTest, ByteByByteInputGivesTheSameAppends) {
  start_default(send("a", "m0"));
  std::string in = frame("BEGIN", {{"transaction", "t"}}) + "\n" + send("b", "m1", "r1", "t") +
                   frame("SEND", {{"destination", "/queue/c"}, {"content-length", "7"}},
                         std::string("bin\0ary", 7)) +
                   frame("COMMIT", {{"transaction", "t"}});
  for (char c : in) {
    feed(std::string_view(&c, 1));
    run();
  }
  ASSERT_EQ(seen_.appends.size(), 3u);
  EXPECT_EQ(std::get<2>(seen_.appends[1]), std::string("bin\0ary", 7));
  EXPECT_EQ(std::get<2>(seen_.appends[2]), "m1");
}

// feed() moves a small retained remainder (part of a frame) to the buffer's front and keeps
// a large one where it is; either way, input cut anywhere gives the same appends in order.
TEST_F(SpillSessionTest, InputInRandomPiecesGivesTheSameAppendsWhateverIsRetained) {
  limits_.receipts_pending_max = 100000;
  start_default(send("a", "m0"));
  std::mt19937 rng(7);
  std::string in;
  std::vector<std::string> bodies{"m0"};
  for (int i = 1; i < 400; ++i) {
    // Bodies up to 12 KiB, so a retained partial frame is sometimes above the 4 KiB that is
    // moved to the front and sometimes below it; some frames in transactions.
    std::string body(rng() % 3 == 0 ? 5000 + rng() % 7000 : 1 + rng() % 900, char('a' + i % 26));
    body += std::to_string(i);
    if (i % 50 == 0) {
      in += frame("BEGIN", {{"transaction", "t" + std::to_string(i)}});
      in += send("q", body, {}, "t" + std::to_string(i));
      in += frame("COMMIT", {{"transaction", "t" + std::to_string(i)}});
    } else {
      in += send("q", body);
    }
    bodies.push_back(body);
  }
  size_t at = 0;
  while (at < in.size()) {
    const size_t n = std::min(in.size() - at, size_t(1 + rng() % 9000));
    feed(std::string_view(in).substr(at, n));
    at += n;
    run();
  }
  ASSERT_EQ(seen_.appends.size(), bodies.size());
  for (size_t i = 0; i < bodies.size(); ++i)
    ASSERT_EQ(std::get<2>(seen_.appends[i]), bodies[i]) << "append " << i;
}

TEST_F(SpillSessionTest, ServerFramesAndSecondConnectAreRefused) {
  for (std::string_view cmd : {"CONNECT", "MESSAGE", "ERROR"}) {
    seen_ = Seen{};
    start_default(send("a", "m"));
    feed(frame(cmd, {}));
    run();
    EXPECT_TRUE(seen_.closed) << cmd;
    EXPECT_EQ(seen_.end, SpillEnd::kProtocolError) << cmd;
  }
}

TEST_F(SpillSessionTest, CarriageReturnInsideAReceiptIsRefusedNotEchoed) {
  start_default(send("a", "m"));
  feed("SEND\ndestination:/queue/a\nreceipt:\r:\n\n\0"s);
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_EQ(seen_.end, SpillEnd::kProtocolError);
  EXPECT_NE(seen_.close_bytes.find("malformed header line"), std::string::npos);
}

TEST_F(SpillSessionTest, UnparsableInputClosesWithTheParseError) {
  start_default(send("a", "m"));
  feed("SEND\ndestination:/queue/a\nbad\\q:1\n\n\0"s);
  run();
  EXPECT_TRUE(seen_.closed);
  EXPECT_NE(seen_.close_bytes.find("undefined escape"), std::string::npos);
}

}  // namespace
}  // namespace sluice::session
