// What one lcore of the DPDK engine is told at start (addresses, ports, routes, limits, timers)
// and its view of control's decisions (the Router). Plain data; the gateway fills it from the
// TOML config and adapts control's replicas to the Router.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/dpdk/net/packet.h"
#include "dataplane/session/config.h"
#include "dataplane/session/heart_beat.h"
#include "dataplane/session/queue_key.h"

namespace sluice::dpdk::engine {

// A static IPv4 route: destinations in prefix/length leave by `port`, to `gateway` (0: the
// destination is on the link itself). The longest matching prefix wins.
struct Route {
  uint32_t prefix = 0;
  uint8_t length = 0;
  uint32_t gateway = 0;
  uint16_t port = 0;
};

struct LcoreConfig {
  // Index = port id as the frames carry it; the MAC each port answers and sends with.
  std::vector<net::MacAddr> port_macs;
  // Clients connect to virtual_ip on one of listen_ports.
  uint32_t virtual_ip = 0;
  std::vector<uint16_t> listen_ports = {61613};
  // The owner leg's sources: every local address with ports [local_port_min, local_port_max].
  std::vector<uint32_t> local_ips;
  uint16_t local_port_min = 20000;
  uint16_t local_port_max = 59999;
  // Where the search for a free (local address, port) starts, as an index over every pair
  // (taken modulo their number; it then goes round). sluiced picks it at random, so that a
  // restarted gateway does not reuse the previous one's first ports, whose connections may
  // still be in TIME_WAIT at the owners; tests leave it at 0.
  uint32_t local_port_start = 0;
  std::vector<Route> routes;
  // Where spill sessions are spliced to (the gateway's own spill listener, behind the
  // exception port) and where an owner that refuses or does not answer sends the session.
  uint32_t spill_ip = 0;
  uint16_t spill_port = 0;
  // The TAP port to the gateway's own kernel (admin API, SSH, the spill listener), -1: none.
  // Frames for addresses that are not the engine's go there; frames from it leave by the
  // route of their destination.
  int32_t exception_port = -1;

  // Limits (DESIGN section 4: memory is sized from these at start).
  uint32_t flows_max = 65536;         // every flow, spliced or not
  uint32_t prelude_flows_max = 1024;  // flows still in the prelude or binding (64 KiB each)
  uint32_t neighbors_max = 256;
  uint32_t owner_greeting_bytes_max = 4096;  // the owner's CONNECTED frame
  uint32_t ack_storm_max = 2000;             // identical pure ACKs per flow per 10 ms window
  // Client segments held while flows bind (they hold mbufs): over every flow of the lcore, and
  // per flow (Lcore::kParkedPerFlowMax). 0: none held, the client's retransmission brings them.
  uint32_t parked_frames_max = 1024;

  // TCP of the gateway's own segments (handshake, prelude replies, replay).
  uint16_t mss = 1460;       // announced to clients
  uint8_t window_scale = 7;  // announced to clients that offer window scaling
  uint32_t rto_initial_ms = 200;
  uint32_t rto_max_ms = 3000;
  uint32_t retries_max = 6;    // retransmissions of one segment before the flow is reset
  uint32_t syn_rto_ms = 1000;  // the owner SYN's retransmission interval

  // Deadlines of a flow's states, in the manner of a stateful NAT.
  uint32_t connect_timeout_ms = 2000;  // owner SYN to the owner's CONNECTED
  // New queues one client address may have placed per minute (0: no limit); over it the flow
  // goes on but nothing is recorded.
  uint32_t placements_per_source_per_minute = 600;
  uint64_t established_idle_ms = 7'200'000;
  uint32_t fin_timeout_ms = 60'000;  // after a FIN each way, or after the gateway's own FIN
  uint32_t reset_linger_ms = 2'000;  // after a RST: absorb what is still in flight

  // Segments of spliced flows in their common shape skip the general parse and dispatch
  // (Lcore::splice_established). Off only in tests and benchmarks that compare the two paths,
  // whose output must be the same; not a TOML setting.
  bool established_path = true;
  // On x86-64 the fast path's loop (Lcore::fast) is built twice: for the engine's baseline
  // (SSE4.2) and for x86-64-v3 (AVX2, BMI1/2, MOVBE, FMA, F16C, LZCNT), which an lcore runs when
  // the CPU has it (Lcore::fast_path_v3). Off, the baseline everywhere: tests that check both
  // builds send the same frames; not a TOML setting.
  bool fast_path_v3 = true;

  std::array<uint8_t, 16> cookie_key{};
  uint64_t flow_hash_key = 0;  // the flow table's hash secret (flow::tuple_hash)
  session::SessionConfig session;

  // An error naming the first wrong setting, if one is.
  Result<> validate() const;
};

}  // namespace sluice::dpdk::engine
