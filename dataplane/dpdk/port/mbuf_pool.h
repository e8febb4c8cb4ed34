// Packet buffers for the DPDK engine: an rte_mempool of mbufs whose private area holds the
// engine::Frame that the engine's logic sees, so converting between the two costs nothing.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>
#include <memory>
#include <string>

#include "base/assert.h"
#include "base/result.h"
#include "dataplane/dpdk/engine/frame.h"

namespace sluice::dpdk::port {

struct MbufPoolConfig {
  std::string name;           // unique among the process's mempools (DPDK names them)
  uint32_t count = 8191;      // mbufs; a power of two minus one is what rte_mempool sizes best
  uint32_t cache_size = 256;  // per-lcore cache, at most RTE_MEMPOOL_CACHE_MAX_SIZE
  uint16_t data_room = RTE_MBUF_DEFAULT_BUF_SIZE;  // headroom + data bytes per mbuf
  int socket = SOCKET_ID_ANY;
};

class MbufPool final : public engine::FramePool {
 public:
  // Where a received frame starts in its cache line: PMDs write it RTE_PKTMBUF_HEADROOM bytes
  // into the buffer, which begins after the rte_mbuf and its private area. 8 bytes in, the 54
  // bytes of Ethernet, IPv4 and TCP headers without options lie in one line, and the 66 with
  // TCP timestamps in two with none of their written fields across the lines (at 0, the
  // echoed timestamp would straddle them; at 32, where a private area of just a Frame leaves
  // it, every frame's headers take two lines).
  static constexpr uint16_t kDataLineOffset = 8;
  // Bytes reserved after each rte_mbuf: its Frame, then padding up to kDataLineOffset.
  static constexpr uint16_t kPrivBytes = static_cast<uint16_t>(
      RTE_ALIGN_CEIL(sizeof(engine::Frame), RTE_CACHE_LINE_SIZE) + kDataLineOffset);
  static_assert(kPrivBytes % RTE_MBUF_PRIV_ALIGN == 0);
  static_assert(sizeof(rte_mbuf) % RTE_CACHE_LINE_SIZE == 0 &&
                RTE_PKTMBUF_HEADROOM % RTE_CACHE_LINE_SIZE == 0);

  // Needs the EAL running. The error names the pool and DPDK's reason.
  static Result<std::unique_ptr<MbufPool>> create(const MbufPoolConfig& config);

  ~MbufPool() override;
  MbufPool(const MbufPool&) = delete;
  MbufPool& operator=(const MbufPool&) = delete;

  // FramePool: a frame with len 0 and room = the mbuf's tailroom; nullptr when empty.
  engine::Frame* alloc() override;
  void free(engine::Frame* f) override;

  rte_mempool* mempool() const { return pool_; }
  // Mbufs currently in the pool (including per-lcore caches): for tests and leak checks.
  uint32_t available() const;

  // The Frame living in `m`'s private area. `m` must come from a pool with priv_size >=
  // kPrivBytes (any MbufPool).
  static engine::Frame* frame_of(rte_mbuf* m) {
    return static_cast<engine::Frame*>(rte_mbuf_to_priv(m));
  }
  static rte_mbuf* mbuf_of(engine::Frame* f) { return static_cast<rte_mbuf*>(f->handle); }

  // A received mbuf as a Frame: data/len/room/port filled from the mbuf. Returns nullptr for
  // a multi-segment mbuf (the engine works on contiguous frames): the caller counts and frees
  // it.
  static engine::Frame* to_frame(rte_mbuf* m, uint16_t port) {
    SLUICE_ASSERT(m->priv_size >= kPrivBytes);
    if (m->nb_segs != 1) [[unlikely]]
      return nullptr;
    engine::Frame* f = frame_of(m);
    f->data = rte_pktmbuf_mtod(m, uint8_t*);
    f->len = m->data_len;
    f->room = static_cast<uint32_t>(m->data_len) + rte_pktmbuf_tailroom(m);
    f->port = port;
    f->handle = m;
    return f;
  }

  // The mbuf to transmit for `f`, its lengths set from f->len. The engine edits frames in
  // place, so f->data must still be where to_frame/alloc put it.
  static rte_mbuf* to_mbuf(engine::Frame* f) {
    rte_mbuf* m = mbuf_of(f);
    SLUICE_ASSERT(f->data == rte_pktmbuf_mtod(m, uint8_t*));
    SLUICE_ASSERT(f->len <= f->room);
    // Written only when the engine changed the length (the splice never does): a store
    // dirties the mbuf's first cache line, which then has to be written back, and that showed
    // as 10-15% of the forwarding rate (dpdk_forward_bench, LcoreLoop + IoForward).
    if (m->data_len != f->len) {
      m->data_len = static_cast<uint16_t>(f->len);
      m->pkt_len = f->len;
    }
    SLUICE_ASSERT(m->pkt_len == m->data_len);  // one segment (to_frame, alloc)
    return m;
  }

 private:
  explicit MbufPool(rte_mempool* pool) : pool_(pool) {}

  rte_mempool* pool_;
};

}  // namespace sluice::dpdk::port
