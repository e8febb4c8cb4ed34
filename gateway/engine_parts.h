// What the io_uring engine's workers run with, made from control/ and queue/ (the engine
// includes neither): a Router over a worker's replica of control's decisions, and a SpillSink
// over the worker's producer of the spill log.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "control/control.h"
#include "dataplane/uring/engine.h"
#include "queue/spill_producer.h"

namespace sluice::gateway {

// The configured nodes' addresses, resolved at start and again after a reload; read by every
// worker when a session is routed.
class NodeDirectory {
 public:
  // Resolves every node's host (IPv4 literal or name); an error names the node.
  std::optional<std::string> set(const std::vector<control::NodeSpec>& nodes);
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void copy(std::vector<sockaddr_in>* addrs, std::vector<std::string>* names, uint64_t* version);

 private:
  std::mutex mutex_;
  std::vector<sockaddr_in> addrs_;
  std::vector<std::string> names_;
  std::atomic<uint64_t> version_{0};
};

class ReplicaRouter : public uring::Router {
 public:
  // `label` names the engine thread in the debug log's session_routed lines (e.g. "uring0").
  ReplicaRouter(control::Control::Worker worker, NodeDirectory& nodes, std::string label);
  void poll() override;
  uring::RouteDecision route(const session::QueueKey& key, uint64_t session_hash) override;
  uring::RouteDecision login_node(std::string_view vhost, uint64_t session_hash,
                                  uint32_t attempt) override;
  void confirm_placement(const session::QueueKey& key, uint32_t node) override;
  bool owner_up(const session::QueueKey& key) override;
  void connect_failed(uint32_t node) override;
  std::string_view node_name(uint32_t node) const override;

 private:
  uring::RouteDecision decide(const session::QueueKey& key, uint64_t session_hash);
  void log_routed(const session::QueueKey& key, const uring::RouteDecision& d) const;
  bool usable(control::NodeIndex n) const;
  void refresh_nodes();
  void report(const control::WorkerToControl& m);
  uring::RouteDecision direct(control::NodeIndex n);
  // Tells control a placed queue is in use (placement.unused_ttl_ms), at most once per
  // control::Used::kReportIntervalMs per key; keys sharing a slot of used_ report more often.
  void note_used(const session::QueueKey& key);
  // The healthy node taking new sessions that `session_hash` picks (with `rank` > 0, the one
  // that many places below it); kNoNode when none.
  control::NodeIndex spread(uint64_t session_hash, uint32_t rank = 0) const;

  control::Control::Worker worker_;
  NodeDirectory& directory_;
  std::string label_;
  std::vector<sockaddr_in> addrs_;
  std::vector<std::string> names_;
  uint64_t nodes_version_ = 0;
  std::vector<control::NodeIndex> order_;
  // Reports the ring to control refused, sent again on the next poll (bounded).
  static constexpr size_t kBacklogMax = 4096;
  std::vector<control::WorkerToControl> unsent_;
  struct UsedSlot {
    uint64_t hash = 0;
    int64_t reported_ms = 0;
  };
  static constexpr size_t kUsedSlots = 4096;
  std::vector<UsedSlot> used_ = std::vector<UsedSlot>(kUsedSlots);
  uint64_t reports_dropped_ = 0;
};

class ProducerSink : public uring::SpillSink {
 public:
  // The worker calls arm_notify() before it blocks whenever appends are in flight, which
  // publishes them: the producer's wake-ups are batched per pass of the worker's loop.
  explicit ProducerSink(queue::SpillProducer& producer) : producer_(producer) {
    producer_.set_batched_wake(true);
  }
  Result append(uint64_t token, std::string_view vhost, std::string_view queue,
                std::string_view headers, std::string_view body, std::string_view* why) override;
  size_t poll(std::span<Done> out) override;
  uint64_t in_flight() const override { return producer_.in_flight(); }
  bool arm_notify() override { return producer_.arm_notify(); }
  int notify_fd() const override { return producer_.notify_fd(); }

 private:
  queue::SpillProducer& producer_;
};

}  // namespace sluice::gateway
