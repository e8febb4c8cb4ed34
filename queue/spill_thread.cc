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
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  SLUICE_ASSERT(sqe != nullptr);
  io_uring_prep_read(sqe, log_.wake_fd_.get(), &wake_buf_, sizeof wake_buf_, 0);
  io_uring_sqe_set_data64(sqe, kTagWake);
  io_uring_submit(&ring_);
}

bool LogState::work_available(bool disk) const {
  for (const auto& p : log_.producers_)
    if (disk ? p->past_half() : p->ring_.read_available() > 0) return true;
  if (stopping_.load(std::memory_order_relaxed)) return true;
  if (sync_req_seen_.load(std::memory_order_acquire) > sync_handled_) return true;
  return index_.deliveries_requested();
}

void LogState::run() {
  arm_wake();
  index_.top_up_chunks();
  for (;;) {
    create_tried_ = false;
    bool progress = apply_deliveries();
    progress |= pull();
    if (!inflight_ && !acc_->empty()) {
      submit();
      progress = true;
    }
    maybe_delete();
    maybe_cursors(false);
    progress |= reap(false);
    const uint64_t req = sync_req_seen_.load(std::memory_order_acquire);
    if (req > sync_handled_) {  // appends in flight do not matter: sync is about deliveries
      flush_deliveries();
      sync_handled_ = req;
      std::lock_guard<std::mutex> l(sync_mu_);
      sync_done_ = req;
      sync_cv_.notify_all();
    }
    if (progress) continue;
    if (inflight_) {
      // Waiting for the disk: a producer past half its ring or arena wakes us, so that its
      // records are copied into the next batch while this one is written and it never fills;
      // fewer records wait for the batch's completion (a wake per append here cost the
      // producers' threads a switch every few records when they share a core with us).
      // When the next batch cannot take more (full, or the segment is being sealed), waiting
      // records are no reason to wake: only the disk is.
      if (stalled_) {
        reap(true);
        continue;
      }
      log_.sleeping_.store(SpillLog::kDiskSleep, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!work_available(true)) reap(true);
      log_.sleeping_.store(SpillLog::kAwake, std::memory_order_relaxed);
      continue;
    }
    if (stopping_.load()) {
      bool rings_empty = true;
      for (const auto& p : log_.producers_)
        rings_empty = rings_empty && p->ring_.read_available() == 0;
      if (rings_empty && acc_->empty()) break;
      continue;
    }
    // Idle: announce it, look once more (pairs with the producers' fence), then block.
    log_.sleeping_.store(SpillLog::kIdleSleep, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!work_available(false)) reap(true);
    log_.sleeping_.store(SpillLog::kAwake, std::memory_order_relaxed);
  }
  flush_deliveries();
  std::lock_guard<std::mutex> l(sync_mu_);
  sync_done_ = sync_req_;
  sync_cv_.notify_all();
}

void LogState::flush_deliveries() {
  apply_deliveries();
  maybe_delete();
  maybe_cursors(true);
  maybe_delete();
}

bool LogState::reap(bool wait) {
  io_uring_cqe* cqe = nullptr;
  if (wait) {
    int r;
    do {
      r = io_uring_wait_cqe(&ring_, &cqe);
    } while (r == -EINTR);
    SLUICE_ASSERT(r == 0);
  } else if (io_uring_peek_cqe(&ring_, &cqe) != 0) {
    return false;
  }
  bool rearm = false;
  while (cqe) {
    switch (io_uring_cqe_get_data64(cqe)) {
      case kTagWake:
        rearm = true;
        break;
      case kTagWrite:
        write_res_ = cqe->res;
        --cqes_wanted_;
        break;
      case kTagSync:
        sync_res_ = cqe->res;
        --cqes_wanted_;
        break;
      default:
        SLUICE_ASSERT(false);
    }
    io_uring_cqe_seen(&ring_, cqe);
    if (io_uring_peek_cqe(&ring_, &cqe) != 0) cqe = nullptr;
  }
  if (rearm) arm_wake();
  if (inflight_ && cqes_wanted_ == 0) {
    const bool ok = write_res_ == int(fly_->write_len) && sync_res_ == 0;
    int err = 0;
    if (!ok)
      err =
          write_res_ < 0 ? -write_res_ : (write_res_ < int(fly_->write_len) ? ENOSPC : -sync_res_);
    on_batch_done(ok, err);
  }
  return true;
}

