// The poll-mode loop of one lcore: receive bursts from its queues, offer each to the engine's
// fast path (BurstHandler::fast) and hand the rest to it as Frames, transmit what the engine
// returns, and keep the engine's timers ticking.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "dataplane/dpdk/engine/frame.h"

struct rte_mbuf;

namespace sluice::dpdk::port {

class Port;

// One rx queue this lcore polls.
struct RxSource {
  Port* port = nullptr;
  uint16_t queue = 0;
};

// Per-loop counters; read them from the lcore itself or after run() returned.
struct LoopCounters {
  uint64_t rx = 0;                   // mbufs received, including refused ones
  uint64_t tx = 0;                   // mbufs the ports accepted
  uint64_t tx_dropped = 0;           // frames a port did not accept (tx ring full), freed
  uint64_t tx_unknown_port = 0;      // frames for a port this loop does not send on, freed
  uint64_t rx_multiseg_dropped = 0;  // multi-segment mbufs refused, freed
  uint64_t loops = 0;
  uint64_t idle_loops = 0;  // loops that received nothing
  uint64_t ticks = 0;
};

class LcoreLoop {
 public:
  // Mbufs per rx_burst: 64 rather than l3fwd's 32, which halves what each iteration costs
  // beyond its frames (the clock, the handler's calls, the fast path's set-up); the splice
  // forwarded 15-20% more 64-byte frames per second, ethdev io the same (bench/RESULTS.md).
  static constexpr uint16_t kBurstMax = 64;
  static constexpr size_t kRxSourcesMax = 16;  // queues one lcore polls
  static constexpr size_t kTxPortsMax = 8;     // ports one lcore sends on
  static constexpr uint16_t kTxStageMax = 64;  // frames staged per port before a tx_burst
  // Below the 1 ms the BurstHandler contract asks for, so that one slow iteration cannot
  // push a tick past it.
  static constexpr uint64_t kTickPeriodNs = 500'000;

  // Polls `rx`, sends on queue `tx_queue` of each port in `tx` (every one must have that
  // queue). Frames whose Frame::port is not in `tx` are counted and freed. The ports and
  // the handler must outlive the loop.
  LcoreLoop(std::span<const RxSource> rx, std::span<Port* const> tx, uint16_t tx_queue,
            engine::BurstHandler& handler);

  // Loops until `stop` is set.
  void run(const std::atomic<bool>& stop);
  // One iteration: every rx source once, transmit, tick when due. Returns mbufs received.
  uint32_t run_once();

  const LoopCounters& counters() const { return counters_; }

  // The loop's clock: nanoseconds from the TSC, monotonic, as handed to the handler.
  uint64_t now_ns() const;

 private:
  void transmit();
  // Stages `m` for `port` (frees and counts it when this loop does not send on that port).
  // Inline: the fast path's frames come here one by one.
  [[gnu::always_inline]] inline void stage(rte_mbuf* m, uint16_t port);
  // The same for `count` mbufs to one port (a span of the fast path's frames). A whole burst
  // for a port with nothing staged goes to the port at once.
  void stage_run(rte_mbuf** mbufs, uint16_t count, uint16_t port);
  void flush(size_t slot);
  // tx_burst of `count` mbufs on `port_id`; frees and counts what the port does not take.
  void send(uint16_t port_id, rte_mbuf** mbufs, uint16_t count);

  static constexpr uint8_t kNoSlot = 0xff;
  static constexpr size_t kPortIdsMax = 256;  // above DPDK's RTE_MAX_ETHPORTS (32 here)

  struct TxStage {
    uint16_t port_id = 0;
    uint16_t count = 0;
    std::array<rte_mbuf*, kTxStageMax> mbufs{};
  };

  engine::BurstHandler& handler_;
  std::array<RxSource, kRxSourcesMax> rx_{};
  size_t rx_count_ = 0;
  std::array<TxStage, kTxPortsMax> tx_{};
  size_t tx_count_ = 0;
  uint16_t tx_queue_;
  std::array<uint8_t, kPortIdsMax> slot_of_port_{};  // Frame::port -> tx_ slot, kNoSlot if none
  std::array<rte_mbuf*, kBurstMax> rx_mbufs_{};
  std::array<engine::Frame*, kBurstMax> rx_frames_{};
  bool fast_path_;  // the handler has one (asked once)
  std::array<engine::FastRun, kBurstMax> fast_runs_{};
  double ns_per_tsc_;
  uint64_t last_tick_ns_ = 0;
  LoopCounters counters_;
};

}  // namespace sluice::dpdk::port
