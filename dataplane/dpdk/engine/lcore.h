// One lcore of the DPDK engine: the delayed-binding TCP splicer (DESIGN section 7).
// It answers ARP and ICMP echo, completes clients' handshakes with SYN cookies, speaks the STOMP
// prelude at packet level through the session core, connects to the owner from a local address
// with the client's ISN, replays the bind plan, strips the owner's CONNECTED and from then on
// rewrites addresses and sequence numbers packet by packet. Pure C++ over Frames: the DPDK
// driver (port/) feeds it mbufs, tests feed it crafted frames.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dataplane/dpdk/engine/config.h"
#include "dataplane/dpdk/engine/flow.h"
#include "dataplane/dpdk/engine/frame.h"
#include "dataplane/dpdk/flow/timer_wheel.h"
#include "dataplane/dpdk/flow/tuple_map.h"
#include "dataplane/dpdk/net/packet.h"
#include "dataplane/dpdk/splice/syn_cookie.h"
#include "dataplane/session/owner_greeting.h"
#include "dataplane/session/placement_budget.h"
#include "dataplane/session/prelude.h"
#include "dataplane/session/route.h"

namespace sluice::dpdk::engine {

// Every counted event of an lcore (metrics: sluice_dpdk_*).
struct LcoreCounters {
  uint64_t rx_frames = 0;
  uint64_t tx_frames = 0;
  uint64_t tx_full = 0;     // the lcore's tx array was full: frame dropped
  uint64_t pool_empty = 0;  // no buffer for a frame the gateway makes
  std::array<uint64_t, size_t(net::Reason::kCount)> rx_invalid{};  // by parse reason
  uint64_t rx_not_handled = 0;  // valid, but for no flow, address or service of ours
  uint64_t exception_frames = 0;
  uint64_t arp_replies = 0;
  uint64_t arp_requests = 0;
  uint64_t neighbors_full = 0;
  uint64_t no_route = 0;
  uint64_t icmp_echo_replies = 0;
  uint64_t bad_tcp_checksum = 0;
  uint64_t syn_cookies_sent = 0;
  uint64_t cookies_bad = 0;
  uint64_t flows_created = 0;
  uint64_t flows_refused = 0;  // flows_max or prelude_flows_max reached
  uint64_t flows_freed = 0;
  uint64_t flows_expired = 0;  // freed by a deadline (idle, connect, prelude, linger)
  uint64_t resets_sent = 0;
  uint64_t out_of_order = 0;  // segments the gateway's own endpoint dropped (not in order)
  uint64_t duplicates = 0;    // segments wholly before rcv_nxt (re-acknowledged)
  uint64_t retransmits = 0;   // segments the gateway sent again
  uint64_t retransmit_giveups = 0;
  uint64_t heartbeats_sent = 0;  // EOLs the prelude sent a client that negotiated heart-beats
  // Owner CONNECTEDs whose heart-beats differ from what the client was told: the session goes
  // on, or is refused (the owner would drop the client).
  uint64_t heartbeat_mismatch_allowed = 0;
  uint64_t heartbeat_mismatch_refused = 0;
  uint64_t placements_rate_limited = 0;  // not recorded: over the client address's budget
  // Login checks (login_check eager): CONNECTs a node answered, by outcome; not answered (the
  // node refused the connection, closed it or stayed silent: the next node is asked);
  // answered from the login cache; answered by the gateway because no node could check them.
  uint64_t login_accepted = 0;
  uint64_t login_refused = 0;
  uint64_t login_failed = 0;
  uint64_t login_cached = 0;
  uint64_t login_unchecked = 0;
  // The login check's connection: kept as the owner's (its node owned the first destination),
  // or closed (another owner, a spill, or the node said something while it was held).
  uint64_t login_conn_kept = 0;
  uint64_t login_conn_closed = 0;
  std::array<uint64_t, session::kPreludeEndCount> prelude_ends{};  // by session::PreludeEnd
  uint64_t binds_owner = 0;
  uint64_t binds_spill = 0;
  uint64_t binds_refused = 0;
  uint64_t local_ports_exhausted = 0;
  uint64_t owner_refused = 0;   // RST to the owner SYN
  uint64_t owner_timeouts = 0;  // no SYN-ACK, or no CONNECTED, within connect_timeout_ms
  uint64_t owner_errors = 0;    // the owner's first frame was ERROR or not STOMP
  uint64_t spliced = 0;         // flows that reached splice mode
  // Segments of spliced or lingering flows that took the established-flow path
  // (net::parse_established: no general parse, no dispatch), then counted as on the general
  // path (c2o_packets, o2c_packets, ack_storm_drops, removed_range).
  uint64_t established_path = 0;
  // Of those, the segments the driver's fast path took (Lcore::fast: rewritten where they were
  // received, never made Frames; counted in c2o_packets and o2c_packets as well).
  uint64_t fast_path = 0;
  uint64_t c2o_packets = 0;
  uint64_t c2o_bytes = 0;
  uint64_t o2c_packets = 0;
  uint64_t o2c_bytes = 0;
  uint64_t removed_range = 0;      // segments inside bytes the gateway removed, answered locally
  uint64_t binding_parked = 0;     // client segments held while binding, sent on at the splice
  uint64_t binding_park_full = 0;  // not held (flow or lcore limit): the client sends again
  uint64_t ack_storm_drops = 0;
  uint64_t flow_resets = 0;        // RST seen on a spliced flow
  uint64_t flows_reopened = 0;     // a client SYN on a lingering flow's tuple: a new session
  uint64_t lingering_evicted = 0;  // lingering flows freed early: flow table or local ports full
};

class Lcore final : public BurstHandler {
 public:
  // Client segments one binding flow holds until its splice (LcoreConfig::parked_frames_max
  // bounds them over the lcore).
  static constexpr uint32_t kParkedPerFlowMax = 8;
  // `pool` makes the frames the lcore sends itself; `router` answers RESOLVE; `logins` (null:
  // every eager login check asks a node) caches what nodes accepted. All three outlive it.
  Lcore(const LcoreConfig& config, session::Router& router, FramePool& pool, uint64_t now_ns,
        session::LoginCache* logins = nullptr);
  ~Lcore() override;

