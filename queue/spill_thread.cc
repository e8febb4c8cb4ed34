// The spill thread: drains the producers' rings into the accumulating batch, writes one batch
// at a time on io_uring (an O_DIRECT write with RWF_DSYNC, or where the file system refuses
// O_DIRECT a buffered write and an fdatasync, linked), answers every append in order, applies
// deliveries, deletes finished segments and hands cursor snapshots to the cursor writer.
#include <fcntl.h>
#include <linux/falloc.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/assert.h"
#include "queue/format.h"
#include "queue/log_state.h"
#include "queue/recovery.h"

namespace sluice::queue {
namespace {

constexpr uint64_t kTagWake = 1;
constexpr uint64_t kTagWrite = 2;
constexpr uint64_t kTagSync = 3;

uint64_t mono_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}
uint64_t wall_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}
void bump_max(std::atomic<uint64_t>& a, uint64_t v) {
  if (v > a.load(std::memory_order_relaxed)) a.store(v, std::memory_order_relaxed);
}

}  // namespace

void LogState::arm_wake() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  SLUICE_ASSERT(sqe != nullptr);
  io_uring_prep_read(sqe, log.wake_fd_.get(), &wake_buf, sizeof wake_buf, 0);
  io_uring_sqe_set_data64(sqe, kTagWake);
  io_uring_submit(&ring);
}

bool LogState::work_available(bool disk) const {
  for (const auto& p : log.producers_)
    if (disk ? p->past_half() : p->ring_.read_available() > 0) return true;
  if (stopping.load(std::memory_order_relaxed)) return true;
  if (sync_req_seen.load(std::memory_order_acquire) > sync_handled) return true;
  base::MutexLock l(mu);
  return !delivered_list.empty();
}

void LogState::run() {
  arm_wake();
  top_up_chunks();
  for (;;) {
    create_tried = false;
    bool progress = apply_deliveries();
    progress |= pull();
    if (!inflight && !acc->empty()) {
      submit();
      progress = true;
    }
    maybe_delete();
    maybe_cursors(false);
    progress |= reap(false);
    const uint64_t req = sync_req_seen.load(std::memory_order_acquire);
    if (req > sync_handled) {  // appends in flight do not matter: sync is about deliveries
      apply_deliveries();
      maybe_delete();
      maybe_cursors(true);
      maybe_delete();
      sync_handled = req;
      std::lock_guard<std::mutex> l(sync_mu);
      sync_done = req;
      sync_cv.notify_all();
    }
    if (progress) continue;
    if (inflight) {
      // Waiting for the disk: a producer past half its ring or arena wakes us, so that its
      // records are copied into the next batch while this one is written and it never fills;
      // fewer records wait for the batch's completion (a wake per append here cost the
      // producers' threads a switch every few records when they share a core with us).
      // When the next batch cannot take more (full, or the segment is being sealed), waiting
      // records are no reason to wake: only the disk is.
      if (stalled) {
        reap(true);
        continue;
      }
      log.sleeping_.store(SpillLog::kDiskSleep, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!work_available(true)) reap(true);
      log.sleeping_.store(SpillLog::kAwake, std::memory_order_relaxed);
      continue;
    }
    if (stopping.load()) {
      bool rings_empty = true;
      for (const auto& p : log.producers_)
        rings_empty = rings_empty && p->ring_.read_available() == 0;
      if (rings_empty && acc->empty()) break;
      continue;
    }
    // Idle: announce it, look once more (pairs with the producers' fence), then block.
    log.sleeping_.store(SpillLog::kIdleSleep, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!work_available(false)) reap(true);
    log.sleeping_.store(SpillLog::kAwake, std::memory_order_relaxed);
  }
  apply_deliveries();
  maybe_delete();
  maybe_cursors(true);
  maybe_delete();
  std::lock_guard<std::mutex> l(sync_mu);
  sync_done = sync_req;
  sync_cv.notify_all();
}

