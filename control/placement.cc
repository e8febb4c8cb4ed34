// Weighted rendezvous hashing: score(node) = weight / -ln(u), u uniform in (0,1) from a hash of
// key and node; the highest score wins. Each node's share of keys is weight / sum of weights, and
// adding a node takes keys only for itself (Schindelhauer and Schomaker, "Weighted distributed
// hash tables", 2005; the logarithm method).
#include "control/placement.h"

#include <algorithm>
#include <cmath>

namespace sluice::control {
namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

Placement::Placement(std::span<const NodeSpec> nodes) {
  seeds_.reserve(nodes.size());
  weights_.reserve(nodes.size());
  for (const NodeSpec& n : nodes) {
    seeds_.push_back(stable_hash("node", n.name));
    weights_.push_back(double(n.weight));
  }
}

double Placement::score(uint64_t key_hash, size_t node) const {
  const uint64_t h = mix(key_hash ^ seeds_[node]);
  // 53 random bits, offset by half a step so that u is never 0 or 1.
  const double u = (double(h >> 11) + 0.5) * 0x1.0p-53;
  return weights_[node] / -std::log(u);
}

NodeIndex Placement::rendezvous(std::string_view vhost, std::string_view queue) const {
  const uint64_t k = stable_hash(vhost, queue);
  NodeIndex best = kNoNode;
  double best_score = -1;
  for (size_t i = 0; i < seeds_.size(); ++i) {
    const double s = score(k, i);
    // Ties (practically never) go to the smaller seed, so the result is independent of order.
    if (s > best_score || (s == best_score && seeds_[i] < seeds_[best])) {
      best_score = s;
      best = NodeIndex(i);
    }
  }
  return best;
}

void Placement::order(std::string_view vhost, std::string_view queue,
                      std::span<NodeIndex> out) const {
  const uint64_t k = stable_hash(vhost, queue);
  const size_t n = seeds_.size();
  for (size_t i = 0; i < n; ++i)
    out[i] = NodeIndex(i);
  std::sort(out.begin(), out.begin() + ptrdiff_t(n), [&](NodeIndex a, NodeIndex b) {
    const double sa = score(k, a), sb = score(k, b);
    return sa != sb ? sa > sb : seeds_[a] < seeds_[b];
  });
}

NodeIndex Placement::least_queues(std::string_view vhost, std::string_view queue,
                                  std::span<const uint32_t> queue_counts) const {
  NodeIndex order_buf[kNodesMax];
  order(vhost, queue, std::span<NodeIndex>(order_buf, seeds_.size()));
  NodeIndex best = kNoNode;
  for (size_t i = 0; i < seeds_.size(); ++i) {
    const NodeIndex n = order_buf[i];
    if (best == kNoNode || queue_counts[n] < queue_counts[best]) best = n;
  }
  return best;
}

}  // namespace sluice::control
