// The control thread's service: node health, the ownership table and its sources, the state
// file, and the per-worker outboxes that feed the replicas.
#include "control/control.h"

#include <boost/asio/post.hpp>
#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "base/assert.h"
#include "control/control_internal.h"
#include "control/log.h"

namespace sluice::control {
namespace {

constexpr uint32_t kFlushRetryMs = 1;
constexpr uint32_t kWorkerPollMs = 1;
constexpr uint32_t kSaveDelayMs = 100;
constexpr uint32_t kSaveRetryMs = 5'000;
constexpr size_t kPassKeyBytesMax = 4096;

// The passcode, or an error naming the file.
Result<std::string> read_passcode(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return failure("cannot read passcode file " + path + ": " + std::strerror(errno));
  std::string s(kPassKeyBytesMax + 1, '\0');
  in.read(s.data(), std::streamsize(s.size()));
  s.resize(size_t(in.gcount()));
  if (s.size() > kPassKeyBytesMax) {
    return failure("passcode file " + path + " is larger than " + std::to_string(kPassKeyBytesMax) +
                   " bytes");
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r'))
    s.pop_back();
  return s;
}

}  // namespace

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Result<Secrets> read_secrets(const GatewayConfig& config) {
  Secrets s;
  // Each file into its secret, or an error naming the key.
  auto read = [](const std::string& path, const char* key, std::string* secret) -> Result<> {
    Result<std::string> r = read_passcode(path);
    if (!r) return failure(std::string(key) + ": " + r.error().message);
    *secret = std::move(*r);
    return {};
  };
  Result<> r;
  if (!config.health.passcode_file.empty()) {
    r = read(config.health.passcode_file, "health.passcode_file", &s.health_passcode);
  }
  if (r && config.rabbitmq_feed.enabled && !config.rabbitmq_feed.passcode_file.empty()) {
    r = read(config.rabbitmq_feed.passcode_file, "feed.rabbitmq.passcode_file", &s.feed_passcode);
  }
  if (r && !config.drain.passcode_file.empty()) {
    r = read(config.drain.passcode_file, "drain.passcode_file", &s.drain_passcode);
  }
  if (!r) return tl::unexpected(std::move(r.error()));
  return s;
}

Control::Control(boost::asio::io_context& io, GatewayConfig config, Secrets secrets)
    : io_(io),
      config_(std::move(config)),
      secrets_(std::move(secrets)),
      table_(config_.nodes.size()),
      counters_(std::make_unique<Counters>()),
      flush_timer_(io),
      poll_timer_(io),
      feed_timer_(io),
      save_timer_(io),
      unused_timer_(io),
      alive_(std::make_shared<int>(0)) {
  SLUICE_ASSERT(!config_.nodes.empty() && config_.nodes.size() <= kNodesMax);
  placements_.push_back(std::make_unique<Placement>(config_.nodes));
  for (size_t i = 0; i < config_.nodes.size(); ++i) {
    nodes_.push_back(std::make_unique<NodeRuntime>(io, config_.health.rise, config_.health.fall));
    if (!config_.broker_node_names[i].empty()) {
      broker_nodes_[config_.broker_node_names[i]] = NodeIndex(i);
    }
  }
  counters_->started_unix_ms = unix_ms_now();
  table_.reserve(config_.queues_max);
  table_.track_persisted_changes();
  // The writer thread must not read alive_ (stop() resets it): it gets its own weak_ptr.
  std::weak_ptr<int> alive = alive_;
  writer_ = std::make_unique<StateWriter>(state_path(), config_.nodes.size(),
                                          [this, alive](const Result<>& e) { on_saved(alive, e); });
  set_log_level(config_.log_level);
}

// stop() saves the table; what fails there is logged, as a destructor cannot report it.
Control::~Control() {
  try {
    stop();
  } catch (const std::exception& e) {
    log_event(LogLevel::kError, "control_stop_failed", {{"error", e.what()}});
  }
}

std::string Control::state_path() const {
  return config_.state_dir + "/ownership";
}

Result<> Control::load_state() {
  Result<LoadedOwnership> r = load_ownership(table_, config_.nodes, state_path());
  if (!r) {
    const Error& e = r.error();
    return failure("state file " + e.file + ": " + e.message + " (a copy is kept as " + e.file +
                   ".corrupt; move the file away to start with no recorded placements)");
  }
  const LoadedOwnership& loaded = *r;
  log_event(LogLevel::kInfo, "state_loaded",
            {{"file", state_path()},
             {"placed", std::to_string(loaded.placed)},
             {"pinned", std::to_string(loaded.pinned)}});
  for (const std::string& d : loaded.dropped) {
    log_event(LogLevel::kWarn, "state_entry_dropped", {{"file", state_path()}, {"entry", d}});
  }
  apply_config_pins({}, config_.pins);
  return {};
}

Control::Worker Control::attach_worker(ReplicaUser user) {
  auto w = std::make_unique<WorkerState>();
  w->channel = std::make_unique<WorkerChannel>();
  Worker out{w->channel.get(), std::make_unique<Replica>(config_.nodes, config_.queues_max)};
  Replica& r = *out.replica;
  // The worker thread has not started: filling its replica here is safe, and start-up does not
  // push a million messages through a ring.
  if (placements_.size() > 1) r.apply(SetNodes{placements_.back().get()});
  for (size_t i = 0; i < nodes_.size(); ++i) {
    r.apply(NodeState{NodeIndex(i), nodes_[i]->admin, nodes_[i]->tracker.state()});
  }
  table_.for_each([&](const QueueKey& key, const OwnershipTable::Entry&) {
    std::optional<Owner> o = table_.lookup(key);
    SetOwner m;
    if (!o || m.key.assign(key.vhost, key.queue) != KeyFit::kFits) return;
    m.node = o->node;
    m.source = o->source;
    if (!r.apply(m)) ++counters_->replica_refused;
  });
  for (const QueueKey& key : backlog_) {
    SetBacklog b;
    if (b.key.assign(key.vhost, key.queue) != KeyFit::kFits) continue;
    b.has_backlog = true;
    if (!r.apply(b)) ++counters_->replica_refused;
  }
  w->user = user;
  w->index = size_t(std::count_if(workers_.begin(), workers_.end(),
                                  [user](const auto& x) { return x->user == user; }));
  workers_.push_back(std::move(w));
  return out;
}

void Control::start() {
  if (running_) return;
  running_ = true;
  // Spread the first probes over one interval so that nodes are not probed in lockstep.
  const uint32_t interval = config_.health.interval_ms;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    schedule_probe(NodeIndex(i), uint32_t(interval * i / nodes_.size()));
  }
  if (config_.rabbitmq_feed.enabled) schedule_feed(0);
  if (config_.placement_unused_ttl_ms != 0) schedule_unused_scan();
  poll_timer_.expires_after(std::chrono::milliseconds(kWorkerPollMs));
  std::weak_ptr<int> alive = alive_;
  poll_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (!ec && !alive.expired()) poll_workers();
  });
  log_event(LogLevel::kInfo, "control_started",
            {{"nodes", std::to_string(nodes_.size())},
             {"workers", std::to_string(summary().workers)},
             {"queues", std::to_string(table_.size())}});
}

