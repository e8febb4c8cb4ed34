// The spill log and the drainer wired to control, the logger and the admin API.
#include "gateway/spill_service.h"

#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <type_traits>

#include "base/assert.h"
#include "control/log.h"
#include "gateway/metrics_families.h"

namespace sluice::gateway {

using control::LogLevel;

namespace {

constexpr size_t kPurgeLocateBatch = 1024;
constexpr size_t kApplyPerScanMax = 1u << 16;

LogLevel level_of(queue::LogSeverity s) {
  switch (s) {
    case queue::LogSeverity::kInfo:
      return LogLevel::kInfo;
    case queue::LogSeverity::kWarn:
      return LogLevel::kWarn;
    case queue::LogSeverity::kError:
      return LogLevel::kError;
  }
  return LogLevel::kError;
}

// queue/ logs through a callback (it does not include control/); here it goes to control's
// logger. Both name a field the same way.
static_assert(std::is_same_v<queue::LogField, control::LogField>);
void log_from_queue(queue::LogSeverity s, std::string_view event,
                    std::span<const queue::LogField> fields) {
  control::log_event(level_of(s), event, fields);
}

int64_t unix_ns_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

SpillService::SpillService(const control::GatewayConfig& config)
    : dir_(config.spill_dir()), nodes_(config.nodes) {}

Result<std::unique_ptr<SpillService>> SpillService::open(const control::GatewayConfig& config,
                                                         const control::Secrets& secrets,
                                                         control::Control& control,
                                                         boost::asio::io_context& io) {
  std::unique_ptr<SpillService> s(new SpillService(config));
  queue::SpillOptions o;
  o.dir = s->dir_;
  o.max_bytes = config.spill.max_bytes;
  o.segment_bytes = config.spill.segment_bytes;
  o.queue_messages_max = config.spill.queue_messages_max;
  o.queue_bytes_max = config.spill.queue_bytes_max;
  o.on_full = config.spill.on_full == control::SpillOnFull::kDropOldest ? queue::OnFull::kDropOldest
                                                                        : queue::OnFull::kRefuse;
  o.record_bytes_max = config.session.frame_limits.frame_bytes_max;
  o.producers = config.workers;
  o.log = log_from_queue;
  // The drain barrier: control tells every worker. Called on the spill thread (and at open for
  // recovered backlogs); control runs on io.
  o.on_backlog = [&control, &io](const queue::BacklogEvent& e) {
    boost::asio::post(io, [&control, vhost = std::string(e.vhost), q = std::string(e.queue),
                           nonempty = e.nonempty] { control.set_backlog(vhost, q, nonempty); });
  };
  queue::RecoveryReport report;
  auto log = queue::SpillLog::open(std::move(o), &report);
  if (!log) return failure("spill log " + s->dir_ + ": " + log.error().message);
  s->log_ = std::move(*log);
  // The log itself reports every problem recovery met and what it recovered
  // (spill_recovery_skipped, spill_recovered).

  s->worker_ = control.attach_worker(control::Control::ReplicaUser::kDrainer);
  queue::DrainerOptions d;
  d.gateway_id = config.id;
  d.login = config.drain.login;
  d.passcode = secrets.drain_passcode;
  d.window = config.drain.window;
  d.rate_per_second = config.drain.rate_per_second;
  d.backoff_base_ms = config.drain.backoff_base_ms;
  d.backoff_max_ms = config.drain.backoff_max_ms;
  d.connect_timeout_ms = config.drain.connect_timeout_ms;
  d.receipt_timeout_ms = config.drain.receipt_timeout_ms;
  d.seed = std::random_device{}();  // gateways must not retry in step
  d.limits = config.session.frame_limits;
  d.log = log_from_queue;
  SpillService* self = s.get();
  d.on_scan = [self] { self->apply_control_messages(); };
  s->drainer_ = std::make_unique<queue::Drainer>(
      *s->log_,
      [self](std::string_view vhost, std::string_view queue) { return self->route(vhost, queue); },
      std::move(d));
  return s;
}

SpillService::~SpillService() {
  stop();
}

void SpillService::start() {
  if (started_) return;
  started_ = true;
  log_->start();
  drainer_->start();
}

void SpillService::stop() {
  if (!started_) return;
  started_ = false;
  drainer_->stop();
  log_->stop();
}

Result<> SpillService::set_tuning(uint64_t max_bytes, uint64_t queue_messages_max,
                                  uint64_t queue_bytes_max, uint32_t drain_rate_per_second) {
  // A refusal changes nothing: max_bytes is checked first, and set_queue_limits changes nothing
  // when it refuses.
  if (max_bytes / 2 < log_->options().segment_bytes) return log_->set_max_bytes(max_bytes);
  if (Result<> r = log_->set_queue_limits(queue_messages_max, queue_bytes_max); !r) return r;
  Result<> r = log_->set_max_bytes(max_bytes);
  SLUICE_ASSERT(r);  // checked above
  drainer_->set_rate(drain_rate_per_second);
  return {};
}

void SpillService::set_nodes(std::vector<control::NodeSpec> nodes) {
  std::lock_guard<std::mutex> lock(nodes_mutex_);
  nodes_ = std::move(nodes);
}

void SpillService::apply_control_messages() {
  worker_.channel->to_worker.pop_some(
      [this](const control::ControlToWorker& m) { (void)worker_.replica->apply(m); },
      kApplyPerScanMax);
}

std::optional<queue::DrainTarget> SpillService::route(std::string_view vhost,
                                                      std::string_view queue) {
  control::Replica& r = *worker_.replica;
  control::Route route = r.lookup(vhost, queue);
  control::NodeIndex owner = route.owner;
  if (!route.known) {
    // As a worker does: place it and tell control, which records it.
    control::WorkerToControl report;
    owner = r.place_unknown(vhost, queue, &report);
    if (owner != control::kNoNode) (void)worker_.channel->to_control.try_push(report);
  }
  if (owner == control::kNoNode || r.node_health(owner) != control::HealthState::kUp ||
      r.node_admin(owner) == control::AdminState::kMaintenance) {
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(nodes_mutex_);
  if (owner >= nodes_.size()) return std::nullopt;
  return queue::DrainTarget{uint32_t(owner), nodes_[owner].host, nodes_[owner].port};
}

control::SpillTotals SpillService::totals() {
  control::SpillTotals t;
  t.dir = dir_;
  t.max_bytes = log_->max_bytes();
  for (const queue::QueueStats& q : log_->queues()) {
    if (q.messages == 0 && q.pending == 0) continue;
    t.messages += q.messages;
    t.bytes += q.bytes;
    ++t.queues;
  }
  return t;
}

std::vector<control::SpillQueueInfo> SpillService::queues() {
  std::map<std::pair<std::string, std::string>, queue::DrainQueueStatus> drain;
  for (queue::DrainQueueStatus& s : drainer_->queues())
    drain[{s.vhost, s.queue}] = std::move(s);
  const int64_t now = unix_ns_now();
  std::vector<control::SpillQueueInfo> out;
  for (const queue::QueueStats& q : log_->queues()) {
    if (q.messages == 0 && q.pending == 0) continue;
    control::SpillQueueInfo i;
    i.vhost = q.vhost;
    i.queue = q.queue;
    i.messages = q.messages;
    i.bytes = q.bytes;
    i.pending = q.pending;
    if (q.messages > 0 && q.oldest_append_unix_ns > 0) {
      i.oldest_age_ms = std::max<int64_t>(0, (now - int64_t(q.oldest_append_unix_ns)) / 1'000'000);
    }
    auto it = drain.find({q.vhost, q.queue});
    if (it != drain.end()) {
      i.node = it->second.node;
      i.state = it->second.state;
    } else {
      i.state = q.messages > 0 ? "waiting: next scan" : "appending";
    }
    out.push_back(std::move(i));
  }
  return out;
}

bool SpillService::drain_now(std::string_view vhost, std::string_view queue) {
  std::optional<queue::QueueStats> q = log_->queue(vhost, queue);
  if (!q || q->messages == 0) return false;
  drainer_->drain_now();
  return true;
}

std::optional<uint64_t> SpillService::purge(std::string_view vhost, std::string_view queue) {
  std::optional<queue::QueueStats> q = log_->queue(vhost, queue);
  if (!q || q->messages == 0) return std::nullopt;
  // Everything durable now, up to its newest message, is marked delivered.
  std::vector<queue::RecordLocation> locs(kPurgeLocateBatch);
  uint64_t after = q->delivered_seq;
  uint64_t count = 0;
  for (;;) {
    const size_t n = log_->locate(vhost, queue, after, locs);
    if (n == 0) break;
    count += n;
    after = locs[n - 1].seq;
    if (n < locs.size()) break;
  }
  if (count == 0) return std::nullopt;
  log_->mark_delivered(vhost, queue, after);
  return count;
}

std::string SpillService::metrics_text() {
  const queue::SpillMetrics& m = log_->metrics();
  Families f;
  auto v = [](const std::atomic<uint64_t>& a) { return double(a.load(std::memory_order_relaxed)); };
  f.one("sluice_spill_appends_total", "counter", "Messages written durably to the spill log.",
        v(m.appends));
  f.one("sluice_spill_append_bytes_total", "counter", "Bytes of the messages written.",
        v(m.append_bytes));
  f.one("sluice_spill_batches_total", "counter", "Group commits (one durable write each).",
        v(m.batches));
  f.one("sluice_spill_batches_direct_total", "counter",
        "Group commits written with O_DIRECT and RWF_DSYNC (the others: buffered + fdatasync).",
        v(m.batches_direct));
  f.one("sluice_spill_batch_records_max", "gauge", "Most messages one group commit carried.",
        v(m.batch_records_max));
  f.family("sluice_spill_fsync_seconds", "histogram",
           "Time of each group commit's write and sync.");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < queue::SpillMetrics::kFsyncBuckets; ++i) {
    cumulative += m.fsync_us_hist[i].load(std::memory_order_relaxed);
    char le[32];
    std::snprintf(le, sizeof le, "%.6g", double(uint64_t(1) << i) / 1e6);
    f.sample("sluice_spill_fsync_seconds_bucket", std::string("le=\"") + le + "\"",
             double(cumulative));
  }
  f.sample("sluice_spill_fsync_seconds_bucket", "le=\"+Inf\"", double(cumulative));
  f.sample("sluice_spill_fsync_seconds_sum", "", v(m.fsync_ns_sum) / 1e9);
  f.sample("sluice_spill_fsync_seconds_count", "", double(cumulative));
  f.family("sluice_spill_refusals_total", "counter",
           "Appends refused, by reason (each one a STOMP ERROR to the client).");
  const std::pair<const char*, const std::atomic<uint64_t>*> reasons[] = {
      {"spill_full", &m.refused_spill_full},
      {"queue_full", &m.refused_queue_full},
      {"disk", &m.refused_disk},
      {"too_large", &m.refused_too_large},
      {"ring_full", &m.refused_ring_full},
      {"arena_full", &m.refused_arena_full}};
  for (const auto& [reason, counter] : reasons)
    f.sample("sluice_spill_refusals_total", std::string("reason=\"") + reason + "\"", v(*counter));
  f.one("sluice_spill_dropped_total", "counter",
        "Messages dropped to make room (spill.on_full = \"drop-oldest\").", v(m.dropped));
  f.one("sluice_spill_disk_errors_total", "counter", "Write or sync errors of the spill log.",
        v(m.disk_errors));
  f.one("sluice_spill_disk_bytes", "gauge", "Bytes of all segment files.", v(m.disk_bytes));
  f.one("sluice_spill_max_bytes", "gauge", "spill.max_bytes.", double(log_->max_bytes()));
  f.one("sluice_spill_backlog_messages", "gauge", "Messages spilled and not yet delivered.",
        v(m.backlog_messages));
  f.one("sluice_spill_segments_deleted_total", "counter", "Fully delivered segments removed.",
        v(m.segments_deleted));
  f.one("sluice_spill_cursor_write_errors_total", "counter",
        "Failed writes of the delivery cursor file.", v(m.cursor_write_errors));
  f.one("sluice_spill_recovery_issues", "gauge",
        "Problems recovery reported at start (see the log).", v(m.recovery_issues));
  const queue::DrainerMetrics& d = drainer_->metrics();
  f.one("sluice_drain_sent_total", "counter", "SENDs the drainer wrote (resends included).",
        v(d.sent));
  f.one("sluice_drain_delivered_total", "counter",
        "Spilled messages confirmed by their owner (RECEIPT).", v(d.delivered));
  f.one("sluice_drain_resent_total", "counter",
        "SENDs in flight when a connection failed (sent again, same sluice-message-id).",
        v(d.resent));
  f.one("sluice_drain_connects_total", "counter", "Drain connections that reached CONNECTED.",
        v(d.connects));
  f.one("sluice_drain_connect_failures_total", "counter",
        "Drain connections that failed before CONNECTED.", v(d.connect_failures));
  f.one("sluice_drain_connection_failures_total", "counter",
        "Drain connections lost after CONNECTED.", v(d.link_failures));
  f.one("sluice_drain_bad_records_total", "counter",
        "Spilled messages that could not be read or sent (the queue's drain stops).",
        v(d.bad_records));
  return f.take();
}

}  // namespace sluice::gateway