bool LogState::reap(bool wait) {
  io_uring_cqe* cqe = nullptr;
  if (wait) {
    int r;
    do {
      r = io_uring_wait_cqe(&ring, &cqe);
    } while (r == -EINTR);
    SLUICE_ASSERT(r == 0);
  } else if (io_uring_peek_cqe(&ring, &cqe) != 0) {
    return false;
  }
  bool rearm = false;
  while (cqe) {
    switch (io_uring_cqe_get_data64(cqe)) {
      case kTagWake:
        rearm = true;
        break;
      case kTagWrite:
        write_res = cqe->res;
        --cqes_wanted;
        break;
      case kTagSync:
        sync_res = cqe->res;
        --cqes_wanted;
        break;
      default:
        SLUICE_ASSERT(false);
    }
    io_uring_cqe_seen(&ring, cqe);
    if (io_uring_peek_cqe(&ring, &cqe) != 0) cqe = nullptr;
  }
  if (rearm) arm_wake();
  if (inflight && cqes_wanted == 0) {
    const bool ok = write_res == int(fly->write_len) && sync_res == 0;
    int err = 0;
    if (!ok)
      err = write_res < 0 ? -write_res : (write_res < int(fly->write_len) ? ENOSPC : -sync_res);
    on_batch_done(ok, err);
  }
  return true;
}

bool LogState::pull() {
  bool any = false;
  const uint64_t now = wall_ns();
  const uint32_t n = uint32_t(log.producers_.size());
  for (uint32_t k = 0; k < n; ++k) {
    SpillProducer& p = *log.producers_[(pull_start + k) % n];
    for (uint32_t i = 0; i < SpillOptions::kPullPerProducerMax && p.ring_.read_available(); ++i) {
      const AppendMsg m = p.ring_.front();
      if (place(p, m, now) == Place::kStall) {
        pull_start = (pull_start + k) % n;  // this producer first next time
        stalled = true;
        fire_events();
        return any;
      }
      p.ring_.pop();
      p.tail_.store(m.arena_pos + m.total, std::memory_order_release);
      any = true;
    }
  }
  pull_start = (pull_start + 1) % n;
  stalled = false;
  fire_events();
  return any;
}

