// The spill log (DESIGN section 6): durable, ordered storage of messages whose owner cannot be
// reached. One spill thread owns the segment files and an io_uring and writes group commits;
// workers append through their SpillProducer; the drainer reads backlogs and marks them
// delivered. queue/README.md documents the on-disk format and the guarantees.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/fd.h"
#include "base/result.h"
#include "queue/spill_producer.h"
#include "queue/spill_types.h"

namespace sluice::queue {

struct SegmentFile;  // an open segment, kept alive while a reader holds a location in it
class LogState;      // the spill thread and the index it shares (log_state.h)

// Where one durable message is. Cheap to copy; keeps its segment file open.
struct RecordLocation {
  std::shared_ptr<const SegmentFile> file;
  uint64_t seq = 0;
  uint32_t offset = 0;
  uint32_t bytes = 0;  // aligned record size: the buffer read() needs
};

enum class ReadStatus : uint8_t { kOk, kBufferTooSmall, kIoError, kDamaged };

class SpillLog {
 public:
  // Recovers options.dir (see RecoveryReport) and returns a log ready for start(), or an error
  // naming the file and what to do. Backlog events for recovered backlogs are delivered to
  // options.on_backlog before it returns.
  static Result<std::unique_ptr<SpillLog>> open(SpillOptions options, RecoveryReport* report);
  ~SpillLog();  // stop()
  SpillLog(const SpillLog&) = delete;
  SpillLog& operator=(const SpillLog&) = delete;

  // Starts the spill thread. Producers may append from then on.
  void start();
  // Producers must have stopped appending. Writes what is queued, answers every append, writes
  // the cursor file and joins the spill thread.
  void stop();

  SpillProducer& producer(uint32_t index) { return *producers_[index]; }
  uint32_t producer_count() const { return uint32_t(producers_.size()); }
  const SpillMetrics& metrics() const { return metrics_; }
  const SpillOptions& options() const;
  // The per-queue limits (SpillOptions::queue_messages_max and queue_bytes_max) while the log
  // runs, from any thread: appends from then on are checked against them; a queue already
  // above a lowered limit keeps its messages and takes no more (on_full = drop-oldest drops
  // down to it as new ones arrive). Refuses zeros, and changes nothing then.
  struct QueueLimits {
    uint64_t messages_max = 0;
    uint64_t bytes_max = 0;
    bool operator==(const QueueLimits&) const = default;
  };
  Result<> set_queue_limits(uint64_t messages_max, uint64_t bytes_max);
  QueueLimits queue_limits() const;
  // SpillOptions::max_bytes while the log runs, from any thread: checked each time a segment
  // is created or prepared. Lowered below what the segments take: no data is removed, appends
  // go on into the segment in use (and one already prepared), then are refused as spill full
  // until deliveries free enough (on_full = drop-oldest drops the oldest sealed segments down to
  // it instead). Refuses less than two segments, and changes nothing then.
  Result<> set_max_bytes(uint64_t max_bytes);
  uint64_t max_bytes() const;

  // Read side (any one thread, typically the drainer; safe against the spill thread).
  // Locations of up to out.size() durable messages of (vhost, queue) with seq > after_seq, in
  // order. Returns how many.
  size_t locate(std::string_view vhost, std::string_view queue, uint64_t after_seq,
                std::span<RecordLocation> out) const;
  // Reads and re-checks (CRC) one message into `buf` (at least loc.bytes bytes).
  ReadStatus read(const RecordLocation& loc, std::span<uint8_t> buf, RecordView* out) const;
  // Every message of the queue with seq <= `seq` is delivered: the cursor moves (persisted in
  // batches by the spill thread), and segments with nothing left undelivered are deleted.
  // False if the queue is unknown.
  bool mark_delivered(std::string_view vhost, std::string_view queue, uint64_t seq);
  std::vector<QueueStats> queues() const;
  std::optional<QueueStats> queue(std::string_view vhost, std::string_view queue) const;

  // Blocks until the spill thread has applied every mark_delivered() made before the call,
  // deleted what that frees and written the cursor file (tests, admin "sync"). Needs start().
  void sync();

 private:
  explicit SpillLog(SpillOptions options);
  friend class SpillProducer;
  friend class LogState;
  void wake();  // from a producer, when the spill thread sleeps
  void kick();  // wakes the spill thread, asleep or not

  // What the spill thread waits for while it sleeps, so that producers wake it only when it
  // has a use for their records: when idle, any record; while a batch is being written, only a
  // producer past half its ring or arena (its records are otherwise taken when the batch
  // completes: waking for each one cost a thread switch per few records on a shared core).
  static constexpr uint8_t kAwake = 0;
  static constexpr uint8_t kIdleSleep = 1;
  static constexpr uint8_t kDiskSleep = 2;

  SpillMetrics metrics_;
  std::unique_ptr<LogState> st_;
  std::vector<std::unique_ptr<SpillProducer>> producers_;
  alignas(64) std::atomic<uint8_t> sleeping_{kAwake};
  base::Fd wake_fd_;
};

}  // namespace sluice::queue
