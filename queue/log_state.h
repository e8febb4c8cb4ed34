// Private to queue/: the state behind SpillLog, shared by spill_log.cc (open, read side) and
// spill_thread.cc (the spill thread's loop). LogState's fields SLUICE_GUARDED_BY(mu) and those
// of QueueState and SegmentState marked "mu" are guarded by LogState::mu (clang's
// -Wthread-safety checks the first); the others belong to the spill thread alone (or to open()
// before it starts).
#pragma once

#include <liburing.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/fd.h"
#include "base/mutex.h"
#include "queue/cursor_file.h"
#include "queue/segment_file.h"
#include "queue/spill_log.h"

namespace sluice::queue {

struct SegmentFile {
  uint64_t number = 0;
  std::string path;
  int fd = -1;         // buffered: readers, recovery, and writes when direct_fd is -1
  int direct_fd = -1;  // O_DIRECT, write-only: the spill thread's batches (SpillOptions::direct_io)
  ~SegmentFile();
};

// O_DIRECT writes are aligned to this (offset, length and memory); it covers every logical
// block size in use (512 and 4096).
inline constexpr uint64_t kDirectBlockBytes = 4096;

// What a failed write, fdatasync or fallocate means for the appends it carried.
inline AppendStatus status_of_errno(int e) {
  return (e == ENOSPC || e == EDQUOT) ? AppendStatus::kDiskFull : AppendStatus::kDiskError;
}

struct SegmentState {
  std::shared_ptr<SegmentFile> file;  // mu (readers copy it)
  uint64_t live = 0;                  // mu: durable, undelivered messages in it
  uint64_t messages = 0;              // durable message records
  uint64_t placed = 0;                // message records durable, in flight or batched (seal)
  uint64_t last_seq = 0;
  uint64_t durable_end = 0;  // bytes known durable
  uint64_t write_end = 0;    // bytes written or being written
  uint64_t disk_bytes = 0;
  bool sealed = false;
  bool sealing = false;     // a batch carrying its seal is in flight
  uint64_t delete_gen = 0;  // delete once the cursor file of this generation is written
};

struct Entry {
  uint64_t seq;
  uint64_t append_unix_ns;
  uint64_t segment;
  uint32_t offset;
  uint32_t bytes;
};

using EntryChunk = std::unique_ptr<Entry[]>;
inline constexpr size_t kEntryChunkEntries = 256;  // 8 KiB

// Spare backlog chunks shared by every queue (LogState::mu). A chunk a backlog no longer needs
// comes back here, and the spill thread tops the spares up, each page touched, while the disk
// works (LogState::top_up_chunks). So adding a batch's messages to their backlogs takes no page
// fault between a write's completion and the next write. Taking fresh chunks there cost one
// batch in ten 230-300 us in spill_bench (16 queues crossing into new chunks together: about
// 13 faults of some 18 us each on the development VM).
class EntryChunks {
 public:
  static constexpr size_t kTopUp = 32;     // spares after each top_up
  static constexpr size_t kKeepMax = 128;  // more returned chunks than this are freed

  // A new chunk, its pages not touched yet.
  static EntryChunk make() { return std::make_unique_for_overwrite<Entry[]>(kEntryChunkEntries); }
  EntryChunk take() {
    if (spares_.empty()) return make();
    EntryChunk c = std::move(spares_.back());
    spares_.pop_back();
    return c;
  }
  void give(EntryChunk c) {
    if (c && spares_.size() < kKeepMax) spares_.push_back(std::move(c));
  }
  size_t spares() const { return spares_.size(); }
  // Chunks to add for kTopUp spares; make them with fresh() outside the lock, then add().
  size_t missing() const { return spares_.size() < kTopUp ? kTopUp - spares_.size() : 0; }
  // A new chunk, zeroed: every page touched.
  static EntryChunk fresh() { return std::make_unique<Entry[]>(kEntryChunkEntries); }
  void add(std::vector<EntryChunk>& fresh) {
    for (EntryChunk& c : fresh)
      give(std::move(c));
    fresh.clear();
  }

