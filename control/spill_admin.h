// What the admin API shows and does about the spill log (DESIGN section 6): the gateway
// implements it over queue/'s SpillLog and Drainer, since control does not include queue/. Every
// call comes on the control thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::control {

struct SpillQueueInfo {
  std::string vhost;
  std::string queue;
  uint64_t messages = 0;  // durable, not yet delivered
  uint64_t bytes = 0;
  uint64_t pending = 0;          // accepted, not yet durable
  int64_t oldest_age_ms = -1;    // of the oldest undelivered message; -1: none
  std::optional<uint32_t> node;  // the owner the drainer sends to, when it has one
  std::string state;             // "draining", "waiting: owner down", ...
};

struct SpillTotals {
  std::string dir;
  uint64_t messages = 0;
  uint64_t bytes = 0;      // undelivered record bytes
  uint64_t max_bytes = 0;  // spill.max_bytes
  uint64_t queues = 0;
};

class SpillAdmin {
 public:
  virtual ~SpillAdmin() = default;
  virtual SpillTotals totals() = 0;
  virtual std::vector<SpillQueueInfo> queues() = 0;
  // Retry now (clears the drainer's backoff). False when the queue has no backlog.
  virtual bool drain_now(std::string_view vhost, std::string_view queue) = 0;
  // Drops the queue's backlog (marks it delivered); how many messages, or nothing when the
  // queue has no backlog.
  virtual std::optional<uint64_t> purge(std::string_view vhost, std::string_view queue) = 0;
  // Prometheus families of the spill log and the drainer, appended to /metrics.
  virtual std::string metrics_text() = 0;
};

}  // namespace sluice::control
