// One spliced session's state on its lcore (private to the engine): both legs' addresses and
// sequence spaces, the gateway's own TCP sender state while it still speaks for a peer, and the
// sequence maps of the splice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "dataplane/dpdk/flow/tuple_map.h"
#include "dataplane/dpdk/net/packet.h"
#include "dataplane/dpdk/splice/seq_map.h"

namespace sluice::dpdk::engine::detail {

enum class FlowState : uint8_t {
  kFree,
  kPrelude,     // the gateway is the client's STOMP server
  kConnecting,  // owner SYN sent, waiting for SYN-ACK
  kReplay,      // replaying the bind plan, reading the owner's CONNECTED
  kSpliced,     // rewriting only
  kClosing,     // the gateway closed the client leg itself (ERROR, DISCONNECT): FIN sent
  kLinger,      // both FINs seen, or a RST: absorbing stragglers until the timer frees it
};
const char* flow_state_name(FlowState s);

// The login check's connection (login_check eager) while the flow is still kPrelude: the owner
// leg's fields serve it. Its SYN is out; the CONNECT went and the node's answer is awaited;
// the node accepted and its connection is held for the session, to be kept when that node
// owns the destination (Lcore::bind).
enum class LoginLeg : uint8_t { kNone, kConnecting, kGreeting, kHeld };

constexpr uint32_t kNoSlot = UINT32_MAX;

struct Leg {
  flow::Tuple rx;         // as the peer's frames arrive (peer -> gateway)
  net::MacAddr peer_mac;  // next hop towards the peer
  uint16_t port = 0;      // port the leg's frames leave by
  bool wscale_ok = false;
  uint8_t peer_wscale = 0;  // shift of the peer's window fields (0 when not negotiated)
  uint8_t our_wscale = 0;   // shift of the window fields the peer receives
  bool sack_ok = false;
  bool ts_ok = false;
  uint16_t peer_mss = 536;
  uint32_t peer_window = 0;  // bytes, from the last segment
  uint32_t ts_recent = 0;    // the peer's last TSval
  bool fin_seen = false;     // the peer sent FIN (at fin_seq, its own space)
  uint32_t fin_seq = 0;
  // ACK-storm window (identical pure ACKs in a 10 ms window).
  uint64_t storm_window_ms = 0;
  uint32_t storm_count = 0;
  uint32_t last_ack = 0;
  uint16_t last_window = 0;
};

// The constant part of the splice's rewrite in one direction, prepared when the flow splices
// (Lcore::prepare_fast) for the driver's fast path (fast_path.cc). Everything is in the frame's
// byte order: the new addresses and ports as they are stored, and what replacing the old ones
// adds to the checksums (RFC 1624: ~old + new over each 16-bit word, summed as they lie in
// memory, which gives the checksum field in the same order, RFC 1071).
struct FastRewrite {
  // Where the frames go: Lcore::set_client_port keeps o2c's port and MACs in step.
  uint8_t macs[12] = {};  // destination then source MAC
  uint16_t port = 0;
  uint16_t ip_sum = 0;  // the addresses' part: the IPv4 header checksum's whole change, folded
  // The fast path loads the MACs as 16 bytes (fast_path.cc: store_macs), and these two with
  // ts_delta, storing them with the new sequence number in its place (store_tuple_seq).
  uint64_t addresses = 0;  // source then destination address
  uint32_t ports = 0;      // source then destination port
  // Timestamps: ts_at 0 leaves them (the owner leg does not use them), else the offset in the
  // TCP header of the one value that moves (TSecr towards the owner, TSval towards the
  // client), and ts_delta what is added to it.
  uint32_t ts_delta = 0;
  // The addresses' and ports' part of the TCP checksum's change, over host-order numbers and
  // modulo 0xffff (fast_path.cc).
  uint64_t tcp_sum = 0;
  uint8_t ts_at = 0;
  bool rescale = false;  // the legs' window scales differ: the window field is rescaled
  uint8_t window_from = 0;
  uint8_t window_to = 0;
};
static_assert(sizeof(FastRewrite) == 48);
static_assert(offsetof(FastRewrite, macs) == 0 &&
              offsetof(FastRewrite, ports) == offsetof(FastRewrite, addresses) + 8 &&
              offsetof(FastRewrite, ts_delta) == offsetof(FastRewrite, addresses) + 12);

struct Flow {
  FlowState state = FlowState::kFree;
  uint32_t next_free = kNoSlot;
  uint32_t slot = kNoSlot;  // prelude/binding buffers, kNoSlot once spliced
  // The lingering flows in the order they ended (the lcore's linger list), while kLinger.
  uint32_t linger_prev = kNoSlot;
  uint32_t linger_next = kNoSlot;