void Control::stop() {
  if (!alive_) return;
  const bool was_running = running_;
  running_ = false;
  alive_.reset();
  flush_timer_.cancel();
  poll_timer_.cancel();
  feed_timer_.cancel();
  save_timer_.cancel();
  unused_timer_.cancel();
  for (auto& n : nodes_)
    n->timer.cancel();
  if (dirty_ || was_running) save_now();
}

// ---- queues -----------------------------------------------------------------------------------

std::vector<QueueStatus> Control::queues(std::string_view vhost, std::optional<OwnerSource> source,
                                         size_t limit, size_t* total) const {
  std::vector<QueueStatus> out;
  size_t matched = 0;
  table_.for_each([&](const QueueKey& key, const OwnershipTable::Entry& e) {
    if (!vhost.empty() && key.vhost != vhost) return;
    std::optional<Owner> o = table_.lookup(key);
    if (source && (!o || o->source != *source)) return;
    ++matched;
    if (out.size() >= limit) return;
    out.push_back(QueueStatus{key, o, node_name_or_empty(e.placed), node_name_or_empty(e.learned),
                              node_name_or_empty(e.pinned), backlog_.count(key) != 0});
  });
  std::sort(out.begin(), out.end(), [](const QueueStatus& a, const QueueStatus& b) {
    return a.key.vhost != b.key.vhost ? a.key.vhost < b.key.vhost : a.key.queue < b.key.queue;
  });
  if (total != nullptr) *total = matched;
  return out;
}

