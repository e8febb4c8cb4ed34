// SpillLog: opening (recovery into backlogs), the read side for the drainer, statistics, and
// the cursor writer thread. The spill thread's loop is in spill_thread.cc.
#include "queue/spill_log.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "queue/format.h"
#include "queue/log_state.h"
#include "queue/recovery.h"

namespace sluice::queue {

std::string_view append_status_message(AppendStatus s) {
  switch (s) {
    case AppendStatus::kDurable:
      return "durable";
    case AppendStatus::kSpillFull:
      return "spill full";
    case AppendStatus::kQueueFull:
      return "spill full: queue limit reached";
    case AppendStatus::kDiskFull:
      return "spill full: no space left on the spill disk";
    case AppendStatus::kDiskError:
      return "spill disk error";
    case AppendStatus::kTooLarge:
      return "message too large for the spill log";
    case AppendStatus::kStopping:
      return "spill log shutting down";
  }
  return "spill error";
}

SegmentFile::~SegmentFile() {
  if (fd >= 0) ::close(fd);
  if (direct_fd >= 0) ::close(direct_fd);
}

// ---- cursor writer -------------------------------------------------------------------------

CursorWriter::CursorWriter(std::string dir, SpillMetrics& metrics, std::function<void()> done)
    : dir_(std::move(dir)), metrics_(metrics), done_(std::move(done)), thread_([this] { run(); }) {}

CursorWriter::~CursorWriter() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CursorWriter::submit(CursorSnapshot s, uint64_t gen) {
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_ = std::move(s);
    pending_gen_ = gen;
    has_ = true;
  }
  cv_.notify_all();
}

std::string CursorWriter::last_error() {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

void CursorWriter::run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return has_ || stop_; });
    if (!has_) return;
    CursorSnapshot s = std::move(pending_);
    const uint64_t gen = pending_gen_;
    has_ = false;
    l.unlock();
    write(s, gen);
    l.lock();
    if (done_) done_();
  }
}

bool CursorWriter::write_now(const CursorSnapshot& s, uint64_t gen) {
  return write(s, gen);
}

bool CursorWriter::write(const CursorSnapshot& s, uint64_t gen) {
  std::lock_guard<std::mutex> f(file_mu_);
  bool ok = true;
  // A newer snapshot already written (by write_now) must not be replaced by an older one.
  if (gen > persisted_.load(std::memory_order_relaxed)) {
    Result<> written = write_cursor_file(dir_, s);
    if (written) {
      metrics_.cursor_writes.fetch_add(1, std::memory_order_relaxed);
      persisted_.store(gen, std::memory_order_release);
    } else {
      ok = false;
      metrics_.cursor_write_errors.fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> l(mu_);
      error_ = std::move(written.error().message);
    }
  }
  if (gen > finished_.load(std::memory_order_relaxed))
    finished_.store(gen, std::memory_order_release);
  return ok;
}

// ---- state helpers -------------------------------------------------------------------------

LogState::LogState(SpillLog& l, SpillOptions o)
    : log(l),
      opt(std::move(o)),
      metrics(l.metrics_),
      queue_messages_max(opt.queue_messages_max),
      queue_bytes_max(opt.queue_bytes_max),
      max_bytes(opt.max_bytes) {}

LogState::~LogState() {
  writer.reset();
  preparer.reset();
  if (ring_ok) io_uring_queue_exit(&ring);
  for (Batch& b : batches)
    std::free(b.buf);
  std::free(tail_block);
}

void LogState::make_key(std::string& key, std::string_view vhost, std::string_view queue) {
  key.clear();
  const uint16_t n = uint16_t(vhost.size());
  key.append(reinterpret_cast<const char*>(&n), 2);
  key.append(vhost);
  key.append(queue);
}

QueueState* LogState::find_queue(std::string_view vhost, std::string_view queue) const {
  std::string k;
  make_key(k, vhost, queue);
  auto it = ids.find(k);
  return it == ids.end() ? nullptr : queues[it->second].get();
}

uint32_t LogState::queue_index(std::string_view vhost, std::string_view queue) {
  make_key(key, vhost, queue);
  auto it = ids.find(key);
  if (it != ids.end()) return it->second;
  const uint32_t i = uint32_t(queues.size());
  auto q = std::make_unique<QueueState>(&chunks);
  q->vhost = std::string(vhost);
  q->queue = std::string(queue);
  queues.push_back(std::move(q));
  ids.emplace(key, i);
  return i;
}

