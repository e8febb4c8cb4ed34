// Control's private state, shared by control.cc (decisions), control_settings.cc (settings and
// reload) and control_metrics.cc (the Prometheus text). Not for other modules.
#pragma once

#include <array>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "control/control.h"

namespace sluice::control {

int64_t unix_ms_now();

// A Prometheus histogram with fixed buckets (seconds).
struct LatencyHistogram {
  static constexpr std::array<double, 10> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                     0.025,  0.05,  0.1,    0.25,  1.0};
  std::array<uint64_t, kBounds.size()> buckets{};  // not cumulative; rendered cumulative
  uint64_t count = 0;
  double sum = 0;
  void observe(double seconds) {
    for (size_t i = 0; i < kBounds.size(); ++i) {
      if (seconds <= kBounds[i]) {
        ++buckets[i];
        break;
      }
    }
    ++count;
    sum += seconds;
  }
};

struct Control::NodeRuntime {
  NodeRuntime(boost::asio::io_context& io, uint32_t rise, uint32_t fall)
      : tracker(rise, fall), timer(io) {}
  HealthTracker tracker;
  AdminState admin = AdminState::kUp;
  boost::asio::steady_timer timer;
  std::chrono::steady_clock::time_point probe_started;
  // Bumped when the probe cycle restarts (address changed on reload): late results are ignored.
  uint64_t generation = 0;
  uint64_t probes_ok = 0;
  uint64_t probes_failed = 0;
  uint64_t passive_failures = 0;
  uint64_t health_changes = 0;
  uint32_t last_latency_us = 0;
  std::string last_error;
  int64_t health_since_unix_ms = unix_ms_now();
  LatencyHistogram latency;
};

// One change for the workers, compact until it is turned into a ring message.
struct Control::Delta {
  enum Kind : uint8_t { kSetOwner, kClearOwner, kNodeState, kNodes, kSetBacklog, kClearBacklog };
  Kind kind = kSetOwner;
  NodeIndex node = kNoNode;
  OwnerSource source = OwnerSource::kPlaced;
  QueueKey key;
};

struct Control::WorkerState {
  size_t index = 0;
  ReplicaUser user = ReplicaUser::kWorker;
  // The metrics label: "0", "1", ... for workers, "drainer".
  std::string label() const {
    return user == ReplicaUser::kDrainer ? "drainer" : std::to_string(index);
  }
  std::unique_ptr<WorkerChannel> channel;
  // Deltas the ring had no room for yet; sent in order.
  std::deque<Delta> outbox;
  size_t outbox_high = 0;
  uint64_t sent = 0;
};

struct Control::Counters {
  int64_t started_unix_ms = 0;
  uint64_t placements = 0;
  uint64_t placements_refused = 0;
  uint64_t placements_forgotten = 0;  // placement.unused_ttl_ms
  uint64_t replica_refused = 0;
  uint64_t pins_applied = 0;
  uint64_t admin_changes = 0;
  uint64_t saves = 0;
  uint64_t save_failures = 0;
  uint64_t reloads = 0;
  uint64_t reload_failures = 0;
  uint64_t settings_changes = 0;
  // RabbitMQ feed
  std::chrono::steady_clock::time_point feed_started;
  uint64_t feed_polls = 0;
  uint64_t feed_failures = 0;
  uint32_t feed_latency_us = 0;
  std::string feed_last_error;
  int64_t feed_last_success_unix_ms = 0;
  size_t feed_queues = 0;
  size_t feed_skipped = 0;
  size_t feed_unmapped = 0;
  size_t feed_refused = 0;
};

}  // namespace sluice::control
