// The DPDK engine's per-lcore flow state: the 4-tuple map (against std::unordered_map) and the
// per-flow timer wheel (against a std::multimap of deadlines), on synthetic times only.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "dataplane/dpdk/flow/timer_wheel.h"
#include "dataplane/dpdk/flow/tuple_map.h"

namespace {

using sluice::dpdk::flow::TimerWheel;
using sluice::dpdk::flow::Tuple;
using sluice::dpdk::flow::tuple_hash;
using sluice::dpdk::flow::TupleMap;

constexpr uint32_t kVip = 0x0a000001;          // 10.0.0.1
constexpr uint64_t kKey = 0x5eed5eed12345678;  // the hash secret of the maps made here
constexpr uint16_t kStompPort = 61613;

Tuple client(uint32_t ip, uint16_t port) {
  return Tuple{ip, kVip, port, kStompPort};
}

// The slot a tuple's probe starts at, for a map built with `capacity` (the table is the
// smallest power of two >= 2 * capacity).
uint32_t home_slot(const Tuple& t, uint32_t capacity) {
  return tuple_hash(t, kKey) & (std::bit_ceil(2 * capacity) - 1);
}

struct TupleHasher {
  size_t operator()(const Tuple& t) const { return tuple_hash(t, kKey); }
};

// ---- TupleMap ----

TEST(TupleMap, InsertFindErase) {
  TupleMap m(16, kKey);
  EXPECT_EQ(m.capacity(), 16u);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.find(client(0xc0a80001, 40000)), TupleMap::kNone);

  EXPECT_TRUE(m.insert(client(0xc0a80001, 40000), 7));
  EXPECT_TRUE(m.insert(client(0xc0a80001, 40001), 8));
  EXPECT_TRUE(m.insert(client(0xc0a80002, 40000), 0));
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.find(client(0xc0a80001, 40000)), 7u);
  EXPECT_EQ(m.find(client(0xc0a80001, 40001)), 8u);
  EXPECT_EQ(m.find(client(0xc0a80002, 40000)), 0u);
  // Same addresses, ports swapped: another flow.
  EXPECT_EQ(m.find(Tuple{0xc0a80001, kVip, kStompPort, 40000}), TupleMap::kNone);

  EXPECT_TRUE(m.erase(client(0xc0a80001, 40000)));
  EXPECT_EQ(m.find(client(0xc0a80001, 40000)), TupleMap::kNone);
  EXPECT_EQ(m.find(client(0xc0a80001, 40001)), 8u);
  EXPECT_EQ(m.size(), 2u);
  EXPECT_FALSE(m.erase(client(0xc0a80001, 40000)));
  EXPECT_EQ(m.size(), 2u);

  m.prefetch(client(0xc0a80001, 40001));  // a hint only: nothing changes
  EXPECT_EQ(m.find(client(0xc0a80001, 40001)), 8u);
}

TEST(TupleMap, InsertRefusesDuplicateAndKeepsValue) {
  TupleMap m(4, kKey);
  EXPECT_TRUE(m.insert(client(1, 1), 10));
  EXPECT_FALSE(m.insert(client(1, 1), 20));
  EXPECT_EQ(m.find(client(1, 1)), 10u);
  EXPECT_EQ(m.size(), 1u);
}

TEST(TupleMap, FullMapRefusesUntilAnEntryIsErased) {
  TupleMap m(8, kKey);
  for (uint16_t p = 0; p < 8; ++p)
    EXPECT_TRUE(m.insert(client(5, p), p));
  EXPECT_EQ(m.size(), 8u);
  EXPECT_FALSE(m.insert(client(5, 100), 100));
  EXPECT_EQ(m.find(client(5, 100)), TupleMap::kNone);
  // A duplicate is still reported as refused, not as inserted.
  EXPECT_FALSE(m.insert(client(5, 3), 99));
  EXPECT_TRUE(m.erase(client(5, 3)));
  EXPECT_TRUE(m.insert(client(5, 100), 100));
  EXPECT_EQ(m.size(), 8u);
  for (uint16_t p = 0; p < 8; ++p) {
    if (p != 3) {
      EXPECT_EQ(m.find(client(5, p)), p);
    }
  }
  EXPECT_EQ(m.find(client(5, 100)), 100u);
}

