// The routing policy (control/router.h, ReplicaRouter) over a real replica fed
// through the worker's ring, as control feeds it: the owner, placement of unknown queues, the
// drain barrier (a queue with a spill backlog spills even when its owner is up), node health and
// admin states, the default route, and the debug log line each decision writes.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "control/log.h"
#include "control/router.h"

namespace sluice::control {
namespace {

using control::AdminState;
using control::HealthState;
using control::NodeIndex;
using Kind = session::Route::Kind;

class ReplicaRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = {{"n0", "127.0.0.1", 61001, 100},
              {"n1", "127.0.0.1", 61002, 100},
              {"n2", "127.0.0.1", 61003, 100}};
    ASSERT_TRUE(directory_.set(nodes_));
    channel_ = std::make_unique<control::WorkerChannel>();
    control::Control::Worker w{channel_.get(), std::make_unique<control::Replica>(nodes_, 1024)};
    router_ = std::make_unique<ReplicaRouter>(std::move(w), directory_, "test0");
  }

  // Control's message, through the ring, applied by the router's poll.
  void send(const control::ControlToWorker& m) {
    ASSERT_TRUE(channel_->to_worker.try_push(m));
    router_->poll();
    ASSERT_EQ(channel_->to_worker.read_available(), 0u);
  }
  void set_owner(std::string_view queue, NodeIndex node,
                 control::OwnerSource source = control::OwnerSource::kPinned) {
    control::SetOwner m;
    ASSERT_EQ(m.key.assign("/", queue), control::KeyFit::kFits);
    m.node = node;
    m.source = source;
    send(m);
  }
  void set_backlog(std::string_view queue, bool has) {
    control::SetBacklog m;
    ASSERT_EQ(m.key.assign("/", queue), control::KeyFit::kFits);
    m.has_backlog = has;
    send(m);
  }
  void set_node(NodeIndex node, AdminState admin, HealthState health) {
    send(control::NodeState{node, admin, health});
  }

  session::Route route(std::string_view queue, uint64_t hash = 1) {
    return router_->route(session::QueueKey{"/", queue, false}, hash);
  }
  bool owner_up(std::string_view queue) {
    return router_->owner_up(session::QueueKey{"/", queue, false});
  }
  // Direct to node n, at its configured address.
  static void expect_direct(const session::Route& d, NodeIndex n, uint16_t port) {
    ASSERT_EQ(d.kind, Kind::kOwner);
    EXPECT_EQ(d.node, n);
    EXPECT_EQ(d.port, port);
    EXPECT_EQ(d.ip, INADDR_LOOPBACK);
  }
  uint16_t port_of(NodeIndex n) const { return nodes_[n].port; }
  std::vector<NodeIndex> order(std::string_view queue) const {
    std::vector<NodeIndex> out(nodes_.size());
    control::Placement(nodes_).order("/", queue, out);
    return out;
  }

  std::vector<control::NodeSpec> nodes_;
  NodeDirectory directory_;
  std::unique_ptr<control::WorkerChannel> channel_;
  std::unique_ptr<ReplicaRouter> router_;
};

TEST_F(ReplicaRouterTest, UnknownQueueGoesToItsRendezvousNodeAndIsPlacedOnlyOnceConfirmed) {
  const NodeIndex want = order("orders")[0];
  session::Route d = route("orders");
  ASSERT_NO_FATAL_FAILURE(expect_direct(d, want, port_of(want)));
  EXPECT_TRUE(d.placement_pending);
  // Nothing recorded or reported until the owner accepted a session's login.
  EXPECT_EQ(channel_->to_control.read_available(), 0u);
  d = route("orders");
  EXPECT_TRUE(d.placement_pending);
  EXPECT_EQ(channel_->to_control.read_available(), 0u);
  router_->confirm_placement(session::QueueKey{"/", "orders", false}, want);
  std::vector<control::WorkerToControl> reports;
  channel_->to_control.pop_some([&](const control::WorkerToControl& m) { reports.push_back(m); },
                                16);
  ASSERT_EQ(reports.size(), 1u);
  const auto* placed = std::get_if<control::Placed>(&reports[0]);
  ASSERT_NE(placed, nullptr);
  EXPECT_EQ(placed->key.vhost(), "/");
  EXPECT_EQ(placed->key.queue(), "orders");
  EXPECT_EQ(placed->node, want);
  // Recorded: the next session is routed as known and not placed again (only its use of the
  // placed queue is reported).
  d = route("orders");
  ASSERT_NO_FATAL_FAILURE(expect_direct(d, want, port_of(want)));
  EXPECT_FALSE(d.placement_pending);
  router_->confirm_placement(session::QueueKey{"/", "orders", false}, want);
  reports.clear();
  channel_->to_control.pop_some([&](const control::WorkerToControl& m) { reports.push_back(m); },
                                16);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(std::get_if<control::Used>(&reports[0]), nullptr);
}

