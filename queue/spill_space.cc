// The spill thread's bookkeeping of space: segment creation and deletion, deliveries and
// drops moving the cursors, capacity checks, and when cursor snapshots are written.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "queue/format.h"
#include "queue/log_state.h"
#include "queue/recovery.h"
#include "queue/segment_file.h"

namespace sluice::queue {
namespace {

// A write-only O_DIRECT descriptor for a segment, or why not. The file system's own alignment
// needs (statx, where it reports them) must divide our 4 KiB blocks.
Result<int> open_direct(const std::string& path) {
  struct statx sx {};
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_DIOALIGN, &sx) == 0 &&
      (sx.stx_mask & STATX_DIOALIGN)) {
    if (sx.stx_dio_offset_align == 0) return failure("the file system does not support O_DIRECT");
    if (kDirectBlockBytes % sx.stx_dio_offset_align || kDirectBlockBytes % sx.stx_dio_mem_align) {
      return failure("O_DIRECT needs " + std::to_string(sx.stx_dio_offset_align) +
                     "-byte offsets and " + std::to_string(sx.stx_dio_mem_align) +
                     "-byte buffers, more than 4096");
    }
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return failure(std::strerror(errno));
  return fd;
}
}  // namespace

bool LogState::apply_deliveries() {
  const std::optional<uint64_t> popped = index_.apply_deliveries();
  if (!popped) return false;
  if (*popped) {
    cursor_dirty_ = true;
    metrics_.delivered.fetch_add(*popped, std::memory_order_relaxed);
    metrics_.backlog_messages.fetch_sub(*popped, std::memory_order_relaxed);
  }
  index_.fire_events();
  return true;
}

void LogState::maybe_cursors(bool force_sync) {
  // A forced write also covers a snapshot the writer thread has not finished yet.
  if (force_sync && writer_->persisted_gen() < cursor_submitted_gen_) cursor_dirty_ = true;
  if (!cursor_dirty_) return;
  if (!force_sync && writer_->finished_gen() < cursor_submitted_gen_) return;  // writer busy
  CursorSnapshot s = index_.snapshot(next_seq_ - 1);
  const uint64_t gen = ++cursor_gen_;
  cursor_dirty_ = false;
  cursor_submitted_gen_ = gen;
  if (force_sync) {
    if (!writer_->write_now(s, gen))
      log_event(LogSeverity::kError, "spill_cursor_write_failed",
                {{"error", writer_->last_error()}});
  } else {
    writer_->submit(std::move(s), gen);
  }
}

void LogState::maybe_delete() {
  index_.fire_events();
  if (index_.delete_delivered(active_, cursor_gen_ + 1, writer_->persisted_gen()))
    cursor_dirty_ = true;
}

bool LogState::make_room_for_segment(AppendStatus* refusal) {
  auto fits = [&] { return segment_fits(); };
  if (fits()) return true;
  // Delivered segments waiting for their cursor write: write it now and delete them.
  maybe_delete();
  maybe_cursors(true);
  maybe_delete();
  if (fits()) return true;
  if (opt_.on_full != OnFull::kDropOldest) {
    *refusal = AppendStatus::kSpillFull;
    return false;
  }
  while (!fits()) {
    const std::optional<uint64_t> dropped = index_.drop_oldest_segment(active_);
    if (!dropped) break;
    if (*dropped) cursor_dirty_ = true;
  }
  index_.fire_events();
  if (cursor_dirty_) maybe_cursors(true);  // the drops must survive a crash
  if (fits()) return true;
  *refusal = AppendStatus::kSpillFull;
  return false;
}

bool LogState::create_segment(AppendStatus* refusal) {
  uint64_t number = 0;
  int fd = -1, err = 0;
  bool prepared = false;
  if (preparer_->state() != SegmentPreparer::State::kIdle) {
    // Usually ready long before it is needed; waits for the preparer otherwise.
    const auto st = preparer_->take(&number, &fd, &err);
    prepared = st == SegmentPreparer::State::kReady;
    if (!prepared) metrics_.disk_bytes.fetch_sub(opt_.segment_bytes, std::memory_order_relaxed);
  }
  if (!prepared) {
    if (!make_room_for_segment(refusal)) return false;
    number = next_segment_++;
    err = create_segment_file(opt_.dir, dir_fd_.get(), number, next_seq_, opt_.segment_bytes,
                              opt_.preallocate, &fd);
    if (err) {
      *refusal = status_of_errno(err);
      metrics_.disk_errors.fetch_add(1, std::memory_order_relaxed);
      if (!disk_error_logged_) {
        const std::string e = std::strerror(err);
        log_event(LogSeverity::kError, "spill_segment_create_failed",
                  {{"file", opt_.dir + "/" + segment_file_name(number)}, {"error", e}});
      }
      disk_error_logged_ = true;
      return false;
    }
    metrics_.disk_bytes.fetch_add(opt_.segment_bytes, std::memory_order_relaxed);
  }
  SegmentState seg;
  seg.file = std::make_shared<SegmentFile>();
  seg.file->number = number;
  seg.file->path = opt_.dir + "/" + segment_file_name(number);
  seg.file->fd = fd;
  if (opt_.direct_io && opt_.segment_bytes % kDirectBlockBytes == 0) {
    Result<int> direct = open_direct(seg.file->path);
    seg.file->direct_fd = direct ? *direct : -1;
    if (!direct && !direct_refused_logged_) {
      direct_refused_logged_ = true;
      log_event(
          LogSeverity::kInfo, "spill_direct_io_unavailable",
          {{"file", seg.file->path}, {"reason", direct.error().message}, {"writes", "buffered"}});
    }
  }
  hold_writer_lock(seg.file->direct_fd >= 0 ? seg.file->direct_fd : seg.file->fd);
  seg.durable_end = seg.write_end = kSegmentHeaderBytes;
  seg.disk_bytes = opt_.segment_bytes;
  index_.add_segment(number, std::move(seg));
  active_ = number;
  metrics_.segments_created.fetch_add(1, std::memory_order_relaxed);
  // Prepare the next one now if it fits (its bytes count against max_bytes from now on).
  if (segment_fits()) {
    metrics_.disk_bytes.fetch_add(opt_.segment_bytes, std::memory_order_relaxed);
    preparer_->request(next_segment_++, next_seq_);
  }
  return true;
}

}  // namespace sluice::queue
