// Testpmd-style I/O forwarding measured through the engine's lcore loop: frames wait in an
// rte_ring behind an rx port, the timed step is rx_burst + a BurstHandler + tx_burst to a
// net_null port. The handler is pluggable so a benchmark can compare the splicer's burst
// function with plain I/O forwarding in the same process.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "dataplane/dpdk/engine/frame.h"

struct rte_ring;

namespace sluice::dpdk::port {
class MbufPool;
class Port;
}  // namespace sluice::dpdk::port

namespace sluice::bench {

struct ForwardOptions {
  uint64_t packets = 20'000'000;  // per run
  double seconds_max = 10.0;      // wall-clock bound on a run, filling the ring included
  // Mbufs per rx_burst of the bare ethdev loops (run_ethdev_forward, run_bare_rewrite), at most
  // kBurstMax; port::LcoreLoop always asks for its own kBurstMax.
  uint16_t ethdev_burst = kBurstMax;
  static constexpr uint16_t kBurstMax = 64;
};

struct ForwardResult {
  double mpps = 0;       // packets / timed seconds / 1e6
  uint64_t packets = 0;  // accepted by the tx port
  double seconds = 0;    // time spent in the forwarding step only
  uint64_t dropped = 0;  // received but not transmitted (tx full, unknown port, multi-segment)
};

// The ports and buffers of a forwarding run: an rx port made from an rte_ring and a net_null
// tx port, which frees what it is given. Needs the EAL running; make one per process and reuse
// it across runs.
class ForwardRig {
 public:
  static Result<std::unique_ptr<ForwardRig>> create();
  ~ForwardRig();
  ForwardRig(const ForwardRig&) = delete;
  ForwardRig& operator=(const ForwardRig&) = delete;

  uint16_t rx_port() const;
  uint16_t tx_port() const;
  dpdk::engine::FramePool& pool();
  // Copies the template into `count` mbufs and enqueues them behind the rx port (untimed).
  bool fill(std::span<const uint8_t> frame, uint32_t count);
  // The same with several templates, taken in turn.
  bool fill(std::span<const std::vector<uint8_t>> frames, uint32_t count);

 private:
  ForwardRig() = default;
  friend ForwardResult run_forward(ForwardRig&, dpdk::engine::BurstHandler&,
                                   std::span<const std::vector<uint8_t>>, const ForwardOptions&);

  rte_ring* ring_ = nullptr;
  std::string ring_device_;
  std::string null_device_;
  std::unique_ptr<dpdk::port::MbufPool> pool_;
  std::unique_ptr<dpdk::port::Port> rx_;
  std::unique_ptr<dpdk::port::Port> tx_;
};

// The reference handler: every frame leaves unchanged by `tx_port`.
class IoForward final : public dpdk::engine::BurstHandler {
 public:
  static constexpr size_t kTxMax = 256;  // frames held between burst and take_tx

  IoForward(uint16_t tx_port, dpdk::engine::FramePool& pool) : tx_port_(tx_port), pool_(pool) {}
  void burst(std::span<dpdk::engine::Frame*> rx, uint64_t now_ns) override;
  void tick(uint64_t) override {}
  std::span<dpdk::engine::Frame*> take_tx() override;

 private:
  uint16_t tx_port_;
  dpdk::engine::FramePool& pool_;
  dpdk::engine::Frame* tx_[kTxMax] = {};
  size_t tx_count_ = 0;
};

// The driver's fast path with no engine behind it: it takes every frame and sends it by
// `tx_port`, untouched, with one byte of its TCP header written (the least a rewrite does), or
// with each field the splice's rewrite writes changed (the MAC addresses, the IPv4 addresses
// and checksum, the ports, sequence and acknowledgment numbers and the TCP checksum: each read,
// changed and written back, with none of the splice's checks or arithmetic). What
// port::LcoreLoop costs a spliced frame before any splice work, and what the writes to a
// frame's header cost: informational floors for the splice figure.
class FastForward final : public dpdk::engine::BurstHandler {
 public:
  enum class Writes { kNone, kOneByte, kRewriteFields };
  FastForward(uint16_t tx_port, dpdk::engine::FramePool& pool, Writes writes)
      : tx_port_(tx_port), pool_(pool), writes_(writes) {}
  void burst(std::span<dpdk::engine::Frame*> rx, uint64_t now_ns) override;  // frees them
  void tick(uint64_t) override {}
  std::span<dpdk::engine::Frame*> take_tx() override { return {}; }
  bool has_fast_path() const override { return true; }
  size_t fast(uint16_t port, std::span<dpdk::engine::RxBuffer* const> rx,
              dpdk::engine::FastRun* runs, uint64_t now_ns) override;

 private:
  uint16_t tx_port_;
  dpdk::engine::FramePool& pool_;
  Writes writes_;
};

// Forwards options.packets copies of `template_frame` through `handler` on the calling lcore
// (port::LcoreLoop, in its bursts of LcoreLoop::kBurstMax). Only the loop is timed (rte_rdtsc
// around each batch).
ForwardResult run_forward(ForwardRig& rig, dpdk::engine::BurstHandler& handler,
                          std::span<const uint8_t> template_frame,
                          const ForwardOptions& options = {});
// The same with copies of several templates in turn (e.g. segments of several flows).
ForwardResult run_forward(ForwardRig& rig, dpdk::engine::BurstHandler& handler,
                          std::span<const std::vector<uint8_t>> templates,
                          const ForwardOptions& options = {});

// The same traffic forwarded with bare rte_eth_rx_burst + rte_eth_tx_burst, as testpmd's io
// mode does: what the driver and handler cost is the gap between the two.
ForwardResult run_ethdev_forward(ForwardRig& rig, std::span<const uint8_t> template_frame,
                                 const ForwardOptions& options = {});

// The rewrite alone, for reading the splice's figure: bare ethdev calls as above, and on each
// frame only what every full-NAT splice must do, with none of the engine's checks (state,
// options, windows, counters): Ethernet/IPv4/TCP type fields, a flow::TupleMap lookup of the
// 4-tuple, new MACs, addresses and ports, sequence and acknowledgment numbers moved by fixed
// deltas, and both checksums updated incrementally (RFC 1624). Not a floor: the engine's fast
// path, which remembers its last flow instead of hashing every frame's tuple, runs faster on
// one flow. The template must be an Ethernet/IPv4/TCP frame without IP options; its tuple is
// the one flow.
ForwardResult run_bare_rewrite(ForwardRig& rig, std::span<const uint8_t> template_frame,
                               const ForwardOptions& options = {});

// An Ethernet/IPv4/TCP (ACK|PSH) frame of `frame_bytes` (at least 54: headers without
// payload), checksums valid.
std::vector<uint8_t> tcp_template(size_t frame_bytes);

}  // namespace sluice::bench