QueueStatus Control::queue(std::string_view vhost, std::string_view queue) const {
  QueueStatus s{QueueKey{std::string(vhost), std::string(queue)}, std::nullopt, {}, {}, {}, false};
  s.backlog = backlog_.count(s.key) != 0;
  if (const OwnershipTable::Entry* e = table_.find(s.key)) {
    s.owner = table_.lookup(s.key);
    s.placed = node_name_or_empty(e->placed);
    s.learned = node_name_or_empty(e->learned);
    s.pinned = node_name_or_empty(e->pinned);
  }
  return s;
}

bool Control::table_full_for(const QueueKey& key) const {
  return table_.size() >= config_.queues_max && table_.find(key) == nullptr;
}

OpResult Control::pin(std::span<const PinRequest> pins) {
  // Everything is checked before anything changes: a batch is applied all or nothing.
  std::vector<NodeIndex> targets;
  targets.reserve(pins.size());
  size_t fresh = 0;
  for (size_t k = 0; k < pins.size(); ++k) {
    const PinRequest& p = pins[k];
    auto where = [&] { return pins.size() > 1 ? "pins[" + std::to_string(k) + "]: " : ""; };
    if (p.vhost.empty()) return refuse(400, where() + "vhost must not be empty");
    if (p.queue.empty()) return refuse(400, where() + "queue must not be empty");
    if (KeyFit f = key_fit(p.vhost, p.queue); f != KeyFit::kFits) {
      return refuse(400, where() + std::string(key_fit_name(f)));
    }
    std::optional<NodeIndex> i = node_index(p.node);
    if (!i) {
      return refuse(404, where() + "no node named \"" + p.node + "\"; nodes are: " + node_names());
    }
    targets.push_back(*i);
    if (table_.find(QueueKey{p.vhost, p.queue}) == nullptr) ++fresh;
  }
  if (table_.size() + fresh > config_.queues_max) {
    return refuse(507, "the ownership table would exceed limits.queues_max (" +
                           std::to_string(config_.queues_max) + " queues; " +
                           std::to_string(table_.size()) + " recorded)");
  }
  for (size_t k = 0; k < pins.size(); ++k) {
    QueueKey key{pins[k].vhost, pins[k].queue};
    const Owner now{targets[k], OwnerSource::kPinned};
    std::optional<Owner> before = table_.pin(key, now.node);
    if (!before || before->node != now.node || before->source != now.source) {
      broadcast_owner(std::move(key), now);
    }
    if (pins.size() <= 16) {
      log_event(LogLevel::kInfo, "queue_pinned",
                {{"vhost", pins[k].vhost}, {"queue", pins[k].queue}, {"node", pins[k].node}});
    }
  }
  if (pins.size() > 16) {
    log_event(LogLevel::kInfo, "queues_pinned", {{"count", std::to_string(pins.size())}});
  }
  counters_->pins_applied += pins.size();
  mark_dirty();
  return {};
}

