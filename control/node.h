// Nodes as control sees them: the configured set (name, address, weight), the operator's admin
// state and the health state, and the (vhost, queue) key ownership is decided for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::control {

// Index of a node in the configured list. Nodes are few; a small index keeps replicas compact.
using NodeIndex = uint16_t;
inline constexpr NodeIndex kNoNode = UINT16_MAX;
inline constexpr size_t kNodesMax = 256;
inline constexpr uint32_t kWeightMax = 10'000;

struct NodeSpec {
  std::string name;  // operator's name, unique: [A-Za-z0-9._-]{1,64}
  std::string host;  // IPv4 address or host name
  uint16_t port = 61613;
  uint32_t weight = 100;  // 1..kWeightMax; placement share is weight / sum of weights
};

enum class AdminState : uint8_t {
  kUp,           // takes sessions
  kDrain,        // no new sessions: they go to the next node in the queue's rendezvous order
  kMaintenance,  // counts as down
};
std::string_view admin_state_name(AdminState s);
std::optional<AdminState> parse_admin_state(std::string_view s);

enum class HealthState : uint8_t { kUp, kDown };
std::string_view health_state_name(HealthState s);

struct QueueKey {
  std::string vhost;
  std::string queue;
  bool operator==(const QueueKey&) const = default;
};

// Stable 64-bit hash of a key: the same on every gateway and every build (placement depends on
// it), unlike std::hash.
uint64_t stable_hash(std::string_view vhost, std::string_view queue);

struct QueueKeyHash {
  size_t operator()(const QueueKey& k) const { return size_t(stable_hash(k.vhost, k.queue)); }
};

}  // namespace sluice::control