  Leg client;  // rx: client -> virtual ip
  Leg owner;   // rx: owner -> local address

  // Client leg, gateway as server. Sequence numbers in the client leg's spaces.
  uint32_t client_isn = 0;
  uint32_t our_isn = 0;  // the cookie
  uint32_t rcv_nxt = 0;  // next client byte the gateway expects (prelude)
  uint32_t snd_una = 0;  // injected bytes to the client: [our_isn + 1, snd_nxt)
  uint32_t snd_nxt = 0;
  bool our_fin = false;  // the gateway sent FIN after its injected bytes (kClosing)

  // Owner leg, gateway as client; the owner leg's ISN is the client's (DESIGN section 7).
  uint32_t node = UINT32_MAX;
  bool to_spill = false;
  bool syn_after_reset = false;  // this connect attempt sent its SYN again after a RST (once)
  uint32_t owner_isn = 0;
  uint32_t o_rcv_nxt = 0;  // next owner byte (greeting)
  uint32_t o_snd_una = 0;  // replay bytes acknowledged by the owner
  uint32_t o_snd_nxt = 0;
  uint32_t replay_bytes = 0;  // connect' + rest, contiguous at the start of the slot's buffer
  uint32_t replay_seq = 0;    // the owner leg's sequence number of the buffer's first byte
  // The login check: its state, the nodes asked so far, and the bytes the owner leg owes the
  // node (the rewritten CONNECT, then one heart-beat EOL per beat sent while held).
  LoginLeg login = LoginLeg::kNone;
  uint8_t login_attempts = 0;
  uint32_t login_bytes = 0;
  uint32_t login_connect_bytes = 0;
  uint32_t greeting_fill = 0;
  bool greeting_done = false;
  uint32_t ts_offset = 0;  // owner TSval + ts_offset = what the client sees
  uint16_t local_port = 0;
  uint32_t local_ip = 0;
  uint32_t next_hop = 0;
  // Spliced: the end of what reached the owner, for the gateway's ACK when the owner sends its
  // CONNECTED again (from_owner). That is read only while the owner -> client map has edits,
  // so the driver's fast path, which takes no segment of a flow with edits (they never come
  // back once retired), does not keep it.
  uint32_t owner_seq_max = 0;

  splice::SeqMap c2o{0};  // client -> owner data
  splice::SeqMap o2c{0};  // owner -> client data

  // Timers: one per flow in the wheel; these say what it is for.
  uint64_t deadline_ms = 0;  // the state's deadline
  uint64_t rtx_at_ms = 0;    // 0: nothing outstanding
  uint32_t rto_ms = 0;
  uint32_t retries = 0;
  uint64_t last_seen_ms = 0;  // spliced: idle expiry

  // Set with c2o_fast and o2c_fast when the flow splices; a Flow{} clears it.
  bool fast_ready = false;
  FastRewrite c2o_fast;  // client -> owner
  FastRewrite o2c_fast;  // owner -> client

  // What the admin API lists of the flow (Lcore::flow_views), past what the paths read: its
  // number and start, set when it is created; the payload bytes spliced each way, [0] owner ->
  // client and [1] client -> owner (the prelude's bytes, which reach the owner in the replay,
  // are not in them). Its destination is kept beside the table (FlowDestination), so that a
  // Flow stays plain data that a Flow{} clears in one go.
  uint64_t id = 0;
  uint64_t created_ms = 0;
  uint64_t spliced_bytes[2] = {0, 0};
};

static_assert(std::is_trivially_copyable_v<Flow>);

// The destination of the flow with id `flow_id`, set when it binds (Lcore::bind). An entry
// whose id is not its flow's is from an earlier flow of that entry: the flow has not bound.
struct FlowDestination {
  uint64_t flow_id = 0;
  std::string vhost;
  std::string queue;
  std::string login;  // the CONNECT's, for the session-end log line
  bool default_route = false;
  bool placement_pending = false;  // recorded once the owner answers the replay with CONNECTED
};

}  // namespace sluice::dpdk::engine::detail