 private:
  std::vector<EntryChunk> spares_;
};

// A queue's backlog: a FIFO of entries in fixed 8 KiB chunks (appends at the back, deliveries
// from the front, binary search by seq for readers). Growing never moves an entry: a backlog
// kept in one vector copied itself whenever it doubled, on the spill thread, between a batch's
// completion and the next write (up to 25 ms with 16 queues of some 100,000 entries each).
// Chunks come from, and go back to, `pool` when one is set (the log's EntryChunks).
class EntryFifo {
 public:
  static constexpr size_t kChunkEntries = kEntryChunkEntries;

  explicit EntryFifo(EntryChunks* pool = nullptr) : pool_(pool) {}
  EntryFifo(const EntryFifo&) = delete;
  EntryFifo& operator=(const EntryFifo&) = delete;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  const Entry& operator[](size_t i) const {
    const size_t j = head_ + i;
    return chunks_[j / kChunkEntries][j % kChunkEntries];
  }
  const Entry& front() const { return chunks_.front()[head_]; }
  void push_back(const Entry& e) {
    const size_t j = head_ + size_;
    if (j == chunks_.size() * kChunkEntries) chunks_.push_back(take_chunk());
    chunks_[j / kChunkEntries][j % kChunkEntries] = e;
    ++size_;
  }
  void pop_front() {
    --size_;
    if (++head_ < kChunkEntries && size_ > 0) return;
    // The front chunk is used up: keep it for the next push while entries remain; an empty
    // backlog holds no memory.
    EntryChunk used = std::move(chunks_.front());
    chunks_.pop_front();
    head_ = 0;
    if (size_ > 0 && !spare_) {
      spare_ = std::move(used);
      return;
    }
    release(std::move(used));
    if (size_ == 0) release(std::move(spare_));
  }
  // The index of the first entry whose seq is greater than `seq` (size() if none).
  size_t upper_bound(uint64_t seq) const {
    size_t lo = 0, n = size_;
    while (n > 0) {
      const size_t half = n / 2;
      if ((*this)[lo + half].seq <= seq) {
        lo += half + 1;
        n -= half + 1;
      } else {
        n = half;
      }
    }
    return lo;
  }
  // Chunks held, spare included (tests).
  size_t chunks_held() const { return chunks_.size() + (spare_ ? 1 : 0); }

 private:
  EntryChunk take_chunk() {
    if (spare_) return std::move(spare_);
    return pool_ ? pool_->take() : EntryChunks::make();
  }
  void release(EntryChunk c) {
    if (pool_) pool_->give(std::move(c));
  }
  EntryChunks* pool_;
  std::deque<EntryChunk> chunks_;  // chunks_[0] holds the front entry at head_
  EntryChunk spare_;
  size_t head_ = 0;
  size_t size_ = 0;
};

struct QueueState {
  explicit QueueState(EntryChunks* pool) : backlog(pool) {}
  std::string vhost;
  std::string queue;
  EntryFifo backlog;                 // mu: durable, undelivered, by seq
  uint64_t backlog_bytes = 0;        // mu
  uint64_t pending = 0;              // mu: accepted, not yet durable
  uint64_t pending_bytes = 0;        // mu
  uint64_t cursor = 0;               // mu: delivered or dropped up to here
  uint64_t delivered_req = 0;        // mu: asked by mark_delivered, applied by the spill thread
  bool delivered_dirty = false;      // mu
  uint64_t defined_in = UINT64_MAX;  // segment whose written/batched bytes define this queue
  uint64_t last_segment = 0;         // newest segment holding one of its messages
  bool nonempty = false;             // as last reported to on_backlog
};

struct BatchEntry {
  uint32_t producer;
  AppendStatus status;
  uint32_t queue;
  uint64_t token;
  uint64_t seq;
  uint64_t append_unix_ns;
  uint32_t offset;
  uint32_t bytes;
};

// Records are laid out from data(). A direct batch starts at the block holding file_offset:
// the `lead` bytes before data() repeat what that block already holds on disk, and the write
// is padded with zeros to a whole block (what preallocated space reads as anyway).
struct Batch {
  uint8_t* buf = nullptr;  // kDirectBlockBytes-aligned
  size_t cap = 0;
  size_t used = 0;  // record bytes from data()
  size_t lead = 0;
  bool direct = false;
  uint64_t segment = 0;
  uint64_t file_offset = 0;  // where data() goes in the segment
  size_t write_len = 0;      // bytes of the write in flight
  bool seals = false;
  std::vector<BatchEntry> entries;
  std::vector<uint32_t> defined;  // queues whose define record is in this batch
  uint64_t submit_ns = 0;
  uint8_t* data() { return buf + lead; }
  bool has_writes() const { return used > 0; }
  bool empty() const { return used == 0 && entries.empty(); }
  void reset() {
    used = 0;
    lead = 0;
    direct = false;
    seals = false;
    entries.clear();
    defined.clear();
  }
};

// Persists cursor snapshots off the spill thread, keeping only the newest one waiting.
class CursorWriter {
 public:
  CursorWriter(std::string dir, SpillMetrics& metrics, std::function<void()> done);
  ~CursorWriter();
  void submit(CursorSnapshot s, uint64_t gen);
  // Writes on the calling thread (sync(), stop()); false on error.
  bool write_now(const CursorSnapshot& s, uint64_t gen);
  uint64_t persisted_gen() const { return persisted_.load(std::memory_order_acquire); }
  // Generation of the last attempt, written or failed: the writer is idle when it reaches the
  // last submitted one.
  uint64_t finished_gen() const { return finished_.load(std::memory_order_acquire); }
  std::string last_error();

