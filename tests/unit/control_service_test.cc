// Tests of the control service: decisions reach every worker's replica through the rings, worker
// reports are recorded, health follows probes and passive reports, feeds, settings, reload and
// the state file.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "control/control.h"
#include "control/log.h"
#include "tests/unit/result_util.h"

namespace sluice::control {
namespace {

// reload's restart keys; a refused reload fails the test.
std::vector<std::string> reload_ok(Control& c, const GatewayConfig& next) {
  Result<std::vector<std::string>> r = c.reload(next, Secrets{});
  EXPECT_EQ(error_of(r), "");
  return r ? *r : std::vector<std::string>{};
}

using namespace std::chrono_literals;

// An admin operation's refusal as "STATUS message", or "" when it was applied.
std::string op_error(const OpResult& r) {
  return r ? std::string() : std::to_string(r.error().status) + " " + r.error().message;
}

class ControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-control-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    set_log_sink(&log_);
    config_.state_dir = dir_;
    // Nothing listens on port 1 of loopback: probes fail fast with "connection refused".
    config_.nodes = {NodeSpec{"n0", "127.0.0.1", 1, 100}, NodeSpec{"n1", "127.0.0.1", 1, 100}};
    config_.broker_node_names = {"rabbit@n0", "rabbit@n1"};
    // Probes are slow here unless a test wants them: the tests drive health by hand.
    config_.health.interval_ms = 3'600'000;
    config_.health.timeout_ms = 1'000;
    config_.queues_max = 1000;
  }
  void TearDown() override {
    control_.reset();
    set_log_sink(nullptr);
    std::filesystem::remove_all(dir_);
  }

  Control& make() {
    control_ = std::make_unique<Control>(io_, config_, Secrets{});
    return *control_;
  }

  // Runs the io_context until pred() holds, at most `limit`.
  bool run_until(const std::function<bool()>& pred, std::chrono::milliseconds limit = 5s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) return false;
      io_.restart();
      io_.run_for(2ms);
    }
    return true;
  }

  static size_t drain(Control::Worker& w) {
    return w.channel->to_worker.pop_some(
        [&](const ControlToWorker& m) { (void)w.replica->apply(m); }, 1'000'000);
  }

  std::string dir_;
  std::string log_;
  GatewayConfig config_;
  boost::asio::io_context io_;
  std::unique_ptr<Control> control_;
};

TEST_F(ControlTest, PinReachesEveryWorkersReplica) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w0 = c.attach_worker(), w1 = c.attach_worker();
  c.start();
  PinRequest p{"/", "orders", "n1"};
  ASSERT_EQ(op_error(c.pin({&p, 1})), "");
  ASSERT_TRUE(run_until([&] {
    drain(w0);
    drain(w1);
    return w0.replica->lookup("/", "orders").known && w1.replica->lookup("/", "orders").known;
  }));
  for (Replica* r : {w0.replica.get(), w1.replica.get()}) {
    Route route = r->lookup("/", "orders");
    EXPECT_TRUE(route.known);
    EXPECT_EQ(route.owner, 1);
    EXPECT_EQ(route.source, OwnerSource::kPinned);
  }
  EXPECT_NE(log_.find("event=queue_pinned vhost=/ queue=orders node=n1"), std::string::npos)
      << log_;
}

TEST_F(ControlTest, AttachedWorkerStartsWithWhatWasDecided) {
  config_.pins = {PinSpec{"/", "from-config", "n0"}};
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w = c.attach_worker();
  EXPECT_EQ(w.channel->to_worker.read_available(), 0u) << "filled directly, not through the ring";
  Route route = w.replica->lookup("/", "from-config");
  EXPECT_EQ(route.owner, 0);
  EXPECT_EQ(route.source, OwnerSource::kPinned);
}

