// The control thread's service (DESIGN section 5): the node registry with health probes and
// passive reports, the ownership table fed by pins, the RabbitMQ feed and placements, its state
// file, run-time settings, and the rings that carry every decision to the workers' replicas.
// Everything here runs on one io_context's thread; workers only ever touch their WorkerChannel.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "control/config.h"
#include "control/health.h"
#include "control/messages.h"
#include "control/node.h"
#include "control/ownership_table.h"
#include "control/placement.h"
#include "control/probe.h"
#include "control/rabbit_feed.h"
#include "control/replica.h"
#include "control/state_writer.h"
#include "queue/spsc_ring.h"

namespace sluice::control {

inline constexpr size_t kWorkerRingDepth = 4096;
// Messages control pops from one worker per tick; the rest wait for the next tick.
inline constexpr size_t kWorkerReportsPerTick = 1024;

// The two rings between control and one worker. About 4 MiB: allocate it (Control does).
struct WorkerChannel {
  queue::SpscRing<ControlToWorker, kWorkerRingDepth> to_worker;
  queue::SpscRing<WorkerToControl, kWorkerRingDepth> to_control;
};

// Passcodes read from the files the config names; never logged.
struct Secrets {
  std::string health_passcode;
  std::string feed_passcode;
  std::string drain_passcode;  // the gateway's own passcode at the owners ([drain])
};
// Reads the passcode files the config names (trailing newline dropped). Error names the file.
Result<Secrets> read_secrets(const GatewayConfig& config);

struct NodeStatus {
  NodeSpec spec;
  std::string broker_node;
  AdminState admin = AdminState::kUp;
  HealthState health = HealthState::kUp;
  uint32_t queues = 0;  // queues it owns (winning source)
  uint64_t probes_ok = 0;
  uint64_t probes_failed = 0;
  uint64_t passive_failures = 0;
  uint64_t health_changes = 0;
  uint32_t last_probe_latency_us = 0;
  std::string last_probe_error;
  int64_t health_since_unix_ms = 0;
};

struct QueueStatus {
  QueueKey key;
  std::optional<Owner> owner;
  std::string placed, learned, pinned;  // node names, empty when that source has none
  bool backlog = false;                 // spilled messages wait for delivery (the drain barrier)
};

struct PinRequest {
  std::string vhost;
  std::string queue;
  std::string node;
};

// A failed operation: the HTTP status the admin API answers with and one clear line.
struct OpError {
  unsigned status = 400;
  std::string message;
};
// What an operation behind the admin API answers: nothing, or the refusal as an HTTP status
// with its message (`return refuse(404, "no node named ...");`).
using OpResult = tl::expected<void, OpError>;
inline tl::unexpected<OpError> refuse(unsigned status, std::string message) {
  return tl::unexpected<OpError>(OpError{status, std::move(message)});
}

class Control {
 public:
  // `config` must be valid (load_config checked it).
  Control(boost::asio::io_context& io, GatewayConfig config, Secrets secrets);
  ~Control();
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  // Loads the state file from the state directory and applies the config's pins. A damaged
  // state file is an error naming it (the gateway must not start with an empty table).
  Result<> load_state();

  // A new worker: its channel, and its replica filled with everything decided so far. Call on
  // the control thread before the worker thread starts; the worker then owns the replica and
  // applies what arrives on channel.to_worker.
  struct Worker {
    WorkerChannel* channel;
    std::unique_ptr<Replica> replica;
  };
  // Who reads the replica: an engine's worker, or the drainer (which routes backlogs by the same
  // decisions). Only workers count in status; metrics label each by its name.
  enum class ReplicaUser : uint8_t { kWorker, kDrainer };
  Worker attach_worker(ReplicaUser user = ReplicaUser::kWorker);

  // Starts probing nodes, polling the feed, reading worker reports, saving the state.
  void start();
  // Cancels the timers and writes the state file. Idempotent.
  void stop();

  // ---- operations (the admin API's, on the control thread) ----
  std::vector<NodeStatus> nodes() const;
  std::optional<NodeStatus> node(std::string_view name) const;
  OpResult set_admin_state(std::string_view node, std::string_view state);

  // Queues matching the filters (empty: any), at most `limit`; *total counts every match.
  std::vector<QueueStatus> queues(std::string_view vhost, std::optional<OwnerSource> source,
                                  size_t limit, size_t* total) const;
  QueueStatus queue(std::string_view vhost, std::string_view queue) const;
  // All or nothing: every pin is checked before any is applied.
  OpResult pin(std::span<const PinRequest> pins);
  // False when the queue had no pin.
  bool unpin(std::string_view vhost, std::string_view queue);

  // The drain barrier (DESIGN section 6), from the spill log's backlog events: while a queue has
  // spilled messages waiting, workers send its new sessions to the spill too, so that one
  // producer's messages are never reordered across an outage. Tells every worker.
  void set_backlog(std::string_view vhost, std::string_view queue, bool has_backlog);
  size_t queues_with_backlog() const { return backlog_.size(); }