 private:
  void run();
  bool write(const CursorSnapshot& s, uint64_t gen);
  std::string dir_;
  SpillMetrics& metrics_;
  std::function<void()> done_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool has_ = false;
  CursorSnapshot pending_;
  uint64_t pending_gen_ = 0;
  std::string error_;
  std::mutex file_mu_;  // one writer of DIR/cursors.tmp at a time
  std::atomic<uint64_t> persisted_{0};
  std::atomic<uint64_t> finished_{0};
  std::thread thread_;
};

struct LogState {
  LogState(SpillLog& log, SpillOptions opts);
  ~LogState();

  SpillLog& log;
  SpillOptions opt;
  SpillMetrics& metrics;
  // opt.queue_messages_max and opt.queue_bytes_max as they are now (SpillLog::set_queue_limits,
  // any thread); the spill thread reads them at each append.
  std::atomic<uint64_t> queue_messages_max;
  std::atomic<uint64_t> queue_bytes_max;
  // opt.max_bytes as it is now (SpillLog::set_max_bytes, any thread); read where a segment is
  // created or prepared.
  std::atomic<uint64_t> max_bytes;
  bool segment_fits() const {
    return metrics.disk_bytes.load(std::memory_order_relaxed) + opt.segment_bytes <=
           max_bytes.load(std::memory_order_relaxed);
  }
  base::Fd lock_fd;  // holds the flock on DIR/lock
  base::Fd dir_fd;   // fsynced after a segment is created

  mutable base::Mutex mu;
  EntryChunks chunks SLUICE_GUARDED_BY(mu);  // spare backlog chunks
  std::vector<EntryChunk> fresh_chunks;      // spill thread: top_up_chunks' scratch
  std::unordered_map<std::string, uint32_t> ids SLUICE_GUARDED_BY(mu);    // key -> queues index
  std::vector<std::unique_ptr<QueueState>> queues SLUICE_GUARDED_BY(mu);  // null once pruned
  std::map<uint64_t, SegmentState> segments SLUICE_GUARDED_BY(mu);
  std::vector<uint32_t> delivered_list SLUICE_GUARDED_BY(mu);  // queues with delivered_dirty
  std::string key SLUICE_GUARDED_BY(mu);                       // scratch for lookups

  uint64_t next_seq = 1;
  uint64_t next_segment = 1;
  uint64_t active = 0;  // segment receiving appends; 0 = none yet
  uint64_t cursor_gen = 0;
  bool cursor_dirty = false;
  uint64_t cursor_submitted_gen = 0;
  std::unique_ptr<CursorWriter> writer;
  std::unique_ptr<SegmentPreparer> preparer;