TEST_F(ControlTest, BacklogEventsSetTheDrainBarrierInEveryReplica) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w0 = c.attach_worker();
  c.start();
  c.set_backlog("/", "orders", true);
  c.set_backlog("/", "orders", true);  // no change: nothing more is sent
  ASSERT_TRUE(run_until([&] {
    drain(w0);
    return w0.replica->lookup("/", "orders").backlog;
  }));
  EXPECT_EQ(c.queues_with_backlog(), 1u);
  EXPECT_TRUE(c.queue("/", "orders").backlog);
  EXPECT_EQ(c.summary().queues_with_backlog, 1u);
  // A worker attached later starts with the barrier set.
  Control::Worker w1 = c.attach_worker();
  EXPECT_TRUE(w1.replica->lookup("/", "orders").backlog);
  c.set_backlog("/", "orders", false);
  ASSERT_TRUE(run_until([&] {
    drain(w0);
    return !w0.replica->lookup("/", "orders").backlog;
  }));
  EXPECT_EQ(c.queues_with_backlog(), 0u);
  EXPECT_FALSE(c.queue("/", "orders").backlog);
  EXPECT_NE(log_.find("event=queue_backlog vhost=/ queue=orders"), std::string::npos) << log_;
  EXPECT_NE(log_.find("event=queue_backlog_delivered vhost=/ queue=orders"), std::string::npos);
  EXPECT_NE(c.metrics_text().find("sluice_queues_with_backlog 0"), std::string::npos);
  // A key no message can carry is ignored (the spill log never holds one).
  c.set_backlog(std::string(300, 'v'), "q", true);
  EXPECT_EQ(c.queues_with_backlog(), 0u);
}

TEST_F(ControlTest, WorkerPlacementIsRecordedAndSentToTheOtherWorkers) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w0 = c.attach_worker(), w1 = c.attach_worker();
  c.start();
  WorkerToControl report;
  const NodeIndex chosen = w0.replica->place_unknown("/", "fresh", &report);
  ASSERT_NE(chosen, kNoNode);
  ASSERT_TRUE(w0.channel->to_control.try_push(report));
  ASSERT_TRUE(run_until([&] {
    drain(w1);
    return w1.replica->lookup("/", "fresh").known;
  }));
  EXPECT_EQ(w1.replica->lookup("/", "fresh").owner, chosen);
  QueueStatus q = c.queue("/", "fresh");
  ASSERT_TRUE(q.owner.has_value());
  EXPECT_EQ(q.owner->source, OwnerSource::kPlaced);
  EXPECT_EQ(q.placed, config_.nodes[chosen].name);
  EXPECT_EQ(c.summary().placements, 1u);
}

TEST_F(ControlTest, PlacementIsStickyWhenAnotherWorkerReportsADifferentNode) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w0 = c.attach_worker();
  c.start();
  Placed first;
  (void)first.key.assign("/", "q");
  first.node = 0;
  Placed second = first;
  second.node = 1;
  ASSERT_TRUE(w0.channel->to_control.try_push(first));
  ASSERT_TRUE(w0.channel->to_control.try_push(second));
  ASSERT_TRUE(run_until([&] {
    drain(w0);
    return w0.replica->lookup("/", "q").known && c.summary().placements == 1 &&
           w0.channel->to_control.read_available() == 0;
  }));
  // Both reports were handled (the ring is empty); what they sent has arrived.
  run_until([] { return false; }, 20ms);
  drain(w0);
  EXPECT_EQ(c.queue("/", "q").placed, "n0");
  EXPECT_EQ(w0.replica->lookup("/", "q").owner, 0) << "the reporter is corrected";
  EXPECT_EQ(c.summary().placements, 1u);
}

TEST_F(ControlTest, LeastQueuesPolicyOverridesTheWorkersRendezvousChoice) {
  config_.placement = PlacementPolicy::kLeastQueues;
  config_.pins = {PinSpec{"/", "a", "n0"}, PinSpec{"/", "b", "n0"}};
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w = c.attach_worker();
  c.start();
  Placed m;
  (void)m.key.assign("/", "c");
  m.node = 0;
  ASSERT_TRUE(w.channel->to_control.try_push(m));
  ASSERT_TRUE(run_until([&] {
    drain(w);
    return w.replica->lookup("/", "c").known;
  }));
  EXPECT_EQ(c.queue("/", "c").placed, "n1");
  EXPECT_EQ(w.replica->lookup("/", "c").owner, 1);
}

