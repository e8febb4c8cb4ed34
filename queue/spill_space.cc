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
  uint64_t popped = 0;
  {
    base::MutexLock l(mu);
    if (delivered_list.empty()) return false;
    for (uint32_t qi : delivered_list) {
      QueueState& q = *queues[qi];
      q.delivered_dirty = false;
      while (!q.backlog.empty() && q.backlog.front().seq <= q.delivered_req) {
        const Entry& e = q.backlog.front();
        --segments.at(e.segment).live;
        q.backlog_bytes -= e.bytes;
        // Only durable messages move the cursor: one still in flight stays undelivered.
        q.cursor = std::max(q.cursor, e.seq);
        q.backlog.pop_front();
        ++popped;
      }
      note_backlog(qi);
    }
    delivered_list.clear();
  }
  if (popped) {
    cursor_dirty = true;
    metrics.delivered.fetch_add(popped, std::memory_order_relaxed);
    metrics.backlog_messages.fetch_sub(popped, std::memory_order_relaxed);
  }
  fire_events();
  return true;
}

void LogState::drop_front(QueueState& q, uint32_t qi) {
  const Entry& e = q.backlog.front();
  --segments.at(e.segment).live;
  q.backlog_bytes -= e.bytes;
  q.cursor = std::max(q.cursor, e.seq);
  q.backlog.pop_front();
  cursor_dirty = true;
  metrics.dropped.fetch_add(1, std::memory_order_relaxed);
  metrics.backlog_messages.fetch_sub(1, std::memory_order_relaxed);
  note_backlog(qi);
}

CursorSnapshot LogState::snapshot_locked() const {
  CursorSnapshot s;
  s.seq_high = next_seq - 1;
  for (const auto& q : queues)
    if (q && q->cursor > 0) s.entries.push_back({q->vhost, q->queue, q->cursor});
  return s;
}

void LogState::maybe_cursors(bool force_sync) {
  // A forced write also covers a snapshot the writer thread has not finished yet.
  if (force_sync && writer->persisted_gen() < cursor_submitted_gen) cursor_dirty = true;
  if (!cursor_dirty) return;
  if (!force_sync && writer->finished_gen() < cursor_submitted_gen) return;  // writer busy
  CursorSnapshot s;
  {
    base::MutexLock l(mu);
    s = snapshot_locked();
  }
  const uint64_t gen = ++cursor_gen;
  cursor_dirty = false;
  cursor_submitted_gen = gen;
  if (force_sync) {
    if (!writer->write_now(s, gen))
      log_event(LogSeverity::kError, "spill_cursor_write_failed",
                {{"error", writer->last_error()}});
  } else {
    writer->submit(std::move(s), gen);
  }
}

void LogState::delete_segment_locked(std::map<uint64_t, SegmentState>::iterator it) {
  // A file that stays (EIO, a changed mode) holds only delivered messages, but once their
  // queues' cursors are pruned a restart would deliver them again: said, for the operator to
  // remove it.
  if (::unlink(it->second.file->path.c_str()) != 0 && errno != ENOENT) {
    log_event(LogSeverity::kWarn, "spill_segment_unlink_failed",
              {{"file", it->second.file->path}, {"error", std::strerror(errno)}});
  }
  metrics.disk_bytes.fetch_sub(it->second.disk_bytes, std::memory_order_relaxed);
  metrics.segments_deleted.fetch_add(1, std::memory_order_relaxed);
  segments.erase(it);  // readers holding a location keep the file open
}

void LogState::prune_queues_locked() {
  // A queue with nothing pending and no message left in any segment needs neither its state
  // nor its cursor: nothing on disk could be mistaken for undelivered.
  for (uint32_t qi = 0; qi < queues.size(); ++qi) {
    QueueState* q = queues[qi].get();
    if (!q || q->pending || !q->backlog.empty() || q->delivered_dirty || q->nonempty) continue;
    // Segments are deleted out of order (a slow queue keeps an old one alive): every segment
    // that may hold this queue's messages, up to its newest, must be gone.
    if (!segments.empty() && segments.begin()->first <= q->last_segment) continue;
    if (q->defined_in == active) continue;
    make_key(key, q->vhost, q->queue);
    ids.erase(key);
    queues[qi].reset();
  }
}