void LogState::note_backlog(uint32_t qi) {
  QueueState& q = *queues[qi];
  const bool now = q.pending + q.backlog.size() > 0;
  if (now != q.nonempty) {
    q.nonempty = now;
    events.emplace_back(qi, now);
  }
}

void LogState::fire_events() {
  if (events.empty()) return;
  if (opt.on_backlog) {
    for (auto [qi, nonempty] : events) {
      const QueueState& q = writer_queue(qi);  // pruned only when empty and reported, after this
      opt.on_backlog(BacklogEvent{q.vhost, q.queue, nonempty});
    }
  }
  events.clear();
}

void LogState::log_event(LogSeverity s, std::string_view event, std::initializer_list<LogField> f) {
  if (opt.log) opt.log(s, event, std::span<const LogField>(f.begin(), f.size()));
}

// ---- open ----------------------------------------------------------------------------------

namespace {

Result<> validate(const SpillOptions& o) {
  const uint64_t record_need = define_record_bytes(kVhostBytesMax, kQueueBytesMax) +
                               message_record_bytes(o.record_bytes_max, 0) + kSealRecordBytes;
  if (o.dir.empty()) return failure("spill.dir is empty");
  if (o.producers == 0 || o.producers > SpillOptions::kProducersMax)
    return failure("producers must be 1.." + std::to_string(SpillOptions::kProducersMax));
  if (o.record_bytes_max == 0 || o.record_bytes_max > kRecordPayloadBytesMax)
    return failure("record_bytes_max must be 1.." + std::to_string(kRecordPayloadBytesMax));
  if (o.segment_bytes < kSegmentHeaderBytes + record_need || o.segment_bytes > (1ull << 32))
    return failure(
        "spill.segment_bytes must hold one largest record (record_bytes_max plus 1.4 KiB) "
        "and be at most 4 GiB");
  if (o.max_bytes < 2 * o.segment_bytes)
    return failure("spill.max_bytes must be at least 2 segments");
  if (o.batch_bytes_max < 4096) return failure("batch_bytes_max must be at least 4096");
  if (o.batch_records_max == 0) return failure("batch_records_max must be at least 1");
  if (o.producer_ring_depth < 2) return failure("producer_ring_depth must be at least 2");
  if (o.producer_arena_bytes < o.record_bytes_max + kVhostBytesMax + kQueueBytesMax)
    return failure("producer_arena_bytes must hold one largest record plus its names");
  return {};
}

// Creates the spill directory if needed and takes it for this process (DIR/lock).
Result<> lock_spill_dir(LogState& s) {
  const std::string& dir = s.opt.dir;
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return failure("cannot create spill directory " + dir + ": " + std::strerror(errno));
  }
  const std::string lock = dir + "/lock";
  s.lock_fd.reset(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640));
  if (!s.lock_fd.valid() || ::flock(s.lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    return failure("cannot lock " + lock + " (" + std::strerror(errno) +
                   "): is another sluiced using this spill directory?");
  }
  // Segment creations and deletions are durable once the directory is fsynced through this.
  s.dir_fd.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!s.dir_fd.valid()) {
    return failure("cannot open spill directory " + dir + ": " + std::strerror(errno));
  }
  return {};
}

// The queue index in `s` of each recovered queue name, each queue given its delivery cursor.
std::vector<uint32_t> adopt_queues(LogState& s, const RecoveredLog& rec,
                                   const CursorSnapshot& cursors) SLUICE_REQUIRES(s.mu) {
  std::unordered_map<std::string, uint64_t> cursor_of;
  for (const CursorEntry& c : cursors.entries) {
    LogState::make_key(s.key, c.vhost, c.queue);
    cursor_of[s.key] = c.delivered_seq;
  }
  std::vector<uint32_t> qmap(rec.queue_names.size());
  for (size_t i = 0; i < rec.queue_names.size(); ++i) {
    qmap[i] = s.queue_index(rec.queue_names[i].first, rec.queue_names[i].second);
    auto it = cursor_of.find(s.key);
    if (it != cursor_of.end()) s.queues[qmap[i]]->cursor = it->second;
  }
  return qmap;
}

