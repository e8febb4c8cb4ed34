// The DPDK side of the engine against real DPDK (EAL without hugepages, virtual devices): EAL
// guard, driver registration, MbufPool and its Frame conversions, Port and the LcoreLoop
// moving frames between ports made from rte_rings that the test fills and drains.
#include <gtest/gtest.h>
#include <rte_bus_vdev.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/dpdk/engine/frame.h"
#include "dataplane/dpdk/port/driver.h"
#include "dataplane/dpdk/port/eal.h"
#include "dataplane/dpdk/port/mbuf_pool.h"
#include "dataplane/dpdk/port/port.h"
#include "tests/unit/result_util.h"

namespace sluice::dpdk::port {
namespace {

using engine::Frame;

constexpr uint32_t kPoolMbufs = 511;
constexpr uint16_t kFrameBytes = 60;
constexpr uint32_t kRingSlots = 1024;

// One lcore, no hugepages, no PCI, no files in /var/run: runs anywhere DPDK is installed.
// net_null0 comes from --vdev to check that EAL-created vdevs find their driver.
const std::vector<std::string> kEalArgs = {"--no-huge",     "--no-pci",       "-m",       "512",
                                           "--no-shconf",   "--no-telemetry", "-l",       "0",
                                           "--log-level=5", "--vdev",         "net_null0"};

std::string unique_name(const char* prefix) {
  static int next = 0;
  return std::string(prefix) + std::to_string(next++);
}

// Echo: every frame leaves by the other port of the pair; frames made on tick go to `to_b`.
class EchoHandler : public engine::BurstHandler {
 public:
  EchoHandler(uint16_t a, uint16_t b) : a_(a), b_(b) { tx_.reserve(kPoolMbufs); }

  void burst(std::span<Frame*> rx, uint64_t now_ns) override {
    last_burst_ns = now_ns;
    for (Frame* f : rx) {
      f->port = redirect_to.value_or(f->port == a_ ? b_ : a_);
      tx_.push_back(f);
    }
  }
  void tick(uint64_t now_ns) override {
    tick_ns.push_back(now_ns);
    if (make_on_tick != nullptr) {
      Frame* f = make_on_tick->alloc();
      if (f != nullptr) {
        std::memset(f->data, 0xab, kFrameBytes);
        f->len = kFrameBytes;
        f->port = b_;
        tx_.push_back(f);
      }
    }
    if (stop_after_ticks != 0 && tick_ns.size() >= stop_after_ticks) stop.store(true);
  }
  std::span<Frame*> take_tx() override {
    out_.swap(tx_);
    tx_.clear();
    return out_;
  }

  std::optional<uint16_t> redirect_to;
  engine::FramePool* make_on_tick = nullptr;
  std::vector<uint64_t> tick_ns;
  uint64_t last_burst_ns = 0;
  size_t stop_after_ticks = 0;
  std::atomic<bool> stop{false};

 private:
  uint16_t a_, b_;
  std::vector<Frame*> tx_;
  std::vector<Frame*> out_;
};

// Echo with a fast path: it takes frames whose byte 1 is kFastMark (marking each by setting
// byte 2) from the front of a burst and stops at the first other one, as Lcore::fast does. A
// taken frame whose byte 3 is kBack goes back by the port it came from, others by the other
// port; runs of frames for one port are one FastRun.
class FastEchoHandler : public EchoHandler {
 public:
  static constexpr uint8_t kFastMark = 0xf1;
  static constexpr uint8_t kBack = 0xba;
  FastEchoHandler(uint16_t a, uint16_t b) : EchoHandler(a, b), a_(a), b_(b) {}

  bool has_fast_path() const override { return true; }
  size_t fast(uint16_t port, std::span<engine::RxBuffer* const> rx, engine::FastRun* runs,
              uint64_t) override {
    ++fast_calls;
    size_t count = 0;
    for (size_t i = 0; i < rx.size(); ++i) {
      uint8_t* const data = engine::rx_data(rx[i]);
      if (engine::rx_segments(rx[i]) != 1 || engine::rx_len(rx[i]) < 4 || data[1] != kFastMark) {
        break;
      }
      data[2] = 'F';
      const uint16_t out = data[3] == kBack ? port : (port == a_ ? b_ : a_);
      if (count != 0 && runs[count - 1].port == out) {
        runs[count - 1].end = uint16_t(i + 1);
      } else {
        runs[count++] = {uint16_t(i + 1), out};
      }
    }
    return count;
  }
  size_t fast_calls = 0;