TEST_F(ControlTest, PassiveFailuresCountTowardFall) {
  config_.health.fall = 2;
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w = c.attach_worker();
  c.start();
  ASSERT_TRUE(w.channel->to_control.try_push(PassiveFailure{1}));
  ASSERT_TRUE(run_until([&] { return c.node("n1")->passive_failures == 1; }));
  EXPECT_EQ(c.node("n1")->health, HealthState::kDown) << "never answered: the first failure counts";
  EXPECT_EQ(c.node("n0")->passive_failures, 0u);
  ASSERT_TRUE(run_until([&] {
    drain(w);
    return w.replica->node_health(1) == HealthState::kDown;
  }));
  EXPECT_NE(log_.find("event=node_down node=n1"), std::string::npos) << log_;
}

TEST_F(ControlTest, ProbesTakeAClosedPortDownAndKeepAListeningNodeUp) {
  boost::asio::ip::tcp::acceptor acceptor(
      io_, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  std::function<void()> accept = [&] {
    acceptor.async_accept([&](boost::system::error_code ec, boost::asio::ip::tcp::socket) {
      if (!ec) accept();
    });
  };
  accept();
  config_.nodes[0].port = acceptor.local_endpoint().port();
  config_.health.interval_ms = 100;
  config_.health.timeout_ms = 50;
  config_.health.rise = 1;
  config_.health.fall = 2;
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  c.start();
  ASSERT_TRUE(run_until([&] { return c.node("n1")->health == HealthState::kDown; }));
  ASSERT_TRUE(run_until([&] { return c.node("n0")->probes_ok >= 3; }));
  EXPECT_EQ(c.node("n0")->health, HealthState::kUp);
  EXPECT_EQ(c.node("n0")->probes_failed, 0u);
  EXPECT_NE(c.node("n1")->last_probe_error.find("refused"), std::string::npos)
      << c.node("n1")->last_probe_error;
  const std::string metrics = c.metrics_text();
  EXPECT_NE(metrics.find("sluice_node_up{node=\"n0\"} 1\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("sluice_node_up{node=\"n1\"} 0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("sluice_health_probe_latency_seconds_count{node=\"n0\"}"),
            std::string::npos);
}

TEST_F(ControlTest, AdminStateChangesReachWorkersAndRefuseBadInput) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w = c.attach_worker();
  c.start();
  EXPECT_EQ(op_error(c.set_admin_state("n0", "drain")), "");
  ASSERT_TRUE(run_until([&] {
    drain(w);
    return w.replica->node_admin(0) == AdminState::kDrain;
  }));
  OpResult e = c.set_admin_state("n9", "drain");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().status, 404u);
  EXPECT_NE(e.error().message.find("no node named \"n9\"; nodes are: n0, n1"), std::string::npos);
  e = c.set_admin_state("n0", "sleep");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().status, 400u);
  EXPECT_EQ(c.node("n0")->admin, AdminState::kDrain);
}

TEST_F(ControlTest, PinBatchIsAllOrNothing) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  std::vector<PinRequest> batch = {{"/", "a", "n0"}, {"/", "b", "nope"}};
  OpResult e = c.pin(batch);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().status, 404u);
  EXPECT_NE(e.error().message.find("pins[1]: no node named \"nope\""), std::string::npos)
      << e.error().message;
  EXPECT_FALSE(c.queue("/", "a").owner.has_value());
  batch = {{"/", std::string(256, 'q'), "n0"}};
  e = c.pin(batch);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("longer than 255"), std::string::npos) << e.error().message;
  batch = {{"", "q", "n0"}};
  EXPECT_FALSE(c.pin(batch));
}

