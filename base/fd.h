// base::Fd: an owned file descriptor, closed when the Fd goes (as Seastar's file_desc and
// Android's unique_fd). Where close(2)'s result matters (a file whose data is not yet synced),
// call close() and check it; the destructor's close has nobody to report to.
#pragma once

#include <unistd.h>

#include <utility>

namespace sluice::base {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // The descriptor, no longer owned (handed to an owner that closes it itself).
  int release() { return std::exchange(fd_, -1); }
  // Closes now: 0, or -1 with errno set as close(2) left it.
  int close() {
    if (fd_ < 0) return 0;
    return ::close(std::exchange(fd_, -1));
  }
  // Closes the current descriptor (its result unreported) and owns `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) static_cast<void>(::close(fd_));
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace sluice::base