 private:
  uint16_t a_, b_;
};

// A port whose rx ring the test fills and whose tx ring it drains.
struct RingPort {
  rte_ring* rx = nullptr;
  rte_ring* tx = nullptr;
  std::string device;
  std::unique_ptr<Port> port;

  ~RingPort() {
    port.reset();
    if (!device.empty()) rte_vdev_uninit(device.c_str());
    for (rte_ring* r : {rx, tx}) {
      if (r == nullptr) continue;
      rte_mbuf* m = nullptr;
      while (rte_ring_dequeue(r, reinterpret_cast<void**>(&m)) == 0)
        rte_pktmbuf_free(m);
      rte_ring_free(r);
    }
  }
};

class DpdkPortTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static const std::string error = error_of(eal_init(kEalArgs));
    eal_error_ = error;
  }

  void SetUp() override {
    ASSERT_EQ(eal_error_, "");
    Result<std::unique_ptr<MbufPool>> created =
        MbufPool::create({.name = unique_name("test_pool"), .count = kPoolMbufs, .cache_size = 0});
    ASSERT_TRUE(created.has_value()) << created.error().message;
    pool_ = std::move(*created);
  }

  void TearDown() override {
    a_.reset();
    b_.reset();
    if (pool_ != nullptr) {
      EXPECT_EQ(pool_->available(), kPoolMbufs) << "mbufs leaked";
    }
    pool_.reset();
  }

  std::unique_ptr<RingPort> make_ring_port(uint32_t tx_slots = kRingSlots) {
    auto rp = std::make_unique<RingPort>();
    const std::string name = unique_name("test_ring_port");
    rp->rx = rte_ring_create((name + "_rx").c_str(), kRingSlots, SOCKET_ID_ANY,
                             RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
    rp->tx = rte_ring_create((name + "_tx").c_str(), tx_slots, SOCKET_ID_ANY,
                             RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
    EXPECT_NE(rp->rx, nullptr);
    EXPECT_NE(rp->tx, nullptr);
    if (rp->rx == nullptr || rp->tx == nullptr) return nullptr;
    const int id = rte_eth_from_rings(name.c_str(), &rp->rx, 1, &rp->tx, 1, SOCKET_ID_ANY);
    EXPECT_GE(id, 0) << "rte_eth_from_rings: " << rte_strerror(rte_errno);
    if (id < 0) return nullptr;
    // The ethdev is named "net_ring_<name>"; ask rather than rely on that.
    char device[RTE_ETH_NAME_MAX_LEN];
    EXPECT_EQ(rte_eth_dev_get_name_by_port(static_cast<uint16_t>(id), device), 0);
    rp->device = device;
    Result<std::unique_ptr<Port>> opened = Port::open({.device = rp->device}, *pool_);
    EXPECT_TRUE(opened.has_value()) << opened.error().message;
    if (opened) rp->port = std::move(*opened);
    return rp->port != nullptr ? std::move(rp) : nullptr;
  }

  // Puts `count` single-segment frames into `rp`'s rx ring; byte 0 of each is its number.
  void inject(RingPort& rp, uint32_t count, uint8_t first = 0) {
    for (uint32_t i = 0; i < count; ++i) {
      rte_mbuf* m = rte_pktmbuf_alloc(pool_->mempool());
      ASSERT_NE(m, nullptr);
      auto* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, kFrameBytes));
      ASSERT_NE(p, nullptr);
      std::memset(p, 0, kFrameBytes);
      p[0] = static_cast<uint8_t>(first + i);
      ASSERT_EQ(rte_ring_enqueue(rp.rx, m), 0);
    }
  }