// Takes over the recovered segments: messages at or below their queue's cursor are counted as
// delivered, the rest rebuild the queues' backlogs. Returns the segments' bytes on disk.
uint64_t adopt_segments(LogState& s, RecoveredLog& rec, const std::vector<uint32_t>& qmap,
                        RecoveryReport* report) SLUICE_REQUIRES(s.mu) {
  uint64_t disk = 0;
  for (RecoveredSegment& rs : rec.segments) {
    SegmentState seg;
    seg.file = std::make_shared<SegmentFile>();
    seg.file->number = rs.number;
    seg.file->path = rs.path;
    seg.file->fd = rs.fd;
    seg.messages = rs.messages.size();
    seg.last_seq = rs.messages.empty() ? 0 : rs.messages.back().seq;
    seg.durable_end = seg.write_end = seg.disk_bytes = rs.file_bytes;
    seg.sealed = true;  // recovery sealed the last one; new appends go to a new segment
    disk += rs.file_bytes;
    for (const ScannedMessage& m : rs.messages) {
      const uint32_t qi = qmap[rs.queue_of_define[m.define]];
      QueueState& q = *s.queues[qi];
      q.last_segment = rs.number;
      if (m.seq <= q.cursor) {
        ++report->messages_delivered;
        continue;
      }
      q.backlog.push_back({m.seq, m.append_unix_ns, rs.number, m.offset, m.bytes});
      q.backlog_bytes += m.bytes;
      ++seg.live;
      ++report->messages;
    }
    s.segments.emplace(rs.number, std::move(seg));
  }
  return disk;
}

// Fully delivered segments go now (the cursor file that says so is already on disk); the
// newest stays, its header carries the sequence high-water mark.
void delete_delivered_segments(LogState& s, RecoveryReport* report) SLUICE_REQUIRES(s.mu) {
  for (auto it = s.segments.begin(); it != s.segments.end();) {
    auto next = std::next(it);
    if (it->second.live == 0 && next != s.segments.end()) {
      ++report->segments_deleted;
      s.delete_segment_locked(it);
    }
    it = next;
  }
}

// Counts the recovered backlogs into the report and the metrics, queues the backlog events,
// and logs every issue and the summary.
void report_recovery(LogState& s, RecoveryReport* report) {
  uint64_t backlog = 0;
  {
    base::MutexLock l(s.mu);
    for (uint32_t qi = 0; qi < s.queues.size(); ++qi) {
      if (!s.queues[qi]) continue;
      backlog += s.queues[qi]->backlog.size();
      if (!s.queues[qi]->backlog.empty()) ++report->queues;
      s.note_backlog(qi);
    }
  }
  s.metrics.backlog_messages.store(backlog, std::memory_order_relaxed);
  s.metrics.recovered_messages.store(report->messages, std::memory_order_relaxed);
  s.metrics.recovery_issues.store(report->issues.size(), std::memory_order_relaxed);
  for (const RecoveryIssue& i : report->issues) {
    const std::string seg = std::to_string(i.segment), off = std::to_string(i.offset),
                      bytes = std::to_string(i.bytes), recs = std::to_string(i.records);
    s.log_event(i.torn_tail ? LogSeverity::kWarn : LogSeverity::kError, "spill_recovery_skipped",
                {{"file", i.path},
                 {"offset", off},
                 {"bytes", bytes},
                 {"records", recs},
                 {"reason", i.reason},
                 {"kept_as", i.quarantined_as}});
  }
  s.log_event(LogSeverity::kInfo, "spill_recovered",
              {{"dir", s.opt.dir},
               {"segments", std::to_string(report->segments)},
               {"messages", std::to_string(report->messages)},
               {"issues", std::to_string(report->issues.size())}});
}

// The two batch buffers, sized for a direct write, and the block a direct batch repeats.
void allocate_batches(LogState& s) {
  const size_t record_need = define_record_bytes(kVhostBytesMax, kQueueBytesMax) +
                             message_record_bytes(s.opt.record_bytes_max, 0) + kSealRecordBytes;
  for (Batch& b : s.batches) {
    // Room for a direct batch's lead and padding: a block on each side.
    b.cap = (size_t(s.opt.batch_bytes_max) + record_need + 4095) & ~size_t(4095);
    b.cap += 2 * kDirectBlockBytes;
    b.buf = static_cast<uint8_t*>(std::aligned_alloc(kDirectBlockBytes, b.cap));
    b.entries.reserve(s.opt.batch_records_max);
  }
  s.tail_block = static_cast<uint8_t*>(std::aligned_alloc(kDirectBlockBytes, kDirectBlockBytes));
  // Registered once, so a direct write does not pin the batch's pages each time; without it
  // (RLIMIT_MEMLOCK on older kernels) direct writes pin per write.
  iovec iov[2];
  for (int i = 0; i < 2; ++i)
    iov[i] = {s.batches[i].buf, s.batches[i].cap};
  s.buffers_registered = io_uring_register_buffers(&s.ring, iov, 2) == 0;
}

}  // namespace