LogState::Place LogState::place(SpillProducer& p, const AppendMsg& m, uint64_t now_ns) {
  if (acc->entries.size() >= opt.batch_records_max) return Place::kStall;
  const char* src = p.arena_.get() + m.arena_pos % p.arena_bytes_;
  const std::string_view vhost(src, m.vhost_len);
  const std::string_view queue(src + m.vhost_len, m.queue_len);
  const char* payload = src + m.vhost_len + m.queue_len;
  auto refuse = [&](AppendStatus st) {
    acc->entries.push_back({p.index_, st, 0, m.token, 0, 0, 0, 0});
    std::atomic<uint64_t>& c = st == AppendStatus::kQueueFull   ? metrics.refused_queue_full
                               : st == AppendStatus::kSpillFull ? metrics.refused_spill_full
                               : st == AppendStatus::kTooLarge  ? metrics.refused_too_large
                                                                : metrics.refused_disk;
    c.fetch_add(1, std::memory_order_relaxed);
    return Place::kDone;
  };
  const size_t rec = message_record_bytes(m.headers_len, m.body_len);
  if (m.headers_len + uint64_t(m.body_len) > opt.record_bytes_max)
    return refuse(AppendStatus::kTooLarge);
  uint32_t qi;
  {
    base::MutexLock l(mu);
    qi = queue_index(vhost, queue);
  }
  QueueState& q = writer_queue(qi);
  const uint64_t messages_max = queue_messages_max.load(std::memory_order_relaxed);
  const uint64_t bytes_max = queue_bytes_max.load(std::memory_order_relaxed);
  if (rec > bytes_max) return refuse(AppendStatus::kQueueFull);
  while (q.pending + q.backlog.size() + 1 > messages_max ||
         q.pending_bytes + q.backlog_bytes + rec > bytes_max) {
    if (opt.on_full != OnFull::kDropOldest || q.backlog.empty())
      return refuse(AppendStatus::kQueueFull);
    base::MutexLock l(mu);
    drop_front(q, qi);
  }
  if (active != 0 && writer_segment(active).sealing) return Place::kStall;
  if (active == 0) {
    if (create_tried) return refuse(create_status);
    create_tried = true;
    if (!create_segment(&create_status)) return refuse(create_status);
  }
  SegmentState& seg = writer_segment(active);
  if (!acc->has_writes()) start_batch(seg);  // refusals may be in it: they are not laid out
  SLUICE_ASSERT(acc->segment == active);
  const bool define = q.defined_in != active;
  const size_t need = rec + (define ? define_record_bytes(m.vhost_len, m.queue_len) : 0);
  if (acc->used > 0 && acc->used + need > opt.batch_bytes_max) return Place::kStall;
  if (acc->file_offset + acc->used + need + kSealRecordBytes > opt.segment_bytes) {
    // Full: the seal closes this segment in the same write; the record waits for the next.
    uint8_t* s = acc->data() + acc->used;
    RecordHeader h;
    h.length = uint32_t(kSealRecordBytes);
    h.type = RecordType::kSeal;
    h.seq = seg.last_seq;
    h.a_len = kSealPayloadBytes;
    encode_record_header(h, s);
    std::memcpy(s + kRecordHeaderBytes, &seg.placed, 8);
    acc->used += seal_record(s, uint32_t(kSealRecordBytes));
    acc->seals = true;
    seg.sealing = true;
    return Place::kStall;
  }
  if (define) {
    uint8_t* d = acc->data() + acc->used;
    RecordHeader h;
    h.length = uint32_t(kRecordHeaderBytes + m.vhost_len + m.queue_len);
    h.type = RecordType::kDefineQueue;
    h.queue_id = qi;
    h.a_len = m.vhost_len;
    h.b_len = m.queue_len;
    encode_record_header(h, d);
    std::memcpy(d + kRecordHeaderBytes, src, size_t(m.vhost_len) + m.queue_len);
    acc->used += seal_record(d, h.length);
    q.defined_in = active;
    acc->defined.push_back(qi);
  }
  const uint64_t seq = next_seq++;
  uint8_t* r = acc->data() + acc->used;
  RecordHeader h;
  h.length = uint32_t(kRecordHeaderBytes + m.headers_len + m.body_len);
  h.type = RecordType::kMessage;
  h.queue_id = qi;
  h.seq = seq;
  h.append_unix_ns = now_ns;
  h.a_len = m.headers_len;
  h.b_len = m.body_len;
  encode_record_header(h, r);
  std::memcpy(r + kRecordHeaderBytes, payload, size_t(m.headers_len) + m.body_len);
  const size_t bytes = seal_record(r, h.length);
  acc->entries.push_back({p.index_, AppendStatus::kDurable, qi, m.token, seq, now_ns,
                          uint32_t(acc->file_offset + acc->used), uint32_t(bytes)});
  acc->used += bytes;
  ++seg.placed;
  seg.last_seq = seq;
  base::MutexLock l(mu);
  ++q.pending;
  q.pending_bytes += bytes;
  note_backlog(qi);
  return Place::kDone;
}

void LogState::start_batch(SegmentState& seg) {
  acc->segment = active;
  acc->file_offset = seg.write_end;
  acc->direct = seg.file->direct_fd >= 0;
  acc->lead = 0;
  if (!acc->direct) return;
  const uint64_t base = seg.write_end & ~(kDirectBlockBytes - 1);
  acc->lead = size_t(seg.write_end - base);
  if (acc->lead == 0) return;
  if (tail_segment == active && tail_end == seg.write_end) {
    std::memcpy(acc->buf, tail_block, acc->lead);
    return;
  }
  // First batch of a segment (its header) or after a failed batch: read the block's bytes.
  if (::pread(seg.file->fd, acc->buf, acc->lead, off_t(base)) != ssize_t(acc->lead)) {
    acc->direct = false;  // this batch goes buffered; the write reports any disk error
    acc->lead = 0;
  }
}

