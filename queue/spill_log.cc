// SpillLog and LogState: opening (recovery into the index, then what the writes need), the
// thread's start and stop, the live limits, the read side for the drainer, and the cursor
// writer thread. The spill thread's loop is in spill_thread.cc, its space keeping in
// spill_space.cc, the index it shares in log_index.cc.
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

}  // namespace

// ---- LogState: opening, the thread, the live limits -----------------------------------------

LogState::LogState(SpillLog& l, SpillOptions o)
    : log_(l),
      opt_(std::move(o)),
      metrics_(l.metrics_),
      index_(opt_, metrics_),
      queue_messages_max_(opt_.queue_messages_max),
      queue_bytes_max_(opt_.queue_bytes_max),
      max_bytes_(opt_.max_bytes) {}

LogState::~LogState() {
  writer_.reset();
  preparer_.reset();
  if (ring_ok_) io_uring_queue_exit(&ring_);
  for (Batch& b : batches_)
    std::free(b.buf);
  std::free(tail_block_);
}

Result<> LogState::recover(RecoveryReport* report) {
  if (Result<> locked = lock_dir(); !locked) return locked;
  Result<CursorSnapshot> cursors = read_cursor_file(opt_.dir);
  if (!cursors) return tl::unexpected(std::move(cursors.error()));
  RecoveredLog rec;
  if (Result<> recovered = recover_dir(opt_, &rec, report); !recovered) return recovered;
  index_.adopt(rec, *cursors, report);
  next_seq_ = std::max(rec.seq_max, cursors->seq_high) + 1;
  next_segment_ = rec.segment_max + 1;
  report_recovery(report);
  index_.fire_events();
  return {};
}

// Creates the spill directory if needed and takes it for this process (DIR/lock).
Result<> LogState::lock_dir() {
  const std::string& dir = opt_.dir;
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return failure("cannot create spill directory " + dir + ": " + std::strerror(errno));
  }
  const std::string lock = dir + "/lock";
  lock_fd_.reset(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640));
  if (!lock_fd_.valid() || ::flock(lock_fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    return failure("cannot lock " + lock + " (" + std::strerror(errno) +
                   "): is another sluiced using this spill directory?");
  }
  // Segment creations and deletions are durable once the directory is fsynced through this.
  dir_fd_.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd_.valid()) {
    return failure("cannot open spill directory " + dir + ": " + std::strerror(errno));
  }
  return {};
}

// Counts the recovered backlogs into the report and the metrics, queues the backlog events,
// and logs every issue and the summary.
void LogState::report_recovery(RecoveryReport* report) {
  metrics_.backlog_messages.store(index_.count_backlogs(report), std::memory_order_relaxed);
  metrics_.recovered_messages.store(report->messages, std::memory_order_relaxed);
  metrics_.recovery_issues.store(report->issues.size(), std::memory_order_relaxed);
  for (const RecoveryIssue& i : report->issues) {
    const std::string seg = std::to_string(i.segment), off = std::to_string(i.offset),
                      bytes = std::to_string(i.bytes), recs = std::to_string(i.records);
    log_event(i.torn_tail ? LogSeverity::kWarn : LogSeverity::kError, "spill_recovery_skipped",
              {{"file", i.path},
               {"offset", off},
               {"bytes", bytes},
               {"records", recs},
               {"reason", i.reason},
               {"kept_as", i.quarantined_as}});
  }
  log_event(LogSeverity::kInfo, "spill_recovered",
            {{"dir", opt_.dir},
             {"segments", std::to_string(report->segments)},
             {"messages", std::to_string(report->messages)},
             {"issues", std::to_string(report->issues.size())}});
}

Result<> LogState::prepare_writes(const std::function<void()>& wake) {
  if (int e = io_uring_queue_init(16, &ring_, 0); e < 0) {
    return failure(std::string("io_uring_queue_init: ") + std::strerror(-e));
  }
  ring_ok_ = true;
  allocate_batches();
  touched_.assign(opt_.producers, 0);
  writer_ = std::make_unique<CursorWriter>(opt_.dir, metrics_, wake);
  preparer_ = std::make_unique<SegmentPreparer>(opt_.dir, dir_fd_.get(), opt_.segment_bytes,
                                                opt_.preallocate, wake);
  return {};
}

// The two batch buffers, sized for a direct write, and the block a direct batch repeats.
void LogState::allocate_batches() {
  const size_t record_need = define_record_bytes(kVhostBytesMax, kQueueBytesMax) +
                             message_record_bytes(opt_.record_bytes_max, 0) + kSealRecordBytes;
  for (Batch& b : batches_) {
    // Room for a direct batch's lead and padding: a block on each side.
    b.cap = (size_t(opt_.batch_bytes_max) + record_need + 4095) & ~size_t(4095);
    b.cap += 2 * kDirectBlockBytes;
    b.buf = static_cast<uint8_t*>(std::aligned_alloc(kDirectBlockBytes, b.cap));
    b.entries.reserve(opt_.batch_records_max);
  }
  tail_block_ = static_cast<uint8_t*>(std::aligned_alloc(kDirectBlockBytes, kDirectBlockBytes));
  // Registered once, so a direct write does not pin the batch's pages each time; without it
  // (RLIMIT_MEMLOCK on older kernels) direct writes pin per write.
  iovec iov[2];
  for (int i = 0; i < 2; ++i)
    iov[i] = {batches_[i].buf, batches_[i].cap};
  buffers_registered_ = io_uring_register_buffers(&ring_, iov, 2) == 0;
}

