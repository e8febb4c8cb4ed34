// Control's RabbitMQ feed: periodic polls of the management API turned into learned owners.
#include <chrono>
#include <unordered_set>

#include "control/control.h"
#include "control/control_internal.h"
#include "control/log.h"

namespace sluice::control {

// ---- feed -------------------------------------------------------------------------------------

void Control::schedule_feed(uint32_t delay_ms) {
  feed_timer_.expires_after(std::chrono::milliseconds(delay_ms));
  std::weak_ptr<int> alive = alive_;
  feed_timer_.async_wait([this, alive](boost::system::error_code ec) {
    if (!ec && !alive.expired()) run_feed();
  });
}

void Control::run_feed() {
  if (!config_.rabbitmq_feed.enabled || feed_in_flight_) return;
  feed_in_flight_ = true;
  counters_->feed_started = std::chrono::steady_clock::now();
  RabbitFeedSettings s;
  s.urls = config_.rabbitmq_feed.urls;
  s.login = config_.rabbitmq_feed.login;
  s.passcode = secrets_.feed_passcode;
  s.timeout_ms = config_.rabbitmq_feed.timeout_ms;
  std::weak_ptr<int> alive = alive_;
  poll_rabbit_feed(io_, s, [this, alive](const FeedPoll& poll) {
    if (alive.expired() || !running_) return;
    feed_in_flight_ = false;
    on_feed(poll);
    if (!config_.rabbitmq_feed.enabled) return;
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - counters_->feed_started)
                             .count();
    const int64_t wait = int64_t(config_.rabbitmq_feed.interval_ms) - elapsed;
    schedule_feed(uint32_t(std::max<int64_t>(wait, 0)));
  });
}

void Control::on_feed(const FeedPoll& poll) {
  Counters& c = *counters_;
  ++c.feed_polls;
  c.feed_latency_us = poll.latency_us;
  if (!poll.ok) {
    ++c.feed_failures;
    if (poll.error != c.feed_last_error) {
      log_event(LogLevel::kWarn, "feed_poll_failed", {{"feed", "rabbitmq"}, {"error", poll.error}});
    }
    c.feed_last_error = poll.error;
    return;  // the last learned state stays
  }
  if (!c.feed_last_error.empty()) {
    log_event(LogLevel::kInfo, "feed_poll_recovered", {{"feed", "rabbitmq"}, {"url", poll.url}});
  }
  c.feed_last_error.clear();
  c.feed_last_success_unix_ms = unix_ms_now();
  c.feed_skipped = poll.skipped;
  size_t unmapped = 0, refused = 0, changed = 0;
  std::unordered_set<QueueKey, QueueKeyHash> seen;
  seen.reserve(poll.queues.size());
  for (const LearnedQueue& q : poll.queues) {
    auto it = broker_nodes_.find(q.broker_node);
    if (it == broker_nodes_.end()) {
      ++unmapped;
      continue;
    }
    if (key_fit(q.vhost, q.queue) != KeyFit::kFits) {
      ++refused;
      continue;
    }
    QueueKey key{q.vhost, q.queue};
    if (table_full_for(key)) {
      ++refused;
      continue;
    }
    std::optional<Owner> before = table_.lookup(key);
    table_.learn(key, it->second);
    std::optional<Owner> after = table_.lookup(key);
    if (!before || before->node != after->node || before->source != after->source) {
      ++changed;
      broadcast_owner(key);
    }
    seen.insert(std::move(key));
  }
  std::vector<QueueKey> gone =
      table_.forget_learned_except([&](const QueueKey& k) { return seen.count(k) != 0; });
  for (const QueueKey& k : gone)
    broadcast_owner(k);
  c.feed_unmapped = unmapped;
  c.feed_refused = refused;
  c.feed_queues = seen.size();
  if (changed != 0 || !gone.empty()) {
    log_event(LogLevel::kInfo, "feed_applied",
              {{"feed", "rabbitmq"},
               {"url", poll.url},
               {"queues", std::to_string(seen.size())},
               {"changed", std::to_string(changed)},
               {"forgotten", std::to_string(gone.size())},
               {"unmapped", std::to_string(unmapped)}});
  }
}

}  // namespace sluice::control