bool LogState::pull() {
  bool any = false;
  const uint64_t now = wall_ns();
  const uint32_t n = uint32_t(log_.producers_.size());
  for (uint32_t k = 0; k < n; ++k) {
    SpillProducer& p = *log_.producers_[(pull_start_ + k) % n];
    for (uint32_t i = 0; i < SpillOptions::kPullPerProducerMax && p.ring_.read_available(); ++i) {
      const AppendMsg m = p.ring_.front();
      if (place(p, m, now) == Place::kStall) {
        pull_start_ = (pull_start_ + k) % n;  // this producer first next time
        stalled_ = true;
        index_.fire_events();
        return any;
      }
      p.ring_.pop();
      p.tail_.store(m.arena_pos + m.total, std::memory_order_release);
      any = true;
    }
  }
  pull_start_ = (pull_start_ + 1) % n;
  stalled_ = false;
  index_.fire_events();
  return any;
}

LogState::Place LogState::place(SpillProducer& p, const AppendMsg& m, uint64_t now_ns) {
  if (acc_->entries.size() >= opt_.batch_records_max) return Place::kStall;
  const char* src = p.arena_.get() + m.arena_pos % p.arena_bytes_;
  auto refuse = [&](AppendStatus st) {
    acc_->entries.push_back({p.index_, st, 0, m.token, 0, 0, 0, 0});
    std::atomic<uint64_t>& c = st == AppendStatus::kQueueFull   ? metrics_.refused_queue_full
                               : st == AppendStatus::kSpillFull ? metrics_.refused_spill_full
                               : st == AppendStatus::kTooLarge  ? metrics_.refused_too_large
                                                                : metrics_.refused_disk;
    c.fetch_add(1, std::memory_order_relaxed);
    return Place::kDone;
  };
  const size_t rec = message_record_bytes(m.headers_len, m.body_len);
  if (m.headers_len + uint64_t(m.body_len) > opt_.record_bytes_max)
    return refuse(AppendStatus::kTooLarge);
  const uint32_t qi = index_.queue_index(std::string_view(src, m.vhost_len),
                                         std::string_view(src + m.vhost_len, m.queue_len));
  QueueState& q = index_.writer_queue(qi);
  const SpillLog::QueueLimits limits = queue_limits();
  if (rec > limits.bytes_max) return refuse(AppendStatus::kQueueFull);
  while (q.pending + q.backlog.size() + 1 > limits.messages_max ||
         q.pending_bytes + q.backlog_bytes + rec > limits.bytes_max) {
    if (opt_.on_full != OnFull::kDropOldest || q.backlog.empty())
      return refuse(AppendStatus::kQueueFull);
    index_.drop_oldest(qi);
    cursor_dirty_ = true;
  }
  if (active_ != 0 && index_.writer_segment(active_).sealing) return Place::kStall;
  if (active_ == 0) {
    if (create_tried_) return refuse(create_status_);
    create_tried_ = true;
    if (!create_segment(&create_status_)) return refuse(create_status_);
  }
  SegmentState& seg = index_.writer_segment(active_);
  if (!acc_->has_writes()) start_batch(seg);  // refusals may be in it: they are not laid out
  SLUICE_ASSERT(acc_->segment == active_);
  const bool define = q.defined_in != active_;
  const size_t need = rec + (define ? define_record_bytes(m.vhost_len, m.queue_len) : 0);
  if (acc_->used > 0 && acc_->used + need > opt_.batch_bytes_max) return Place::kStall;
  if (acc_->file_offset + acc_->used + need + kSealRecordBytes > opt_.segment_bytes) {
    // Full: the seal closes this segment in the same write; the record waits for the next.
    write_seal(seg);
    return Place::kStall;
  }
  if (define) write_define(m, src, qi);
  const uint64_t bytes = write_message(m, src + m.vhost_len + m.queue_len, qi, p.index_, now_ns);
  ++seg.placed;
  seg.last_seq = acc_->entries.back().seq;
  index_.add_pending(qi, bytes);
  return Place::kDone;
}

void LogState::write_seal(SegmentState& seg) {
  uint8_t* s = acc_->data() + acc_->used;
  RecordHeader h;
  h.length = uint32_t(kSealRecordBytes);
  h.type = RecordType::kSeal;
  h.seq = seg.last_seq;
  h.a_len = kSealPayloadBytes;
  encode_record_header(h, s);
  std::memcpy(s + kRecordHeaderBytes, &seg.placed, 8);
  acc_->used += seal_record(s, uint32_t(kSealRecordBytes));
  acc_->seals = true;
  seg.sealing = true;
}