  // Puts one frame into `rp`'s rx ring: byte 0 is its number, bytes 1 and 3 as given (what
  // FastEchoHandler reads), the rest zero.
  void put_marked(RingPort& rp, uint8_t number, uint8_t byte1, uint8_t byte3 = 0) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_->mempool());
    ASSERT_NE(m, nullptr);
    auto* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, kFrameBytes));
    ASSERT_NE(p, nullptr);
    std::memset(p, 0, kFrameBytes);
    p[0] = number;
    p[1] = byte1;
    p[3] = byte3;
    ASSERT_EQ(rte_ring_enqueue(rp.rx, m), 0);
  }

  // Everything `rp` transmitted, in order.
  static std::vector<rte_mbuf*> drain_tx(RingPort& rp) {
    std::vector<rte_mbuf*> out;
    rte_mbuf* m = nullptr;
    while (rte_ring_dequeue(rp.tx, reinterpret_cast<void**>(&m)) == 0)
      out.push_back(m);
    return out;
  }

  static void free_all(const std::vector<rte_mbuf*>& mbufs) {
    for (rte_mbuf* m : mbufs)
      rte_pktmbuf_free(m);
  }

  bool make_pair() {
    a_ = make_ring_port();
    b_ = make_ring_port();
    return a_ != nullptr && b_ != nullptr;
  }

  static inline std::string eal_error_;
  std::unique_ptr<MbufPool> pool_;
  std::unique_ptr<RingPort> a_, b_;
};

TEST_F(DpdkPortTest, EalRefusesASecondInitialization) {
  const std::string error = error_of(eal_init(kEalArgs));
  EXPECT_NE(error.find("already initialized"), std::string::npos) << error;
  EXPECT_TRUE(eal_running());
}

TEST_F(DpdkPortTest, VirtualDeviceDriversAreRegistered) {
  uint16_t id = 0;
  EXPECT_EQ(rte_eth_dev_get_port_by_name("net_null0", &id), 0) << "net_null0 from --vdev";
  EXPECT_EQ(rte_vdev_init("net_ring_probe0", nullptr), 0) << "net_ring driver missing";
  EXPECT_EQ(rte_vdev_uninit("net_ring_probe0"), 0);
  // Binding an AF_PACKET socket to lo sends nothing; it needs CAP_NET_RAW, as the engine does.
  EXPECT_EQ(rte_vdev_init("net_af_packet_probe0", "iface=lo"), 0) << "net_af_packet missing";
  EXPECT_EQ(rte_vdev_uninit("net_af_packet_probe0"), 0);
}

TEST_F(DpdkPortTest, MbufPoolAllocGivesEmptyFrameThatRoundTrips) {
  Frame* f = pool_->alloc();
  ASSERT_NE(f, nullptr);
  rte_mbuf* m = MbufPool::mbuf_of(f);
  EXPECT_EQ(MbufPool::frame_of(m), f);
  EXPECT_EQ(f->data, rte_pktmbuf_mtod(m, uint8_t*));
  EXPECT_EQ(f->len, 0u);
  EXPECT_EQ(f->room, uint32_t{RTE_MBUF_DEFAULT_BUF_SIZE - RTE_PKTMBUF_HEADROOM});
  EXPECT_EQ(pool_->available(), kPoolMbufs - 1);
  pool_->free(f);
  EXPECT_EQ(pool_->available(), kPoolMbufs);
}

TEST_F(DpdkPortTest, MbufPoolPutsReceivedDataEightBytesIntoACacheLine) {
  // Where a PMD writes a frame: data_off as rte_pktmbuf_reset leaves it. The headers of a
  // frame without TCP options (54 bytes) then fit in the line.
  for (int i = 0; i < 4; ++i) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_->mempool());
    ASSERT_NE(m, nullptr);
    const auto at = reinterpret_cast<uintptr_t>(rte_pktmbuf_mtod(m, uint8_t*));
    EXPECT_EQ(at % RTE_CACHE_LINE_SIZE, MbufPool::kDataLineOffset) << i;
    EXPECT_LE(at % RTE_CACHE_LINE_SIZE + 54, uint64_t{RTE_CACHE_LINE_SIZE});
    EXPECT_GE(m->priv_size, sizeof(Frame));
    rte_pktmbuf_free(m);
  }
}