TEST_F(ControlTest, PinsBeyondQueuesMaxAreRefused) {
  config_.queues_max = 3;
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  std::vector<PinRequest> batch = {{"/", "a", "n0"}, {"/", "b", "n0"}, {"/", "c", "n0"}};
  ASSERT_EQ(op_error(c.pin(batch)), "");
  batch = {{"/", "a", "n1"}};
  EXPECT_EQ(op_error(c.pin(batch)), "") << "re-pinning a recorded queue takes no room";
  batch = {{"/", "d", "n1"}};
  OpResult e = c.pin(batch);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().status, 507u);
  EXPECT_NE(e.error().message.find("limits.queues_max (3"), std::string::npos) << e.error().message;
}

TEST_F(ControlTest, UnpinFallsBackToTheLearnedOwner) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w = c.attach_worker();
  c.start();
  FeedPoll poll;
  poll.ok = true;
  poll.queues = {LearnedQueue{"/", "q", "rabbit@n1"}};
  c.on_feed(poll);
  PinRequest p{"/", "q", "n0"};
  ASSERT_EQ(op_error(c.pin({&p, 1})), "");
  EXPECT_EQ(c.queue("/", "q").owner->source, OwnerSource::kPinned);
  EXPECT_TRUE(c.unpin("/", "q"));
  EXPECT_FALSE(c.unpin("/", "q"));
  ASSERT_TRUE(run_until([&] {
    drain(w);
    return w.replica->lookup("/", "q").source == OwnerSource::kLearned;
  }));
  Route r = w.replica->lookup("/", "q");
  EXPECT_EQ(r.owner, 1);
  EXPECT_EQ(r.source, OwnerSource::kLearned);
}

TEST_F(ControlTest, FeedLearnsForgetsAndKeepsStateWhenAPollFails) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w = c.attach_worker();
  c.start();
  FeedPoll poll;
  poll.ok = true;
  poll.url = "http://127.0.0.1:15672";
  poll.queues = {LearnedQueue{"/", "a", "rabbit@n0"}, LearnedQueue{"/", "b", "rabbit@n1"},
                 LearnedQueue{"/", "c", "rabbit@elsewhere"}};
  c.on_feed(poll);
  EXPECT_EQ(c.queue("/", "a").learned, "n0");
  EXPECT_EQ(c.queue("/", "b").learned, "n1");
  EXPECT_FALSE(c.queue("/", "c").owner.has_value()) << "a broker node no Sluice node maps";
  FeedPoll failed;
  failed.error = "http://127.0.0.1:15672: connect: Connection refused";
  c.on_feed(failed);
  EXPECT_EQ(c.queue("/", "a").learned, "n0") << "a failed poll keeps what was learned";
  EXPECT_EQ(c.summary().feed_failures, 1u);
  EXPECT_NE(log_.find("event=feed_poll_failed"), std::string::npos);
  poll.queues = {LearnedQueue{"/", "b", "rabbit@n0"}};
  c.on_feed(poll);
  EXPECT_FALSE(c.queue("/", "a").owner.has_value()) << "gone from the broker: forgotten";
  EXPECT_EQ(c.queue("/", "b").learned, "n0") << "moved";
  ASSERT_TRUE(run_until([&] {
    drain(w);
    return !w.replica->lookup("/", "a").known && w.replica->lookup("/", "b").owner == 0;
  }));
  EXPECT_FALSE(w.replica->lookup("/", "a").known);
  EXPECT_EQ(w.replica->lookup("/", "b").owner, 0);
  const std::string m = c.metrics_text();
  EXPECT_NE(m.find("sluice_feed_polls_total{feed=\"rabbitmq\"} 3"), std::string::npos) << m;
  EXPECT_NE(m.find("sluice_feed_poll_failures_total{feed=\"rabbitmq\"} 1"), std::string::npos);
  EXPECT_NE(m.find("sluice_ownership_entries{source=\"learned\"} 1"), std::string::npos);
}