TEST(TupleMap, CapacityOneHoldsOneTuple) {
  TupleMap m(1, kKey);
  EXPECT_TRUE(m.insert(client(1, 2), 3));
  EXPECT_FALSE(m.insert(client(1, 4), 5));
  EXPECT_EQ(m.find(client(1, 2)), 3u);
  EXPECT_EQ(m.find(client(1, 4)), TupleMap::kNone);
  EXPECT_TRUE(m.erase(client(1, 2)));
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.find(client(1, 2)), TupleMap::kNone);
  EXPECT_TRUE(m.insert(client(1, 4), 5));
  EXPECT_EQ(m.find(client(1, 4)), 5u);
}

// A run that wraps past the table's last slot, holding keys from three homes: erasing any of
// them, in every order, leaves all the others findable.
TEST(TupleMap, EraseShiftsBackAcrossTableEndInEveryOrder) {
  constexpr uint32_t kCapacity = 8;  // 16 slots
  const uint32_t last = std::bit_ceil(2 * kCapacity) - 1;
  std::vector<Tuple> keys;
  size_t at_last = 0, at_first = 0, before_last = 0;
  for (uint32_t port = 0; keys.size() < 6 && port < 1000000; ++port) {
    const Tuple t = client(0xc0a80000 + port / 60000, uint16_t(port % 60000));
    const uint32_t home = home_slot(t, kCapacity);
    if (home == last && at_last < 3) {
      ++at_last;
    } else if (home == 0 && at_first < 2) {
      ++at_first;
    } else if (home == last - 1 && before_last < 1) {
      ++before_last;
    } else {
      continue;
    }
    keys.push_back(t);
  }
  ASSERT_EQ(keys.size(), 6u);

  std::array<int, 6> order{0, 1, 2, 3, 4, 5};
  int orders = 0;
  do {
    TupleMap m(kCapacity, kKey);
    for (size_t i = 0; i < keys.size(); ++i)
      ASSERT_TRUE(m.insert(keys[i], uint32_t(i)));
    std::vector<bool> gone(keys.size());
    for (int victim : order) {
      ASSERT_TRUE(m.erase(keys[victim]));
      gone[victim] = true;
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_EQ(m.find(keys[i]), gone[i] ? TupleMap::kNone : uint32_t(i));
      }
    }
    EXPECT_EQ(m.size(), 0u);
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 720);
}

// 100k random inserts, erases and finds in a small map (64 entries, 128 slots) over 300 tuples,
// so runs collide, wrap and are shifted back constantly; every answer matches the model.
TEST(TupleMap, RandomOpsMatchUnorderedMap) {
  constexpr uint32_t kCapacity = 64;
  std::mt19937_64 rng(20240611);
  std::vector<Tuple> universe;
  for (uint32_t i = 0; i < 300; ++i) {
    // Few addresses and neighbouring ports, as real clients behind a NAT look.
    universe.push_back(client(0xc0a80000 + uint32_t(rng() % 4), uint16_t(32768 + rng() % 200)));
  }
  std::sort(universe.begin(), universe.end(), [](const Tuple& a, const Tuple& b) {
    return std::tie(a.src_ip, a.src_port) < std::tie(b.src_ip, b.src_port);
  });
  universe.erase(std::unique(universe.begin(), universe.end()), universe.end());

  TupleMap m(kCapacity, kKey);
  std::unordered_map<Tuple, uint32_t, TupleHasher> model;
  int refused_full = 0;
  for (int op = 0; op < 100000; ++op) {
    const Tuple& t = universe[rng() % universe.size()];
    const int kind = int(rng() % 10);
    if (kind < 5) {
      const uint32_t value = uint32_t(rng() % 1000000);
      const bool expected = model.size() < kCapacity && !model.contains(t);
      if (model.size() == kCapacity && !model.contains(t)) ++refused_full;
      ASSERT_EQ(m.insert(t, value), expected) << "op " << op;
      if (expected) model[t] = value;
    } else if (kind < 9) {
      ASSERT_EQ(m.erase(t), model.erase(t) == 1) << "op " << op;
    } else {
      const auto it = model.find(t);
      ASSERT_EQ(m.find(t), it == model.end() ? TupleMap::kNone : it->second) << "op " << op;
    }
    ASSERT_EQ(m.size(), model.size());
    if (op % 1000 == 0) {
      for (const Tuple& u : universe) {
        const auto it = model.find(u);
        ASSERT_EQ(m.find(u), it == model.end() ? TupleMap::kNone : it->second) << "op " << op;
      }
    }
  }
  EXPECT_GT(refused_full, 0);  // the run did reach a full map
}

