// The drainer (DESIGN section 6): delivers spilled backlogs to their owners. For each owner that
// is up and has backlog, one STOMP connection per vhost (io_uring sockets, the gateway's own
// credentials); SENDs pipelined with receipts in a bounded window; a queue's delivery cursor
// moves only on RECEIPT; per-queue order kept; reconnects back off exponentially with jitter;
// an optional rate limit. Every message carries sluice-message-id so consumers can deduplicate
// what a reconnect sends twice.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dataplane/session/stomp.h"
#include "queue/drain_connection.h"
#include "queue/drain_pacing.h"
#include "queue/spill_types.h"

namespace sluice::queue {

class SpillLog;

// Where a queue's owner listens, when it is up.
struct DrainTarget {
  uint32_t node = 0;  // the owner's index: connections are per (node, vhost)
  std::string host;   // address or host name
  uint16_t port = 0;
  bool operator==(const DrainTarget&) const = default;
};
// Asked on the drainer's thread for each queue with backlog: its owner, if that owner is up and
// takes traffic; nothing keeps the backlog waiting.
using DrainRoute =
    std::function<std::optional<DrainTarget>(std::string_view vhost, std::string_view queue)>;

struct DrainerOptions {
  static constexpr uint32_t kLinksMax = 256;
  static constexpr uint32_t kConnectTimeoutMs = 5'000;
  static constexpr uint32_t kReceiptTimeoutMs = 30'000;
  static constexpr uint32_t kScanIntervalMs = 100;
  static constexpr uint32_t kRateBurstDefault = 64;

  std::string gateway_id;  // sluice-message-id: <gateway_id>-<seq>
  std::string login;       // the gateway's own credentials at the owners
  std::string passcode;
  uint32_t window = DrainSettings::kWindowDefault;  // drain_window: SENDs awaiting RECEIPT
  uint32_t rate_per_second = 0;                     // 0: no limit (per connection)
  uint32_t rate_burst = kRateBurstDefault;
  uint32_t backoff_base_ms = Backoff::kBaseMsDefault;
  uint32_t backoff_max_ms = Backoff::kMaxMsDefault;
  uint32_t connect_timeout_ms = kConnectTimeoutMs;  // TCP connect through CONNECTED
  uint32_t receipt_timeout_ms = kReceiptTimeoutMs;  // no RECEIPT for this long: reconnect
  uint32_t scan_interval_ms = kScanIntervalMs;      // how often backlogs and owners are looked at
  uint32_t links_max = kLinksMax;                   // connections at once
  uint64_t seed = 1;                                // jitter
  session::FrameLimits limits;                      // for the owners' frames
  LogFn log;
  // Called on the drainer's thread before each scan, e.g. to bring the state the route reads
  // up to date.
  std::function<void()> on_scan;
};

struct DrainerMetrics {
  std::atomic<uint64_t> sent{0};       // SENDs written (resends included)
  std::atomic<uint64_t> delivered{0};  // RECEIPTs: cursor moves
  std::atomic<uint64_t> resent{0};     // SENDs in flight when a connection failed
  std::atomic<uint64_t> connects{0};   // connections that reached CONNECTED
  std::atomic<uint64_t> connect_failures{0};
  std::atomic<uint64_t> link_failures{0};  // connections lost after CONNECTED
  std::atomic<uint64_t> bad_records{0};    // records that could not be read or sent
};

// One queue as the drainer sees it, for `sluicectl spill`.
struct DrainQueueStatus {
  std::string vhost;
  std::string queue;
  std::string state;  // "draining", "waiting: owner down", "waiting: connecting", ...
  std::optional<uint32_t> node;
};

class Drainer {
 public:
  Drainer(SpillLog& log, DrainRoute route, DrainerOptions options);
  ~Drainer();  // stop()
  Drainer(const Drainer&) = delete;
  Drainer& operator=(const Drainer&) = delete;

  void start();
  // Closes the connections (what is in flight is sent again after the next start) and joins.
  void stop();
  // Retry now: clears every backoff and the marks of queues that stopped on a bad record, and
  // looks at the backlogs at once. Any thread.
  void drain_now();

  // drain.rate_per_second while the drainer runs (any thread): every connection, open or not
  // yet, paces at it from its next SEND on (the drainer applies it within a scan interval).
  void set_rate(uint32_t per_second) { rate_.store(per_second, std::memory_order_relaxed); }
  uint32_t rate() const { return rate_.load(std::memory_order_relaxed); }

  const DrainerMetrics& metrics() const { return metrics_; }
  // Any thread: as of the last scan.
  std::vector<DrainQueueStatus> queues() const;

 private:
  struct Impl;
  SpillLog& log_;
  DrainRoute route_;
  DrainerOptions options_;
  DrainerMetrics metrics_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> now_{false};
  std::atomic<uint32_t> rate_{0};
  mutable std::mutex status_mutex_;
  std::vector<DrainQueueStatus> status_;
  std::thread thread_;
};

}  // namespace sluice::queue
