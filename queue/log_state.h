// Private to queue/: the state behind SpillLog. LogState owns the spill thread (spill_thread.cc,
// spill_space.cc) and what only it touches; its LogIndex is the part shared with the read side,
// guarded by the index's mutex. spill_log.cc opens it: recovery into the index, then what the
// writes need.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "base/result.h"
#include "queue/cursor_file.h"
#include "queue/log_index.h"
#include "queue/segment_file.h"
#include "queue/spill_log.h"

namespace sluice::queue {

// O_DIRECT writes are aligned to this (offset, length and memory); it covers every logical
// block size in use (512 and 4096).
inline constexpr uint64_t kDirectBlockBytes = 4096;

// What a failed write, fdatasync or fallocate means for the appends it carried.
inline AppendStatus status_of_errno(int e) {
  return (e == ENOSPC || e == EDQUOT) ? AppendStatus::kDiskFull : AppendStatus::kDiskError;
}

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

class LogState {
 public:
  LogState(SpillLog& log, SpillOptions opts);
  ~LogState();
  LogState(const LogState&) = delete;
  LogState& operator=(const LogState&) = delete;

  // SpillLog::open, in this order. Takes the spill directory and recovers it into the index.
  Result<> recover(RecoveryReport* report);
  // The ring, the batch buffers and the helper threads; `wake` wakes the spill thread.
  Result<> prepare_writes(const std::function<void()>& wake);

  void start();
  // Producers have stopped: writes what is queued, answers every append and joins the thread.
  void stop();
  void sync();

  const SpillOptions& options() const { return opt_; }
  LogIndex& index() { return index_; }
  const LogIndex& index() const { return index_; }
  // The live limits (SpillLog::set_queue_limits and set_max_bytes, any thread); the spill
  // thread reads them at each append and each new segment.
  SpillLog::QueueLimits queue_limits() const;
  void set_queue_limits(SpillLog::QueueLimits limits);
  uint64_t max_bytes() const { return max_bytes_.load(std::memory_order_relaxed); }
  void set_max_bytes(uint64_t v) { max_bytes_.store(v, std::memory_order_relaxed); }

 private:
  // open (spill_log.cc)
  Result<> lock_dir();
  void report_recovery(RecoveryReport* report);
  void allocate_batches();

  // spill_thread.cc
  void run();
  // Applies the deliveries asked so far, deletes what they free and writes the cursor file:
  // what sync() waits for.
  void flush_deliveries();
  bool pull();
  enum class Place : uint8_t { kDone, kStall };
  Place place(SpillProducer& p, const AppendMsg& m, uint64_t now_ns);
  // The records place() lays out in the accumulating batch.
  void write_seal(SegmentState& seg);
  void write_define(const AppendMsg& m, const char* names, uint32_t qi);
  // Returns the record's bytes; its entry is the batch's last.
  uint64_t write_message(const AppendMsg& m, const char* payload, uint32_t qi, uint32_t producer,
                         uint64_t now_ns);
  // Anything to do; `disk`: while a batch is written (producers count only past half full).
  bool work_available(bool disk) const;
  void fail_batches(AppendStatus st);
  void start_batch(SegmentState& seg);
  void submit();
  void on_batch_done(bool ok, int err);
  void complete_entries(const std::vector<BatchEntry>& entries);
  bool reap(bool wait);
  void arm_wake();

  // spill_space.cc
  bool apply_deliveries();
  void maybe_cursors(bool force_sync);
  void maybe_delete();
  bool segment_fits() const {
    return metrics_.disk_bytes.load(std::memory_order_relaxed) + opt_.segment_bytes <=
           max_bytes_.load(std::memory_order_relaxed);
  }
  bool make_room_for_segment(AppendStatus* refusal);
  bool create_segment(AppendStatus* refusal);
  void log_event(LogSeverity s, std::string_view event, std::initializer_list<LogField> f) {
    log_spill_event(opt_, s, event, f);
  }

  SpillLog& log_;
  const SpillOptions opt_;
  SpillMetrics& metrics_;
  LogIndex index_;
  std::atomic<uint64_t> queue_messages_max_;
  std::atomic<uint64_t> queue_bytes_max_;
  std::atomic<uint64_t> max_bytes_;
  base::Fd lock_fd_;  // holds the flock on DIR/lock
  base::Fd dir_fd_;   // fsynced after a segment is created

  // The spill thread's alone (and open's, before it starts).
  uint64_t next_seq_ = 1;
  uint64_t next_segment_ = 1;
  uint64_t active_ = 0;  // segment receiving appends; 0 = none yet
  uint64_t cursor_gen_ = 0;
  bool cursor_dirty_ = false;
  uint64_t cursor_submitted_gen_ = 0;
  std::unique_ptr<CursorWriter> writer_;
  std::unique_ptr<SegmentPreparer> preparer_;

  io_uring ring_{};
  bool ring_ok_ = false;
  uint64_t wake_buf_ = 0;
  Batch batches_[2];
  Batch* acc_ = &batches_[0];             // accumulating
  Batch* fly_ = &batches_[1];             // in flight when inflight_
  std::vector<BatchEntry> done_entries_;  // the batch just made durable, being answered
  bool inflight_ = false;
  bool stalled_ = false;  // the last pull stopped: the next batch can take nothing more
  int write_res_ = 0;
  int sync_res_ = 0;
  int cqes_wanted_ = 0;
  bool create_tried_ = false;  // one segment creation attempt per pull pass
  AppendStatus create_status_ = AppendStatus::kDiskError;
  uint64_t sync_handled_ = 0;
  uint32_t pull_start_ = 0;
  bool disk_error_logged_ = false;
  // The active segment's last partial block as the last submitted batch left it: a direct
  // batch repeats these bytes in front of its records.
  uint8_t* tail_block_ = nullptr;  // kDirectBlockBytes, aligned
  uint64_t tail_segment_ = 0;
  uint64_t tail_end_ = 0;  // file offset the block's bytes end at
  bool direct_refused_logged_ = false;
  bool buffers_registered_ = false;  // batches_[i].buf is io_uring fixed buffer i
  std::vector<uint8_t> touched_;

  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::mutex sync_mu_;
  std::condition_variable sync_cv_;
  uint64_t sync_req_ = 0;   // sync_mu_
  uint64_t sync_done_ = 0;  // sync_mu_
  std::atomic<uint64_t> sync_req_seen_{0};
};

}  // namespace sluice::queue