void LogState::write_define(const AppendMsg& m, const char* names, uint32_t qi) {
  uint8_t* d = acc_->data() + acc_->used;
  RecordHeader h;
  h.length = uint32_t(kRecordHeaderBytes + m.vhost_len + m.queue_len);
  h.type = RecordType::kDefineQueue;
  h.queue_id = qi;
  h.a_len = m.vhost_len;
  h.b_len = m.queue_len;
  encode_record_header(h, d);
  std::memcpy(d + kRecordHeaderBytes, names, size_t(m.vhost_len) + m.queue_len);
  acc_->used += seal_record(d, h.length);
  index_.writer_queue(qi).defined_in = active_;
  acc_->defined.push_back(qi);
}

uint64_t LogState::write_message(const AppendMsg& m, const char* payload, uint32_t qi,
                                 uint32_t producer, uint64_t now_ns) {
  const uint64_t seq = next_seq_++;
  uint8_t* r = acc_->data() + acc_->used;
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
  acc_->entries.push_back({producer, AppendStatus::kDurable, qi, m.token, seq, now_ns,
                           uint32_t(acc_->file_offset + acc_->used), uint32_t(bytes)});
  acc_->used += bytes;
  return bytes;
}

void LogState::start_batch(SegmentState& seg) {
  acc_->segment = active_;
  acc_->file_offset = seg.write_end;
  acc_->direct = seg.file->direct_fd >= 0;
  acc_->lead = 0;
  if (!acc_->direct) return;
  const uint64_t base = seg.write_end & ~(kDirectBlockBytes - 1);
  acc_->lead = size_t(seg.write_end - base);
  if (acc_->lead == 0) return;
  if (tail_segment_ == active_ && tail_end_ == seg.write_end) {
    std::memcpy(acc_->buf, tail_block_, acc_->lead);
    return;
  }
  // First batch of a segment (its header) or after a failed batch: read the block's bytes.
  if (::pread(seg.file->fd, acc_->buf, acc_->lead, off_t(base)) != ssize_t(acc_->lead)) {
    acc_->direct = false;  // this batch goes buffered; the write reports any disk error
    acc_->lead = 0;
  }
}

void LogState::submit() {
  if (!acc_->has_writes()) {  // only refusals: answer them now
    complete_entries(acc_->entries);
    acc_->reset();
    return;
  }
  std::swap(acc_, fly_);
  SegmentState& seg = index_.writer_segment(fly_->segment);
  const int fd = fly_->direct ? seg.file->direct_fd : seg.file->fd;
  const uint8_t* from = fly_->data();
  uint64_t at = fly_->file_offset;
  fly_->write_len = fly_->used;
  const uint64_t end = fly_->file_offset + fly_->used;
  if (fly_->direct) {
    from = fly_->buf;
    at -= fly_->lead;
    const size_t len = fly_->lead + fly_->used;
    fly_->write_len = (len + kDirectBlockBytes - 1) & ~size_t(kDirectBlockBytes - 1);
    std::memset(fly_->buf + len, 0, fly_->write_len - len);
    // The next batch repeats the block this one ends in.
    const size_t last = size_t((end & ~(kDirectBlockBytes - 1)) - at);
    std::memcpy(tail_block_, fly_->buf + last, size_t(end - at) - last);
    tail_segment_ = fly_->segment;
    tail_end_ = end;
  }
  io_uring_sqe* w = io_uring_get_sqe(&ring_);
  SLUICE_ASSERT(w != nullptr);
  if (fly_->direct && buffers_registered_)
    io_uring_prep_write_fixed(w, fd, from, unsigned(fly_->write_len), at, int(fly_ - batches_));
  else
    io_uring_prep_write(w, fd, from, unsigned(fly_->write_len), at);
  io_uring_sqe_set_data64(w, kTagWrite);
  cqes_wanted_ = 1;
  if (fly_->direct) {
    w->rw_flags = RWF_DSYNC;
  } else {
    io_uring_sqe* s = io_uring_get_sqe(&ring_);
    SLUICE_ASSERT(s != nullptr);
    w->flags |= IOSQE_IO_LINK;
    io_uring_prep_fsync(s, fd, IORING_FSYNC_DATASYNC);
    io_uring_sqe_set_data64(s, kTagSync);
    cqes_wanted_ = 2;
  }
  io_uring_submit(&ring_);
  fly_->submit_ns = mono_ns();
  inflight_ = true;
  write_res_ = sync_res_ = 0;
  seg.write_end = end;
}

