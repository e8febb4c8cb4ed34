// Worker replicas and the rings that feed them: each control message applied and looked up,
// placement of unknown queues, capacity limits, deletion, and the SPSC ring across two threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "control/messages.h"
#include "control/placement.h"
#include "control/replica.h"
#include "queue/spsc_ring.h"

namespace sluice::control {
namespace {

using queue::SpscRing;

std::vector<NodeSpec> weighted_nodes() {
  return {
      {"rabbit-1", "10.0.0.1", 61613, 100},
      {"rabbit-2", "10.0.0.2", 61613, 200},
      {"rabbit-3", "10.0.0.3", 61613, 100},
  };
}

ControlToWorker set_owner(std::string_view vhost, std::string_view queue, NodeIndex node,
                          OwnerSource source) {
  SetOwner m;
  m.node = node;
  m.source = source;
  EXPECT_EQ(m.key.assign(vhost, queue), KeyFit::kFits);
  return m;
}

ControlToWorker clear_owner(std::string_view vhost, std::string_view queue) {
  ClearOwner m;
  EXPECT_EQ(m.key.assign(vhost, queue), KeyFit::kFits);
  return m;
}

ControlToWorker set_backlog(std::string_view vhost, std::string_view queue, bool has_backlog) {
  SetBacklog m;
  m.has_backlog = has_backlog;
  EXPECT_EQ(m.key.assign(vhost, queue), KeyFit::kFits);
  return m;
}

TEST(Replica, SetOwnerIsFoundWithItsSource) {
  Replica r(weighted_nodes(), 16);
  EXPECT_TRUE(r.apply(set_owner("/", "orders", 1, OwnerSource::kLearned)));
  const Route route = r.lookup("/", "orders");
  EXPECT_TRUE(route.known);
  EXPECT_EQ(route.owner, 1);
  EXPECT_EQ(route.source, OwnerSource::kLearned);
  EXPECT_FALSE(route.backlog);
  EXPECT_EQ(r.size(), 1u);
  // Same queue name in another vhost, and the vhost/queue boundary, are other keys.
  EXPECT_FALSE(r.lookup("other", "orders").known);
  EXPECT_FALSE(r.lookup("/o", "rders").known);
  EXPECT_FALSE(r.lookup("", "/orders").known);
}

TEST(Replica, UnknownKeyLooksUpAsNoOwner) {
  Replica r(weighted_nodes(), 16);
  const Route route = r.lookup("/", "nobody");
  EXPECT_FALSE(route.known);
  EXPECT_EQ(route.owner, kNoNode);
  EXPECT_FALSE(route.backlog);
}

TEST(Replica, ClearOwnerMakesTheKeyUnknown) {
  Replica r(weighted_nodes(), 16);
  ASSERT_TRUE(r.apply(set_owner("/", "orders", 2, OwnerSource::kPinned)));
  EXPECT_TRUE(r.apply(clear_owner("/", "orders")));
  EXPECT_FALSE(r.lookup("/", "orders").known);
  EXPECT_EQ(r.size(), 0u);
  // Clearing an absent key is harmless.
  EXPECT_TRUE(r.apply(clear_owner("/", "never-seen")));
  EXPECT_EQ(r.size(), 0u);
}

TEST(Replica, NodeStateSetsAdminAndHealth) {
  Replica r(weighted_nodes(), 16);
  EXPECT_EQ(r.node_count(), 3u);
  EXPECT_EQ(r.node_admin(1), AdminState::kUp);
  EXPECT_EQ(r.node_health(1), HealthState::kUp);
  EXPECT_TRUE(r.apply(NodeState{1, AdminState::kDrain, HealthState::kDown}));
  EXPECT_EQ(r.node_admin(1), AdminState::kDrain);
  EXPECT_EQ(r.node_health(1), HealthState::kDown);
  EXPECT_EQ(r.node_admin(0), AdminState::kUp);
  EXPECT_EQ(r.node_health(2), HealthState::kUp);
  EXPECT_TRUE(r.apply(NodeState{2, AdminState::kMaintenance, HealthState::kUp}));
  EXPECT_EQ(r.node_admin(2), AdminState::kMaintenance);
}

TEST(Replica, BacklogFlagIsKeptWithOrWithoutOwner) {
  Replica r(weighted_nodes(), 16);
  // A backlog may be announced before the owner is known: the key reads unknown but backlogged.
  EXPECT_TRUE(r.apply(set_backlog("/", "orders", true)));
  Route route = r.lookup("/", "orders");
  EXPECT_FALSE(route.known);
  EXPECT_TRUE(route.backlog);

  ASSERT_TRUE(r.apply(set_owner("/", "orders", 0, OwnerSource::kPlaced)));
  route = r.lookup("/", "orders");
  EXPECT_TRUE(route.known);
  EXPECT_TRUE(route.backlog);

  // Clearing the owner keeps the backlog; clearing the backlog then removes the entry.
  ASSERT_TRUE(r.apply(clear_owner("/", "orders")));
  route = r.lookup("/", "orders");
  EXPECT_FALSE(route.known);
  EXPECT_TRUE(route.backlog);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_TRUE(r.apply(set_backlog("/", "orders", false)));
  EXPECT_FALSE(r.lookup("/", "orders").backlog);
  EXPECT_EQ(r.size(), 0u);

  // Clearing the backlog of an owned key keeps the owner.
  ASSERT_TRUE(r.apply(set_owner("/", "orders", 2, OwnerSource::kPinned)));
  ASSERT_TRUE(r.apply(set_backlog("/", "orders", true)));
  ASSERT_TRUE(r.apply(set_backlog("/", "orders", false)));
  route = r.lookup("/", "orders");
  EXPECT_TRUE(route.known);
  EXPECT_EQ(route.owner, 2);
  EXPECT_FALSE(route.backlog);
  // No backlog on an absent key: nothing to do, nothing inserted.
  EXPECT_TRUE(r.apply(set_backlog("/", "absent", false)));
  EXPECT_EQ(r.size(), 1u);
}

TEST(Replica, BarrierRecordsItsSequence) {
  Replica r(weighted_nodes(), 16);
  EXPECT_EQ(r.barrier_seq(), 0u);
  EXPECT_TRUE(r.apply(Barrier{41}));
  EXPECT_EQ(r.barrier_seq(), 41u);
  EXPECT_TRUE(r.apply(Barrier{42}));
  EXPECT_EQ(r.barrier_seq(), 42u);
}

TEST(Replica, UnknownKeyIsPlacedByRendezvousAndReported) {
  const std::vector<NodeSpec> nodes = weighted_nodes();
  Replica r(nodes, 1024);
  const Placement placement(nodes);
  for (int i = 0; i < 200; ++i) {
    const std::string queue = "jobs." + std::to_string(i);
    ASSERT_FALSE(r.lookup("/prod", queue).known);
    WorkerToControl report = PassiveFailure{};
    const NodeIndex node = r.place_unknown("/prod", queue, &report);
    EXPECT_EQ(node, placement.rendezvous("/prod", queue)) << queue;
    const Placed* placed = std::get_if<Placed>(&report);
    ASSERT_NE(placed, nullptr);
    EXPECT_EQ(placed->node, node);
    EXPECT_EQ(placed->key.vhost(), "/prod");
    EXPECT_EQ(placed->key.queue(), queue);
    // Recorded locally as placed: the next frame for the queue does not place it again.
    const Route route = r.lookup("/prod", queue);
    EXPECT_TRUE(route.known);
    EXPECT_EQ(route.owner, node);
    EXPECT_EQ(route.source, OwnerSource::kPlaced);
  }
  EXPECT_EQ(r.size(), 200u);
}

TEST(Replica, PlacementWithoutReportStillRecords) {
  Replica r(weighted_nodes(), 16);
  const NodeIndex node = r.place_unknown("/", "orders", nullptr);
  ASSERT_NE(node, kNoNode);
  EXPECT_EQ(r.lookup("/", "orders").owner, node);
}

TEST(Replica, PlacementKeepsAnAnnouncedBacklog) {
  Replica r(weighted_nodes(), 16);
  ASSERT_TRUE(r.apply(set_backlog("/", "orders", true)));
  const NodeIndex node = r.place_unknown("/", "orders", nullptr);
  const Route route = r.lookup("/", "orders");
  EXPECT_EQ(route.owner, node);
  EXPECT_TRUE(route.backlog);
  EXPECT_EQ(r.size(), 1u);
}

TEST(Replica, KeepsWhateverControlSentLast) {
  const std::vector<NodeSpec> nodes = weighted_nodes();
  Replica r(nodes, 16);
  const NodeIndex placed = r.place_unknown("/", "orders", nullptr);
  const NodeIndex other = NodeIndex((placed + 1) % 3);
  // An operator's pin replaces the worker's own placement.
  ASSERT_TRUE(r.apply(set_owner("/", "orders", other, OwnerSource::kPinned)));
  Route route = r.lookup("/", "orders");
  EXPECT_EQ(route.owner, other);
  EXPECT_EQ(route.source, OwnerSource::kPinned);
  // Control decides precedence: after an unpin it sends the next owner down, even a placed one,
  // and the replica takes it.
  ASSERT_TRUE(r.apply(set_owner("/", "orders", placed, OwnerSource::kPlaced)));
  route = r.lookup("/", "orders");
  EXPECT_EQ(route.owner, placed);
  EXPECT_EQ(route.source, OwnerSource::kPlaced);
  EXPECT_EQ(r.size(), 1u);
}

TEST(Replica, KeyTooLongForAMessageIsNotPlaced) {
  Replica r(weighted_nodes(), 16);
  const std::string long_queue(kQueueBytesMax + 1, 'q');
  const std::string long_vhost(kVhostBytesMax + 1, 'v');
  WorkerToControl report = PassiveFailure{7};
  EXPECT_EQ(r.place_unknown("/", long_queue, &report), kNoNode);
  EXPECT_EQ(r.place_unknown(long_vhost, "orders", &report), kNoNode);
  EXPECT_EQ(r.keys_too_long(), 2u);
  ASSERT_TRUE(std::holds_alternative<PassiveFailure>(report));  // untouched
  EXPECT_EQ(std::get<PassiveFailure>(report).node, 7);
  EXPECT_FALSE(r.lookup("/", long_queue).known);
  EXPECT_EQ(r.size(), 0u);
}

TEST(Replica, NoNodesConfiguredPlacesNothing) {
  Replica r(std::span<const NodeSpec>(), 16);
  WorkerToControl report = BarrierReached{3};
  EXPECT_EQ(r.place_unknown("/", "orders", &report), kNoNode);
  EXPECT_TRUE(std::holds_alternative<BarrierReached>(report));
  EXPECT_EQ(r.size(), 0u);
}

TEST(WireKey, RefusesKeysLongerThanTheLimits) {
  WireKey key;
  ASSERT_EQ(key.assign("/", "orders"), KeyFit::kFits);
  EXPECT_EQ(key.assign(std::string(kVhostBytesMax + 1, 'v'), "q"), KeyFit::kVhostTooLong);
  EXPECT_EQ(key.assign("/", std::string(kQueueBytesMax + 1, 'q')), KeyFit::kQueueTooLong);
  // A refused key leaves the old one in place.
  EXPECT_EQ(key.vhost(), "/");
  EXPECT_EQ(key.queue(), "orders");
  // The limits themselves fit.
  const std::string vhost(kVhostBytesMax, 'v'), queue(kQueueBytesMax, 'q');
  ASSERT_EQ(key.assign(vhost, queue), KeyFit::kFits);
  EXPECT_EQ(key.vhost(), vhost);
  EXPECT_EQ(key.queue(), queue);
  EXPECT_EQ(key_fit_name(KeyFit::kQueueTooLong), "queue name longer than 255 bytes");
}

TEST(Replica, FullReplicaRefusesNewKeysAndCountsThem) {
  Replica r(weighted_nodes(), 4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(r.apply(set_owner("/", "q" + std::to_string(i), 0, OwnerSource::kPlaced)));
  }
  EXPECT_FALSE(r.apply(set_owner("/", "q4", 1, OwnerSource::kPinned)));
  EXPECT_FALSE(r.apply(set_backlog("/", "q5", true)));
  EXPECT_EQ(r.refused(), 2u);
  EXPECT_EQ(r.size(), 4u);
  EXPECT_FALSE(r.lookup("/", "q4").known);
  // Keys already present still change.
  EXPECT_TRUE(r.apply(set_owner("/", "q0", 2, OwnerSource::kPinned)));
  EXPECT_EQ(r.lookup("/", "q0").owner, 2);
  // A placement is still computed and reported when it cannot be recorded.
  WorkerToControl report = PassiveFailure{};
  const NodeIndex node = r.place_unknown("/", "q6", &report);
  EXPECT_NE(node, kNoNode);
  EXPECT_TRUE(std::holds_alternative<Placed>(report));
  EXPECT_FALSE(r.lookup("/", "q6").known);
  EXPECT_EQ(r.refused(), 3u);
  // Room again once a key goes.
  ASSERT_TRUE(r.apply(clear_owner("/", "q1")));
  EXPECT_TRUE(r.apply(set_owner("/", "q4", 1, OwnerSource::kPinned)));
  EXPECT_EQ(r.lookup("/", "q4").owner, 1);
  EXPECT_EQ(r.refused(), 3u);
}

TEST(Replica, LongKeysTakeBlocksAndAreRefusedWhenBlocksRunOut) {
  ReplicaOptions options;
  options.long_keys_max = 2;
  Replica r(weighted_nodes(), 16, options);
  EXPECT_EQ(r.long_keys_max(), 2u);
  const std::string vhost(kVhostBytesMax, 'v');
  auto queue = [](char c) { return std::string(kQueueBytesMax, c); };
  ASSERT_TRUE(r.apply(set_owner(vhost, queue('a'), 0, OwnerSource::kPinned)));
  ASSERT_TRUE(r.apply(set_owner(vhost, queue('b'), 1, OwnerSource::kPinned)));
  EXPECT_EQ(r.long_keys(), 2u);
  EXPECT_FALSE(r.apply(set_owner(vhost, queue('c'), 2, OwnerSource::kPinned)));
  EXPECT_EQ(r.refused(), 1u);
  // Short keys still have room.
  EXPECT_TRUE(r.apply(set_owner("/", "short", 2, OwnerSource::kPinned)));
  EXPECT_EQ(r.lookup(vhost, queue('a')).owner, 0);
  EXPECT_EQ(r.lookup(vhost, queue('b')).owner, 1);
  EXPECT_FALSE(r.lookup(vhost, queue('c')).known);
  // A long key differing only in its last byte is another key.
  std::string almost = queue('a');
  almost.back() = 'z';
  EXPECT_FALSE(r.lookup(vhost, almost).known);
  // Exactly the inline size stays inline; one byte more takes a block.
  ASSERT_TRUE(r.apply(clear_owner(vhost, queue('b'))));
  EXPECT_EQ(r.long_keys(), 1u);
  ASSERT_TRUE(r.apply(
      set_owner("/", std::string(Replica::kInlineKeyBytes - 1, 'i'), 0, OwnerSource::kPinned)));
  EXPECT_EQ(r.long_keys(), 1u);
  ASSERT_TRUE(
      r.apply(set_owner("/", std::string(Replica::kInlineKeyBytes, 'i'), 0, OwnerSource::kPinned)));
  EXPECT_EQ(r.long_keys(), 2u);
  EXPECT_TRUE(r.lookup("/", std::string(Replica::kInlineKeyBytes, 'i')).known);
}

TEST(Replica, EmptyVhostAndQueueAreKeysLikeAnyOther) {
  Replica r(weighted_nodes(), 16);
  ASSERT_TRUE(r.apply(set_owner("", "", 1, OwnerSource::kPinned)));
  EXPECT_EQ(r.lookup("", "").owner, 1);
  EXPECT_FALSE(r.lookup("/", "").known);
  ASSERT_TRUE(r.apply(clear_owner("", "")));
  EXPECT_FALSE(r.lookup("", "").known);
}

TEST(Replica, HundredThousandRandomKeysAreAllFoundAndAbsentOnesAreNot) {
  constexpr size_t kKeys = 100'000;
  Replica r(weighted_nodes(), kKeys);
  std::mt19937_64 rng(12345);
  std::vector<std::string> present, absent;
  present.reserve(kKeys);
  absent.reserve(kKeys);
  // Distinct by construction: the counter is part of each name; absent keys use another prefix.
  for (size_t i = 0; i < kKeys; ++i) {
    present.push_back("q." + std::to_string(rng() % 1'000'000) + "." + std::to_string(i));
    absent.push_back("q." + std::to_string(rng() % 1'000'000) + ".x" + std::to_string(i));
  }
  for (size_t i = 0; i < kKeys; ++i) {
    ASSERT_TRUE(r.apply(set_owner("/", present[i], NodeIndex(i % 3), OwnerSource::kLearned)));
  }
  EXPECT_EQ(r.size(), kKeys);
  EXPECT_EQ(r.refused(), 0u);
  size_t found = 0, wrong = 0, false_hits = 0;
  for (size_t i = 0; i < kKeys; ++i) {
    const Route route = r.lookup("/", present[i]);
    found += route.known;
    wrong += route.owner != NodeIndex(i % 3);
    false_hits += r.lookup("/", absent[i]).known;
  }
  EXPECT_EQ(found, kKeys);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(false_hits, 0u);
  // Full means full: one more is refused.
  EXPECT_FALSE(r.apply(set_owner("/", absent[0], 0, OwnerSource::kLearned)));
}

bool same_route(const Route& a, const Route& b) {
  return a.owner == b.owner && a.source == b.source && a.backlog == b.backlog && a.known == b.known;
}

TEST(Replica, BurstLookupAnswersAsSingleLookupsDo) {
  Replica r(weighted_nodes(), 512);
  std::vector<std::string> vhosts, queues;
  for (int i = 0; i < 600; ++i) {
    vhosts.push_back(i % 5 == 0 ? "/tenant-" + std::to_string(i % 7) : "/");
    // Inline, long (a block of its own) and too long for a message, present and absent.
    queues.push_back(i % 50 == 0   ? std::string(kQueueBytesMax + 1, 'x')
                     : i % 11 == 0 ? std::string(100, 'L') + std::to_string(i)
                                   : "q." + std::to_string(i));
    if (i % 3 != 0 && queues.back().size() <= kQueueBytesMax) {
      ASSERT_TRUE(
          r.apply(set_owner(vhosts.back(), queues.back(), NodeIndex(i % 3), OwnerSource(i % 3))));
      if (i % 4 == 0) {
        ASSERT_TRUE(r.apply(set_backlog(vhosts.back(), queues.back(), true)));
      }
    }
  }
  size_t known = 0;
  for (size_t burst : {size_t(1), size_t(7), size_t(32), Replica::kBurstMax}) {
    for (size_t at = 0; at < queues.size(); at += burst) {
      const size_t n = std::min(burst, queues.size() - at);
      std::vector<Replica::KeyRef> keys;
      for (size_t i = at; i < at + n; ++i)
        keys.push_back({vhosts[i], queues[i]});
      std::vector<Route> routes(n);
      r.lookup_burst(keys, routes);
      for (size_t i = 0; i < n; ++i) {
        const Route single = r.lookup(vhosts[at + i], queues[at + i]);
        ASSERT_TRUE(same_route(routes[i], single)) << queues[at + i];
        known += single.known;
      }
    }
  }
  EXPECT_EQ(known, 4 * r.size());
}

// Random sets and clears against a std::unordered_map model on a small table, so that probe runs
// wrap around the end of the table and deletions shift entries many times over.
TEST(Replica, ManyInsertClearCyclesStayCorrect) {
  constexpr size_t kQueuesMax = 64;
  constexpr size_t kUniverse = 200;
  Replica r(weighted_nodes(), kQueuesMax);
  EXPECT_EQ(r.slot_count(), 128u);
  std::unordered_map<std::string, Route> model;
  std::mt19937_64 rng(7);
  std::vector<std::string> names;
  for (size_t i = 0; i < kUniverse; ++i) {
    // Some keys long enough to take a block, so blocks are freed and reused too.
    names.push_back(i % 17 == 0 ? std::string(100, 'L') + std::to_string(i) : std::to_string(i));
  }
  size_t refusals = 0;
  for (int step = 0; step < 200'000; ++step) {
    const std::string& q = names[rng() % kUniverse];
    const int op = int(rng() % 4);
    auto it = model.find(q);
    if (op <= 1) {
      const NodeIndex node = NodeIndex(rng() % 3);
      const bool ok = r.apply(set_owner("/", q, node, OwnerSource::kPinned));
      if (it == model.end() && model.size() == kQueuesMax) {
        ASSERT_FALSE(ok);
        ++refusals;
      } else {
        ASSERT_TRUE(ok);
        Route& m = model[q];
        m.owner = node;
        m.source = OwnerSource::kPinned;
        m.known = true;
      }
    } else if (op == 2) {
      ASSERT_TRUE(r.apply(clear_owner("/", q)));
      if (it != model.end()) {
        it->second.owner = kNoNode;
        it->second.known = false;
        if (!it->second.backlog) model.erase(it);
      }
    } else {
      const bool backlog = rng() % 2 == 0;
      const bool ok = r.apply(set_backlog("/", q, backlog));
      if (backlog && it == model.end() && model.size() == kQueuesMax) {
        ASSERT_FALSE(ok);
        ++refusals;
      } else {
        ASSERT_TRUE(ok);
        if (backlog) {
          model[q].backlog = true;
        } else if (it != model.end()) {
          it->second.backlog = false;
          if (!it->second.known) model.erase(it);
        }
      }
    }
    ASSERT_EQ(r.size(), model.size()) << "step " << step;
    if (step % 1000 == 0 || step > 199'000) {
      for (size_t at = 0; at < kUniverse; at += Replica::kBurstMax) {
        const size_t n = std::min(Replica::kBurstMax, kUniverse - at);
        std::vector<Replica::KeyRef> keys;
        for (size_t i = at; i < at + n; ++i)
          keys.push_back({"/", names[i]});
        std::vector<Route> burst(n);
        r.lookup_burst(keys, burst);
        for (size_t i = at; i < at + n; ++i) {
          const std::string& name = names[i];
          const Route got = r.lookup("/", name);
          auto m = model.find(name);
          const Route want = m == model.end() ? Route{} : m->second;
          ASSERT_EQ(got.known, want.known) << name << " at step " << step;
          ASSERT_EQ(got.owner, want.owner) << name << " at step " << step;
          ASSERT_EQ(got.backlog, want.backlog) << name << " at step " << step;
          ASSERT_TRUE(same_route(burst[i - at], got)) << name << " at step " << step;
        }
      }
    }
  }
  EXPECT_EQ(r.refused(), refusals);
  EXPECT_GT(refusals, 0u);  // the table was driven to full
}

// ---- rings ----------------------------------------------------------------------------------

TEST(Ring, PushUntilFullIsRefusedAndCounted) {
  SpscRing<uint64_t, 8> ring;
  for (uint64_t i = 0; i < 8; ++i)
    ASSERT_TRUE(ring.try_push(i));
  EXPECT_EQ(ring.full_count(), 0u);
  EXPECT_FALSE(ring.try_push(8));
  EXPECT_FALSE(ring.try_push(9));
  EXPECT_EQ(ring.full_count(), 2u);
  EXPECT_EQ(ring.read_available(), 8u);
  // The refused elements were not queued.
  std::vector<uint64_t> got;
  ring.pop_some([&](uint64_t v) { got.push_back(v); }, 100);
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(ring.try_push(10));
}

TEST(Ring, DepthSetAtConstructionHoldsThatManyAndFrontPeeks) {
  SpscRing<uint64_t> ring(5);
  for (uint64_t i = 0; i < 5; ++i)
    ASSERT_TRUE(ring.try_push(i));
  EXPECT_FALSE(ring.try_push(5));
  EXPECT_EQ(ring.full_count(), 1u);
  ASSERT_EQ(ring.read_available(), 5u);
  EXPECT_EQ(ring.front(), 0u);
  ring.pop();
  EXPECT_EQ(ring.front(), 1u);
  EXPECT_EQ(ring.read_available(), 4u);
  EXPECT_TRUE(ring.try_push(6));
}

TEST(Ring, PopSomeTakesAtMostMax) {
  SpscRing<uint64_t, 16> ring;
  for (uint64_t i = 0; i < 10; ++i)
    ASSERT_TRUE(ring.try_push(i));
  std::vector<uint64_t> got;
  EXPECT_EQ(ring.pop_some([&](uint64_t v) { got.push_back(v); }, 4), 4u);
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(ring.pop_some([&](uint64_t v) { got.push_back(v); }, 0), 0u);
  EXPECT_EQ(ring.pop_some([&](uint64_t v) { got.push_back(v); }, 100), 6u);
  EXPECT_EQ(got.size(), 10u);
  EXPECT_EQ(got.back(), 9u);
  EXPECT_EQ(ring.pop_some([&](uint64_t v) { got.push_back(v); }, 100), 0u);
}

TEST(Ring, CarriesControlMessagesIntoAReplica) {
  auto ring = std::make_unique<SpscRing<ControlToWorker, 64>>();
  Replica r(weighted_nodes(), 16);
  ASSERT_TRUE(ring->try_push(set_owner("/", "orders", 2, OwnerSource::kPinned)));
  ASSERT_TRUE(ring->try_push(NodeState{2, AdminState::kDrain, HealthState::kUp}));
  ASSERT_TRUE(ring->try_push(set_backlog("/", "orders", true)));
  ASSERT_TRUE(ring->try_push(Barrier{1}));
  const size_t n = ring->pop_some([&](const ControlToWorker& m) { EXPECT_TRUE(r.apply(m)); }, 64);
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(r.barrier_seq(), 1u);
  const Route route = r.lookup("/", "orders");
  EXPECT_EQ(route.owner, 2);
  EXPECT_EQ(route.source, OwnerSource::kPinned);
  EXPECT_TRUE(route.backlog);
  EXPECT_EQ(r.node_admin(2), AdminState::kDrain);
}

TEST(Ring, TwoThreadsPassAMillionInOrder) {
  constexpr uint64_t kCount = 1'000'000;
  auto ring = std::make_unique<SpscRing<uint64_t, 1024>>();
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    for (uint64_t i = 0; i < kCount && !stop.load(std::memory_order_relaxed);) {
      if (ring->try_push(i)) {
        ++i;
      } else {
        std::this_thread::yield();
      }
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  uint64_t next = 0, out_of_order = 0;
  while (next < kCount) {
    const size_t n = ring->pop_some(
        [&](uint64_t v) {
          out_of_order += v != next;
          ++next;
        },
        256);
    if (n == 0) {
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::yield();
    }
  }
  stop.store(true, std::memory_order_relaxed);
  producer.join();
  EXPECT_EQ(next, kCount) << "timed out";
  EXPECT_EQ(out_of_order, 0u);
}

}  // namespace
}  // namespace sluice::control