void Control::set_backlog(std::string_view vhost, std::string_view queue, bool has_backlog) {
  QueueKey key{std::string(vhost), std::string(queue)};
  // The spill log holds only keys a session could name, which a message can carry.
  if (key_fit(key.vhost, key.queue) != KeyFit::kFits) return;
  const bool changed = has_backlog ? backlog_.insert(key).second : backlog_.erase(key) != 0;
  if (!changed) return;
  log_event(LogLevel::kInfo, has_backlog ? "queue_backlog" : "queue_backlog_delivered",
            {{"vhost", key.vhost}, {"queue", key.queue}});
  Delta d;
  d.kind = has_backlog ? Delta::kSetBacklog : Delta::kClearBacklog;
  d.key = std::move(key);
  broadcast(d);
}

bool Control::unpin(std::string_view vhost, std::string_view queue) {
  QueueKey key{std::string(vhost), std::string(queue)};
  if (!table_.unpin(key)) return false;
  log_event(LogLevel::kInfo, "queue_unpinned", {{"vhost", key.vhost}, {"queue", key.queue}});
  broadcast_owner(key);
  mark_dirty();
  return true;
}

void Control::apply_config_pins(const std::vector<PinSpec>& old_pins,
                                const std::vector<PinSpec>& pins) {
  // A pin that left the config is dropped only if it still says what the config said: an
  // operator's later change through the API wins.
  for (const PinSpec& p : old_pins) {
    bool kept = std::any_of(pins.begin(), pins.end(), [&](const PinSpec& q) {
      return q.vhost == p.vhost && q.queue == p.queue;
    });
    if (kept) continue;
    const OwnershipTable::Entry* e = table_.find(QueueKey{p.vhost, p.queue});
    if (e && node_name_or_empty(e->pinned) == p.node) unpin(p.vhost, p.queue);
  }
  std::vector<PinRequest> reqs;
  for (const PinSpec& p : pins) {
    const OwnershipTable::Entry* e = table_.find(QueueKey{p.vhost, p.queue});
    if (e && node_name_or_empty(e->pinned) == p.node) continue;
    reqs.push_back(PinRequest{p.vhost, p.queue, p.node});
  }
  if (reqs.empty()) return;
  if (OpResult r = pin(reqs); !r) {
    log_event(LogLevel::kError, "config_pins_refused", {{"error", r.error().message}});
  }
}

// ---- workers ----------------------------------------------------------------------------------

void Control::broadcast_owner(const QueueKey& key) {
  broadcast_owner(key, table_.lookup(key));
}

void Control::broadcast_owner(QueueKey key, std::optional<Owner> owner) {
  Delta d;
  d.key = std::move(key);
  if (owner) {
    d.kind = Delta::kSetOwner;
    d.node = owner->node;
    d.source = owner->source;
  } else {
    d.kind = Delta::kClearOwner;
  }
  broadcast(d);
}

void Control::broadcast_node(NodeIndex i) {
  Delta d;
  d.kind = Delta::kNodeState;
  d.node = i;
  broadcast(d);
}

void Control::broadcast(const Delta& d) {
  for (auto& w : workers_) {
    w->outbox.push_back(d);
    w->outbox_high = std::max(w->outbox_high, w->outbox.size());
  }
  schedule_flush();
}

void Control::schedule_flush() {
  if (flush_posted_) return;
  flush_posted_ = true;
  std::weak_ptr<int> alive = alive_;
  boost::asio::post(io_, [this, alive] {
    if (alive.expired()) return;
    flush_posted_ = false;
    flush();
  });
}