  void burst(std::span<Frame*> rx, uint64_t now_ns) override;
  void tick(uint64_t now_ns) override;
  std::span<Frame*> take_tx() override;
  // The fast path (fast_path.cc): segments of spliced flows in the shape the established-flow
  // path takes, on flows whose sequence maps are down to their bases, without FIN, RST or a
  // repeated pure ACK. On whenever the established-flow path is (LcoreConfig).
  bool has_fast_path() const override { return config_.established_path; }
  size_t fast(uint16_t port, std::span<RxBuffer* const> rx, FastRun* runs,
              uint64_t now_ns) override;
  // Whether fast() runs the x86-64-v3 build of its loop (LcoreConfig::fast_path_v3 and the
  // CPU's features; false on other architectures).
  bool fast_path_v3() const { return fast_v3_; }

  const LcoreCounters& counters() const { return counters_; }
  uint32_t flows() const { return flows_in_use_; }
  uint32_t prelude_flows() const { return slots_in_use_; }
  // Flows that ended (both FINs or a RST) and linger for stragglers until their timer frees
  // them: counted in flows(), but no longer sessions.
  uint32_t lingering_flows() const { return lingering_; }
  // Client segments held by binding flows (frames the lcore keeps between bursts).
  uint32_t parked_frames() const { return parked_; }
  uint32_t neighbors() const { return neighbor_count_; }
  // The state of the flow a client tuple (as the client sends it) belongs to; kFree if none.
  detail::FlowState flow_state(const flow::Tuple& client) const;
  // One session of the lcore, for the admin API (`sluicectl sessions`).
  struct FlowView {
    uint64_t id = 0;     // unique on the lcore, from 1
    flow::Tuple client;  // as the client sends (client address and port first)
    // As `sluicectl sessions` shows it: prelude, connecting, replay, spliced, closing, or spill
    // (spliced to the spill listener).
    std::string_view state;
    uint32_t node = UINT32_MAX;  // the owner's node (Router::route), UINT32_MAX before binding
    bool to_spill = false;       // bound to the spill listener rather than an owner
    std::string vhost;           // empty before binding
    std::string queue;
    uint64_t bytes_in = 0;   // payload spliced client -> owner
    uint64_t bytes_out = 0;  // payload spliced owner -> client
    uint64_t age_ms = 0;
  };
  // The flows that are still sessions (not lingering), found by walking the flow table a step
  // at a time, so that the lcore never stops for the whole table: list_flows() takes the next
  // `count` entries of the table and is true once it has walked all of them; flow_views()
  // then gives the oldest `limit` of those found that are still sessions, oldest first.
  struct FlowListing {
    uint32_t next = 0;                                 // the next table entry to look at
    std::vector<std::pair<uint64_t, uint32_t>> found;  // Flow::id and the entry
  };
  bool list_flows(FlowListing& listing, uint32_t count) const;
  std::vector<FlowView> flow_views(FlowListing& listing, size_t limit) const;
  // Learns or refreshes a neighbour as an ARP reply would (static entries from config).
  void add_neighbor(uint32_t ip, const net::MacAddr& mac);