TEST_F(ReplicaRouterTest, SessionsOfAPlacedQueueReportItsUseOnceAMinute) {
  ASSERT_NO_FATAL_FAILURE(set_owner("orders", 1, control::OwnerSource::kPlaced));
  (void)route("orders");
  std::vector<control::WorkerToControl> reports;
  channel_->to_control.pop_some([&](const control::WorkerToControl& m) { reports.push_back(m); },
                                16);
  ASSERT_EQ(reports.size(), 1u);
  const auto* used = std::get_if<control::Used>(&reports[0]);
  ASSERT_NE(used, nullptr);
  EXPECT_EQ(used->key.queue(), "orders");
  for (int i = 0; i < 10; ++i)
    (void)route("orders");
  EXPECT_EQ(channel_->to_control.read_available(), 0u);
}

TEST_F(ReplicaRouterTest, LoginNodesAreEveryHealthyNodeInTurnAndNoneWhenAllAreDown) {
  std::vector<uint32_t> seen;
  for (uint32_t attempt = 0; attempt < nodes_.size(); ++attempt) {
    session::Route d = router_->login_node("/", 12345, attempt);
    ASSERT_EQ(d.kind, Kind::kOwner) << attempt;
    EXPECT_LT(d.node, nodes_.size());
    seen.push_back(d.node);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end()) << "a node asked twice";
  EXPECT_EQ(router_->login_node("/", 12345, uint32_t(nodes_.size())).kind, Kind::kSpill);
  // The first choice is the default route's for the same session.
  EXPECT_EQ(router_->login_node("/", 12345, 0).node,
            router_->route(session::QueueKey{"/", "x", true}, 12345).node);
  for (NodeIndex n = 0; n < NodeIndex(nodes_.size()); ++n) {
    ASSERT_NO_FATAL_FAILURE(set_node(n, AdminState::kUp, HealthState::kDown));
  }
  EXPECT_EQ(router_->login_node("/", 12345, 0).kind, Kind::kSpill);
}

TEST_F(ReplicaRouterTest, OwnerControlChoseIsReachedDirect) {
  for (NodeIndex n = 0; n < 3; ++n) {
    const std::string q = "q" + std::to_string(n);
    ASSERT_NO_FATAL_FAILURE(set_owner(q, n));
    ASSERT_NO_FATAL_FAILURE(expect_direct(route(q), n, port_of(n)));
    EXPECT_TRUE(owner_up(q));
  }
}

TEST_F(ReplicaRouterTest, BacklogSendsNewSessionsToSpillWhileTheOwnerIsUp) {
  ASSERT_NO_FATAL_FAILURE(set_owner("orders", 1));
  ASSERT_NO_FATAL_FAILURE(set_backlog("orders", true));
  for (uint64_t h = 0; h < 64; ++h)
    EXPECT_EQ(route("orders", h).kind, Kind::kSpill) << "session hash " << h;
  EXPECT_TRUE(owner_up("orders"));  // spill sessions are told to reconnect; they come back here
  // Another queue on the same owner is not held back.
  ASSERT_NO_FATAL_FAILURE(set_owner("other", 1));
  ASSERT_NO_FATAL_FAILURE(expect_direct(route("other"), 1, port_of(1)));
  // The owner changes while the backlog drains: still held.
  ASSERT_NO_FATAL_FAILURE(set_owner("orders", 2));
  EXPECT_EQ(route("orders").kind, Kind::kSpill);
  ASSERT_NO_FATAL_FAILURE(set_backlog("orders", false));
  ASSERT_NO_FATAL_FAILURE(expect_direct(route("orders"), 2, port_of(2)));
}