void Control::flush() {
  bool pending = false;
  for (auto& w : workers_) {
    while (!w->outbox.empty()) {
      const Delta& d = w->outbox.front();
      ControlToWorker m;
      switch (d.kind) {
        case Delta::kSetOwner: {
          SetOwner s;
          (void)s.key.assign(d.key.vhost, d.key.queue);  // checked when the key was accepted
          s.node = d.node;
          s.source = d.source;
          m = s;
          break;
        }
        case Delta::kClearOwner: {
          ClearOwner c;
          (void)c.key.assign(d.key.vhost, d.key.queue);
          m = c;
          break;
        }
        case Delta::kNodeState:
          // The state when sent, not when decided: the newest is what the worker needs.
          m = NodeState{d.node, nodes_[d.node]->admin, nodes_[d.node]->tracker.state()};
          break;
        case Delta::kNodes:
          m = SetNodes{placements_.back().get()};
          break;
        case Delta::kSetBacklog:
        case Delta::kClearBacklog: {
          SetBacklog b;
          (void)b.key.assign(d.key.vhost, d.key.queue);  // checked in set_backlog()
          b.has_backlog = d.kind == Delta::kSetBacklog;
          m = b;
          break;
        }
      }
      if (!w->channel->to_worker.try_push(m)) break;
      ++w->sent;
      w->outbox.pop_front();
    }
    pending = pending || !w->outbox.empty();
  }
  if (!pending || flush_timer_armed_) return;
  flush_timer_armed_ = true;
  flush_timer_.expires_after(std::chrono::milliseconds(kFlushRetryMs));
  std::weak_ptr<int> alive = alive_;
  flush_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (ec || alive.expired()) return;
    flush_timer_armed_ = false;
    flush();
  });
}

void Control::poll_workers() {
  for (auto& w : workers_) {
    w->channel->to_control.pop_some(
        [this](const WorkerToControl& m) {
          if (const auto* p = std::get_if<Placed>(&m)) {
            on_placed(*p);
          } else if (const auto* f = std::get_if<PassiveFailure>(&m)) {
            on_passive_failure(f->node);
          } else if (const auto* u = std::get_if<Used>(&m)) {
            table_.touch_placed(QueueKey{std::string(u->key.vhost()), std::string(u->key.queue())},
                                steady_ms());
          } else if (const auto* b = std::get_if<BarrierReached>(&m)) {
            (void)b;  // barriers are for the spill drainer
          }
        },
        kWorkerReportsPerTick);
  }
  poll_timer_.expires_after(std::chrono::milliseconds(kWorkerPollMs));
  std::weak_ptr<int> alive = alive_;
  poll_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (!ec && !alive.expired()) poll_workers();
  });
}

void Control::on_placed(const Placed& m) {
  if (m.node >= nodes_.size()) return;
  QueueKey key{std::string(m.key.vhost()), std::string(m.key.queue())};
  std::optional<Owner> before = table_.lookup(key);
  if (!before && table_full_for(key)) {
    ++counters_->placements_refused;
    return;
  }
  NodeIndex node = m.node;
  if (!before && config_.placement == PlacementPolicy::kLeastQueues) {
    node = placements_.back()->least_queues(key.vhost, key.queue, table_.queues_per_node());
  }
  table_.place(key, node);
  table_.touch_placed(key, steady_ms());
  if (!before) {
    ++counters_->placements;
    log_event(LogLevel::kDebug, "queue_placed",
              {{"vhost", key.vhost}, {"queue", key.queue}, {"node", config_.nodes[node].name}});
    mark_dirty();
  }
  // Every worker learns the winner, the reporter too if control decided otherwise.
  broadcast_owner(key);
}

int64_t Control::steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Control::schedule_unused_scan() {
  // A quarter of the lifetime, at most a minute: a placement goes within 1.25 lifetimes.
  const uint64_t every = std::min<uint64_t>(config_.placement_unused_ttl_ms / 4, 60'000);
  unused_timer_.expires_after(std::chrono::milliseconds(every));
  std::weak_ptr<int> alive = alive_;
  unused_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (ec || alive.expired()) return;
    forget_unused();
    schedule_unused_scan();
  });
}

void Control::forget_unused() {
  const std::vector<QueueKey> gone =
      table_.forget_unused_placed(steady_ms(), int64_t(config_.placement_unused_ttl_ms));
  for (const QueueKey& key : gone) {
    ++counters_->placements_forgotten;
    log_event(LogLevel::kInfo, "placement_forgotten",
              {{"vhost", key.vhost},
               {"queue", key.queue},
               {"unused_ms", std::to_string(config_.placement_unused_ttl_ms)}});
    broadcast_owner(key);
  }
  if (!gone.empty()) mark_dirty();
}

