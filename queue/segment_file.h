// Creating segment files: the one function that makes a new, durable, empty segment, and the
// helper thread that prepares the next segment while the current one fills, so a rollover
// does not stall the group commit on fallocate + fdatasync + directory fsync.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace sluice::queue {

// Creates DIR/<number>.seg: preallocated (when asked), header written, file and directory
// entry durable. Returns 0 and the open O_RDWR fd, or an errno (nothing left behind).
int create_segment_file(const std::string& dir, int dir_fd, uint64_t number, uint64_t first_seq,
                        uint64_t segment_bytes, bool preallocate, int* fd);

// The descriptor a segment's batches are written through holds an OFD write lock on the whole
// file, and recovery waits for that lock before it reads a segment. A write in flight when its
// process died (SIGKILL, crash) still completes afterwards, and the open file description, with
// its lock, lives until it has: without the wait, recovery could read a segment while such a
// direct write lands, and the page cache the read filled could not be invalidated (the kernel
// then fails the next fdatasync of that file with EIO).
// hold_writer_lock: false (errno set) when the file system refuses the lock; writing goes on.
bool hold_writer_lock(int fd);
// 0, or the errno of a lock the file system refuses (nothing to wait for then).
int wait_for_writers(int fd);

class SegmentPreparer {
 public:
  enum class State : uint8_t { kIdle, kBusy, kReady, kFailed };
  SegmentPreparer(std::string dir, int dir_fd, uint64_t segment_bytes, bool preallocate,
                  std::function<void()> done);
  ~SegmentPreparer();  // an unused prepared segment is removed

  // Starts preparing segment `number` (whose messages will all have seq >= first_seq).
  // Precondition: state() == kIdle.
  void request(uint64_t number, uint64_t first_seq);
  State state();
  // Waits (while kBusy) for the outcome. kReady: returns the segment's number and fd;
  // kFailed: returns its errno in *err. Either way the preparer is idle again.
  State take(uint64_t* number, int* fd, int* err);

 private:
  void run();
  const std::string dir_;
  const int dir_fd_;
  const uint64_t segment_bytes_;
  const bool preallocate_;
  std::function<void()> done_;
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kIdle;
  bool stop_ = false;
  uint64_t number_ = 0;
  uint64_t first_seq_ = 0;
  int fd_ = -1;
  int err_ = 0;
  std::thread thread_;
};

}  // namespace sluice::queue