TEST_F(DpdkPortTest, MbufPoolEveryMbufRoundTripsAndEmptyPoolGivesNull) {
  std::vector<Frame*> frames;
  for (uint32_t i = 0; i < kPoolMbufs; ++i) {
    Frame* f = pool_->alloc();
    ASSERT_NE(f, nullptr) << i;
    ASSERT_EQ(MbufPool::frame_of(MbufPool::mbuf_of(f)), f);
    frames.push_back(f);
  }
  EXPECT_EQ(pool_->alloc(), nullptr);
  for (Frame* f : frames)
    pool_->free(f);
  // Set at creation for every mbuf, converted or not.
  rte_mbuf* m = rte_pktmbuf_alloc(pool_->mempool());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(MbufPool::mbuf_of(MbufPool::frame_of(m)), m);
  rte_pktmbuf_free(m);
}

TEST_F(DpdkPortTest, MbufPoolRefusesBadSizes) {
  Result<std::unique_ptr<MbufPool>> c =
      MbufPool::create({.name = unique_name("bad"), .data_room = 64});
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("data_room"), std::string::npos) << c.error().message;
}

TEST_F(DpdkPortTest, ToFrameAndToMbufCarryLengthAndPort) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_->mempool());
  ASSERT_NE(m, nullptr);
  ASSERT_NE(rte_pktmbuf_append(m, kFrameBytes), nullptr);
  Frame* f = MbufPool::to_frame(m, 3);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->data, rte_pktmbuf_mtod(m, uint8_t*));
  EXPECT_EQ(f->len, kFrameBytes);
  EXPECT_EQ(f->room, uint32_t{kFrameBytes} + rte_pktmbuf_tailroom(m));
  EXPECT_EQ(f->port, 3);
  f->len = 42;  // the engine trimmed it
  EXPECT_EQ(MbufPool::to_mbuf(f), m);
  EXPECT_EQ(m->data_len, 42);
  EXPECT_EQ(m->pkt_len, 42u);
  rte_pktmbuf_free(m);
}

TEST_F(DpdkPortTest, ToFrameRefusesMultiSegmentMbuf) {
  rte_mbuf* head = rte_pktmbuf_alloc(pool_->mempool());
  rte_mbuf* tail = rte_pktmbuf_alloc(pool_->mempool());
  ASSERT_NE(head, nullptr);
  ASSERT_NE(tail, nullptr);
  ASSERT_NE(rte_pktmbuf_append(head, 100), nullptr);
  ASSERT_NE(rte_pktmbuf_append(tail, 100), nullptr);
  ASSERT_EQ(rte_pktmbuf_chain(head, tail), 0);
  EXPECT_EQ(MbufPool::to_frame(head, 0), nullptr);
  rte_pktmbuf_free(head);
}

TEST_F(DpdkPortTest, PortOpenReportsUnknownDevice) {
  Result<std::unique_ptr<Port>> opened = Port::open({.device = "net_nonexistent7"}, *pool_);
  ASSERT_FALSE(opened.has_value());
  EXPECT_NE(opened.error().message.find("net_nonexistent7"), std::string::npos)
      << opened.error().message;
}

TEST_F(DpdkPortTest, PortReportsIdMacAndQueues) {
  // net_null has a random MAC (net_ring's is all zeros), so a copy error would show.
  Result<std::unique_ptr<Port>> opened =
      Port::open({.device = "net_null0", .rx_queues = 2, .tx_queues = 3}, *pool_);
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  const Port& port = **opened;
  uint16_t id = 0;
  ASSERT_EQ(rte_eth_dev_get_port_by_name("net_null0", &id), 0);
  EXPECT_EQ(port.id(), id);
  EXPECT_EQ(port.name(), "net_null0");
  EXPECT_EQ(port.rx_queues(), 2);
  EXPECT_EQ(port.tx_queues(), 3);
  rte_ether_addr mac;
  ASSERT_EQ(rte_eth_macaddr_get(id, &mac), 0);
  EXPECT_EQ(std::memcmp(port.mac().data(), mac.addr_bytes, 6), 0);
  EXPECT_NE(port.mac(), Port::MacAddr{});
  EXPECT_FALSE(port.tx_checksum_offload());  // net_null offers none
  EXPECT_EQ(port.stats().opackets, 0u);
}

