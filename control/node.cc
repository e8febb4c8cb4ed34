// Node state names and the stable key hash placement is built on.
#include "control/node.h"

namespace sluice::control {

std::string_view admin_state_name(AdminState s) {
  switch (s) {
    case AdminState::kUp:
      return "up";
    case AdminState::kDrain:
      return "drain";
    case AdminState::kMaintenance:
      return "maintenance";
  }
  return "unknown";
}

std::optional<AdminState> parse_admin_state(std::string_view s) {
  if (s == "up") return AdminState::kUp;
  if (s == "drain") return AdminState::kDrain;
  if (s == "maintenance") return AdminState::kMaintenance;
  return std::nullopt;
}

std::string_view health_state_name(HealthState s) {
  return s == HealthState::kUp ? "up" : "down";
}

uint64_t stable_hash(std::string_view vhost, std::string_view queue) {
  // FNV-1a over vhost, a separator that cannot occur in a vhost length prefix, and the queue,
  // then a splitmix64 finaliser so that nearby keys spread. Fixed forever: changing it would
  // move every placed queue on gateways that have not recorded their placements.
  uint64_t h = 1469598103934665603ull;
  auto mix_in = [&h](std::string_view s) {
    for (unsigned char c : s)
      h = (h ^ c) * 1099511628211ull;
  };
  const uint64_t vlen = vhost.size();
  for (int i = 0; i < 8; ++i)
    h = (h ^ ((vlen >> (8 * i)) & 0xff)) * 1099511628211ull;
  mix_in(vhost);
  mix_in(queue);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace sluice::control