TEST_F(ControlTest, SettingsChangeAtRunTimeAndRefuseBadValues) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  EXPECT_EQ(op_error(c.set_setting("log_level", "debug")), "");
  EXPECT_EQ(log_level(), LogLevel::kDebug);
  EXPECT_EQ(c.setting("log_level"), "debug");
  EXPECT_EQ(op_error(c.set_setting("health.fall", "5")), "");
  EXPECT_EQ(c.setting("health.fall"), "5");
  OpResult e = c.set_setting("health.timeout_ms", "5000000");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("health.timeout_ms: must be between 10 and 3600000"),
            std::string::npos)
      << e.error().message;
  e = c.set_setting("health.timeout_ms", "3600000");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("must be less than health.interval_ms"), std::string::npos);
  e = c.set_setting("health.rise", "two");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("whole number"), std::string::npos);
  e = c.set_setting("feed.rabbitmq.timeout_ms", "9000");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("feed.rabbitmq.timeout_ms: must be less than feed.rabbitmq."),
            std::string::npos)
      << e.error().message;
  e = c.set_setting("health.probe", "stomp");
  ASSERT_FALSE(e) << "no passcode file configured";
  e = c.set_setting("nonsense", "1");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().status, 404u);
  EXPECT_NE(e.error().message.find("settings are: log_level"), std::string::npos);
  EXPECT_EQ(op_error(c.set_setting("placement.policy", "least-queues")), "");
  EXPECT_EQ(c.config().placement, PlacementPolicy::kLeastQueues);
  set_log_level(LogLevel::kInfo);
}

