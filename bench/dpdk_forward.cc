// The forwarding harness: the rig's ports, filling the rx ring outside the timed section and
// timing the lcore loop (or bare ethdev calls) over it.
#include "bench/dpdk_forward.h"

#include <rte_bus_vdev.h>
#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>
#include <rte_ring.h>

#include <algorithm>
#include <cstring>

#include "dataplane/dpdk/flow/tuple_map.h"
#include "dataplane/dpdk/net/build.h"
#include "dataplane/dpdk/net/checksum.h"
#include "dataplane/dpdk/port/driver.h"
#include "dataplane/dpdk/port/mbuf_pool.h"
#include "dataplane/dpdk/port/port.h"

namespace sluice::bench {
namespace {

using dpdk::port::LcoreLoop;
using dpdk::port::MbufPool;
using dpdk::port::Port;

// Frames enqueued per batch: the ring's size. Large enough that per-batch rdtsc reads vanish,
// and the copies of one batch (about 10 MB of mbufs at 1514 bytes) do not all stay in cache.
constexpr uint32_t kBatch = 4096;
constexpr uint32_t kPoolMbufs = 2 * kBatch - 1;
constexpr uint32_t kPoolCache = 256;
static_assert(ForwardOptions::kBurstMax >= LcoreLoop::kBurstMax);

int next_rig = 0;

struct Clock {
  uint64_t hz = rte_get_tsc_hz();
  uint64_t start = rte_rdtsc();
  bool expired(double seconds_max) const {
    return double(rte_rdtsc() - start) > seconds_max * double(hz);
  }
};

ForwardResult result(uint64_t packets, uint64_t cycles, uint64_t dropped) {
  ForwardResult r;
  r.packets = packets;
  r.dropped = dropped;
  r.seconds = double(cycles) / double(rte_get_tsc_hz());
  r.mpps = r.seconds > 0 ? double(packets) / r.seconds / 1e6 : 0;
  return r;
}

}  // namespace

Result<std::unique_ptr<ForwardRig>> ForwardRig::create() {
  std::unique_ptr<ForwardRig> rig(new ForwardRig());
  const std::string n = std::to_string(next_rig++);
  Result<std::unique_ptr<MbufPool>> pool =
      MbufPool::create({.name = "fwd_pool" + n, .count = kPoolMbufs, .cache_size = kPoolCache});
  if (!pool) return tl::unexpected(pool.error());
  rig->pool_ = std::move(*pool);
  const std::string ring_name = "fwd_rx" + n;
  rig->ring_ = rte_ring_create(ring_name.c_str(), kBatch, SOCKET_ID_ANY,
                               RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
  if (rig->ring_ == nullptr) {
    return failure("ring '" + ring_name + "': " + rte_strerror(rte_errno));
  }
  const int id =
      rte_eth_from_rings(ring_name.c_str(), &rig->ring_, 1, &rig->ring_, 1, SOCKET_ID_ANY);
  char name[RTE_ETH_NAME_MAX_LEN];
  if (id < 0 || rte_eth_dev_get_name_by_port(static_cast<uint16_t>(id), name) != 0) {
    return failure("rx port from ring '" + ring_name + "': " + rte_strerror(rte_errno));
  }
  rig->ring_device_ = name;
  Result<std::unique_ptr<Port>> rx = Port::open({.device = rig->ring_device_}, *rig->pool_);
  if (!rx) return tl::unexpected(rx.error());
  rig->rx_ = std::move(*rx);
  rig->null_device_ = "net_null_fwd" + n;
  if (int rc = rte_vdev_init(rig->null_device_.c_str(), nullptr); rc != 0) {
    rig->null_device_.clear();
    return failure("creating the net_null tx port failed (" + std::to_string(rc) + ")");
  }
  Result<std::unique_ptr<Port>> tx = Port::open({.device = rig->null_device_}, *rig->pool_);
  if (!tx) return tl::unexpected(tx.error());
  rig->tx_ = std::move(*tx);
  return rig;
}

ForwardRig::~ForwardRig() {
  rx_.reset();
  tx_.reset();
  if (!ring_device_.empty()) rte_vdev_uninit(ring_device_.c_str());
  if (!null_device_.empty()) rte_vdev_uninit(null_device_.c_str());
  if (ring_ != nullptr) {
    rte_mbuf* m = nullptr;
    while (rte_ring_dequeue(ring_, reinterpret_cast<void**>(&m)) == 0)
      rte_pktmbuf_free(m);
    rte_ring_free(ring_);
  }
}

uint16_t ForwardRig::rx_port() const {
  return rx_->id();
}
uint16_t ForwardRig::tx_port() const {
  return tx_->id();
}
dpdk::engine::FramePool& ForwardRig::pool() {
  return *pool_;
}

bool ForwardRig::fill(std::span<const uint8_t> frame, uint32_t count) {
  const std::vector<uint8_t> one(frame.begin(), frame.end());
  return fill(std::span(&one, 1), count);
}

bool ForwardRig::fill(std::span<const std::vector<uint8_t>> frames, uint32_t count) {
  rte_mbuf* mbufs[kBatch];
  if (frames.empty() || count > kBatch ||
      rte_pktmbuf_alloc_bulk(pool_->mempool(), mbufs, count) != 0) {
    return false;
  }
  for (uint32_t i = 0; i < count; ++i) {
    const std::vector<uint8_t>& frame = frames[i % frames.size()];
    char* p = rte_pktmbuf_append(mbufs[i], static_cast<uint16_t>(frame.size()));
    if (p == nullptr) {
      rte_pktmbuf_free_bulk(mbufs, count);
      return false;
    }
    std::memcpy(p, frame.data(), frame.size());
  }
  if (rte_ring_enqueue_bulk(ring_, reinterpret_cast<void**>(mbufs), count, nullptr) != count) {
    rte_pktmbuf_free_bulk(mbufs, count);
    return false;
  }
  return true;
}

void IoForward::burst(std::span<dpdk::engine::Frame*> rx, uint64_t) {
  for (dpdk::engine::Frame* f : rx) {
    if (tx_count_ == kTxMax) [[unlikely]] {
      pool_.free(f);
      continue;
    }
    f->port = tx_port_;
    tx_[tx_count_++] = f;
  }
}

std::span<dpdk::engine::Frame*> IoForward::take_tx() {
  const size_t n = tx_count_;
  tx_count_ = 0;
  return {tx_, n};
}

void FastForward::burst(std::span<dpdk::engine::Frame*> rx, uint64_t) {
  for (dpdk::engine::Frame* f : rx)
    pool_.free(f);
}

namespace {

// Reads the `Field` at `at`, flips its lowest bit and writes it back.
template <typename Field>
inline void flip(uint8_t* at) {
  Field v;
  std::memcpy(&v, at, sizeof v);
  v ^= 1;
  std::memcpy(at, &v, sizeof v);
}

}  // namespace

size_t FastForward::fast(uint16_t, std::span<dpdk::engine::RxBuffer* const> rx,
                         dpdk::engine::FastRun* runs, uint64_t) {
  // Byte 40: in the TCP header's sequence number, on the line every rewrite writes.
  constexpr uint32_t kWritten = 40;
  // The fields the splice's rewrite writes, as it writes them (fast_path.cc): the MAC
  // addresses (8 + 4 bytes), the IPv4 checksum and addresses, the ports and sequence number,
  // the acknowledgment number and the TCP checksum.
  constexpr uint32_t kHeaders = 14 + 20 + 20;
  const Writes writes = writes_;
  size_t i = 0;
  for (; i < rx.size(); ++i) {
    uint8_t* const d = dpdk::engine::rx_data(rx[i]);
    if (dpdk::engine::rx_len(rx[i]) < kHeaders) break;
    if (writes == Writes::kOneByte) {
      d[kWritten] ^= 1;
    } else if (writes == Writes::kRewriteFields) {
      flip<uint64_t>(d);
      flip<uint32_t>(d + 8);
      flip<uint16_t>(d + 24);
      flip<uint64_t>(d + 26);
      flip<uint64_t>(d + 34);
      flip<uint32_t>(d + 42);
      flip<uint16_t>(d + 50);
    }
  }
  if (i == 0) return 0;
  runs[0] = {uint16_t(i), tx_port_};
  return 1;
}

ForwardResult run_forward(ForwardRig& rig, dpdk::engine::BurstHandler& handler,
                          std::span<const uint8_t> template_frame, const ForwardOptions& options) {
  const std::vector<uint8_t> one(template_frame.begin(), template_frame.end());
  return run_forward(rig, handler, std::span(&one, 1), options);
}

ForwardResult run_forward(ForwardRig& rig, dpdk::engine::BurstHandler& handler,
                          std::span<const std::vector<uint8_t>> templates,
                          const ForwardOptions& options) {
  const dpdk::port::RxSource rx[] = {{rig.rx_.get(), 0}};
  Port* const tx[] = {rig.tx_.get()};
  LcoreLoop loop(rx, tx, 0, handler);
  const Clock clock;
  uint64_t cycles = 0;
  uint64_t received = 0;
  while (received < options.packets && !clock.expired(options.seconds_max)) {
    const auto count =
        static_cast<uint32_t>(std::min<uint64_t>(kBatch, options.packets - received));
    if (!rig.fill(templates, count)) break;
    const uint64_t target = received + count;
    const uint64_t t0 = rte_rdtsc();
    while (loop.counters().rx < target) {
      if (loop.run_once() == 0) break;  // the ring ran dry early: a bug, not worth a hang
    }
    cycles += rte_rdtsc() - t0;
    received = loop.counters().rx;
  }
  // Frames a handler still holds (none for I/O forwarding) go out with one idle iteration.
  loop.run_once();
  const dpdk::port::LoopCounters& c = loop.counters();
  return result(c.tx, cycles, c.rx - c.tx);
}

namespace {

// Bare rte_eth_rx_burst + rte_eth_tx_burst over batches of copies of the template, with
// on_burst(mbufs, n, t0) between the two (t0: the batch's start in TSC cycles). Only the loop
// is timed.
template <typename OnBurst>
ForwardResult ethdev_loop(ForwardRig& rig, std::span<const uint8_t> template_frame,
                          const ForwardOptions& options, OnBurst&& on_burst) {
  const uint16_t rx_port = rig.rx_port();
  const uint16_t tx_port = rig.tx_port();
  const Clock clock;
  uint64_t cycles = 0;
  uint64_t received = 0;
  uint64_t sent = 0;
  rte_mbuf* mbufs[ForwardOptions::kBurstMax];
  const uint16_t burst = std::min(options.ethdev_burst, ForwardOptions::kBurstMax);
  while (received < options.packets && !clock.expired(options.seconds_max)) {
    const auto count =
        static_cast<uint32_t>(std::min<uint64_t>(kBatch, options.packets - received));
    if (!rig.fill(template_frame, count)) break;
    const uint64_t target = received + count;
    const uint64_t t0 = rte_rdtsc();
    while (received < target) {
      const uint16_t n = rte_eth_rx_burst(rx_port, 0, mbufs, burst);
      if (n == 0) break;
      received += n;
      on_burst(mbufs, n, t0);
      const uint16_t s = rte_eth_tx_burst(tx_port, 0, mbufs, n);
      sent += s;
      if (s < n) [[unlikely]]
        rte_pktmbuf_free_bulk(mbufs + s, n - s);
    }
    cycles += rte_rdtsc() - t0;
  }
  return result(sent, cycles, received - sent);
}

}  // namespace

ForwardResult run_ethdev_forward(ForwardRig& rig, std::span<const uint8_t> template_frame,
                                 const ForwardOptions& options) {
  return ethdev_loop(rig, template_frame, options, [](rte_mbuf**, uint16_t, uint64_t) {});
}

namespace {

// The one's-complement sum of the 16-bit words of a 32-bit value as it lies in memory: sums of
// words read in the machine's byte order give the checksum field in the same order (RFC 1071,
// byte order independence), so nothing here is swapped.
inline uint64_t words(uint32_t v) {
  return (v & 0xffff) + (v >> 16);
}

}  // namespace

ForwardResult run_bare_rewrite(ForwardRig& rig, std::span<const uint8_t> template_frame,
                               const ForwardOptions& options) {
  constexpr size_t kIp = 14, kTcp = kIp + 20;
  if (template_frame.size() < kTcp + 20) return {};
  auto be32 = [](const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return rte_be_to_cpu_32(v);
  };
  auto be16 = [](const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return rte_be_to_cpu_16(v);
  };
  const uint8_t* t = template_frame.data();
  dpdk::flow::TupleMap map(1024, 0x9e3779b97f4a7c15ull);
  map.insert({be32(t + kIp + 12), be32(t + kIp + 16), be16(t + kTcp), be16(t + kTcp + 2)}, 0);
  // The flow's other leg, in wire order.
  struct Leg {
    uint8_t macs[12] = {0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a};
    uint32_t src_ip = rte_cpu_to_be_32(0x0a000203);
    uint32_t dst_ip = rte_cpu_to_be_32(0x0a000204);
    uint32_t ports = uint32_t(rte_cpu_to_be_16(50000)) | uint32_t(rte_cpu_to_be_16(61613)) << 16;
    uint32_t seq_delta = 1000;
    uint32_t ack_delta = 2000;
    uint64_t last_seen = 0;
  } legs[1];

  uint64_t missed = 0;
  ForwardResult r =
      ethdev_loop(rig, template_frame, options, [&](rte_mbuf** mbufs, uint16_t n, uint64_t t0) {
        for (uint16_t i = 0; i < n; ++i)
          rte_prefetch0(rte_pktmbuf_mtod(mbufs[i], void*));
        for (uint16_t i = 0; i < n; ++i) {
          uint8_t* d = rte_pktmbuf_mtod(mbufs[i], uint8_t*);
          uint8_t* ip = d + kIp;
          uint8_t* tcp = d + kTcp;
          if (d[12] != 0x08 || d[13] != 0x00 || ip[0] != 0x45 || ip[9] != 6) {
            ++missed;
            continue;
          }
          const dpdk::flow::Tuple tuple{be32(ip + 12), be32(ip + 16), be16(tcp), be16(tcp + 2)};
          const uint32_t id = map.find(tuple, map.hash(tuple));
          if (id == dpdk::flow::TupleMap::kNone) {
            ++missed;
            continue;
          }
          Leg& leg = legs[id];
          leg.last_seen = t0;
          std::memcpy(d, leg.macs, 12);
          uint32_t addr[2], ports, seq, ack;
          uint16_t ip_check, tcp_check;
          std::memcpy(addr, ip + 12, 8);
          std::memcpy(&ip_check, ip + 10, 2);
          std::memcpy(&ports, tcp, 4);
          std::memcpy(&seq, tcp + 4, 4);
          std::memcpy(&ack, tcp + 8, 4);
          std::memcpy(&tcp_check, tcp + 16, 2);
          const uint32_t new_seq = rte_cpu_to_be_32(rte_be_to_cpu_32(seq) + leg.seq_delta);
          const uint32_t new_ack = rte_cpu_to_be_32(rte_be_to_cpu_32(ack) - leg.ack_delta);
          // ~HC + ~m + m' over every changed word, folded once per header.
          const uint64_t addr_delta =
              words(~addr[0]) + words(~addr[1]) + words(leg.src_ip) + words(leg.dst_ip);
          const uint64_t ip_sum = uint16_t(~ip_check) + addr_delta;
          const uint64_t tcp_sum = uint16_t(~tcp_check) + addr_delta + words(~ports) +
                                   words(leg.ports) + words(~seq) + words(new_seq) + words(~ack) +
                                   words(new_ack);
          const uint16_t new_ip_check = uint16_t(~dpdk::net::checksum_fold(ip_sum));
          const uint16_t new_tcp_check = uint16_t(~dpdk::net::checksum_fold(tcp_sum));
          std::memcpy(ip + 10, &new_ip_check, 2);
          std::memcpy(ip + 12, &leg.src_ip, 4);
          std::memcpy(ip + 16, &leg.dst_ip, 4);
          std::memcpy(tcp, &leg.ports, 4);
          std::memcpy(tcp + 4, &new_seq, 4);
          std::memcpy(tcp + 8, &new_ack, 4);
          std::memcpy(tcp + 16, &new_tcp_check, 2);
        }
      });
  r.dropped += missed;  // a frame the floor did not rewrite fails the run
  return r;
}

std::vector<uint8_t> tcp_template(size_t frame_bytes) {
  constexpr size_t kHeaders =
      dpdk::net::kEthernetBytes + dpdk::net::kIpv4Bytes + dpdk::net::kTcpBytes;
  if (frame_bytes < kHeaders) return {};
  const std::vector<uint8_t> payload(frame_bytes - kHeaders, 'x');
  dpdk::net::TcpSegment s;
  s.src_mac.bytes = {0x02, 0, 0, 0, 0, 1};
  s.dst_mac.bytes = {0x02, 0, 0, 0, 0, 2};
  s.src_ip = 0x0a000001;  // 10.0.0.1
  s.dst_ip = 0x0a000002;
  s.src_port = 40000;
  s.dst_port = 61613;  // STOMP
  s.seq = 1;
  s.ack = 1;
  s.flags = dpdk::net::kAck | dpdk::net::kPsh;
  s.window = 65535;
  s.payload = payload;
  std::vector<uint8_t> frame(frame_bytes);
  if (dpdk::net::build_tcp_segment(s, frame) != frame_bytes) return {};
  return frame;
}

}  // namespace sluice::bench