TEST_F(ReplicaRouterTest, BacklogHoldsAQueueTheReplicaHasNoOwnerFor) {
  ASSERT_NO_FATAL_FAILURE(set_backlog("fresh", true));
  EXPECT_EQ(route("fresh").kind, Kind::kSpill);
  // Placed meanwhile (and reported), still held; direct once the backlog is delivered.
  EXPECT_EQ(route("fresh").kind, Kind::kSpill);
  ASSERT_NO_FATAL_FAILURE(set_backlog("fresh", false));
  const NodeIndex want = order("fresh")[0];
  ASSERT_NO_FATAL_FAILURE(expect_direct(route("fresh"), want, port_of(want)));
}

TEST_F(ReplicaRouterTest, OwnerDownOrInMaintenanceSpills) {
  ASSERT_NO_FATAL_FAILURE(set_owner("orders", 1));
  ASSERT_NO_FATAL_FAILURE(set_node(1, AdminState::kUp, HealthState::kDown));
  EXPECT_EQ(route("orders").kind, Kind::kSpill);
  EXPECT_FALSE(owner_up("orders"));
  ASSERT_NO_FATAL_FAILURE(set_node(1, AdminState::kMaintenance, HealthState::kUp));
  EXPECT_EQ(route("orders").kind, Kind::kSpill);
  EXPECT_FALSE(owner_up("orders"));
  ASSERT_NO_FATAL_FAILURE(set_node(1, AdminState::kUp, HealthState::kUp));
  ASSERT_NO_FATAL_FAILURE(expect_direct(route("orders"), 1, port_of(1)));
  EXPECT_TRUE(owner_up("orders"));
  EXPECT_FALSE(owner_up("never-seen"));
}

TEST_F(ReplicaRouterTest, DrainingOwnerPassesNewSessionsToTheNextUsableNodeInRendezvousOrder) {
  const std::vector<NodeIndex> o = order("orders");
  ASSERT_NO_FATAL_FAILURE(set_owner("orders", o[0]));
  ASSERT_NO_FATAL_FAILURE(set_node(o[0], AdminState::kDrain, HealthState::kUp));
  ASSERT_NO_FATAL_FAILURE(expect_direct(route("orders"), o[1], port_of(o[1])));
  ASSERT_NO_FATAL_FAILURE(set_node(o[1], AdminState::kUp, HealthState::kDown));
  ASSERT_NO_FATAL_FAILURE(expect_direct(route("orders"), o[2], port_of(o[2])));
  ASSERT_NO_FATAL_FAILURE(set_node(o[2], AdminState::kMaintenance, HealthState::kUp));
  EXPECT_EQ(route("orders").kind, Kind::kSpill);
  // A draining owner that is also down: the queue spills (its backlog waits for it).
  ASSERT_NO_FATAL_FAILURE(set_node(o[1], AdminState::kUp, HealthState::kUp));
  ASSERT_NO_FATAL_FAILURE(set_node(o[0], AdminState::kDrain, HealthState::kDown));
  EXPECT_EQ(route("orders").kind, Kind::kSpill);
}