// ---- state file -------------------------------------------------------------------------------

void Control::mark_dirty() {
  dirty_ = true;
  if (save_armed_ || !running_) return;
  save_armed_ = true;
  // Changes come in bursts (a batch of pins, a feed poll): one write covers a burst.
  save_timer_.expires_after(std::chrono::milliseconds(kSaveDelayMs));
  std::weak_ptr<int> alive = alive_;
  save_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (ec || alive.expired()) return;
    save_armed_ = false;
    save_soon();
  });
}

void Control::save_soon() {
  if (!dirty_) return;
  dirty_ = false;
  // What changed since the last save, with its values now; the writer renders from its copy.
  std::vector<QueueKey> keys = table_.take_persisted_changes();
  std::vector<PersistedChange> changes;
  changes.reserve(keys.size());
  for (QueueKey& key : keys) {
    const OwnershipTable::Entry* e = table_.find(key);
    changes.push_back(
        PersistedChange{std::move(key), e ? e->placed : kNoNode, e ? e->pinned : kNoNode});
  }
  writer_->submit(std::move(changes), config_.nodes);
}

// On the writer's thread: counts, and on failure marks the table dirty again on the control
// thread, where a retry is scheduled.
void Control::on_saved(const std::weak_ptr<int>& alive, const Result<>& e) {
  if (alive.expired()) return;
  boost::asio::post(io_, [this, alive, e] {
    if (alive.expired()) return;
    if (e) {
      ++counters_->saves;
      return;
    }
    ++counters_->save_failures;
    log_event(LogLevel::kError, "state_save_failed",
              {{"file", e.error().file}, {"error", e.error().message}});
    dirty_ = true;
    if (save_armed_ || !running_) return;
    save_armed_ = true;
    save_timer_.expires_after(std::chrono::milliseconds(kSaveRetryMs));
    save_timer_.async_wait([this, alive](boost::system::error_code ec) {
      if (ec || alive.expired()) return;
      save_armed_ = false;
      save_soon();
    });
  });
}

// At stop: the writer finishes what it has, then the final state is written here, synchronously.
void Control::save_now() {
  writer_->wait_idle();
  // Written from the table itself: the writer's copy is not needed any more.
  table_.take_persisted_changes();
  if (Result<> e = write_state_file(render_ownership(table_, config_.nodes), state_path()); !e) {
    ++counters_->save_failures;
    log_event(LogLevel::kError, "state_save_failed",
              {{"file", e.error().file}, {"error", e.error().message}});
    return;
  }
  ++counters_->saves;
  dirty_ = false;
}

Control::Summary Control::summary() const {
  Summary s;
  s.nodes = nodes_.size();
  for (const auto& n : nodes_)
    s.nodes_up += n->tracker.state() == HealthState::kUp ? 1 : 0;
  s.workers = size_t(std::count_if(workers_.begin(), workers_.end(),
                                   [](const auto& w) { return w->user == ReplicaUser::kWorker; }));
  s.queues = table_.size();
  s.pinned = table_.count(OwnerSource::kPinned);
  s.learned = table_.count(OwnerSource::kLearned);
  s.placed = table_.count(OwnerSource::kPlaced);
  s.queues_with_backlog = backlog_.size();
  s.feed_enabled = config_.rabbitmq_feed.enabled;
  s.feed_polls = counters_->feed_polls;
  s.feed_failures = counters_->feed_failures;
  s.feed_last_error = counters_->feed_last_error;
  s.feed_last_success_unix_ms = counters_->feed_last_success_unix_ms;
  s.started_unix_ms = counters_->started_unix_ms;
  s.placements = counters_->placements;
  return s;
}

}  // namespace sluice::control
