// What the spill log's users see besides the log itself: options and their limits, append
// outcomes, backlog events, records read back, metrics and the recovery report.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/names.h"

namespace sluice::queue {

// Longest names a record can carry: the session core's (it refuses longer ones first).
using ::sluice::kVhostBytesMax;
inline constexpr size_t kQueueBytesMax = 1024;  // the session core's destinations

enum class OnFull : uint8_t {
  kRefuse,      // refuse the append: STOMP ERROR "spill full" (default)
  kDropOldest,  // drop the oldest undelivered message(s) to make room, counted
};

enum class LogSeverity : uint8_t { kInfo, kWarn, kError };
using LogField = std::pair<std::string_view, std::string_view>;
// The gateway points this at control's logger; queue/ does not include control.
using LogFn = std::function<void(LogSeverity, std::string_view event, std::span<const LogField>)>;

// A queue's backlog (accepted, not yet delivered or dropped) went from empty to non-empty or
// back: the drain barrier (DESIGN section 6). Called on the spill thread (and, for queues that
// have a backlog after recovery, once on the thread calling SpillLog::open); keep it short, e.g.
// push a message into a ring to control.
struct BacklogEvent {
  std::string_view vhost;
  std::string_view queue;
  bool nonempty = false;
};

struct SpillOptions {
  static constexpr uint64_t kSegmentBytes = 64ull << 20;
  static constexpr uint64_t kMaxBytes = 8ull << 30;
  static constexpr uint64_t kQueueMessagesMax = 1'000'000;
  static constexpr uint64_t kQueueBytesMax = 1ull << 30;
  static constexpr uint32_t kRecordBytesMax = 1u << 20;
  static constexpr uint32_t kBatchBytesMax = 4u << 20;
  static constexpr uint32_t kBatchRecordsMax = 16384;
  static constexpr uint32_t kProducerRingDepth = 1024;
  static constexpr uint32_t kProducerArenaBytes = 2u << 20;
  static constexpr uint32_t kProducersMax = 1024;
  static constexpr uint32_t kPullPerProducerMax = 64;