TEST_F(ReplicaRouterTest, DefaultRouteSpreadsOverUsableNodesAndRefusesWhenNoneIs) {
  auto route_default = [&](uint64_t hash) {
    return router_->route(session::QueueKey{"/", "/topic/prices", true}, hash);
  };
  std::set<uint32_t> used;
  for (uint64_t h = 0; h < 300; ++h) {
    const session::Route d = route_default(h * 0x9E3779B97F4A7C15ull);
    ASSERT_EQ(d.kind, Kind::kOwner);
    used.insert(d.node);
  }
  EXPECT_EQ(used, (std::set<uint32_t>{0, 1, 2}));
  ASSERT_NO_FATAL_FAILURE(set_node(0, AdminState::kUp, HealthState::kDown));
  ASSERT_NO_FATAL_FAILURE(set_node(2, AdminState::kDrain, HealthState::kUp));
  for (uint64_t h = 0; h < 100; ++h) {
    const session::Route d = route_default(h);
    ASSERT_EQ(d.kind, Kind::kOwner);
    EXPECT_EQ(d.node, 1u) << "only n1 is up and takes new sessions";
  }
  ASSERT_NO_FATAL_FAILURE(set_node(1, AdminState::kMaintenance, HealthState::kUp));
  const session::Route d = route_default(7);
  EXPECT_EQ(d.kind, Kind::kRefuse);
  EXPECT_EQ(d.message, "no node available, retry later");
  EXPECT_EQ(channel_->to_control.read_available(), 0u) << "the default route places nothing";
}

TEST_F(ReplicaRouterTest, EachDecisionIsOneDebugLineNamingTheRouterAndTheBacklog) {
  std::string sink;
  control::set_log_sink(&sink);
  const control::LogLevel before = control::log_level();
  ASSERT_NO_FATAL_FAILURE(set_owner("orders", 1));
  ASSERT_NO_FATAL_FAILURE(set_backlog("orders", true));
  control::set_log_level(control::LogLevel::kInfo);
  (void)route("orders");
  EXPECT_EQ(sink, "") << "no line above debug level";
  control::set_log_level(control::LogLevel::kDebug);
  (void)route("orders");
  ASSERT_NO_FATAL_FAILURE(set_backlog("orders", false));
  (void)route("orders");
  control::set_log_level(before);
  control::set_log_sink(nullptr);
  const size_t split = sink.find('\n');
  ASSERT_NE(split, std::string::npos) << sink;
  const std::string first = sink.substr(0, split);
  const std::string second = sink.substr(split + 1);
  for (const std::string& line : {first, second}) {
    EXPECT_NE(line.find("level=debug event=session_routed router=test0 vhost=/ queue=orders "
                        "default_route=0 "),
              std::string::npos)
        << line;
  }
  EXPECT_NE(first.find("route=spill node=- owner=n1 backlog=1"), std::string::npos) << first;
  EXPECT_NE(second.find("route=direct node=n1 owner=n1 backlog=0"), std::string::npos) << second;
}

TEST_F(ReplicaRouterTest, SessionEndsAreLoggedAtMostTwentyASecondTheRestCounted) {
  std::string sink;
  control::set_log_sink(&sink);
  session::SessionEnd e;
  e.reason = "login_refused";
  e.client_ip = 0x7F000001;
  e.client_port = 40000;
  e.vhost = "/";
  e.login = "guest";
  e.queue = "orders";
  e.node = 2;
  e.message = "Bad CONNECT";
  for (int i = 0; i < 25; ++i)
    router_->session_end(e);
  e.node = session::kNoRouteNode;
  router_->session_end(e);
  control::set_log_sink(nullptr);
  size_t lines = 0;
  for (size_t at = sink.find("event=session_end "); at != std::string::npos;
       at = sink.find("event=session_end ", at + 1))
    ++lines;
  EXPECT_EQ(lines, 20u) << sink;
  EXPECT_NE(sink.find("event=session_end reason=login_refused client=127.0.0.1:40000 vhost=/ "
                      "login=guest queue=orders owner=n2 message=\"Bad CONNECT\""),
            std::string::npos)
      << sink;
  EXPECT_EQ(sink.find("owner=-"), std::string::npos) << "the 26th line is counted, not written";
  EXPECT_EQ(sink.find("session_end_lines_suppressed"), std::string::npos)
      << "the count is written when the next second's first line is";
}

}  // namespace
}  // namespace sluice::control
