// A frame as the lcore's burst function sees it: bytes with room to grow, the port it came in
// on or leaves by, and an opaque handle to the buffer that holds it (an rte_mbuf in the DPDK
// driver, a heap block in tests). Keeps the engine's logic free of DPDK headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace sluice::dpdk::engine {

struct Frame {
  uint8_t* data = nullptr;  // first byte of the Ethernet header
  uint32_t len = 0;         // bytes in the frame
  uint32_t room = 0;        // bytes writable from `data` (len <= room)
  uint16_t port = 0;        // rx: the port it arrived on; tx: the port it leaves by
  void* handle = nullptr;   // the buffer's owner; opaque here

  std::span<uint8_t> bytes() { return {data, len}; }
  std::span<uint8_t> writable() { return {data, room}; }
};

// Buffers for frames the engine makes (SYN-ACKs, ACKs, replays, ARP) and for the ones it
// drops. Not on the per-packet path of a spliced flow, so a virtual call is fine here.
class FramePool {
 public:
  virtual ~FramePool() = default;
  // A frame with len 0 and room >= the pool's data room; nullptr when the pool is empty (the
  // engine counts it and acts as if the frame were lost on the wire).
  virtual Frame* alloc() = 0;
  virtual void free(Frame* f) = 0;
};

}  // namespace sluice::dpdk::engine

namespace sluice::dpdk::engine {

// A received buffer as the driver offers it to BurstHandler::fast(): DPDK's rte_mbuf, as the
// port received it. The engine reads the few fields it needs at their offsets (rx_data,
// rx_len, rx_segments), which port/ asserts against rte_mbuf when it compiles, so that it
// needs no DPDK header and the driver hands its burst over without copying a thing. Tests lay
// out RxBuffers the same way (set_rx_buffer).
struct RxBuffer {
  static constexpr size_t kBufAddr = 0;   // uint8_t*: the buffer
  static constexpr size_t kDataOff = 16;  // uint16_t: where the frame starts in it
  static constexpr size_t kNbSegs = 20;   // uint16_t: segments (the fast path takes 1 only)
  static constexpr size_t kDataLen = 40;  // uint16_t: the bytes in the first segment
  alignas(64) uint8_t header[64] = {};
};

namespace rx_detail {
template <typename T>
inline T field(const RxBuffer* b, size_t at) {
  T v;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(b) + at, sizeof v);
  return v;
}
}  // namespace rx_detail

// The frame's first byte, its length in the first segment and the buffer's segments.
inline uint8_t* rx_data(const RxBuffer* b) {
  return rx_detail::field<uint8_t*>(b, RxBuffer::kBufAddr) +
         rx_detail::field<uint16_t>(b, RxBuffer::kDataOff);
}
inline uint32_t rx_len(const RxBuffer* b) {
  return rx_detail::field<uint16_t>(b, RxBuffer::kDataLen);
}
inline uint16_t rx_segments(const RxBuffer* b) {
  return rx_detail::field<uint16_t>(b, RxBuffer::kNbSegs);
}

// Lays out `b` as a received buffer of `len` bytes at `data` (tests, benchmarks).
inline void set_rx_buffer(RxBuffer& b, uint8_t* data, uint16_t len, uint16_t segments = 1) {
  const uint16_t offset = 0;
  std::memcpy(b.header + RxBuffer::kBufAddr, &data, sizeof data);
  std::memcpy(b.header + RxBuffer::kDataOff, &offset, 2);
  std::memcpy(b.header + RxBuffer::kNbSegs, &segments, 2);
  std::memcpy(b.header + RxBuffer::kDataLen, &len, 2);
}

// A span of frames the fast path took that leave by one port: from where the span before ended
// (0 for the first) to before `end`. Each span holds at least one frame.
struct FastRun {
  uint16_t end = 0;
  uint16_t port = 0;
};

// The frames the fast path took, from its spans.
inline size_t fast_taken(const FastRun* runs, size_t count) {
  return count == 0 ? 0 : runs[count - 1].end;
}

// What a poll-mode loop drives: the DPDK driver (port/) hands it received frames and sends
// what it returns; tests and benchmarks call it directly with crafted frames.
class BurstHandler {
 public:
  virtual ~BurstHandler() = default;
  // Takes ownership of every frame in `rx`: each one is either queued for transmission
  // (returned later by take_tx) or given back to the pool.
  virtual void burst(std::span<Frame*> rx, uint64_t now_ns) = 0;
  // Timers: retransmissions, deadlines, expiry. Called at least every millisecond.
  virtual void tick(uint64_t now_ns) = 0;
  // Frames to transmit since the last call, each with Frame::port set. The caller owns them
  // (it frees what the port does not take and counts it).
  virtual std::span<Frame*> take_tx() = 0;

  // The fast path, for a handler that has one (has_fast_path(), asked once by the driver):
  // tried on every received burst before its frames become Frames. It takes frames from the
  // front of `rx` (all from `port`), in order, rewrites each in place without changing its
  // length, and stops at the first frame it leaves to burst(), which includes any buffer of
  // more than one segment (rx_segments). It describes the frames it took
  // as spans that each leave by one port (FastRun), in runs[0..k) (room for rx.size()), and
  // returns k: it took frames [0, runs[k-1].end), none when k is 0. The driver sends those as
  // they are, then hands the rest of the burst to burst(), so the frames of a flow keep their
  // order and every frame burst() sees finds the state the frames before it left.
  virtual bool has_fast_path() const { return false; }
  virtual size_t fast(uint16_t /*port*/, std::span<RxBuffer* const> /*rx*/, FastRun* /*runs*/,
                      uint64_t /*now_ns*/) {
    return 0;
  }
};

}  // namespace sluice::dpdk::engine