SpillLog::SpillLog(SpillOptions options)
    : st_(std::make_unique<LogState>(*this, std::move(options))) {}

const SpillOptions& SpillLog::options() const {
  return st_->opt;
}

Result<> SpillLog::set_queue_limits(uint64_t messages_max, uint64_t bytes_max) {
  if (messages_max == 0) return failure("spill.queue_messages_max must be at least 1");
  if (bytes_max == 0) return failure("spill.queue_bytes_max must be at least 1");
  st_->queue_messages_max.store(messages_max, std::memory_order_relaxed);
  st_->queue_bytes_max.store(bytes_max, std::memory_order_relaxed);
  return {};
}

Result<> SpillLog::set_max_bytes(uint64_t max_bytes) {
  if (max_bytes / 2 < st_->opt.segment_bytes) {
    return failure("spill.max_bytes must be at least two segments: 2 x spill.segment_bytes = " +
                   std::to_string(2 * st_->opt.segment_bytes));
  }
  st_->max_bytes.store(max_bytes, std::memory_order_relaxed);
  return {};
}

uint64_t SpillLog::max_bytes() const {
  return st_->max_bytes.load(std::memory_order_relaxed);
}

SpillLog::QueueLimits SpillLog::queue_limits() const {
  return {st_->queue_messages_max.load(std::memory_order_relaxed),
          st_->queue_bytes_max.load(std::memory_order_relaxed)};
}

Result<std::unique_ptr<SpillLog>> SpillLog::open(SpillOptions options, RecoveryReport* report) {
  *report = RecoveryReport{};
  if (Result<> r = validate(options); !r) return failure("spill options: " + r.error().message);
  std::unique_ptr<SpillLog> log(new SpillLog(std::move(options)));
  LogState& s = *log->st_;
  const std::string& dir = s.opt.dir;
  if (auto locked = lock_spill_dir(s); !locked) return tl::unexpected(locked.error());
  Result<CursorSnapshot> read_cursors = read_cursor_file(dir);
  if (!read_cursors) return tl::unexpected(std::move(read_cursors.error()));
  CursorSnapshot cursors = std::move(*read_cursors);
  RecoveredLog rec;
  if (auto recovered = recover_dir(s.opt, &rec, report); !recovered) {
    return tl::unexpected(recovered.error());
  }

  {
    // No other thread runs yet; the lock is what the helpers' annotations ask for.
    base::MutexLock l(s.mu);
    const std::vector<uint32_t> qmap = adopt_queues(s, rec, cursors);
    const uint64_t disk = adopt_segments(s, rec, qmap, report);
    s.next_seq = std::max(rec.seq_max, cursors.seq_high) + 1;
    s.next_segment = rec.segment_max + 1;
    s.metrics.disk_bytes.store(disk, std::memory_order_relaxed);
    delete_delivered_segments(s, report);
  }
  report_recovery(s, report);
  s.fire_events();

  if (int e = io_uring_queue_init(16, &s.ring, 0); e < 0) {
    return failure(std::string("io_uring_queue_init: ") + std::strerror(-e));
  }
  s.ring_ok = true;
  // The spill thread sleeps on a read of it: without it nothing would wake the thread.
  log->wake_fd_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!log->wake_fd_.valid()) return failure(std::string("eventfd: ") + std::strerror(errno));
  allocate_batches(s);
  s.touched.assign(s.opt.producers, 0);
  for (uint32_t i = 0; i < s.opt.producers; ++i)
    log->producers_.emplace_back(
        new SpillProducer(*log, i, s.opt.producer_ring_depth, s.opt.producer_arena_bytes));
  SpillLog* raw = log.get();
  auto wake = [raw] {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(raw->wake_fd_.get(), &one, sizeof one);
  };
  s.writer = std::make_unique<CursorWriter>(dir, s.metrics, wake);
  s.preparer = std::make_unique<SegmentPreparer>(dir, s.dir_fd.get(), s.opt.segment_bytes,
                                                 s.opt.preallocate, wake);
  return log;
}