TEST_F(DpdkPortTest, PortOpenRefusesMoreQueuesThanTheDeviceHas) {
  ASSERT_TRUE(make_pair());
  Result<std::unique_ptr<Port>> again = Port::open({.device = a_->device, .rx_queues = 2}, *pool_);
  ASSERT_FALSE(again.has_value());
  const std::string& error = again.error().message;
  EXPECT_NE(error.find("queues"), std::string::npos) << error;
  EXPECT_NE(error.find(a_->device), std::string::npos) << error;
}

TEST_F(DpdkPortTest, LoopMovesFramesToTheOtherPort) {
  ASSERT_TRUE(make_pair());
  EchoHandler echo(a_->port->id(), b_->port->id());
  const RxSource rx[] = {{a_->port.get(), 0}, {b_->port.get(), 0}};
  Port* const tx[] = {a_->port.get(), b_->port.get()};
  LcoreLoop loop(rx, tx, 0, echo);

  constexpr uint32_t kFromA = LcoreLoop::kBurstMax + 8;  // more than one burst
  inject(*a_, kFromA);
  inject(*b_, 5, 100);
  uint32_t received = 0;
  for (int i = 0; i < 4; ++i)
    received += loop.run_once();
  EXPECT_EQ(received, kFromA + 5);

  std::vector<rte_mbuf*> out_b = drain_tx(*b_);
  std::vector<rte_mbuf*> out_a = drain_tx(*a_);
  ASSERT_EQ(out_b.size(), kFromA);
  ASSERT_EQ(out_a.size(), 5u);
  for (size_t i = 0; i < out_b.size(); ++i) {
    EXPECT_EQ(rte_pktmbuf_mtod(out_b[i], uint8_t*)[0], i) << "order kept";
    EXPECT_EQ(out_b[i]->data_len, kFrameBytes);
    EXPECT_EQ(out_b[i]->pkt_len, kFrameBytes);
  }
  EXPECT_EQ(rte_pktmbuf_mtod(out_a[0], uint8_t*)[0], 100);
  free_all(out_a);
  free_all(out_b);

  const LoopCounters& c = loop.counters();
  EXPECT_EQ(c.rx, kFromA + 5);
  EXPECT_EQ(c.tx, kFromA + 5);
  EXPECT_EQ(c.tx_dropped, 0u);
  EXPECT_EQ(c.tx_unknown_port, 0u);
  EXPECT_EQ(c.rx_multiseg_dropped, 0u);
  EXPECT_EQ(c.loops, 4u);
  EXPECT_EQ(c.idle_loops, 2u);  // a full burst and 8 + 5 frames, then nothing

  const PortStats sa = a_->port->stats();
  const PortStats sb = b_->port->stats();
  EXPECT_EQ(sa.ipackets, kFromA);
  EXPECT_EQ(sa.opackets, 5u);
  EXPECT_EQ(sb.ipackets, 5u);
  EXPECT_EQ(sb.opackets, kFromA);
}

TEST_F(DpdkPortTest, LoopCountsAndFreesWhatAFullPortDoesNotTake) {
  a_ = make_ring_port();
  b_ = make_ring_port(/*tx_slots=*/8);
  ASSERT_NE(a_, nullptr);
  ASSERT_NE(b_, nullptr);
  EchoHandler echo(a_->port->id(), b_->port->id());
  const RxSource rx[] = {{a_->port.get(), 0}};
  Port* const tx[] = {a_->port.get(), b_->port.get()};
  LcoreLoop loop(rx, tx, 0, echo);

  inject(*a_, 20);
  EXPECT_EQ(loop.run_once(), 20u);
  std::vector<rte_mbuf*> out = drain_tx(*b_);
  EXPECT_EQ(out.size(), 8u);
  free_all(out);
  EXPECT_EQ(loop.counters().tx, 8u);
  EXPECT_EQ(loop.counters().tx_dropped, 12u);
  // TearDown checks the 12 went back to the pool.
}