// Sequential ports from one client spread over the table like random keys would (for 1000
// keys in 1024 slots about 632 distinct homes are expected): no clustering from the packing.
TEST(TupleMap, HashSpreadsSequentialPorts) {
  std::set<uint32_t> homes;
  for (uint16_t p = 0; p < 1000; ++p)
    homes.insert(tuple_hash(client(0xc0a80001, p), kKey) & 1023);
  EXPECT_GT(homes.size(), 590u);
  std::set<uint32_t> homes_by_ip;
  for (uint32_t ip = 0; ip < 1000; ++ip)
    homes_by_ip.insert(tuple_hash(client(ip, 5), kKey) & 1023);
  EXPECT_GT(homes_by_ip.size(), 590u);
}

// Hash flooding: source ports chosen (offline, knowing the function) to share one home slot
// under one key are spread by another key like any ports, so a client that does not know the
// running key cannot build a long probe run. And the map uses its key: those ports, inserted
// into a map keyed otherwise, find their values.
TEST(TupleMap, KeyDefeatsPrecomputedCollisions) {
  constexpr uint64_t kAttackerGuess = 0;
  constexpr uint32_t kMask = 1023;
  std::vector<Tuple> colliding;
  for (uint32_t p = 0; p < 65536 && colliding.size() < 48; ++p) {
    const Tuple t = client(0xc0a80001, uint16_t(p));
    if ((tuple_hash(t, kAttackerGuess) & kMask) == 7) colliding.push_back(t);
  }
  ASSERT_EQ(colliding.size(), 48u);  // 65536 ports give about 64
  std::set<uint32_t> homes;
  for (const Tuple& t : colliding)
    homes.insert(tuple_hash(t, kKey) & kMask);
  // 48 random keys in 1024 slots: about 47 distinct homes expected.
  EXPECT_GT(homes.size(), 40u);

  TupleMap m(512, kKey);  // 1024 slots
  for (uint32_t i = 0; i < colliding.size(); ++i)
    ASSERT_TRUE(m.insert(colliding[i], i));
  for (uint32_t i = 0; i < colliding.size(); ++i) {
    EXPECT_EQ(m.find(colliding[i]), i);
    EXPECT_EQ(m.find(colliding[i], m.hash(colliding[i])), i);
  }
  EXPECT_NE(m.hash(colliding[0]), tuple_hash(colliding[0], kAttackerGuess));
}

// ---- TimerWheel ----

constexpr uint64_t kTick = 1000;

// Advances 1 ns at a time and returns the first time the single timer 0 fired, checking that
// it fired once only.
uint64_t first_fire_time(TimerWheel& w, uint64_t from_ns, uint64_t to_ns) {
  std::optional<uint64_t> fired_at;
  for (uint64_t now = from_ns; now <= to_ns; ++now) {
    const size_t n = w.advance(now, [&](uint32_t id) {
      EXPECT_EQ(id, 0u);
      EXPECT_FALSE(fired_at.has_value()) << "fired twice";
      fired_at = now;
    });
    EXPECT_EQ(n, fired_at == now ? 1u : 0u);
  }
  EXPECT_TRUE(fired_at.has_value());
  return fired_at.value_or(UINT64_MAX);
}