  static constexpr size_t kTxMax = 1024;

 private:
  using Flow = detail::Flow;
  using Leg = detail::Leg;
  struct Slot;  // prelude and binding buffers of one flow

  // lcore.cc: dispatch, L2/L3, frames out, timers
  void advance_clock(uint64_t now_ns);
  bool from_kernel(const Frame* f) const { return from_kernel_port(f->port); }
  bool from_kernel_port(uint16_t port) const {
    return config_.exception_port >= 0 && port == config_.exception_port;
  }
  net::Reason parse_frame(Frame* f, net::Packet* p) const;
  // The established-flow path: parse_established() takes a frame in the common shape of a
  // spliced flow's segments (net::parse_established); splice_established() hands it straight
  // to from_client/from_owner when its flow is spliced or lingering (true); otherwise the
  // frame takes the general path (false).
  bool parse_established(Frame* f, net::Packet* p) const;
  struct Staged;
  bool splice_established(Frame* f, Staged& s);
  void handle(Frame* f, Staged& s);
  // tuple_hash: tuples_.hash() of a TCP packet's tuple, from the stage.
  void dispatch(Frame* f, net::Packet& p, uint32_t tuple_hash);
  void kernel_out(Frame* f, const net::Packet& p, uint32_t dst);
  void handle_arp(Frame* f, net::Packet& p);
  void handle_tcp(Frame* f, net::Packet& p, uint32_t tuple_hash);
  bool is_local_ip(uint32_t ip) const;
  bool is_listen(uint32_t ip, uint16_t port) const;
  void send(Frame* f);
  void drop(Frame* f);
  void to_exception(Frame* f);
  const Route* route_for(uint32_t ip) const;
  const net::MacAddr* neighbor(uint32_t ip) const;
  void arp_request(uint16_t port, uint32_t target);
  void on_timer(uint32_t id);
  // The timers of the flow's state; true when they settled the flow (ended it, re-armed it or
  // sent its SYN again), false when its retransmission timer is next.
  bool state_timer(Flow& fl, bool rtx_due, bool deadline_due);
  bool prelude_timer(Flow& fl, bool deadline_due);
  // The flow's retransmission timer fired: back off and resend what is unacknowledged.
  void retransmit_flow(Flow& fl);
  void arm(Flow& fl);

  // flows.cc: the flow table, prelude slots and local ports
  Flow* alloc_flow();
  void free_flow(Flow& fl);
  uint32_t index_of(const Flow& fl) const;
  bool alloc_local_port(Flow& fl);
  void free_local_port(Flow& fl);
  uint32_t local_port_bit(const Flow& fl) const;  // fl's pair in ports_in_use_
  bool take_local_port(Flow& fl, uint32_t bit);   // the pair `bit` for fl's owner leg, if free
  // Frees the flow that has lingered longest (false: none lingers); returns its local port's
  // bit in *bit (UINT32_MAX: it had none).
  bool evict_lingering(uint32_t* bit);

  // tcp_out.cc: segments the gateway sends itself
  struct Seg {
    uint32_t seq = 0;
    uint32_t ack = 0;
    uint8_t flags = 0;
    uint16_t window = 0;
    std::span<const uint8_t> payload;
    bool syn_options = false;
    bool timestamps = false;
    uint32_t ts_value = 0;
    uint32_t ts_echo = 0;
  };
  void send_to_client(const Flow& fl, const Seg& s);
  void send_to_owner(const Flow& fl, const Seg& s);
  void send_reset_reply(const net::Packet& p, uint16_t port);
  uint32_t ts_now() const;
  uint16_t client_window(const Flow& fl) const;
  uint16_t owner_window(const Flow& fl) const;

  // client_leg.cc: handshake and prelude
  void client_no_flow(Frame* f, net::Packet& p);
  void client_open(Frame* f, net::Packet& p, const splice::SynOptions& o);
  void client_prelude(Flow& fl, Frame* f, net::Packet& p);
  void client_ack(Flow& fl, const net::Packet& p);
  void prelude_events(Flow& fl);
  bool inject(Flow& fl, std::string_view bytes);
  // Heart-beats the prelude owes a client that negotiated them (after its CONNECTED).
  void arm_beats(Slot& s);
  void prelude_beat(Flow& fl);
  void send_injected(Flow& fl, bool retransmit);
  void close_client(Flow& fl, std::string_view last_bytes);
  void client_closing(Flow& fl, Frame* f, net::Packet& p);
  void refuse(Flow& fl, std::string_view message, std::string_view detail);

