// An engine thread's Router (dataplane/session/route.h) over its replica of control's
// decisions: the routing policy (the drain barrier, the nodes' admin states, the default
// route's spread, placement on first use), the reports back to control (placements, passive
// failures, use of placed queues) and the session-end log. The node addresses it routes to are
// the NodeDirectory's, resolved at start and again after a reload.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control/control.h"
#include "dataplane/session/route.h"

namespace sluice::control {

// The configured nodes' addresses, resolved at start and again after a reload; read by every
// worker when a session is routed.
class NodeDirectory {
 public:
  // Resolves every node's host (IPv4 literal or name); an error names the node.
  Result<> set(const std::vector<NodeSpec>& nodes);
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void copy(std::vector<sockaddr_in>* addrs, std::vector<std::string>* names, uint64_t* version);

 private:
  std::mutex mutex_;
  std::vector<sockaddr_in> addrs_;
  std::vector<std::string> names_;
  std::atomic<uint64_t> version_{0};
};

class ReplicaRouter final : public session::Router {
 public:
  // `label` names the engine thread in the debug log's session_routed lines (e.g. "uring0").
  ReplicaRouter(Control::Worker worker, NodeDirectory& nodes, std::string label);
  void poll() override;
  session::Route route(const session::QueueKey& key, uint64_t session_hash) override;
  session::Route login_node(std::string_view vhost, uint64_t session_hash,
                            uint32_t attempt) override;
  void confirm_placement(const session::QueueKey& key, uint32_t node) override;
  bool owner_up(const session::QueueKey& key) override;
  void connect_failed(uint32_t node) override;
  std::string_view node_name(uint32_t node) const override;
  void session_end(const session::SessionEnd& end) override;
  void heart_beat_mismatch(uint32_t node, session::HeartBeat client, session::HeartBeat told,
                           session::HeartBeat owner, session::HeartBeatCheck check) override;

 private:
  session::Route decide(const session::QueueKey& key, uint64_t session_hash);
  void log_routed(const session::QueueKey& key, const session::Route& d) const;
  bool usable(NodeIndex n) const;
  void refresh_nodes();
  void report(const WorkerToControl& m);
  session::Route direct(NodeIndex n);
  // Tells control a placed queue is in use (placement.unused_ttl_ms), at most once per
  // Used::kReportIntervalMs per key; keys sharing a slot of used_ report more often.
  void note_used(const session::QueueKey& key);
  // The healthy node taking new sessions that `session_hash` picks (with `rank` > 0, the one
  // that many places below it); kNoNode when none.
  NodeIndex spread(uint64_t session_hash, uint32_t rank = 0) const;

  Control::Worker worker_;
  NodeDirectory& directory_;
  std::string label_;
  std::vector<sockaddr_in> addrs_;
  std::vector<std::string> names_;
  uint64_t nodes_version_ = 0;
  std::vector<NodeIndex> order_;
  // Reports the ring to control refused, sent again on the next poll (bounded).
  static constexpr size_t kBacklogMax = 4096;
  std::vector<WorkerToControl> unsent_;
  struct UsedSlot {
    uint64_t hash = 0;
    int64_t reported_ms = 0;
  };
  static constexpr size_t kUsedSlots = 4096;
  std::vector<UsedSlot> used_ = std::vector<UsedSlot>(kUsedSlots);
  uint64_t reports_dropped_ = 0;
  // Session-end log lines: at most this many a second, the rest counted in one line.
  static constexpr uint32_t kSessionEndLogsPerSecond = 20;
  int64_t log_window_ns_ = INT64_MIN;
  uint32_t log_lines_ = 0;
  uint64_t log_suppressed_ = 0;
};

}  // namespace sluice::control
