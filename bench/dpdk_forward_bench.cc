// I/O forwarding on one lcore, the reference figure for the DPDK engine: 64- and 1514-byte
// Ethernet/IPv4/TCP frames from an rte_ring-backed port to net_null, forwarded (a) by bare
// rte_eth_rx_burst/rte_eth_tx_burst as testpmd's io mode and (b) by port::LcoreLoop with the
// IoForward handler. Prints Mpps per lcore for each; the filling of the ring is not timed.
// Usage: dpdk_forward_bench [--packets=N] [--seconds=S]  (--benchmark_* flags are accepted and
// ignored: CI's smoke run passes --benchmark_min_time). Needs no hugepages and no NIC.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "bench/dpdk_forward.h"
#include "dataplane/dpdk/port/eal.h"

namespace {

using namespace sluice;

constexpr size_t kFrameSizes[] = {64, 1514};  // minimum frame (no FCS); full 1500-byte MTU

bool parse_u64(std::string_view text, uint64_t& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out > 0;
}

void print(const char* what, const bench::ForwardResult& r) {
  std::printf("  %-26s %7.2f Mpps  (%llu packets in %.3f s forwarding time, %llu dropped)\n", what,
              r.mpps, static_cast<unsigned long long>(r.packets), r.seconds,
              static_cast<unsigned long long>(r.dropped));
}

}  // namespace

int main(int argc, char** argv) {
  bench::ForwardOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    uint64_t value = 0;
    if (arg.starts_with("--benchmark_")) continue;
    if (arg.starts_with("--packets=") && parse_u64(arg.substr(10), value)) {
      options.packets = value;
    } else if (arg.starts_with("--seconds=") && parse_u64(arg.substr(10), value)) {
      options.seconds_max = double(value);
    } else {
      std::fprintf(stderr, "dpdk_forward_bench: unknown or bad argument '%s'\n", argv[i]);
      return 2;
    }
  }

  // One lcore, no hugepages, no PCI, no shared files: runs beside anything else on the host.
  const std::string error =
      dpdk::port::eal_init({"--no-huge", "--no-pci", "-m", "512", "--no-shconf", "--no-telemetry",
                            "-l", "0", "--log-level=5"});
  if (!error.empty()) {
    std::fprintf(stderr, "dpdk_forward_bench: %s\n", error.c_str());
    return 1;
  }
  int rc = 0;
  {
    bench::ForwardRig::Created created = bench::ForwardRig::create();
    if (created.rig == nullptr) {
      std::fprintf(stderr, "dpdk_forward_bench: %s\n", created.error.c_str());
      dpdk::port::eal_cleanup();
      return 1;
    }
    bench::ForwardRig& rig = *created.rig;
    std::printf(
        "dpdk_forward: I/O forwarding, 1 lcore, net_ring rx -> net_null tx, bursts of 32, "
        "%llu packets per run (at most %.0f s)\n",
        static_cast<unsigned long long>(options.packets), options.seconds_max);
    for (const size_t bytes : kFrameSizes) {
      const std::vector<uint8_t> frame = bench::tcp_template(bytes);
      if (frame.empty()) {
        std::fprintf(stderr, "dpdk_forward_bench: cannot build a %zu-byte frame\n", bytes);
        rc = 1;
        break;
      }
      std::printf("frame %zu bytes:\n", bytes);
      const bench::ForwardResult raw = bench::run_ethdev_forward(rig, frame, options);
      print("ethdev rx/tx (testpmd io)", raw);
      bench::IoForward io(rig.tx_port(), rig.pool());
      const bench::ForwardResult loop = bench::run_forward(rig, io, frame, options);
      print("LcoreLoop + IoForward", loop);
      if (raw.mpps > 0) std::printf("  ratio LcoreLoop/ethdev      %7.2f\n", loop.mpps / raw.mpps);
      if (raw.packets == 0 || loop.packets == 0 || raw.dropped != 0 || loop.dropped != 0) rc = 1;
    }
  }
  dpdk::port::eal_cleanup();
  return rc;
}