void LogState::maybe_delete() {
  fire_events();
  const uint64_t persisted = writer->persisted_gen();
  bool deleted = false;
  base::MutexLock l(mu);
  if (segments.empty()) return;
  const uint64_t newest = segments.rbegin()->first;
  for (auto it = segments.begin(); it != segments.end();) {
    auto next = std::next(it);
    SegmentState& s = it->second;
    if (it->first != newest && it->first != active && s.sealed && s.live == 0) {
      if (s.delete_gen == 0) {
        // Deleted only once a cursor file covering its messages is on disk, so a crash
        // never brings back (as undelivered) what the old cursor file does not cover.
        s.delete_gen = cursor_gen + 1;
        cursor_dirty = true;
      } else if (persisted >= s.delete_gen) {
        delete_segment_locked(it);
        deleted = true;
      }
    }
    it = next;
  }
  if (deleted) prune_queues_locked();
}

bool LogState::make_room_for_segment(AppendStatus* refusal) {
  auto fits = [&] { return segment_fits(); };
  if (fits()) return true;
  // Delivered segments waiting for their cursor write: write it now and delete them.
  maybe_delete();
  maybe_cursors(true);
  maybe_delete();
  if (fits()) return true;
  if (opt.on_full != OnFull::kDropOldest) {
    *refusal = AppendStatus::kSpillFull;
    return false;
  }
  while (!fits()) {
    base::MutexLock l(mu);
    auto oldest = segments.begin();
    if (oldest == segments.end() || oldest->first == active || !oldest->second.sealed) break;
    for (uint32_t qi = 0; qi < queues.size(); ++qi) {
      QueueState* q = queues[qi].get();
      while (q && !q->backlog.empty() && q->backlog.front().segment == oldest->first)
        drop_front(*q, qi);
    }
    const std::string path = oldest->second.file->path;
    delete_segment_locked(oldest);
    prune_queues_locked();
  }
  fire_events();
  if (cursor_dirty) maybe_cursors(true);  // the drops must survive a crash
  if (fits()) return true;
  *refusal = AppendStatus::kSpillFull;
  return false;
}

bool LogState::create_segment(AppendStatus* refusal) {
  uint64_t number = 0;
  int fd = -1, err = 0;
  bool prepared = false;
  if (preparer->state() != SegmentPreparer::State::kIdle) {
    // Usually ready long before it is needed; waits for the preparer otherwise.
    const auto st = preparer->take(&number, &fd, &err);
    prepared = st == SegmentPreparer::State::kReady;
    if (!prepared) metrics.disk_bytes.fetch_sub(opt.segment_bytes, std::memory_order_relaxed);
  }
  if (!prepared) {
    if (!make_room_for_segment(refusal)) return false;
    number = next_segment++;
    err = create_segment_file(opt.dir, dir_fd.get(), number, next_seq, opt.segment_bytes,
                              opt.preallocate, &fd);
    if (err) {
      *refusal = status_of_errno(err);
      metrics.disk_errors.fetch_add(1, std::memory_order_relaxed);
      if (!disk_error_logged) {
        const std::string e = std::strerror(err);
        log_event(LogSeverity::kError, "spill_segment_create_failed",
                  {{"file", opt.dir + "/" + segment_file_name(number)}, {"error", e}});
      }
      disk_error_logged = true;
      return false;
    }
    metrics.disk_bytes.fetch_add(opt.segment_bytes, std::memory_order_relaxed);
  }
  SegmentState seg;
  seg.file = std::make_shared<SegmentFile>();
  seg.file->number = number;
  seg.file->path = opt.dir + "/" + segment_file_name(number);
  seg.file->fd = fd;
  if (opt.direct_io && opt.segment_bytes % kDirectBlockBytes == 0) {
    Result<int> direct = open_direct(seg.file->path);
    seg.file->direct_fd = direct ? *direct : -1;
    if (!direct && !direct_refused_logged) {
      direct_refused_logged = true;
      log_event(
          LogSeverity::kInfo, "spill_direct_io_unavailable",
          {{"file", seg.file->path}, {"reason", direct.error().message}, {"writes", "buffered"}});
    }
  }
  hold_writer_lock(seg.file->direct_fd >= 0 ? seg.file->direct_fd : seg.file->fd);
  seg.durable_end = seg.write_end = kSegmentHeaderBytes;
  seg.disk_bytes = opt.segment_bytes;
  {
    base::MutexLock l(mu);
    segments.emplace(number, std::move(seg));
  }
  active = number;
  metrics.segments_created.fetch_add(1, std::memory_order_relaxed);
  // Prepare the next one now if it fits (its bytes count against max_bytes from now on).
  if (segment_fits()) {
    metrics.disk_bytes.fetch_add(opt.segment_bytes, std::memory_order_relaxed);
    preparer->request(next_segment++, next_seq);
  }
  return true;
}

}  // namespace sluice::queue
