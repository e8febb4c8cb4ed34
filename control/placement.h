// Workload management's choice of a node for a queue seen for the first time: weighted
// rendezvous hashing (highest random weight) over the configured nodes, or least-queues.
// Rendezvous is deterministic: gateways with the same node list agree without talking.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "control/node.h"

namespace sluice::control {

class Placement {
 public:
  explicit Placement(std::span<const NodeSpec> nodes);

  size_t node_count() const { return seeds_.size(); }
  // The node with the highest weighted score for the key.
  NodeIndex rendezvous(std::string_view vhost, std::string_view queue) const;
  // Every node in descending score order (out[0] is rendezvous()); out must hold node_count().
  // A node in drain passes its new sessions to the next in this order.
  void order(std::string_view vhost, std::string_view queue, std::span<NodeIndex> out) const;
  // The node with the fewest queues (queue_counts[i] for node i); ties go to the earlier node in
  // the key's rendezvous order. Not coordinated between gateways.
  NodeIndex least_queues(std::string_view vhost, std::string_view queue,
                         std::span<const uint32_t> queue_counts) const;

 private:
  double score(uint64_t key_hash, size_t node) const;

  std::vector<uint64_t> seeds_;  // per node, from its name: identity does not depend on order
  std::vector<double> weights_;
};

}  // namespace sluice::control