  std::string dir;  // spill directory, created if missing; one process at a time (flock)
  // Every segment file is preallocated to this size (fallocate) and holds records up to it.
  uint64_t segment_bytes = kSegmentBytes;
  // Disk bytes of all segments together; a new segment that would pass it is "spill full"
  // (or, with kDropOldest, the oldest segment's messages are dropped). At least 2 segments.
  uint64_t max_bytes = kMaxBytes;
  uint64_t queue_messages_max = kQueueMessagesMax;  // per (vhost, queue), undelivered
  uint64_t queue_bytes_max = kQueueBytesMax;        // per (vhost, queue), record bytes
  OnFull on_full = OnFull::kRefuse;
  // Largest STOMP headers + body of one message; bigger appends are refused (kTooLarge).
  uint32_t record_bytes_max = kRecordBytesMax;
  // Group commit: one write+fdatasync carries at most this much (and this many records).
  uint32_t batch_bytes_max = kBatchBytesMax;
  uint32_t batch_records_max = kBatchRecordsMax;
  // Producers (one per worker thread), each with a ring per direction and a byte arena.
  uint32_t producers = 1;
  uint32_t producer_ring_depth = kProducerRingDepth;  // also the producer's in-flight limit
  uint32_t producer_arena_bytes = kProducerArenaBytes;
  // fallocate each segment at creation (no ENOSPC on a write into it afterwards). Off for file
  // systems that cannot preallocate.
  bool preallocate = true;
  // Write batches with O_DIRECT (then fdatasync), from the batch buffers, instead of copying
  // them into the page cache. Needs segment_bytes a multiple of 4 KiB; a file system that
  // refuses O_DIRECT gets buffered writes (logged once). Same bytes on disk either way.
  bool direct_io = true;
  std::function<void(const BacklogEvent&)> on_backlog;
  LogFn log;
};

// Outcome of one append, reported to the producer in append order.
enum class AppendStatus : uint8_t {
  kDurable,    // written and synced (RWF_DSYNC or fdatasync): the RECEIPT may go out
  kSpillFull,  // spill.max_bytes reached
  kQueueFull,  // the queue's message or byte limit reached
  kDiskFull,   // ENOSPC from the file system
  kDiskError,  // EIO or another I/O error
  kTooLarge,   // headers + body above record_bytes_max
  kStopping,   // the log is shutting down
};
// Text for the STOMP ERROR `message` header; every refusal because of space starts with
// "spill full".
std::string_view append_status_message(AppendStatus s);

// Immediate answer of SpillProducer::append.
enum class AppendResult : uint8_t {
  kQueued,     // a completion will follow
  kRingFull,   // the ring to the spill thread is full, or too many appends in flight
  kArenaFull,  // the producer's byte arena has no room
  kTooLarge,   // bigger than record_bytes_max (or than the arena)
  kBadName,    // vhost or queue empty, or longer than kVhostBytesMax / kQueueBytesMax
};

struct Completion {
  uint64_t token = 0;
  uint64_t seq = 0;  // the message's sequence number when kDurable
  AppendStatus status = AppendStatus::kDurable;
};

// A message read back from the log for the drainer. Views point into the caller's buffer.
struct RecordView {
  uint64_t seq = 0;
  uint64_t append_unix_ns = 0;
  std::string_view headers;  // the STOMP header block as appended
  std::string_view body;
};

struct QueueStats {
  std::string vhost;
  std::string queue;
  uint64_t messages = 0;  // durable, undelivered
  uint64_t bytes = 0;     // their record bytes
  uint64_t pending = 0;   // accepted, not yet durable
  uint64_t oldest_seq = 0;
  uint64_t oldest_append_unix_ns = 0;
  uint64_t delivered_seq = 0;  // cursor
};

// One problem found by recovery. Nothing is skipped without one of these.
struct RecoveryIssue {
  std::string path;
  uint64_t segment = 0;
  uint64_t offset = 0;   // where the good data ends
  uint64_t bytes = 0;    // bytes not recovered from there
  uint64_t records = 0;  // intact-looking message records among them (not recovered)
  std::string reason;
  bool torn_tail = false;      // the last segment's unfinished write: expected after a crash
  std::string quarantined_as;  // where the original bytes are kept, if anywhere
};

struct RecoveryReport {
  uint64_t segments = 0;
  uint64_t bytes_scanned = 0;
  uint64_t messages = 0;            // recovered into backlogs
  uint64_t messages_delivered = 0;  // on disk, but behind a cursor
  uint64_t queues = 0;
  uint64_t segments_deleted = 0;  // fully delivered, removed
  uint64_t duration_ns = 0;
  std::vector<RecoveryIssue> issues;
};

// Counters, updated with relaxed atomics; read from any thread.
struct SpillMetrics {
  static constexpr size_t kFsyncBuckets = 20;  // bucket i: latency < 2^i microseconds
  std::atomic<uint64_t> appends{0};            // durable
  std::atomic<uint64_t> append_bytes{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<uint64_t> batches_direct{0};  // of them, written with O_DIRECT
  std::atomic<uint64_t> batch_records_max{0};
  std::atomic<uint64_t> batch_bytes_max{0};
  std::atomic<uint64_t> fsync_ns_sum{0};
  std::atomic<uint64_t> fsync_ns_max{0};
  std::atomic<uint64_t> fsync_us_hist[kFsyncBuckets] = {};
  std::atomic<uint64_t> refused_ring_full{0};
  std::atomic<uint64_t> refused_arena_full{0};
  std::atomic<uint64_t> refused_too_large{0};
  std::atomic<uint64_t> refused_spill_full{0};
  std::atomic<uint64_t> refused_queue_full{0};
  std::atomic<uint64_t> refused_disk{0};
  std::atomic<uint64_t> disk_errors{0};
  std::atomic<uint64_t> dropped{0};  // drop-oldest
  std::atomic<uint64_t> delivered{0};
  std::atomic<uint64_t> segments_created{0};
  std::atomic<uint64_t> segments_deleted{0};
  std::atomic<uint64_t> disk_bytes{0};  // all segment files
  std::atomic<uint64_t> backlog_messages{0};
  std::atomic<uint64_t> cursor_writes{0};
  std::atomic<uint64_t> cursor_write_errors{0};
  std::atomic<uint64_t> recovered_messages{0};
  std::atomic<uint64_t> recovery_issues{0};
};

}  // namespace sluice::queue