TEST(TimerWheel, FiresAtOrAfterDeadlineAtMostOneTickLate) {
  constexpr uint32_t kSlots = 16;
  for (uint64_t start : {uint64_t(0), uint64_t(500), uint64_t(123456789)}) {
    for (uint64_t offset : {1, 2, 499, 999, 1000, 1001, 1999, 12345, 15999, 16000, 16001, 40017}) {
      const uint64_t deadline = start + offset;
      TimerWheel w(1, kTick, kSlots, start);
      w.arm(0, deadline);
      EXPECT_TRUE(w.armed(0));
      EXPECT_EQ(w.deadline(0), deadline);
      const uint64_t at = first_fire_time(w, start, deadline + 3 * kTick);
      EXPECT_GE(at, deadline) << "start " << start << " offset " << offset;
      EXPECT_LE(at, deadline + kTick) << "start " << start << " offset " << offset;
      EXPECT_FALSE(w.armed(0));
      EXPECT_EQ(w.armed_count(), 0u);
    }
  }
}

TEST(TimerWheel, CancelStopsTimerAndIsNoOpWhenNotArmed) {
  TimerWheel w(4, kTick, 8, 0);
  w.cancel(2);  // not armed: nothing happens
  EXPECT_EQ(w.armed_count(), 0u);
  w.arm(1, 5000);
  w.arm(2, 5000);
  EXPECT_EQ(w.armed_count(), 2u);
  w.cancel(1);
  w.cancel(1);
  EXPECT_FALSE(w.armed(1));
  EXPECT_EQ(w.armed_count(), 1u);
  std::vector<uint32_t> fired;
  w.advance(100000, [&](uint32_t id) { fired.push_back(id); });
  EXPECT_EQ(fired, std::vector<uint32_t>{2});
  EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, RearmMovesTimerLaterOrEarlier) {
  TimerWheel w(2, kTick, 8, 0);
  w.arm(0, 5000);
  w.arm(0, 20000);  // later, into another rotation
  EXPECT_EQ(w.armed_count(), 1u);
  EXPECT_EQ(w.deadline(0), 20000u);
  const uint64_t at = first_fire_time(w, 0, 25000);
  EXPECT_GE(at, 20000u);
  EXPECT_LE(at, 21000u);

  w.arm(1, 50000);
  w.arm(1, 30000);  // earlier
  std::vector<std::pair<uint32_t, uint64_t>> fired;
  for (uint64_t now = 25000; now <= 60000; now += 10) {
    w.advance(now, [&](uint32_t id) { fired.emplace_back(id, now); });
  }
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].first, 1u);
  EXPECT_GE(fired[0].second, 30000u);
  EXPECT_LE(fired[0].second, 31000u);
}

TEST(TimerWheel, RearmInsideCallbackFiresOnlyInALaterCall) {
  TimerWheel w(1, kTick, 8, 0);
  w.arm(0, 1000);
  // Re-armed to a later deadline that has also passed: not again in this call, but next time.
  size_t calls = 0;
  EXPECT_EQ(w.advance(10000,
                      [&](uint32_t id) {
                        ++calls;
                        w.arm(id, w.armed(id) ? 0 : 2000);
                      }),
            1u);
  EXPECT_EQ(calls, 1u);
  EXPECT_TRUE(w.armed(0));
  EXPECT_EQ(w.deadline(0), 2000u);
  EXPECT_EQ(w.advance(10000, [&](uint32_t) { ++calls; }), 1u);
  EXPECT_EQ(calls, 2u);
  EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, PeriodicTimerRearmedFromCallbackKeepsItsPeriod) {
  constexpr uint64_t kPeriod = 2500;
  TimerWheel w(1, kTick, 4, 0);
  uint64_t next_deadline = kPeriod;
  w.arm(0, next_deadline);
  std::vector<uint64_t> fired_at;
  for (uint64_t now = 0; now <= 100 * kPeriod + kTick; now += 100) {
    w.advance(now, [&](uint32_t id) {
      fired_at.push_back(now);
      next_deadline += kPeriod;  // from the deadline, not from now: no drift
      w.arm(id, next_deadline);
    });
  }
  ASSERT_EQ(fired_at.size(), 100u);
  for (size_t i = 0; i < fired_at.size(); ++i) {
    const uint64_t deadline = (i + 1) * kPeriod;
    EXPECT_GE(fired_at[i], deadline);
    EXPECT_LE(fired_at[i], deadline + kTick);
  }
}

