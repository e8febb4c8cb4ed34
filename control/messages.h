// The messages between the control thread and one worker, both directions (DESIGN section 4: one
// ring per direction per pair, message types in one header). Fixed-size and trivially copyable, so
// a ring copies them without allocating; keys travel inline with their lengths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <variant>

#include "base/names.h"
#include "control/node.h"
#include "control/ownership_table.h"
#include "control/placement.h"

namespace sluice::control {

// RabbitMQ's limits (AMQP 0-9-1 short strings): a longer vhost or queue name is refused by the
// broker anyway, so the gateway refuses it before it reaches a ring.
using ::sluice::kVhostBytesMax;
inline constexpr size_t kQueueBytesMax = 255;

enum class KeyFit : uint8_t { kFits, kVhostTooLong, kQueueTooLong };

inline std::string_view key_fit_name(KeyFit f) {
  switch (f) {
    case KeyFit::kFits:
      return "fits";
    case KeyFit::kVhostTooLong:
      return "vhost longer than 255 bytes";
    case KeyFit::kQueueTooLong:
      return "queue name longer than 255 bytes";
  }
  return "unknown";
}

inline KeyFit key_fit(std::string_view vhost, std::string_view queue) {
  if (vhost.size() > kVhostBytesMax) return KeyFit::kVhostTooLong;
  if (queue.size() > kQueueBytesMax) return KeyFit::kQueueTooLong;
  return KeyFit::kFits;
}

// A (vhost, queue) key carried by value.
struct WireKey {
  uint8_t vhost_len = 0;
  uint8_t queue_len = 0;
  char vhost_bytes[kVhostBytesMax] = {};
  char queue_bytes[kQueueBytesMax] = {};

  // The producer's check: on anything but kFits the key is left unchanged and the message must
  // not be sent (count it and answer the peer with the reason).
  [[nodiscard]] KeyFit assign(std::string_view vhost, std::string_view queue) {
    const KeyFit fit = key_fit(vhost, queue);
    if (fit != KeyFit::kFits) return fit;
    vhost_len = uint8_t(vhost.size());
    queue_len = uint8_t(queue.size());
    if (!vhost.empty()) std::memcpy(vhost_bytes, vhost.data(), vhost.size());
    if (!queue.empty()) std::memcpy(queue_bytes, queue.data(), queue.size());
    return KeyFit::kFits;
  }
  std::string_view vhost() const { return {vhost_bytes, vhost_len}; }
  std::string_view queue() const { return {queue_bytes, queue_len}; }
};

// ---- control -> worker ----------------------------------------------------------------------

// The key's owner as control decided it (control applies the precedence pinned > learned >
// placed; the worker keeps whatever control sent last).
struct SetOwner {
  WireKey key;
  NodeIndex node = kNoNode;
  OwnerSource source = OwnerSource::kPlaced;
};

// The key has no owner any more (unpinned with nothing below, forgotten by a feed).
struct ClearOwner {
  WireKey key;
};

struct NodeState {
  NodeIndex node = kNoNode;
  AdminState admin = AdminState::kUp;
  HealthState health = HealthState::kUp;
};

// The drain barrier: while set, the queue has spilled messages that go before any new ones.
struct SetBacklog {
  WireKey key;
  bool has_backlog = false;
};

// Everything sent before it has been applied once the worker has applied it; the worker answers
// with BarrierReached carrying the same sequence number.
struct Barrier {
  uint64_t seq = 0;
};

// The configured nodes changed (a reload added nodes or changed weights): unknown queues are
// placed with this from now on, and node indexes up to its node_count() are valid. Control keeps
// every Placement it ever sent alive until it stops, so the pointer stays valid in the worker.
struct SetNodes {
  const Placement* placement = nullptr;
};

using ControlToWorker =
    std::variant<SetOwner, ClearOwner, NodeState, SetBacklog, Barrier, SetNodes>;

// ---- worker -> control ----------------------------------------------------------------------

// The worker met a queue nobody owned and placed it by rendezvous; control records it (sticky)
// and tells the other workers.
struct Placed {
  WireKey key;
  NodeIndex node = kNoNode;
};

// A session was routed to a placed queue: the placement is in use (placement.unused_ttl_ms).
// Each worker sends it at most once per Used::kReportIntervalMs for a key.
struct Used {
  static constexpr int64_t kReportIntervalMs = 60'000;
  WireKey key;
};

// A connection to the node failed on the data path; counts toward its health (DESIGN section 5).
struct PassiveFailure {
  NodeIndex node = kNoNode;
};

struct BarrierReached {
  uint64_t seq = 0;
};

using WorkerToControl = std::variant<Placed, PassiveFailure, BarrierReached, Used>;

// Rings copy messages byte for byte; a message that allocated or grew would break the limits.
static_assert(std::is_trivially_copyable_v<ControlToWorker>);
static_assert(std::is_trivially_copyable_v<WorkerToControl>);
static_assert(sizeof(ControlToWorker) <= 600);
static_assert(sizeof(WorkerToControl) <= 600);

}  // namespace sluice::control
