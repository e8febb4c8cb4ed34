// Private to queue/: the spill log's index, which the spill thread (its only writer) shares
// with the read side (the drainer): the queues with their backlogs and cursors, and the segment
// map. LogIndex's own fields are guarded by its mutex (SLUICE_GUARDED_BY, checked by clang's
// -Wthread-safety); of QueueState's and SegmentState's, those marked "mu" are changed only under
// it, the others belong to the spill thread alone (or to SpillLog::open before it starts).
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "queue/cursor_file.h"
#include "queue/spill_log.h"

namespace sluice::queue {

struct RecoveredLog;

struct SegmentFile {
  uint64_t number = 0;
  std::string path;
  int fd = -1;         // buffered: readers, recovery, and writes when direct_fd is -1
  int direct_fd = -1;  // O_DIRECT, write-only: the spill thread's batches (SpillOptions::direct_io)
  ~SegmentFile();
};

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

// Spare backlog chunks shared by every queue (the index's mutex). A chunk a backlog no longer needs
// comes back here, and the spill thread tops the spares up, each page touched, while the disk
// works (LogIndex::top_up_chunks). So adding a batch's messages to their backlogs takes no page
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

// Logs through SpillOptions::log, if set.
void log_spill_event(const SpillOptions& opt, LogSeverity s, std::string_view event,
                     std::initializer_list<LogField> fields);

class LogIndex {
 public:
  LogIndex(const SpillOptions& opt, SpillMetrics& metrics) : opt_(opt), metrics_(metrics) {}
  LogIndex(const LogIndex&) = delete;
  LogIndex& operator=(const LogIndex&) = delete;

  // ---- the read side: any thread ----
  // Locations of up to out.size() durable messages of the queue with seq > after_seq.
  size_t locate(std::string_view vhost, std::string_view queue, uint64_t after_seq,
                std::span<RecordLocation> out) const SLUICE_EXCLUDES(mu_);
  // Asks the spill thread to deliver the queue up to `seq`; false if the queue is unknown.
  bool request_delivered(std::string_view vhost, std::string_view queue, uint64_t seq)
      SLUICE_EXCLUDES(mu_);
  std::vector<QueueStats> stats() const SLUICE_EXCLUDES(mu_);
  std::optional<QueueStats> stats(std::string_view vhost, std::string_view queue) const
      SLUICE_EXCLUDES(mu_);
  bool deliveries_requested() const SLUICE_EXCLUDES(mu_);

  // ---- SpillLog::open, before the spill thread starts ----
  // Takes over the recovered queues (each given its cursor) and segments: messages at or below
  // their queue's cursor count as delivered, the rest rebuild the backlogs. Fully delivered
  // segments are deleted, but the newest: its header carries the sequence high-water mark.
  // The kept segments' bytes go to SpillMetrics::disk_bytes.
  void adopt(RecoveredLog& rec, const CursorSnapshot& cursors, RecoveryReport* report)
      SLUICE_EXCLUDES(mu_);
  // Counts the non-empty backlogs into report->queues and queues their backlog events;
  // returns the messages in them.
  uint64_t count_backlogs(RecoveryReport* report) SLUICE_EXCLUDES(mu_);

