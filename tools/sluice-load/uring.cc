// io_uring and socket helpers shared by the load loop and the sink loop.
#include "tools/sluice-load/uring.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace sluice::load {

Ring::Ring() {
  const int rc = io_uring_queue_init(kEntries, &ring_, 0);
  if (rc < 0) throw std::runtime_error("io_uring_queue_init: " + errno_text(rc));
}

Ring::~Ring() {
  io_uring_queue_exit(&ring_);
}

io_uring_sqe* Ring::sqe() {
  io_uring_sqe* s = io_uring_get_sqe(&ring_);
  if (s) return s;
  io_uring_submit(&ring_);
  s = io_uring_get_sqe(&ring_);
  if (!s) throw std::runtime_error("io_uring submission queue stays full");
  return s;
}

bool Ring::submit_and_wait(uint64_t timeout_ns) {
  __kernel_timespec ts{};
  ts.tv_sec = int64_t(timeout_ns / 1000000000u);
  ts.tv_nsec = int64_t(timeout_ns % 1000000000u);
  io_uring_cqe* cqe = nullptr;
  const int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
  return rc >= 0 || rc == -ETIME || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY;
}

int tcp_socket() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

sockaddr_in ipv4(const std::string& host, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);  // validated by the options
  return a;
}

int tcp_listen(const std::string& host, uint16_t port, int backlog) {
  const int fd = tcp_socket();
  if (fd < 0) return fd;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = ipv4(host, port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || ::listen(fd, backlog) < 0) {
    const int e = errno;
    ::close(fd);
    return -e;
  }
  return fd;
}

uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

std::string errno_text(int negative_errno) {
  return std::strerror(-negative_errno);
}

}  // namespace sluice::load