TEST_F(DpdkPortTest, LoopDropsMultiSegmentMbufs) {
  ASSERT_TRUE(make_pair());
  EchoHandler echo(a_->port->id(), b_->port->id());
  const RxSource rx[] = {{a_->port.get(), 0}};
  Port* const tx[] = {b_->port.get()};
  LcoreLoop loop(rx, tx, 0, echo);

  rte_mbuf* head = rte_pktmbuf_alloc(pool_->mempool());
  rte_mbuf* tail = rte_pktmbuf_alloc(pool_->mempool());
  ASSERT_NE(head, nullptr);
  ASSERT_NE(tail, nullptr);
  ASSERT_NE(rte_pktmbuf_append(head, 1000), nullptr);
  ASSERT_NE(rte_pktmbuf_append(tail, 1000), nullptr);
  ASSERT_EQ(rte_pktmbuf_chain(head, tail), 0);
  inject(*a_, 1);
  ASSERT_EQ(rte_ring_enqueue(a_->rx, head), 0);
  inject(*a_, 1, 1);

  EXPECT_EQ(loop.run_once(), 3u);
  std::vector<rte_mbuf*> out = drain_tx(*b_);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(rte_pktmbuf_mtod(out[0], uint8_t*)[0], 0);
  EXPECT_EQ(rte_pktmbuf_mtod(out[1], uint8_t*)[0], 1);
  free_all(out);
  EXPECT_EQ(loop.counters().rx, 3u);
  EXPECT_EQ(loop.counters().rx_multiseg_dropped, 1u);
  EXPECT_EQ(loop.counters().tx, 2u);
}

TEST_F(DpdkPortTest, LoopFreesFramesForPortsItDoesNotSendOn) {
  ASSERT_TRUE(make_pair());
  EchoHandler echo(a_->port->id(), b_->port->id());
  echo.redirect_to = 200;
  const RxSource rx[] = {{a_->port.get(), 0}};
  Port* const tx[] = {b_->port.get()};
  LcoreLoop loop(rx, tx, 0, echo);
  inject(*a_, 3);
  EXPECT_EQ(loop.run_once(), 3u);
  EXPECT_EQ(loop.counters().tx_unknown_port, 3u);
  EXPECT_EQ(loop.counters().tx, 0u);
  EXPECT_EQ(rte_ring_count(b_->tx), 0u);
}

// engine::RxBuffer reads an mbuf's frame where rte_pktmbuf_mtod() finds it, its first
// segment's length and its segments, as the fast path gets them from the driver.
TEST_F(DpdkPortTest, RxBufferReadsAnMbufsBytesLengthAndSegments) {
  ASSERT_TRUE(make_pair());
  rte_mbuf* head = rte_pktmbuf_alloc(pool_->mempool());
  rte_mbuf* tail = rte_pktmbuf_alloc(pool_->mempool());
  ASSERT_NE(head, nullptr);
  ASSERT_NE(tail, nullptr);
  head->data_off = uint16_t(head->data_off + 6);  // not where the buffer's headroom ends
  ASSERT_NE(rte_pktmbuf_append(head, 300), nullptr);
  ASSERT_NE(rte_pktmbuf_append(tail, 40), nullptr);
  const auto* view = reinterpret_cast<const engine::RxBuffer*>(head);
  EXPECT_EQ(engine::rx_data(view), rte_pktmbuf_mtod(head, uint8_t*));
  EXPECT_EQ(engine::rx_len(view), 300u);
  EXPECT_EQ(engine::rx_segments(view), 1u);
  ASSERT_EQ(rte_pktmbuf_chain(head, tail), 0);
  EXPECT_EQ(engine::rx_len(view), 300u);
  EXPECT_EQ(engine::rx_segments(view), 2u);
  rte_pktmbuf_free(head);
}

