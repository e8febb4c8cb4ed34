// The few io_uring and socket operations sluice-load's two event loops share: a ring whose
// submission queue never overflows, user_data packing, TCP sockets on loopback or anywhere.
#pragma once

#include <liburing.h>
#include <netinet/in.h>

#include <cstdint>
#include <string>

namespace sluice::load {

enum class Op : uint8_t { kRecv = 0, kSend = 1, kConnect = 2, kAccept = 3 };

// user_data: connection index in the high 32 bits, generation in bits 2-31, op in bits 0-1.
inline uint64_t pack(uint32_t conn, uint32_t gen, Op op) {
  return (uint64_t(conn) << 32) | (uint64_t(gen & 0x3fffffffu) << 2) | uint64_t(op);
}
inline uint32_t conn_of(uint64_t ud) {
  return uint32_t(ud >> 32);
}
inline uint32_t gen_of(uint64_t ud) {
  return uint32_t(ud >> 2) & 0x3fffffffu;
}
inline Op op_of(uint64_t ud) {
  return Op(ud & 3u);
}

class Ring {
 public:
  static constexpr unsigned kEntries = 4096;
  Ring();
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // A submission entry; submits what is queued first when the queue is full.
  io_uring_sqe* sqe();
  // Submits and waits for one completion or the timeout; returns false on a hard error.
  bool submit_and_wait(uint64_t timeout_ns);
  io_uring* get() { return &ring_; }

 private:
  io_uring ring_{};
};

// A TCP socket with TCP_NODELAY (blocking mode: io_uring does the waiting); -errno on failure.
int tcp_socket();
sockaddr_in ipv4(const std::string& host, uint16_t port);
// A listening socket bound to host:port (SO_REUSEADDR); -errno on failure.
int tcp_listen(const std::string& host, uint16_t port, int backlog);
uint64_t now_ns();
std::string errno_text(int negative_errno);

}  // namespace sluice::load
