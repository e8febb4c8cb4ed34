// LcoreLoop: the rx -> engine -> tx cycle over mbufs, with no allocation, syscall or logging
// once constructed.
#include "dataplane/dpdk/port/driver.h"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "base/assert.h"
#include "dataplane/dpdk/port/mbuf_pool.h"
#include "dataplane/dpdk/port/port.h"

namespace sluice::dpdk::port {

// engine::RxBuffer reads an rte_mbuf's fields at these offsets, and their types.
static_assert(offsetof(rte_mbuf, buf_addr) == engine::RxBuffer::kBufAddr);
static_assert(offsetof(rte_mbuf, data_off) == engine::RxBuffer::kDataOff);
static_assert(offsetof(rte_mbuf, nb_segs) == engine::RxBuffer::kNbSegs);
static_assert(offsetof(rte_mbuf, data_len) == engine::RxBuffer::kDataLen);
static_assert(sizeof(rte_mbuf::buf_addr) == sizeof(uint8_t*) && sizeof(rte_mbuf::data_off) == 2 &&
              sizeof(rte_mbuf::nb_segs) == 2 && sizeof(rte_mbuf::data_len) == 2);

LcoreLoop::LcoreLoop(std::span<const RxSource> rx, std::span<Port* const> tx, uint16_t tx_queue,
                     engine::BurstHandler& handler)
    : handler_(handler), tx_queue_(tx_queue), fast_path_(handler.has_fast_path()) {
  SLUICE_ASSERT(rx.size() <= kRxSourcesMax);
  SLUICE_ASSERT(tx.size() <= kTxPortsMax);
  for (const RxSource& source : rx) {
    SLUICE_ASSERT(source.port != nullptr && source.queue < source.port->rx_queues());
    rx_[rx_count_++] = source;
  }
  slot_of_port_.fill(kNoSlot);
  for (Port* port : tx) {
    SLUICE_ASSERT(port != nullptr && port->id() < kPortIdsMax);
    SLUICE_ASSERT(tx_queue < port->tx_queues());
    SLUICE_ASSERT(slot_of_port_[port->id()] == kNoSlot);  // each port once
    slot_of_port_[port->id()] = static_cast<uint8_t>(tx_count_);
    tx_[tx_count_++].port_id = port->id();
  }
  ns_per_tsc_ = 1e9 / static_cast<double>(rte_get_tsc_hz());
  last_tick_ns_ = now_ns();
}

uint64_t LcoreLoop::now_ns() const {
  // A product by a positive constant, rounded, never goes backwards; a double keeps ns exact
  // for months of uptime, without the overflow of cycles * 1e9.
  return static_cast<uint64_t>(static_cast<double>(rte_get_tsc_cycles()) * ns_per_tsc_);
}

void LcoreLoop::run(const std::atomic<bool>& stop) {
  while (!stop.load(std::memory_order_relaxed))
    run_once();
}

inline void LcoreLoop::stage(rte_mbuf* m, uint16_t port) {
  const uint8_t slot = port < kPortIdsMax ? slot_of_port_[port] : kNoSlot;
  if (slot == kNoSlot) [[unlikely]] {
    ++counters_.tx_unknown_port;
    rte_pktmbuf_free(m);
    return;
  }
  TxStage& stage = tx_[slot];
  stage.mbufs[stage.count++] = m;
  if (stage.count == kTxStageMax) flush(slot);
}

void LcoreLoop::stage_run(rte_mbuf** mbufs, uint16_t count, uint16_t port) {
  const uint8_t slot = port < kPortIdsMax ? slot_of_port_[port] : kNoSlot;
  if (slot == kNoSlot) [[unlikely]] {
    counters_.tx_unknown_port += count;
    rte_pktmbuf_free_bulk(mbufs, count);
    return;
  }
  TxStage& stage = tx_[slot];
  if (stage.count == 0 && count == kTxStageMax) {
    send(stage.port_id, mbufs, count);
    return;
  }
  while (count != 0) {
    const uint16_t n = std::min<uint16_t>(count, uint16_t(kTxStageMax - stage.count));
    // An array of pointers, copied as such. memcpy rather than std::copy_n, which GCC turns
    // into memmove and a second copy of the loop.
    // NOLINTNEXTLINE(bugprone-sizeof-expression)
    std::memcpy(&stage.mbufs[stage.count], mbufs, n * sizeof(rte_mbuf*));
    stage.count = uint16_t(stage.count + n);
    mbufs += n;
    count = uint16_t(count - n);
    if (stage.count == kTxStageMax) flush(slot);
  }
}

uint32_t LcoreLoop::run_once() {
  const uint64_t now = now_ns();
  uint32_t received = 0;
  for (size_t s = 0; s < rx_count_; ++s) {
    const uint16_t port_id = rx_[s].port->id();
    const uint16_t n = rte_eth_rx_burst(port_id, rx_[s].queue, rx_mbufs_.data(), kBurstMax);
    if (n == 0) continue;
    received += n;
    uint16_t first = 0;  // frames [0, first) went by the fast path
    if (fast_path_) {
      // The mbufs as they came (engine::RxBuffer reads them).
      const size_t runs = handler_.fast(
          port_id, std::span(reinterpret_cast<engine::RxBuffer* const*>(rx_mbufs_.data()), n),
          fast_runs_.data(), now);
      SLUICE_ASSERT(runs <= n);
      // Each span of frames for one port (usually the whole burst) is staged at once.
      for (size_t r = 0; r < runs; ++r) {
        const engine::FastRun run = fast_runs_[r];
        SLUICE_ASSERT(run.end > first && run.end <= n);
        stage_run(&rx_mbufs_[first], uint16_t(run.end - first), run.port);
        first = run.end;
      }
    }
    uint16_t frames = 0;
    for (uint16_t i = first; i < n; ++i) {
      engine::Frame* f = MbufPool::to_frame(rx_mbufs_[i], port_id);
      if (f == nullptr) [[unlikely]] {
        ++counters_.rx_multiseg_dropped;
        rte_pktmbuf_free(rx_mbufs_[i]);
        continue;
      }
      rx_frames_[frames++] = f;
    }
    if (frames != 0) handler_.burst(std::span(rx_frames_.data(), frames), now);
    transmit();
  }
  if (now - last_tick_ns_ >= kTickPeriodNs) {
    last_tick_ns_ = now;
    ++counters_.ticks;
    handler_.tick(now);
    transmit();
  }
  counters_.rx += received;
  ++counters_.loops;
  if (received == 0) ++counters_.idle_loops;
  return received;
}

void LcoreLoop::transmit() {
  // The stages may hold the fast path's frames even when the handler returns none.
  const std::span<engine::Frame*> out = handler_.take_tx();
  for (engine::Frame* f : out)
    stage(MbufPool::to_mbuf(f), f->port);
  for (size_t slot = 0; slot < tx_count_; ++slot) {
    if (tx_[slot].count != 0) flush(slot);
  }
}

void LcoreLoop::flush(size_t slot) {
  TxStage& stage = tx_[slot];
  send(stage.port_id, stage.mbufs.data(), stage.count);
  stage.count = 0;
}

void LcoreLoop::send(uint16_t port_id, rte_mbuf** mbufs, uint16_t count) {
  const uint16_t sent = rte_eth_tx_burst(port_id, tx_queue_, mbufs, count);
  counters_.tx += sent;
  if (sent < count) [[unlikely]] {
    // The ring is full: the engine treats these as lost on the wire (TCP will resend).
    counters_.tx_dropped += count - sent;
    rte_pktmbuf_free_bulk(mbufs + sent, count - sent);
  }
}

}  // namespace sluice::dpdk::port