// The live settings (limits.*, spill.queue_*_max, drain.rate_per_second) reach the dataplane
// through the hook, at run time and on reload; what the hook refuses stays as it was (and a
// reload names it as needing a restart).
TEST_F(ControlTest, LiveSettingsGoThroughTheHookAtRunTimeAndOnReload) {
  config_.sessions_max = 100;
  config_.sessions_per_source_max = 10;
  config_.prelude_sessions_max = 100;
  config_.connect_timeout_ms = 2'000;
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  EXPECT_EQ(c.setting("limits.sessions_max"), "100");
  // Without a hook (no engine) a value is only recorded.
  EXPECT_EQ(op_error(c.set_setting("limits.connect_timeout_ms", "1500")), "");
  EXPECT_EQ(c.config().connect_timeout_ms, 1'500u);

  std::vector<Control::LiveSettings> seen;
  c.set_live_hook([&](const Control::LiveSettings& l) -> Result<> {
    seen.push_back(l);
    if (l.sessions_max > 100) return failure("limits.sessions_max: above 100");
    return {};
  });
  EXPECT_EQ(op_error(c.set_setting("limits.sessions_max", "40")), "");
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].sessions_max, 40u);
  EXPECT_EQ(seen[0].sessions_per_source_max, 10u);
  EXPECT_EQ(seen[0].prelude_sessions_max, 100u);
  EXPECT_EQ(seen[0].connect_timeout_ms, 1'500u);
  EXPECT_EQ(seen[0].spill_queue_messages_max, config_.spill.queue_messages_max);
  EXPECT_EQ(seen[0].drain_rate_per_second, 0u);
  EXPECT_EQ(c.setting("limits.sessions_max"), "40");

  // The spill log's per-queue limits (beyond 32 bits) and the drainer's rate (0: no limit).
  EXPECT_EQ(op_error(c.set_setting("spill.queue_bytes_max", "1099511627776")), "");
  EXPECT_EQ(seen.back().spill_queue_bytes_max, 1ull << 40);
  EXPECT_EQ(c.config().spill.queue_bytes_max, 1ull << 40);
  EXPECT_EQ(op_error(c.set_setting("spill.queue_messages_max", "2000000")), "");
  EXPECT_EQ(op_error(c.set_setting("drain.rate_per_second", "250")), "");
  EXPECT_EQ(seen.back().drain_rate_per_second, 250u);
  EXPECT_EQ(seen.back().spill_queue_messages_max, 2'000'000u);
  EXPECT_EQ(c.setting("drain.rate_per_second"), "250");
  EXPECT_EQ(op_error(c.set_setting("drain.rate_per_second", "0")), "");
  EXPECT_FALSE(c.set_setting("drain.rate_per_second", "10000001"));
  EXPECT_FALSE(c.set_setting("spill.queue_messages_max", "0"));
  // spill.max_bytes: at least two segments, checked before the hook.
  const uint64_t segment = config_.spill.segment_bytes;
  EXPECT_EQ(op_error(c.set_setting("spill.max_bytes", std::to_string(5 * segment))), "");
  EXPECT_EQ(seen.back().spill_max_bytes, 5 * segment);
  EXPECT_EQ(c.config().spill.max_bytes, 5 * segment);
  EXPECT_EQ(c.setting("spill.max_bytes"), std::to_string(5 * segment));
  {
    const size_t before = seen.size();
    OpResult small = c.set_setting("spill.max_bytes", std::to_string(2 * segment - 1));
    ASSERT_FALSE(small);
    EXPECT_EQ(small.error().status, 400u);
    EXPECT_NE(small.error().message.find("at least two segments"), std::string::npos)
        << small.error().message;
    EXPECT_EQ(seen.size(), before);
    EXPECT_EQ(c.config().spill.max_bytes, 5 * segment);
  }

  // Refused by the hook: 400 with its reason, nothing recorded.
  OpResult e = c.set_setting("limits.sessions_max", "101");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().status, 400u);
  EXPECT_EQ(e.error().message, "limits.sessions_max: above 100");
  EXPECT_EQ(c.setting("limits.sessions_max"), "40");
  // Out of the config file's range, or not a number: refused before the hook.
  const size_t calls = seen.size();
  for (const char* bad : {"0", "1000001", "-1", "many", ""}) {
    e = c.set_setting("limits.sessions_per_source_max", bad);
    ASSERT_FALSE(e) << bad;
    EXPECT_NE(e.error().message.find("must be a whole number from 1 to 1000000"), std::string::npos)
        << e.error().message;
  }
  e = c.set_setting("limits.connect_timeout_ms", "600001");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("from 1 to 600000"), std::string::npos) << e.error().message;
  EXPECT_EQ(seen.size(), calls);

  // A reload: each changed setting goes to the hook; the one refused needs a restart, the
  // others apply.
  GatewayConfig next = config_;
  next.spill.queue_messages_max = 2'000'000;  // as set at run time: unchanged
  next.spill.queue_bytes_max = 1ull << 40;
  next.sessions_max = 500;             // refused
  next.sessions_per_source_max = 5;    // applies
  next.connect_timeout_ms = 1'500;     // as set at run time: unchanged, not sent
  next.prelude_sessions_max = 100;     // unchanged
  next.spill.max_bytes = 5 * segment;  // as set at run time: unchanged
  std::vector<std::string> restart;
  restart = reload_ok(c, next);
  EXPECT_EQ(restart, std::vector<std::string>{"limits.sessions_max: above 100"});
  EXPECT_EQ(c.setting("limits.sessions_max"), "40");
  EXPECT_EQ(c.setting("limits.sessions_per_source_max"), "5");
  ASSERT_EQ(seen.size(), calls + 2);
  EXPECT_EQ(seen.back().sessions_per_source_max, 5u);
  EXPECT_EQ(seen.back().sessions_max, 40u);
  // spill.max_bytes changed by a reload applies.
  next.spill.max_bytes = 7 * segment;
  restart.clear();
  restart = reload_ok(c, next);
  EXPECT_EQ(restart, std::vector<std::string>{"limits.sessions_max: above 100"});
  EXPECT_EQ(seen.back().spill_max_bytes, 7 * segment);
  EXPECT_EQ(c.setting("spill.max_bytes"), std::to_string(7 * segment));
  // Spill and drain keys that are not live still need a restart, and say so.
  next.spill.on_full = SpillOnFull::kDropOldest;
  next.drain.window = 8;
  restart.clear();
  restart = reload_ok(c, next);
  EXPECT_EQ(restart, (std::vector<std::string>{
                         "spill (other than max_bytes, queue_messages_max and queue_bytes_max)",
                         "drain (other than rate_per_second)", "limits.sessions_max: above 100"}));
}