  io_uring ring{};
  bool ring_ok = false;
  uint64_t wake_buf = 0;
  Batch batches[2];
  Batch* acc = &batches[0];              // accumulating
  Batch* fly = &batches[1];              // in flight when inflight
  std::vector<BatchEntry> done_entries;  // the batch just made durable, being answered
  bool inflight = false;
  bool stalled = false;  // the last pull stopped: the next batch can take nothing more
  int write_res = 0;
  int sync_res = 0;
  int cqes_wanted = 0;
  bool create_tried = false;  // one segment creation attempt per pull pass
  AppendStatus create_status = AppendStatus::kDiskError;
  uint64_t sync_handled = 0;
  uint32_t pull_start = 0;
  bool disk_error_logged = false;
  // The active segment's last partial block as the last submitted batch left it: a direct
  // batch repeats these bytes in front of its records.
  uint8_t* tail_block = nullptr;  // kDirectBlockBytes, aligned
  uint64_t tail_segment = 0;
  uint64_t tail_end = 0;  // file offset the block's bytes end at
  bool direct_refused_logged = false;
  bool buffers_registered = false;  // batches[i].buf is io_uring fixed buffer i
  std::vector<uint8_t> touched;
  std::vector<std::pair<uint32_t, bool>> events;  // (queue, nonempty) to report after unlocking

  std::thread thread;
  std::atomic<bool> stopping{false};
  std::mutex sync_mu;
  std::condition_variable sync_cv;
  uint64_t sync_req = 0;   // sync_mu
  uint64_t sync_done = 0;  // sync_mu
  std::atomic<uint64_t> sync_req_seen{0};

  // The spill thread is the only writer of `queues` and `segments`: it changes them under mu,
  // for the readers on other threads, and reads them without it. These are those reads (and
  // open's, before the thread starts), where the analysis cannot know who calls.
  QueueState& writer_queue(uint32_t qi) SLUICE_NO_THREAD_SAFETY_ANALYSIS { return *queues[qi]; }
  SegmentState& writer_segment(uint64_t n) SLUICE_NO_THREAD_SAFETY_ANALYSIS {
    return segments.at(n);
  }

  // Helpers shared by both files.
  static void make_key(std::string& key, std::string_view vhost, std::string_view queue);
  QueueState* find_queue(std::string_view vhost, std::string_view queue) const SLUICE_REQUIRES(mu);
  uint32_t queue_index(std::string_view vhost, std::string_view queue) SLUICE_REQUIRES(mu);
  // Queues an on_backlog event if the queue's emptiness changed.
  void note_backlog(uint32_t q) SLUICE_REQUIRES(mu);
  void fire_events() SLUICE_EXCLUDES(mu);
  void log_event(LogSeverity s, std::string_view event, std::initializer_list<LogField> f);

  // spill_thread.cc
  void run();
  bool pull();
  enum class Place : uint8_t { kDone, kStall };
  Place place(SpillProducer& p, const AppendMsg& m, uint64_t now_ns);
  // Anything to do; `disk`: while a batch is written (producers count only past half full).
  bool work_available(bool disk) const;
  void fail_batches(AppendStatus st);
  void prune_queues_locked() SLUICE_REQUIRES(mu);
  bool apply_deliveries();
  void start_batch(SegmentState& seg);
  void submit();
  void on_batch_done(bool ok, int err);
  void complete_entries(const std::vector<BatchEntry>& entries);
  bool reap(bool wait);
  void top_up_chunks() SLUICE_EXCLUDES(mu);  // spare backlog chunks back to EntryChunks::kTopUp
  void arm_wake();
  void maybe_cursors(bool force_sync);
  void maybe_delete();
  void drop_front(QueueState& q, uint32_t qi) SLUICE_REQUIRES(mu);
  bool make_room_for_segment(AppendStatus* refusal);
  bool create_segment(AppendStatus* refusal);
  CursorSnapshot snapshot_locked() const SLUICE_REQUIRES(mu);
  void delete_segment_locked(std::map<uint64_t, SegmentState>::iterator it) SLUICE_REQUIRES(mu);
};

}  // namespace sluice::queue