  // ---- the spill thread ----
  // The spill thread is the only writer of the queues and the segment map: it changes them
  // under the mutex, for the readers on other threads, and reads them without it through
  // these (where the analysis cannot know who calls).
  QueueState& writer_queue(uint32_t qi) SLUICE_NO_THREAD_SAFETY_ANALYSIS { return *queues_[qi]; }
  SegmentState& writer_segment(uint64_t n) SLUICE_NO_THREAD_SAFETY_ANALYSIS {
    return segments_.at(n);
  }
  // The queue's index, the queue created if new.
  uint32_t queue_index(std::string_view vhost, std::string_view queue) SLUICE_EXCLUDES(mu_);
  // A message of `bytes` laid out in the accumulating batch, not yet durable.
  void add_pending(uint32_t qi, uint64_t bytes) SLUICE_EXCLUDES(mu_);
  // Drops the queue's oldest message (on_full = drop-oldest); the cursor moves past it.
  void drop_oldest(uint32_t qi) SLUICE_EXCLUDES(mu_);
  // A batch written to `segment` up to `durable_end`: its durable entries join their backlogs
  // and a seal it carries seals the segment. Returns the messages made durable.
  uint64_t make_durable(uint64_t segment, uint64_t durable_end, std::span<const BatchEntry> entries,
                        bool seals) SLUICE_EXCLUDES(mu_);
  // A failed batch: its durable entries become `st` and leave their queues' pending counts;
  // the queues it defined must be defined again. Returns the entries failed.
  uint64_t fail_pending(std::span<BatchEntry> entries, std::span<const uint32_t> defined,
                        AppendStatus st) SLUICE_EXCLUDES(mu_);
  // Applies what request_delivered asked: returns the messages delivered, or nullopt when
  // nothing was asked.
  std::optional<uint64_t> apply_deliveries() SLUICE_EXCLUDES(mu_);
  CursorSnapshot snapshot(uint64_t seq_high) const SLUICE_EXCLUDES(mu_);
  // Deletes the sealed segments with nothing undelivered (not the newest, not `active`) once
  // the cursor file of the generation each waits for is persisted; a segment seen so for the
  // first time waits for `next_gen`. True when one started to wait: a cursor write is due.
  bool delete_delivered(uint64_t active, uint64_t next_gen, uint64_t persisted_gen)
      SLUICE_EXCLUDES(mu_);
  // Drops the oldest segment (on_full = drop-oldest, max_bytes reached) with the messages
  // still in it; returns how many, or nullopt if it cannot go (none, active or not sealed).
  std::optional<uint64_t> drop_oldest_segment(uint64_t active) SLUICE_EXCLUDES(mu_);
  void add_segment(uint64_t number, SegmentState seg) SLUICE_EXCLUDES(mu_);
  // Tops the spare backlog chunks up to EntryChunks::kTopUp, made outside the lock.
  void top_up_chunks() SLUICE_EXCLUDES(mu_);
  // Reports the queued backlog events to SpillOptions::on_backlog.
  void fire_events() SLUICE_EXCLUDES(mu_);

 private:
  static void make_key(std::string& key, std::string_view vhost, std::string_view queue);
  uint32_t queue_index_locked(std::string_view vhost, std::string_view queue) SLUICE_REQUIRES(mu_);
  QueueState* find_queue(std::string_view vhost, std::string_view queue) const SLUICE_REQUIRES(mu_);
  // Queues an on_backlog event if the queue's emptiness changed.
  void note_backlog(uint32_t qi) SLUICE_REQUIRES(mu_);
  void drop_front(QueueState& q, uint32_t qi) SLUICE_REQUIRES(mu_);
  void delete_segment(std::map<uint64_t, SegmentState>::iterator it) SLUICE_REQUIRES(mu_);
  void prune_queues(uint64_t active) SLUICE_REQUIRES(mu_);

  const SpillOptions& opt_;
  SpillMetrics& metrics_;
  mutable base::Mutex mu_;
  EntryChunks chunks_ SLUICE_GUARDED_BY(mu_);                               // spare backlog chunks
  std::unordered_map<std::string, uint32_t> ids_ SLUICE_GUARDED_BY(mu_);    // key -> queues_ index
  std::vector<std::unique_ptr<QueueState>> queues_ SLUICE_GUARDED_BY(mu_);  // null once pruned
  std::map<uint64_t, SegmentState> segments_ SLUICE_GUARDED_BY(mu_);
  std::vector<uint32_t> delivered_list_ SLUICE_GUARDED_BY(mu_);  // queues with delivered_dirty
  std::string key_ SLUICE_GUARDED_BY(mu_);                       // scratch for lookups
  // The spill thread's alone.
  std::vector<EntryChunk> fresh_chunks_;           // top_up_chunks' scratch
  std::vector<std::pair<uint32_t, bool>> events_;  // (queue, nonempty) to report after unlocking
};

}  // namespace sluice::queue