TEST_F(ControlTest, ReloadAddsNodesAndWorkersPlaceOnThem) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  Control::Worker w = c.attach_worker();
  c.start();
  GatewayConfig next = config_;
  next.nodes.push_back(NodeSpec{"n2", "127.0.0.1", 1, 10'000});
  next.broker_node_names.push_back("rabbit@n2");
  next.pins = {PinSpec{"/", "p", "n2"}};
  next.workers = 4;
  std::vector<std::string> restart;
  restart = reload_ok(c, next);
  EXPECT_EQ(restart, std::vector<std::string>{"gateway.workers"});
  EXPECT_EQ(c.nodes().size(), 3u);
  EXPECT_EQ(c.queue("/", "p").pinned, "n2");
  ASSERT_TRUE(run_until([&] {
    drain(w);
    return w.replica->node_count() == 3 && w.replica->lookup("/", "p").known;
  }));
  EXPECT_EQ(w.replica->node_count(), 3u);
  EXPECT_EQ(w.replica->lookup("/", "p").owner, 2);
  // n2 carries almost all the weight: most new queues go there.
  size_t on_new = 0;
  for (int i = 0; i < 100; ++i) {
    on_new += w.replica->place_unknown("/", "q" + std::to_string(i), nullptr) == 2 ? 1 : 0;
  }
  EXPECT_GT(on_new, 90u);
}

TEST_F(ControlTest, ReloadRefusesToRemoveANode) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  GatewayConfig next = config_;
  next.nodes.pop_back();
  next.broker_node_names.pop_back();
  const std::string e = error_of(c.reload(next, Secrets{}));
  EXPECT_NE(e.find("node \"n1\" is not in the new config"), std::string::npos) << e;
  EXPECT_EQ(c.nodes().size(), 2u);
}

TEST_F(ControlTest, ReloadDropsAConfigPinOnlyIfUnchanged) {
  config_.pins = {PinSpec{"/", "a", "n0"}, PinSpec{"/", "b", "n0"}};
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  PinRequest p{"/", "b", "n1"};  // the operator moved b through the API
  ASSERT_EQ(op_error(c.pin({&p, 1})), "");
  GatewayConfig next = config_;
  next.pins.clear();
  reload_ok(c, next);
  EXPECT_FALSE(c.queue("/", "a").owner.has_value());
  EXPECT_EQ(c.queue("/", "b").pinned, "n1");
}

TEST_F(ControlTest, PinsAndPlacementsSurviveARestart) {
  {
    Control& c = make();
    ASSERT_EQ(error_of(c.load_state()), "");
    Control::Worker w = c.attach_worker();
    c.start();
    PinRequest p{"/", "pinned", "n1"};
    ASSERT_EQ(op_error(c.pin({&p, 1})), "");
    Placed m;
    (void)m.key.assign("/", "placed");
    m.node = 0;
    ASSERT_TRUE(w.channel->to_control.try_push(m));
    ASSERT_TRUE(run_until([&] { return c.queue("/", "placed").owner.has_value(); }));
    c.stop();
  }
  control_.reset();
  Control& again = make();
  ASSERT_EQ(error_of(again.load_state()), "");
  EXPECT_EQ(again.queue("/", "pinned").pinned, "n1");
  EXPECT_EQ(again.queue("/", "placed").placed, "n0");
}