  // login_leg.cc: the login check at CONNECT (login_check eager) and its held connection
  void check_login(Flow& fl);
  // The gateway's own CONNECTED (verified: from the login cache); false if the flow is gone.
  bool answer_login(Flow& fl, std::string_view server, bool verified);
  void login_binding(Flow& fl, Frame* f, net::Packet& p);
  void login_answer(Flow& fl, const session::GreetingResult& r);
  // The node could not check the login (refused, silent, closed): the next one is asked.
  void login_failed(Flow& fl, bool reset);
  void send_login(Flow& fl, bool retransmit);
  void held_bytes(Flow& fl, Frame* f, net::Packet& p);
  // The login check's timers (its deadline, the SYN's retransmission, the held connection's
  // heart-beats); true when the flow left kPrelude or is gone.
  bool login_timer(Flow& fl);
  void drop_held(Flow& fl);
  // The held connection becomes the owner's: only what came after the CONNECT is replayed.
  void keep_held(Flow& fl, bool placement_pending);
  void end_session(const Flow& fl, std::string_view reason, std::string_view message);

  // owner_leg.cc: bind, connect, replay, greeting
  void bind(Flow& fl);
  void connect_to(Flow& fl, const session::Route& t);
  // The owner leg towards `t` from a free local port, ready for its SYN (nothing is counted
  // or sent).
  enum class LegOpen : uint8_t { kOpen, kNoRoute, kNoPort };
  LegOpen open_owner_leg(Flow& fl, const session::Route& t);
  void send_owner_syn(Flow& fl);
  // The owner's answer to the SYN: its SYN-ACK taken (the leg's options and sequence spaces
  // set), a RST refusing it, or anything else (dropped or answered). `f` is dropped.
  enum class SynAnswer : uint8_t { kOther, kRefused, kAccepted };
  SynAnswer owner_syn_answer(Flow& fl, Frame* f, net::Packet& p);
  // An owner segment's ACK, window and timestamp.
  void owner_ack(Flow& fl, const net::Packet& p);
  // The owner's first frame, read in order into the slot's greeting buffer. `f` is dropped.
  enum class GreetingStep : uint8_t { kWait, kClosed, kTooLarge, kDone };
  GreetingStep read_greeting(Flow& fl, Frame* f, net::Packet& p, session::GreetingResult* r);
  // Heart-beats the gateway owes the client while binding, until the owner's CONNECTED fixes
  // what the client has been sent.
  void binding_beat(Flow& fl);
  void owner_failed(Flow& fl, bool refused);
  void owner_binding(Flow& fl, Frame* f, net::Packet& p);
  void send_replay(Flow& fl, bool retransmit);
  void greeting_bytes(Flow& fl, Frame* f, net::Packet& p);
  void maybe_splice(Flow& fl);
  // A client segment that arrived while `fl` binds: held in its slot (true) or not (false: the
  // caller drops it). Released by release_parked: sent on when the flow splices, else dropped.
  bool park(Flow& fl, Frame* f);
  void release_parked(Flow& fl, bool send_on);
  void abort_flow(Flow& fl, bool reset_client);
  void release_owner_leg(Flow& fl, bool reset);
  void update_rtx(Flow& fl);