SpillLog::~SpillLog() {
  stop();
  st_.reset();
  producers_.clear();
}

void SpillLog::wake() {
  if (sleeping_.exchange(kAwake) != kAwake) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_fd_.get(), &one, sizeof one);
  }
}

void SpillLog::start() {
  if (st_->thread.joinable()) return;
  st_->thread = std::thread([s = st_.get()] { s->run(); });
}

void SpillLog::stop() {
  if (!st_ || !st_->thread.joinable()) return;
  st_->stopping.store(true);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(wake_fd_.get(), &one, sizeof one);
  st_->thread.join();
}

void SpillLog::sync() {
  LogState& s = *st_;
  std::unique_lock<std::mutex> l(s.sync_mu);
  const uint64_t target = ++s.sync_req;
  s.sync_req_seen.store(target, std::memory_order_release);
  uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(wake_fd_.get(), &one, sizeof one);
  s.sync_cv.wait(l, [&] { return s.sync_done >= target || !s.thread.joinable(); });
}

// ---- read side -----------------------------------------------------------------------------

size_t SpillLog::locate(std::string_view vhost, std::string_view queue, uint64_t after_seq,
                        std::span<RecordLocation> out) const {
  const LogState& s = *st_;
  base::MutexLock l(s.mu);
  const QueueState* q = s.find_queue(vhost, queue);
  if (!q || out.empty()) return 0;
  size_t n = 0;
  const SegmentState* seg = nullptr;
  for (size_t i = q->backlog.upper_bound(after_seq); i < q->backlog.size() && n < out.size();
       ++i, ++n) {
    const Entry& e = q->backlog[i];
    if (!seg || seg->file->number != e.segment) seg = &s.segments.at(e.segment);
    out[n] = RecordLocation{seg->file, e.seq, e.offset, e.bytes};
  }
  return n;
}

ReadStatus SpillLog::read(const RecordLocation& loc, std::span<uint8_t> buf,
                          RecordView* out) const {
  if (buf.size() < loc.bytes) return ReadStatus::kBufferTooSmall;
  size_t done = 0;
  while (done < loc.bytes) {
    const ssize_t r =
        ::pread(loc.file->fd, buf.data() + done, loc.bytes - done, off_t(loc.offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return ReadStatus::kIoError;
    done += size_t(r);
  }
  RecordHeader h;
  if (decode_record(buf.first(loc.bytes), &h) != RecordCheck::kOk ||
      h.type != RecordType::kMessage || h.seq != loc.seq)
    return ReadStatus::kDamaged;
  const char* p = reinterpret_cast<const char*>(buf.data()) + kRecordHeaderBytes;
  *out = RecordView{h.seq, h.append_unix_ns, std::string_view(p, h.a_len),
                    std::string_view(p + h.a_len, h.b_len)};
  return ReadStatus::kOk;
}

bool SpillLog::mark_delivered(std::string_view vhost, std::string_view queue, uint64_t seq) {
  LogState& s = *st_;
  {
    base::MutexLock l(s.mu);
    QueueState* q = s.find_queue(vhost, queue);
    if (!q) return false;
    if (seq <= q->delivered_req) return true;
    q->delivered_req = seq;
    if (!q->delivered_dirty) {
      q->delivered_dirty = true;
      s.make_key(s.key, vhost, queue);
      s.delivered_list.push_back(s.ids.at(s.key));
    }
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_relaxed) != kAwake) wake();
  return true;
}

namespace {
QueueStats stats_of(const QueueState& q) {
  QueueStats st{q.vhost, q.queue, q.backlog.size(), q.backlog_bytes, q.pending, 0, 0, q.cursor};
  if (!q.backlog.empty()) {
    st.oldest_seq = q.backlog.front().seq;
    st.oldest_append_unix_ns = q.backlog.front().append_unix_ns;
  }
  return st;
}
}  // namespace

std::vector<QueueStats> SpillLog::queues() const {
  base::MutexLock l(st_->mu);
  std::vector<QueueStats> out;
  for (const auto& q : st_->queues)
    if (q) out.push_back(stats_of(*q));
  return out;
}

std::optional<QueueStats> SpillLog::queue(std::string_view vhost, std::string_view queue) const {
  base::MutexLock l(st_->mu);
  const QueueState* q = st_->find_queue(vhost, queue);
  if (!q) return std::nullopt;
  return stats_of(*q);
}

}  // namespace sluice::queue