// The fast path's frames leave first and as they are; the rest of the burst, from the first
// frame it left on (even frames it could have taken), goes to burst(), so the order holds. A
// multi-segment mbuf is offered as it came, left by the fast path and then dropped as before.
TEST_F(DpdkPortTest, LoopOffersEachBurstToTheFastPathFirst) {
  ASSERT_TRUE(make_pair());
  FastEchoHandler echo(a_->port->id(), b_->port->id());
  const RxSource rx[] = {{a_->port.get(), 0}};
  Port* const tx[] = {b_->port.get()};
  LcoreLoop loop(rx, tx, 0, echo);
  const auto put = [&](uint8_t number, bool mark) {
    put_marked(*a_, number, mark ? FastEchoHandler::kFastMark : 0);
  };
  put(0, true);
  put(1, true);
  put(2, false);
  put(3, true);
  EXPECT_EQ(loop.run_once(), 4u);
  std::vector<rte_mbuf*> out = drain_tx(*b_);
  ASSERT_EQ(out.size(), 4u);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = rte_pktmbuf_mtod(out[i], uint8_t*);
    EXPECT_EQ(p[0], i) << "order kept";
    EXPECT_EQ(p[2], i < 2 ? 'F' : 0) << "frame " << i;
    EXPECT_EQ(out[i]->data_len, kFrameBytes);
  }
  free_all(out);
  EXPECT_EQ(echo.fast_calls, 1u);
  EXPECT_EQ(loop.counters().tx, 4u);

  // A burst the fast path takes whole leaves in the same iteration, though burst() and
  // take_tx() have nothing.
  put(20, true);
  put(21, true);
  EXPECT_EQ(loop.run_once(), 2u);
  out = drain_tx(*b_);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(rte_pktmbuf_mtod(out[1], uint8_t*)[0], 21);
  free_all(out);

  // A marked multi-segment mbuf is not the fast path's: offered as it came (the handler reads
  // its segments through engine::RxBuffer), left, then dropped.
  rte_mbuf* head = rte_pktmbuf_alloc(pool_->mempool());
  rte_mbuf* tail = rte_pktmbuf_alloc(pool_->mempool());
  ASSERT_NE(head, nullptr);
  ASSERT_NE(tail, nullptr);
  auto* h = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(head, 1000));
  ASSERT_NE(h, nullptr);
  ASSERT_NE(rte_pktmbuf_append(tail, 1000), nullptr);
  h[1] = FastEchoHandler::kFastMark;
  ASSERT_EQ(rte_pktmbuf_chain(head, tail), 0);
  ASSERT_EQ(rte_ring_enqueue(a_->rx, head), 0);
  put(9, true);
  EXPECT_EQ(loop.run_once(), 2u);
  out = drain_tx(*b_);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(rte_pktmbuf_mtod(out[0], uint8_t*)[0], 9);
  EXPECT_EQ(rte_pktmbuf_mtod(out[0], uint8_t*)[2], 0);  // after the refused one: burst()
  free_all(out);
  EXPECT_EQ(loop.counters().rx_multiseg_dropped, 1u);

  // Fast-path frames for a port the loop does not send on are counted and freed.
  put(10, true);
  LcoreLoop only_a(rx, std::span<Port* const>(tx, 0), 0, echo);
  EXPECT_EQ(only_a.run_once(), 1u);
  EXPECT_EQ(only_a.counters().tx_unknown_port, 1u);
}