  // splice_path.cc: the rewrite fast path and the end of a spliced flow
  void from_client(Flow& fl, Frame* f, net::Packet& p);
  void from_owner(Flow& fl, Frame* f, net::Packet& p);
  // The same for a segment from parse_established() without FIN or RST, on a flow whose
  // sequence maps hold no edits (lcore.cc: splice_established).
  void client_established(Flow& fl, Frame* f, const net::Packet& p);
  void owner_established(Flow& fl, Frame* f, const net::Packet& p);
  bool ack_storm(Leg& leg, const net::Packet& p);
  // fast_path.cc: fast_checks_ and fast_macs_ from the config.
  void prepare_fast_checks();
  // fast()'s work, inlined into one function per instruction set: fast_baseline() and, on
  // x86-64, fast_x86_64_v3() (compiled for x86-64-v3; run only when fast_v3_).
  [[gnu::always_inline]] inline size_t fast_frames(uint16_t port, std::span<RxBuffer* const> rx,
                                                   FastRun* runs, uint64_t now_ns);
  size_t fast_baseline(uint16_t port, std::span<RxBuffer* const> rx, FastRun* runs,
                       uint64_t now_ns);
  size_t fast_x86_64_v3(uint16_t port, std::span<RxBuffer* const> rx, FastRun* runs,
                        uint64_t now_ns);
  // Fills fl's FastRewrites (on entering kSpliced).
  void prepare_fast(Flow& fl);
  // The port the client's frames arrive on and its frames leave by; keeps the fast path's MACs
  // towards the client in step.
  void set_client_port(Flow& fl, uint16_t port);
  void linger(Flow& fl);                            // enters kLinger (counted in lingering_)
  void reopen(Flow& fl, Frame* f, net::Packet& p);  // a client SYN on a lingering flow
  void after_fin_or_rst(Flow& fl, const net::Packet& p, uint32_t src_seq, bool from_client);

  const LcoreConfig config_;
  session::Router& router_;
  session::LoginCache* logins_;  // null: every eager login check asks a node
  FramePool& pool_;
  splice::SynCookies cookies_;
  uint64_t now_ns_ = 0;
  uint64_t now_ms_ = 0;

  std::vector<Flow> flows_;
  std::vector<detail::FlowDestination> destinations_;  // by flow index, as flows_
  uint32_t free_head_ = detail::kNoSlot;
  uint32_t flows_in_use_ = 0;
  flow::TupleMap tuples_;
  flow::TimerWheel timers_;

  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<uint32_t> free_slots_;
  uint32_t slots_in_use_ = 0;
  uint32_t parked_ = 0;  // frames parked over every slot (at most config_.parked_frames_max)

  // Owner-leg source ports: one bit per (local ip, port) pair in use.
  std::vector<uint64_t> ports_in_use_;
  uint32_t lingering_ = 0;                  // flows in kLinger
  uint64_t next_flow_id_ = 1;               // Flow::id
  uint32_t linger_head_ = detail::kNoSlot;  // the flow that has lingered longest
  uint32_t linger_tail_ = detail::kNoSlot;
  uint32_t port_cursor_ = 0;

  struct Neighbor {
    uint32_t ip = 0;
    net::MacAddr mac;
    uint64_t asked_ms = 0;
    bool resolved = false;
  };
  std::vector<Neighbor> neighbors_;
  session::PlacementBudget placement_budget_;
  uint32_t neighbor_count_ = 0;

  // The fast path's checks of a frame's first 48 bytes, as six words loaded from it: word k
  // passes when (word ^ expect[k]) & mask[k] is 0 (k = 0, 1, 2, 5; word 0, the destination
  // MAC, is compared with the arrival port's in fast_macs_, each MAC loaded the same way).
  // run_mask adds the bytes every frame of one flow and direction shares: the addresses, the
  // ports and the TCP header's length (prepare_fast_checks).
  struct FastChecks {
    std::array<uint64_t, 6> mask{};
    std::array<uint64_t, 6> expect{};
    std::array<uint64_t, 6> run_mask{};
  };
  FastChecks fast_checks_;
  std::vector<uint64_t> fast_macs_;
  // The fast path's last flow and direction: the words its frames have under run_mask (word
  // 0, the destination MAC, is the arrival port's), and its slot. Reset when that flow is
  // freed (free_flow), so a slot reused by another flow is never found this way.
  struct FastKey {
    std::array<uint64_t, 6> expect{};
    uint32_t flow = detail::kNoSlot;
    bool from_client = false;
  };
  FastKey fast_key_;
  bool fast_v3_ = false;  // fast() runs fast_x86_64_v3()

  net::MacAddr kernel_mac_;  // the TAP's kernel side, learnt from its frames
  bool kernel_mac_known_ = false;

  // burst()'s stage: the frames parsed ahead of handling them (kept here, not on the stack,
  // so that a burst does not construct them).
  static constexpr size_t kStageMax = 32;
  struct Staged {
    net::Packet packet;
    net::Reason reason = net::Reason::kOk;
    uint32_t hash = 0;         // of the tuple, for a valid TCP packet
    bool established = false;  // parsed by parse_established, not yet by parse_frame
  };
  std::array<Staged, kStageMax> staged_{};

  std::array<Frame*, kTxMax> tx_{};
  size_t tx_count_ = 0;
  LcoreCounters counters_;
};

}  // namespace sluice::dpdk::engine