TEST(TimerWheel, CallbackMayCancelOrArmOtherTimers) {
  TimerWheel w(4, kTick, 8, 0);
  for (uint32_t id = 0; id < 3; ++id)
    w.arm(id, 3000);  // one bucket
  std::vector<uint32_t> fired;
  const size_t n = w.advance(5000, [&](uint32_t id) {
    fired.push_back(id);
    if (fired.size() == 1) {
      for (uint32_t other = 0; other < 3; ++other) {
        if (other != id) w.cancel(other);
      }
      w.arm(3, 4000);  // due already, but only from the next call on
    }
  });
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(fired.size(), 1u);
  EXPECT_EQ(w.armed_count(), 1u);
  EXPECT_TRUE(w.armed(3));
  fired.clear();
  EXPECT_EQ(w.advance(5000, [&](uint32_t id) { fired.push_back(id); }), 1u);
  EXPECT_EQ(fired, std::vector<uint32_t>{3});
}

TEST(TimerWheel, FarFutureDeadlineWaitsManyRotations) {
  constexpr uint64_t kTickNs = 100;
  constexpr uint32_t kSlots = 8;  // a rotation is 800 ns
  constexpr uint64_t kDeadline = 800 * 1000 + 37;
  TimerWheel w(2, kTickNs, kSlots, 0);
  w.arm(0, kDeadline);
  w.arm(1, 37);  // the same bucket, a thousand rotations sooner
  std::vector<std::pair<uint32_t, uint64_t>> fired;
  for (uint64_t now = 0; now <= kDeadline + 1000; now += 50) {
    w.advance(now, [&](uint32_t id) { fired.emplace_back(id, now); });
  }
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].first, 1u);
  EXPECT_EQ(fired[1].first, 0u);
  EXPECT_GE(fired[1].second, kDeadline);
  EXPECT_LE(fired[1].second, kDeadline + kTickNs);
}