// The fast path's runs: frames for several ports in one burst each leave by their port, in
// order, and a whole burst for one port with nothing staged for it goes out at once.
TEST_F(DpdkPortTest, LoopSendsEachRunOfTheFastPathByItsPort) {
  ASSERT_TRUE(make_pair());
  FastEchoHandler echo(a_->port->id(), b_->port->id());
  const RxSource rx[] = {{a_->port.get(), 0}};
  Port* const tx[] = {a_->port.get(), b_->port.get()};
  LcoreLoop loop(rx, tx, 0, echo);
  const auto put = [&](uint8_t number, bool back) {
    put_marked(*a_, number, FastEchoHandler::kFastMark, back ? FastEchoHandler::kBack : 0);
  };
  // Runs b b | a | b b | a a: four runs, two ports.
  const bool back[] = {false, false, true, false, false, true, true};
  for (size_t i = 0; i < std::size(back); ++i)
    put(uint8_t(i), back[i]);
  EXPECT_EQ(loop.run_once(), std::size(back));
  const auto numbers = [&](RingPort& port) {
    std::vector<int> seen;
    const std::vector<rte_mbuf*> out = drain_tx(port);
    for (rte_mbuf* m : out) {
      const uint8_t* p = rte_pktmbuf_mtod(m, uint8_t*);
      EXPECT_EQ(p[2], 'F');
      seen.push_back(p[0]);
    }
    free_all(out);
    return seen;
  };
  EXPECT_EQ(numbers(*b_), (std::vector<int>{0, 1, 3, 4}));
  EXPECT_EQ(numbers(*a_), (std::vector<int>{2, 5, 6}));
  EXPECT_EQ(loop.counters().tx, std::size(back));

  // A whole burst for b, then one frame back to a and a burst for b again: every frame
  // leaves, in order on each port.
  for (uint8_t i = 0; i < LcoreLoop::kBurstMax; ++i)
    put(uint8_t(10 + i), false);
  EXPECT_EQ(loop.run_once(), LcoreLoop::kBurstMax);
  put(100, true);
  for (uint8_t i = 0; i < LcoreLoop::kBurstMax - 1; ++i)
    put(uint8_t(101 + i), false);
  EXPECT_EQ(loop.run_once(), LcoreLoop::kBurstMax);
  std::vector<int> want_b;
  want_b.reserve(2 * LcoreLoop::kBurstMax);
  for (int i = 0; i < LcoreLoop::kBurstMax; ++i)
    want_b.push_back(10 + i);
  for (int i = 0; i < LcoreLoop::kBurstMax - 1; ++i)
    want_b.push_back(101 + i);
  EXPECT_EQ(numbers(*b_), want_b);
  EXPECT_EQ(numbers(*a_), (std::vector<int>{100}));
  EXPECT_EQ(loop.counters().tx, std::size(back) + 2u * LcoreLoop::kBurstMax);
  EXPECT_EQ(loop.counters().tx_dropped, 0u);
}

TEST_F(DpdkPortTest, LoopTicksWhileIdleAndSendsWhatTickMade) {
  ASSERT_TRUE(make_pair());
  EchoHandler echo(a_->port->id(), b_->port->id());
  echo.make_on_tick = pool_.get();
  echo.stop_after_ticks = 20;
  const RxSource rx[] = {{a_->port.get(), 0}};
  Port* const tx[] = {b_->port.get()};
  LcoreLoop loop(rx, tx, 0, echo);

  const auto start = std::chrono::steady_clock::now();
  loop.run(echo.stop);
  const double elapsed_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();

  ASSERT_EQ(echo.tick_ns.size(), 20u);
  for (size_t i = 1; i < echo.tick_ns.size(); ++i) {
    EXPECT_GE(echo.tick_ns[i] - echo.tick_ns[i - 1], LcoreLoop::kTickPeriodNs);
  }
  // The TSC clock agrees with the system's: 20 periods took at least 19 periods' time.
  const uint64_t span_ns = echo.tick_ns.back() - echo.tick_ns.front();
  EXPECT_LE(double(span_ns), elapsed_ns * 1.05);
  EXPECT_GE(span_ns, 19 * LcoreLoop::kTickPeriodNs);
  EXPECT_EQ(loop.counters().ticks, 20u);
  EXPECT_EQ(loop.counters().idle_loops, loop.counters().loops);

  std::vector<rte_mbuf*> out = drain_tx(*b_);
  EXPECT_EQ(out.size(), 20u);
  for (rte_mbuf* m : out) {
    EXPECT_EQ(m->pkt_len, kFrameBytes);
    EXPECT_EQ(rte_pktmbuf_mtod(m, uint8_t*)[0], 0xab);
  }
  free_all(out);
}

}  // namespace
}  // namespace sluice::dpdk::port