void LogState::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void LogState::stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  log_.kick();
  thread_.join();
}

void LogState::sync() {
  std::unique_lock<std::mutex> l(sync_mu_);
  const uint64_t target = ++sync_req_;
  sync_req_seen_.store(target, std::memory_order_release);
  log_.kick();
  sync_cv_.wait(l, [&] { return sync_done_ >= target || !thread_.joinable(); });
}

SpillLog::QueueLimits LogState::queue_limits() const {
  return {queue_messages_max_.load(std::memory_order_relaxed),
          queue_bytes_max_.load(std::memory_order_relaxed)};
}

void LogState::set_queue_limits(SpillLog::QueueLimits limits) {
  queue_messages_max_.store(limits.messages_max, std::memory_order_relaxed);
  queue_bytes_max_.store(limits.bytes_max, std::memory_order_relaxed);
}

// ---- SpillLog ------------------------------------------------------------------------------

SpillLog::SpillLog(SpillOptions options)
    : st_(std::make_unique<LogState>(*this, std::move(options))) {}

const SpillOptions& SpillLog::options() const {
  return st_->options();
}

Result<> SpillLog::set_queue_limits(uint64_t messages_max, uint64_t bytes_max) {
  if (messages_max == 0) return failure("spill.queue_messages_max must be at least 1");
  if (bytes_max == 0) return failure("spill.queue_bytes_max must be at least 1");
  st_->set_queue_limits({messages_max, bytes_max});
  return {};
}

Result<> SpillLog::set_max_bytes(uint64_t max_bytes) {
  const uint64_t segment = st_->options().segment_bytes;
  if (max_bytes / 2 < segment) {
    return failure("spill.max_bytes must be at least two segments: 2 x spill.segment_bytes = " +
                   std::to_string(2 * segment));
  }
  st_->set_max_bytes(max_bytes);
  return {};
}

uint64_t SpillLog::max_bytes() const {
  return st_->max_bytes();
}

SpillLog::QueueLimits SpillLog::queue_limits() const {
  return st_->queue_limits();
}

Result<std::unique_ptr<SpillLog>> SpillLog::open(SpillOptions options, RecoveryReport* report) {
  *report = RecoveryReport{};
  if (Result<> r = validate(options); !r) return failure("spill options: " + r.error().message);
  std::unique_ptr<SpillLog> log(new SpillLog(std::move(options)));
  if (Result<> recovered = log->st_->recover(report); !recovered) {
    return tl::unexpected(std::move(recovered.error()));
  }
  // The spill thread sleeps on a read of it: without it nothing would wake the thread.
  log->wake_fd_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!log->wake_fd_.valid()) return failure(std::string("eventfd: ") + std::strerror(errno));
  const SpillOptions& opt = log->options();
  for (uint32_t i = 0; i < opt.producers; ++i)
    log->producers_.emplace_back(
        new SpillProducer(*log, i, opt.producer_ring_depth, opt.producer_arena_bytes));
  SpillLog* raw = log.get();
  if (Result<> prepared = log->st_->prepare_writes([raw] { raw->kick(); }); !prepared) {
    return tl::unexpected(std::move(prepared.error()));
  }
  return log;
}

SpillLog::~SpillLog() {
  stop();
  st_.reset();
  producers_.clear();
}

void SpillLog::kick() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(wake_fd_.get(), &one, sizeof one);
}

void SpillLog::wake() {
  if (sleeping_.exchange(kAwake) != kAwake) kick();
}

void SpillLog::start() {
  st_->start();
}

void SpillLog::stop() {
  if (st_) st_->stop();
}

void SpillLog::sync() {
  st_->sync();
}

// ---- read side -----------------------------------------------------------------------------

size_t SpillLog::locate(std::string_view vhost, std::string_view queue, uint64_t after_seq,
                        std::span<RecordLocation> out) const {
  return st_->index().locate(vhost, queue, after_seq, out);
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
  if (!st_->index().request_delivered(vhost, queue, seq)) return false;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_relaxed) != kAwake) wake();
  return true;
}

std::vector<QueueStats> SpillLog::queues() const {
  return st_->index().stats();
}

std::optional<QueueStats> SpillLog::queue(std::string_view vhost, std::string_view queue) const {
  return st_->index().stats(vhost, queue);
}

}  // namespace sluice::queue