  // The settings the dataplane and the spill service apply while they run: the session limits
  // (limits.sessions_max, limits.sessions_per_source_max, limits.prelude_sessions_max,
  // limits.connect_timeout_ms), the spill log's per-queue limits (spill.queue_messages_max,
  // spill.queue_bytes_max) and the drainer's pace (drain.rate_per_second). set_setting and
  // reload hand the whole set, with one of them changed, to the hook, which applies it or says
  // why it cannot (the engine sized its memory for the session limits at start). Without a
  // hook (no engine) they are only recorded.
  struct LiveSettings {
    uint64_t sessions_max = 0;
    uint64_t sessions_per_source_max = 0;
    uint64_t prelude_sessions_max = 0;
    uint64_t connect_timeout_ms = 0;
    uint64_t spill_max_bytes = 0;
    uint64_t spill_queue_messages_max = 0;
    uint64_t spill_queue_bytes_max = 0;
    uint64_t drain_rate_per_second = 0;
  };
  using LiveHook = std::function<Result<>(const LiveSettings&)>;
  void set_live_hook(LiveHook hook) { live_hook_ = std::move(hook); }

  // Run-time settings ("log_level", "health.interval_ms", ...): names in settings() order.
  std::vector<std::pair<std::string, std::string>> settings() const;
  std::optional<std::string> setting(std::string_view key) const;
  OpResult set_setting(std::string_view key, std::string_view value);

  // SIGHUP: applies a new config's nodes (added, or changed address, weight, broker node),
  // pins and tunables. Nodes cannot be removed while running (their queues would move): such a
  // config is refused whole and the running one stays. Keys that only take effect at restart
  // are what it returns.
  Result<std::vector<std::string>> reload(GatewayConfig next, Secrets secrets);

  // One poll's answer from the RabbitMQ feed: learned owners set, those the broker no longer
  // reports forgotten; a failed poll leaves the learned state as it was. The feed's timer calls
  // it; public so that tests can feed answers directly.
  void on_feed(const FeedPoll& poll);

  // A reload that never reached reload() (the new file did not load): counted and logged.
  void reload_failed(std::string_view why);

  // Prometheus text exposition of every counter and gauge.
  std::string metrics_text() const;

  struct Summary {
    size_t nodes = 0, nodes_up = 0, workers = 0;
    size_t queues = 0, pinned = 0, learned = 0, placed = 0;
    bool feed_enabled = false;
    uint64_t feed_polls = 0, feed_failures = 0;
    std::string feed_last_error;
    int64_t feed_last_success_unix_ms = 0;
    int64_t started_unix_ms = 0;
    uint64_t placements = 0;
    size_t queues_with_backlog = 0;
  };
  Summary summary() const;
  const GatewayConfig& config() const { return config_; }

 private:
  struct NodeRuntime;
  struct Delta;
  struct Counters;
  struct WorkerState;

  std::optional<NodeIndex> node_index(std::string_view name) const;
  std::string node_names() const;
  NodeStatus status_of(NodeIndex i) const;
  std::string node_name_or_empty(NodeIndex i) const;

  // Workers: deltas wait in per-worker outboxes until their ring has room.
  void broadcast_owner(const QueueKey& key);
  void broadcast_owner(QueueKey key, std::optional<Owner> owner);
  void broadcast_node(NodeIndex i);
  void broadcast(const Delta& d);
  void schedule_flush();
  void flush();
  void poll_workers();
  void on_placed(const Placed& m);
  // placement.unused_ttl_ms: placements nothing confirmed that long are forgotten.
  static int64_t steady_ms();
  void schedule_unused_scan();
  void forget_unused();
  void on_passive_failure(NodeIndex i);

  // Health.
  void schedule_probe(NodeIndex i, uint32_t delay_ms);
  void run_probe(NodeIndex i);
  void on_probe(NodeIndex i, const ProbeResult& r);
  void on_health_change(NodeIndex i, std::string_view reason);
  ProbeSettings probe_settings() const;

  // Feed.
  void schedule_feed(uint32_t delay_ms);
  void run_feed();

  // State file: rendered here, written by writer_ off this thread.
  void mark_dirty();
  void save_soon();
  void on_saved(const std::weak_ptr<int>& alive, const Result<>& e);
  void save_now();
  std::string state_path() const;

  // Table changes that keep the workers and the counters right.
  bool table_full_for(const QueueKey& key) const;
  void apply_config_pins(const std::vector<PinSpec>& old_pins, const std::vector<PinSpec>& pins);
  void apply_nodes(const GatewayConfig& next);

  boost::asio::io_context& io_;
  GatewayConfig config_;
  Secrets secrets_;
  LiveHook live_hook_;
  // Applies one live setting (key, value) through live_hook_ and records it in config_: empty
  // when done, otherwise why not (nothing changed).
  Result<> apply_live(std::string_view key, uint64_t value);
  // Every Placement sent to workers stays alive (they may still use an older one).
  std::vector<std::unique_ptr<Placement>> placements_;
  OwnershipTable table_;
  // Queues with a spill backlog; bounded by the spill log's queues.
  std::unordered_set<QueueKey, QueueKeyHash> backlog_;
  std::vector<std::unique_ptr<NodeRuntime>> nodes_;
  std::unordered_map<std::string, NodeIndex> broker_nodes_;
  std::vector<std::unique_ptr<WorkerState>> workers_;
  std::unique_ptr<Counters> counters_;
  std::unique_ptr<StateWriter> writer_;

  boost::asio::steady_timer flush_timer_;
  boost::asio::steady_timer poll_timer_;
  boost::asio::steady_timer feed_timer_;
  boost::asio::steady_timer save_timer_;
  boost::asio::steady_timer unused_timer_;
  bool flush_posted_ = false;
  bool flush_timer_armed_ = false;
  bool dirty_ = false;
  bool save_armed_ = false;
  bool feed_in_flight_ = false;
  bool running_ = false;
  // Callbacks of probes and polls hold a weak_ptr to this: after stop() or destruction they
  // find it expired and do nothing.
  std::shared_ptr<int> alive_;
};

}  // namespace sluice::control