TEST(TimerWheel, PastDeadlineFiresOnNextAdvance) {
  TimerWheel w(4, kTick, 8, 1000000);
  w.arm(0, 0);
  w.arm(1, 1000000);  // exactly now
  std::vector<uint32_t> fired;
  EXPECT_EQ(w.advance(1000000, [&](uint32_t id) { fired.push_back(id); }), 2u);
  std::sort(fired.begin(), fired.end());
  EXPECT_EQ(fired, (std::vector<uint32_t>{0, 1}));

  // Mid-tick, behind the last advance but in a tick whose bucket the wheel has not passed.
  w.advance(1500500, [](uint32_t) {});
  w.arm(2, 1500200);
  w.arm(3, 999);  // many rotations back
  fired.clear();
  EXPECT_EQ(w.advance(1500500, [&](uint32_t id) { fired.push_back(id); }), 2u);
  std::sort(fired.begin(), fired.end());
  EXPECT_EQ(fired, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, LargeTimeJumpFiresEveryDueTimerInOneCall) {
  constexpr uint32_t kIds = 4096;
  TimerWheel w(kIds, kTick, 256, 0);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> deadline(kIds);
  for (uint32_t id = 0; id < kIds; ++id) {
    deadline[id] = id % 4 == 0 ? (uint64_t(1) << 62) + rng() % 1000000 : rng() % 1000000000;
    w.arm(id, deadline[id]);
  }
  // 2^52 ns is ~10^12 ticks: a wheel that stepped tick by tick would never return.
  const uint64_t now = uint64_t(1) << 52;
  std::vector<bool> fired(kIds);
  const size_t n = w.advance(now, [&](uint32_t id) {
    EXPECT_FALSE(fired[id]);
    EXPECT_LE(deadline[id], now);
    fired[id] = true;
  });
  EXPECT_EQ(n, kIds - kIds / 4);
  for (uint32_t id = 0; id < kIds; ++id)
    EXPECT_EQ(fired[id], id % 4 != 0) << id;
  EXPECT_EQ(w.armed_count(), kIds / 4);

  // The far ones still fire at their time after another jump.
  std::fill(fired.begin(), fired.end(), false);
  EXPECT_EQ(w.advance(uint64_t(1) << 63, [&](uint32_t id) { fired[id] = true; }), kIds / 4);
  EXPECT_EQ(w.armed_count(), 0u);
}

TEST(TimerWheel, MaxExpiredBoundLeavesTheRestDue) {
  constexpr uint32_t kIds = 100;
  TimerWheel w(kIds + 10, kTick, 16, 0);
  // Due timers across many buckets and rotations, and ten that are not due yet.
  for (uint32_t id = 0; id < kIds; ++id)
    w.arm(id, 1 + uint64_t(id) * 997);
  for (uint32_t id = kIds; id < kIds + 10; ++id)
    w.arm(id, 10000000 + id);
  const uint64_t now = 200000;
  std::vector<int> fired(kIds + 10);
  size_t total = 0;
  for (size_t call = 0; call < 4; ++call) {
    const size_t n = w.advance(
        now, [&](uint32_t id) { ++fired[id]; }, 30);
    EXPECT_EQ(n, call < 3 ? 30u : 10u) << "call " << call;
    total += n;
    EXPECT_EQ(w.armed_count(), kIds + 10 - total);
  }
  for (uint32_t id = 0; id < kIds; ++id)
    EXPECT_EQ(fired[id], 1) << id;
  for (uint32_t id = kIds; id < kIds + 10; ++id)
    EXPECT_EQ(fired[id], 0) << id;
  EXPECT_EQ(w.advance(now, [](uint32_t) {}), 0u);

  // A bound of zero fires nothing and loses nothing.
  w.arm(0, 5);
  EXPECT_EQ(w.advance(
                now + 1, [](uint32_t) {}, 0),
            0u);
  EXPECT_TRUE(w.armed(0));
  EXPECT_EQ(w.advance(now + 2, [](uint32_t) {}), 1u);
}

// The wheel against a model that knows each timer's deadline, over 100k random arms, cancels
// and advances (small steps, jumps past whole rotations, bounded calls, callbacks that re-arm,
// arm and cancel). The model says which timers may fire (deadline passed) and which must
// (deadline before the current tick, or already passed when armed).
TEST(TimerWheel, RandomOpsMatchReference) {
  constexpr uint32_t kIds = 64;
  constexpr uint64_t kTickNs = 100;
  constexpr uint32_t kSlots = 16;  // a rotation is 1600 ns
  std::mt19937_64 rng(424242);
  uint64_t now = 12345;
  TimerWheel w(kIds, kTickNs, kSlots, now);

  using Model = std::multimap<uint64_t, uint32_t>;
  Model model;
  std::vector<std::optional<Model::iterator>> pos(kIds);
  std::vector<bool> due_on_arm(kIds);  // deadline <= the last advance's time when armed
  std::vector<bool> armed_in_call(kIds);

  auto model_cancel = [&](uint32_t id) {
    if (pos[id]) model.erase(*pos[id]);
    pos[id].reset();
    due_on_arm[id] = false;
  };
  auto model_arm = [&](uint32_t id, uint64_t deadline, uint64_t last_advance) {
    model_cancel(id);
    pos[id] = model.emplace(deadline, id);
    due_on_arm[id] = deadline <= last_advance;
  };
  auto pick_deadline = [&](uint64_t base) -> uint64_t {
    switch (rng() % 5) {
      case 0:
        return base - std::min<uint64_t>(base, rng() % 5000);  // past
      case 1:
        return base;
      case 2:
        return base + rng() % 3000;  // within two rotations
      case 3:
        return base + rng() % 200000;  // many rotations
      default:
        return base + rng() % 300;
    }
  };

  size_t fired_total = 0, bounded_calls_cut = 0;
  for (int op = 0; op < 100000; ++op) {
    const int kind = int(rng() % 100);
    if (kind < 40) {
      const uint32_t id = uint32_t(rng() % kIds);
      const uint64_t d = pick_deadline(now);
      w.arm(id, d);
      model_arm(id, d, now);
    } else if (kind < 55) {
      const uint32_t id = uint32_t(rng() % kIds);
      w.cancel(id);
      model_cancel(id);
    } else if (kind < 95) {
      const int jump = int(rng() % 100);
      const uint64_t step = jump < 90 ? rng() % 250 : jump < 99 ? rng() % 50000 : rng() % 10000000;
      const uint64_t next = now + step;
      const size_t max_expired = rng() % 2 ? SIZE_MAX : size_t(rng() % 6);
      std::fill(armed_in_call.begin(), armed_in_call.end(), false);
      std::vector<bool> fired_in_call(kIds);
      size_t fired = 0;
      const size_t n = w.advance(
          next,
          [&](uint32_t id) {
            ASSERT_LT(id, kIds);
            ASSERT_FALSE(fired_in_call[id]) << "op " << op << ": fired twice in one call";
            ASSERT_FALSE(armed_in_call[id]) << "op " << op << ": armed in this call";
            ASSERT_TRUE(pos[id].has_value()) << "op " << op << ": not armed";
            ASSERT_LE((*pos[id])->first, next) << "op " << op << ": early";
            EXPECT_FALSE(w.armed(id));
            fired_in_call[id] = true;
            ++fired;
            model_cancel(id);
            const int action = int(rng() % 4);
            if (action == 0) {
              const uint64_t d = pick_deadline(next);
              w.arm(id, d);
              model_arm(id, d, next);
              armed_in_call[id] = true;
            } else if (action == 1) {
              const uint32_t other = uint32_t(rng() % kIds);
              const uint64_t d = pick_deadline(next);
              w.arm(other, d);
              model_arm(other, d, next);
              armed_in_call[other] = true;
            } else if (action == 2) {
              const uint32_t other = uint32_t(rng() % kIds);
              w.cancel(other);
              model_cancel(other);
            }
          },
          max_expired);
      if (HasFatalFailure()) return;  // an ASSERT in the callback only left the callback
      ASSERT_EQ(n, fired) << "op " << op;
      ASSERT_LE(n, max_expired) << "op " << op;
      fired_total += n;
      now = next;
      if (n == max_expired) {
        ++bounded_calls_cut;
      } else {
        // Not cut short: nothing that had to fire is left.
        const uint64_t tick_start = now / kTickNs * kTickNs;
        for (const auto& [deadline, id] : model) {
          if (armed_in_call[id]) continue;
          ASSERT_FALSE(deadline < tick_start) << "op " << op << ": id " << id << " late";
          ASSERT_FALSE(due_on_arm[id]) << "op " << op << ": id " << id << " armed due, not fired";
        }
      }
    } else {
      for (uint32_t id = 0; id < kIds; ++id) {
        ASSERT_EQ(w.armed(id), pos[id].has_value()) << "op " << op;
        if (pos[id]) {
          ASSERT_EQ(w.deadline(id), (*pos[id])->first) << "op " << op;
        }
      }
    }
    ASSERT_EQ(w.armed_count(), model.size()) << "op " << op;
  }
  EXPECT_GT(fired_total, 10000u);
  EXPECT_GT(bounded_calls_cut, 100u);
}

}  // namespace