void LogState::on_batch_done(bool ok, int err) {
  const uint64_t lat = mono_ns() - fly_->submit_ns;
  metrics_.fsync_ns_sum.fetch_add(lat, std::memory_order_relaxed);
  bump_max(metrics_.fsync_ns_max, lat);
  const size_t bucket =
      std::min<size_t>(std::bit_width(lat / 1000), SpillMetrics::kFsyncBuckets - 1);
  metrics_.fsync_us_hist[bucket].fetch_add(1, std::memory_order_relaxed);
  inflight_ = false;
  SegmentState& seg = index_.writer_segment(fly_->segment);
  if (!ok) {
    fail_batches(status_of_errno(err));
    const std::string e = std::strerror(err);
    if (!disk_error_logged_)
      log_event(LogSeverity::kError, "spill_write_failed",
                {{"file", seg.file->path}, {"error", e}});
    disk_error_logged_ = true;
    index_.fire_events();
    return;
  }
  disk_error_logged_ = false;
  const uint64_t n = index_.make_durable(fly_->segment, fly_->file_offset + fly_->used,
                                         fly_->entries, fly_->seals);
  if (fly_->seals) active_ = 0;
  if (fly_->seals && seg.file->direct_fd >= 0) {
    // Nothing more is written to a sealed segment: its write descriptor goes now, not when the
    // segment is deleted, so a long backlog holds one descriptor per segment (the readers'),
    // as after a restart. The writer's lock goes with it; recovery needs it only while a write
    // may be in flight, and this one has completed.
    ::close(seg.file->direct_fd);
    seg.file->direct_fd = -1;
  }
  metrics_.appends.fetch_add(n, std::memory_order_relaxed);
  metrics_.append_bytes.fetch_add(fly_->used, std::memory_order_relaxed);
  metrics_.batches.fetch_add(1, std::memory_order_relaxed);
  if (fly_->direct) metrics_.batches_direct.fetch_add(1, std::memory_order_relaxed);
  metrics_.backlog_messages.fetch_add(n, std::memory_order_relaxed);
  bump_max(metrics_.batch_records_max, n);
  bump_max(metrics_.batch_bytes_max, fly_->used);
  // The next group commit goes out before this one is answered: posting completions and
  // waking producers takes time the disk should not wait for.
  std::swap(done_entries_, fly_->entries);
  fly_->reset();
  pull();  // what arrived since the last wake-up joins the next batch
  if (acc_->has_writes()) submit();
  complete_entries(done_entries_);
  done_entries_.clear();
  index_.fire_events();
  index_.top_up_chunks();  // while the next batch is written
}

void LogState::fail_batches(AppendStatus st) {
  SegmentState& seg = index_.writer_segment(fly_->segment);
  metrics_.disk_errors.fetch_add(1, std::memory_order_relaxed);
  // The accumulating batch was laid out after the failed one (offsets, queue definitions), so
  // it fails too; the next batch starts again at the last durable offset.
  for (Batch* b : {fly_, acc_}) {
    const uint64_t failed = index_.fail_pending(b->entries, b->defined, st);
    metrics_.refused_disk.fetch_add(failed, std::memory_order_relaxed);
  }
  // Whatever part of the write reached the file must not come back as records after a crash:
  // give the range back (reads as zeros) and make that durable.
  const uint64_t from = seg.durable_end, len = fly_->file_offset + fly_->used - from;
  const int fd = seg.file->fd;
  const int r = opt_.preallocate ? ::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                               off_t(from), off_t(len))
                                 : ::ftruncate(fd, off_t(from));
  if (r != 0 || ::fdatasync(fd) != 0) {
    // Cannot clean up: stop appending to this segment. It stays unsealed, so the next
    // recovery reports it rather than trusting it.
    const std::string e = std::strerror(errno);
    log_event(LogSeverity::kError, "spill_segment_abandoned",
              {{"file", seg.file->path}, {"error", e}});
    seg.sealed = true;
    active_ = 0;
  }
  seg.write_end = seg.durable_end;
  seg.placed = seg.messages;
  seg.sealing = false;
  complete_entries(fly_->entries);
  complete_entries(acc_->entries);
  fly_->reset();
  acc_->reset();
}

void LogState::complete_entries(const std::vector<BatchEntry>& entries) {
  for (const BatchEntry& e : entries) {
    SpillProducer& p = *log_.producers_[e.producer];
    const bool pushed = p.done_.try_push(Completion{e.token, e.seq, e.status});
    SLUICE_ASSERT(pushed);  // in flight never exceeds the completion ring's depth
    touched_[e.producer] = 1;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (uint32_t i = 0; i < touched_.size(); ++i) {
    if (!touched_[i]) continue;
    touched_[i] = 0;
    SpillProducer& p = *log_.producers_[i];
    if (p.waiting_.load(std::memory_order_relaxed) && p.waiting_.exchange(false)) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t r = ::write(p.notify_fd_, &one, sizeof one);
    }
  }
}

}  // namespace sluice::queue