TEST_F(ControlTest, StateFileIsWrittenSoonAfterAChangeWhileRunning) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  c.start();
  PinRequest p{"/", "kept", "n1"};
  ASSERT_EQ(op_error(c.pin({&p, 1})), "");
  auto file_has_pin = [&] {
    std::ifstream in(dir_ + "/ownership");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.find("pinned / kept n1") != std::string::npos;
  };
  ASSERT_TRUE(run_until(file_has_pin)) << "written by the writer thread, not only at stop";
  ASSERT_TRUE(run_until([&] {
    return c.metrics_text().find("sluice_state_saves_total{result=\"ok\"} 1") != std::string::npos;
  }));
}

TEST_F(ControlTest, AFailedStateWriteIsLoggedCountedAndKeepsTheTable) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  c.start();
  // The directory disappears under the running daemon: the write fails, the table stays.
  std::filesystem::remove_all(dir_);
  PinRequest p{"/", "q", "n0"};
  ASSERT_EQ(op_error(c.pin({&p, 1})), "");
  ASSERT_TRUE(run_until([&] { return log_.find("event=state_save_failed") != std::string::npos; }));
  EXPECT_NE(c.metrics_text().find("sluice_state_saves_total{result=\"failed\"} 1"),
            std::string::npos);
  EXPECT_EQ(c.queue("/", "q").pinned, "n0");
  std::filesystem::create_directories(dir_);
}

TEST_F(ControlTest, ADamagedStateFileStopsTheStartAndNamesTheFile) {
  {
    std::ofstream f(dir_ + "/ownership");
    f << "not a state file\n";
  }
  Control& c = make();
  const std::string e = error_of(c.load_state());
  ASSERT_NE(e, "");
  EXPECT_NE(e.find(dir_ + "/ownership"), std::string::npos) << e;
  EXPECT_NE(e.find(".corrupt"), std::string::npos) << e;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ownership.corrupt"));
}

TEST_F(ControlTest, SecretsAreReadFromFilesWithoutTheirNewline) {
  {
    std::ofstream f(dir_ + "/pass");
    f << "s3cret\n";
  }
  config_.health.passcode_file = dir_ + "/pass";
  auto s = read_secrets(config_);
  ASSERT_EQ(error_of(s), "");
  EXPECT_EQ(s->health_passcode, "s3cret");
  config_.health.passcode_file = dir_ + "/missing";
  s = read_secrets(config_);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("health.passcode_file: cannot read passcode file"),
            std::string::npos);
  config_.health.passcode_file = dir_ + "/pass";
  config_.drain.passcode_file = dir_ + "/pass";
  s = read_secrets(config_);
  ASSERT_EQ(error_of(s), "");
  EXPECT_EQ(s->drain_passcode, "s3cret");
  config_.drain.passcode_file = dir_ + "/missing";
  s = read_secrets(config_);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("drain.passcode_file: cannot read passcode file"),
            std::string::npos);
}

TEST_F(ControlTest, MetricsAreWellFormedPrometheusText) {
  Control& c = make();
  ASSERT_EQ(error_of(c.load_state()), "");
  const std::string m = c.metrics_text();
  size_t samples = 0;
  size_t pos = 0;
  while (pos < m.size()) {
    const size_t end = m.find('\n', pos);
    ASSERT_NE(end, std::string::npos) << "every line ends with a newline";
    const std::string line = m.substr(pos, end - pos);
    pos = end + 1;
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) continue;
    ASSERT_TRUE(line.starts_with("sluice_")) << line;
    const size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    char* rest = nullptr;
    const std::string value = line.substr(space + 1);
    std::strtod(value.c_str(), &rest);
    EXPECT_EQ(*rest, '\0') << line;
    ++samples;
  }
  EXPECT_GT(samples, 20u);
  for (const char* family :
       {"sluice_node_up", "sluice_node_admin_state", "sluice_ownership_entries",
        "sluice_placements_total", "sluice_feed_polls_total", "sluice_feed_poll_failures_total",
        "sluice_health_probe_latency_seconds"}) {
    EXPECT_NE(m.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
  }
}

}  // namespace
}  // namespace sluice::control
