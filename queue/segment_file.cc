// Segment file creation, on the spill thread or ahead of time on the preparer thread.
#include "queue/segment_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "queue/format.h"
#include "queue/recovery.h"

namespace sluice::queue {

int create_segment_file(const std::string& dir, int dir_fd, uint64_t number, uint64_t first_seq,
                        uint64_t segment_bytes, bool preallocate, int* out) {
  const std::string path = dir + "/" + segment_file_name(number);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
  if (fd < 0) return errno;
  int err = 0;
  if (preallocate) err = ::posix_fallocate(fd, 0, off_t(segment_bytes));
  if (!err) {
    SegmentHeader h;
    h.segment = number;
    h.first_seq = first_seq;
    h.created_unix_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count());
    h.segment_bytes = segment_bytes;
    uint8_t hdr[kSegmentHeaderBytes];
    encode_segment_header(h, hdr);
    // The header and the directory entry are durable before any record is acknowledged in it.
    errno = 0;
    if (::pwrite(fd, hdr, sizeof hdr, 0) != ssize_t(sizeof hdr))
      err = errno ? errno : ENOSPC;
    else if (::fdatasync(fd) != 0 || (dir_fd >= 0 && ::fsync(dir_fd) != 0))
      err = errno;
  }
  if (err) {
    ::close(fd);
    ::unlink(path.c_str());
    return err;
  }
  *out = fd;
  return 0;
}

SegmentPreparer::SegmentPreparer(std::string dir, int dir_fd, uint64_t segment_bytes,
                                 bool preallocate, std::function<void()> done)
    : dir_(std::move(dir)),
      dir_fd_(dir_fd),
      segment_bytes_(segment_bytes),
      preallocate_(preallocate),
      done_(std::move(done)),
      thread_([this] { run(); }) {}

SegmentPreparer::~SegmentPreparer() {
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return state_ != State::kBusy; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (state_ == State::kReady) {
    ::close(fd_);
    ::unlink((dir_ + "/" + segment_file_name(number_)).c_str());
  }
}

void SegmentPreparer::request(uint64_t number, uint64_t first_seq) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (state_ != State::kIdle) return;
    number_ = number;
    first_seq_ = first_seq;
    state_ = State::kBusy;
  }
  cv_.notify_all();
}

SegmentPreparer::State SegmentPreparer::state() {
  std::lock_guard<std::mutex> l(mu_);
  return state_;
}

SegmentPreparer::State SegmentPreparer::take(uint64_t* number, int* fd, int* err) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return state_ != State::kBusy; });
  const State s = state_;
  *number = number_;
  *fd = fd_;
  *err = err_;
  fd_ = -1;
  if (s != State::kIdle) state_ = State::kIdle;
  return s;
}

namespace {
int ofd_lock(int fd, short type, bool wait) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file, however long
  int r;
  do {
    r = ::fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
  } while (r != 0 && errno == EINTR);
  return r == 0 ? 0 : errno;
}
}  // namespace

bool hold_writer_lock(int fd) {
  return ofd_lock(fd, F_WRLCK, false) == 0;
}

int wait_for_writers(int fd) {
  if (const int e = ofd_lock(fd, F_RDLCK, true)) return e;
  return ofd_lock(fd, F_UNLCK, false);
}

void SegmentPreparer::run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return state_ == State::kBusy || stop_; });
    if (stop_) return;
    const uint64_t number = number_, first_seq = first_seq_;
    l.unlock();
    int fd = -1;
    const int err =
        create_segment_file(dir_, dir_fd_, number, first_seq, segment_bytes_, preallocate_, &fd);
    l.lock();
    fd_ = fd;
    err_ = err;
    state_ = err ? State::kFailed : State::kReady;
    cv_.notify_all();
    if (done_) done_();
  }
}

}  // namespace sluice::queue