void LogState::submit() {
  if (!acc->has_writes()) {  // only refusals: answer them now
    complete_entries(acc->entries);
    acc->reset();
    return;
  }
  std::swap(acc, fly);
  SegmentState& seg = writer_segment(fly->segment);
  const int fd = fly->direct ? seg.file->direct_fd : seg.file->fd;
  const uint8_t* from = fly->data();
  uint64_t at = fly->file_offset;
  fly->write_len = fly->used;
  const uint64_t end = fly->file_offset + fly->used;
  if (fly->direct) {
    from = fly->buf;
    at -= fly->lead;
    const size_t len = fly->lead + fly->used;
    fly->write_len = (len + kDirectBlockBytes - 1) & ~size_t(kDirectBlockBytes - 1);
    std::memset(fly->buf + len, 0, fly->write_len - len);
    // The next batch repeats the block this one ends in.
    const size_t last = size_t((end & ~(kDirectBlockBytes - 1)) - at);
    std::memcpy(tail_block, fly->buf + last, size_t(end - at) - last);
    tail_segment = fly->segment;
    tail_end = end;
  }
  io_uring_sqe* w = io_uring_get_sqe(&ring);
  SLUICE_ASSERT(w != nullptr);
  if (fly->direct && buffers_registered)
    io_uring_prep_write_fixed(w, fd, from, unsigned(fly->write_len), at, int(fly - batches));
  else
    io_uring_prep_write(w, fd, from, unsigned(fly->write_len), at);
  io_uring_sqe_set_data64(w, kTagWrite);
  cqes_wanted = 1;
  if (fly->direct) {
    w->rw_flags = RWF_DSYNC;
  } else {
    io_uring_sqe* s = io_uring_get_sqe(&ring);
    SLUICE_ASSERT(s != nullptr);
    w->flags |= IOSQE_IO_LINK;
    io_uring_prep_fsync(s, fd, IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data64(s, kTagSync);
    cqes_wanted = 2;
  }
  io_uring_submit(&ring);
  fly->submit_ns = mono_ns();
  inflight = true;
  write_res = sync_res = 0;
  seg.write_end = end;
}

void LogState::on_batch_done(bool ok, int err) {
  const uint64_t lat = mono_ns() - fly->submit_ns;
  metrics.fsync_ns_sum.fetch_add(lat, std::memory_order_relaxed);
  bump_max(metrics.fsync_ns_max, lat);
  const size_t bucket =
      std::min<size_t>(std::bit_width(lat / 1000), SpillMetrics::kFsyncBuckets - 1);
  metrics.fsync_us_hist[bucket].fetch_add(1, std::memory_order_relaxed);
  inflight = false;
  SegmentState& seg = writer_segment(fly->segment);
  if (!ok) {
    fail_batches(status_of_errno(err));
    const std::string e = std::strerror(err);
    if (!disk_error_logged)
      log_event(LogSeverity::kError, "spill_write_failed",
                {{"file", seg.file->path}, {"error", e}});
    disk_error_logged = true;
    fire_events();
    return;
  }
  disk_error_logged = false;
  uint64_t n = 0;
  {
    base::MutexLock l(mu);
    seg.durable_end = fly->file_offset + fly->used;
    for (const BatchEntry& e : fly->entries) {
      if (e.status != AppendStatus::kDurable) continue;
      QueueState& q = *queues[e.queue];
      --q.pending;
      q.pending_bytes -= e.bytes;
      q.backlog.push_back({e.seq, e.append_unix_ns, fly->segment, e.offset, e.bytes});
      q.backlog_bytes += e.bytes;
      q.last_segment = fly->segment;
      ++seg.live;
      ++seg.messages;
      ++n;
    }
    if (fly->seals) {
      seg.sealed = true;
      seg.sealing = false;
      active = 0;
    }
  }
  if (fly->seals && seg.file->direct_fd >= 0) {
    // Nothing more is written to a sealed segment: its write descriptor goes now, not when the
    // segment is deleted, so a long backlog holds one descriptor per segment (the readers'),
    // as after a restart. The writer's lock goes with it; recovery needs it only while a write
    // may be in flight, and this one has completed.
    ::close(seg.file->direct_fd);
    seg.file->direct_fd = -1;
  }
  metrics.appends.fetch_add(n, std::memory_order_relaxed);
  metrics.append_bytes.fetch_add(fly->used, std::memory_order_relaxed);
  metrics.batches.fetch_add(1, std::memory_order_relaxed);
  if (fly->direct) metrics.batches_direct.fetch_add(1, std::memory_order_relaxed);
  metrics.backlog_messages.fetch_add(n, std::memory_order_relaxed);
  bump_max(metrics.batch_records_max, n);
  bump_max(metrics.batch_bytes_max, fly->used);
  // The next group commit goes out before this one is answered: posting completions and
  // waking producers takes time the disk should not wait for.
  std::swap(done_entries, fly->entries);
  fly->reset();
  pull();  // what arrived since the last wake-up joins the next batch
  if (acc->has_writes()) submit();
  complete_entries(done_entries);
  done_entries.clear();
  fire_events();
  top_up_chunks();  // while the next batch is written
}

void LogState::top_up_chunks() {
  size_t n;
  {
    base::MutexLock l(mu);
    n = chunks.missing();
  }
  if (n == 0) return;
  for (size_t i = 0; i < n; ++i)
    fresh_chunks.push_back(EntryChunks::fresh());
  base::MutexLock l(mu);
  chunks.add(fresh_chunks);
}

void LogState::fail_batches(AppendStatus st) {
  SegmentState& seg = writer_segment(fly->segment);
  metrics.disk_errors.fetch_add(1, std::memory_order_relaxed);
  // The accumulating batch was laid out after the failed one (offsets, queue definitions), so
  // it fails too; the next batch starts again at the last durable offset.
  for (Batch* b : {fly, acc}) {
    base::MutexLock l(mu);
    for (BatchEntry& e : b->entries) {
      if (e.status != AppendStatus::kDurable) continue;
      e.status = st;
      metrics.refused_disk.fetch_add(1, std::memory_order_relaxed);
      QueueState& q = *queues[e.queue];
      --q.pending;
      q.pending_bytes -= e.bytes;
      note_backlog(e.queue);
    }
    for (uint32_t qi : b->defined)
      queues[qi]->defined_in = UINT64_MAX;
  }
  // Whatever part of the write reached the file must not come back as records after a crash:
  // give the range back (reads as zeros) and make that durable.
  const uint64_t from = seg.durable_end, len = fly->file_offset + fly->used - from;
  const int fd = seg.file->fd;
  const int r = opt.preallocate ? ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                              off_t(from), off_t(len))
                                : ::ftruncate(fd, off_t(from));
  if (r != 0 || ::fdatasync(fd) != 0) {
    // Cannot clean up: stop appending to this segment. It stays unsealed, so the next
    // recovery reports it rather than trusting it.
    const std::string e = std::strerror(errno);
    log_event(LogSeverity::kError, "spill_segment_abandoned",
              {{"file", seg.file->path}, {"error", e}});
    seg.sealed = true;
    active = 0;
  }
  seg.write_end = seg.durable_end;
  seg.placed = seg.messages;
  seg.sealing = false;
  complete_entries(fly->entries);
  complete_entries(acc->entries);
  fly->reset();
  acc->reset();
}

void LogState::complete_entries(const std::vector<BatchEntry>& entries) {
  for (const BatchEntry& e : entries) {
    SpillProducer& p = *log.producers_[e.producer];
    const bool pushed = p.done_.try_push(Completion{e.token, e.seq, e.status});
    SLUICE_ASSERT(pushed);  // in flight never exceeds the completion ring's depth
    touched[e.producer] = 1;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (uint32_t i = 0; i < touched.size(); ++i) {
    if (!touched[i]) continue;
    touched[i] = 0;
    SpillProducer& p = *log.producers_[i];
    if (p.waiting_.load(std::memory_order_relaxed) && p.waiting_.exchange(false)) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t r = ::write(p.notify_fd_, &one, sizeof one);
    }
  }
}

}  // namespace sluice::queue
