// The buffers of a flow that the gateway still speaks for (prelude, binding): the client's
// prelude bytes, the bytes the gateway injected towards the client (kept until acknowledged)
// and the owner's first frame. Allocated at start, prelude_flows_max of them.
#pragma once

#include <array>
#include <memory>
#include <optional>

#include "dataplane/dpdk/engine/config.h"
#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/net/checksum.h"
#include "dataplane/session/owner_greeting.h"
#include "dataplane/session/prelude.h"

namespace sluice::dpdk::engine {

struct Lcore::Slot {
  // CONNECTED, a RECEIPT for an early DISCONNECT, an ERROR: all well under this.
  static constexpr uint32_t kInjectBytesMax = 2048;
  // Heart-beat EOLs stop short of this much room, kept for a final ERROR or RECEIPT.
  static constexpr uint32_t kInjectRoomForEnd = 512;

  explicit Slot(const LcoreConfig& c)
      : prelude_bytes(c.session.prelude_bytes_max),
        greeting_bytes_max(c.owner_greeting_bytes_max),
        buffer(new char[c.session.prelude_bytes_max]),  // untouched until used
        greeting(new char[c.owner_greeting_bytes_max]),
        prelude_headers(c.session.frame_limits.header_count_max),
        greeting_headers(c.session.frame_limits.header_count_max) {}

  // The parked frames must have been released (Lcore::release_parked) before.
  void reset() {
    prelude.reset();
    owner_greeting.reset();
    injected_bytes = 0;
    beat_at_ms = 0;
    login_deadline_ms = 0;
    owner_beat_at_ms = 0;
    bind_deadline_ms = 0;
  }

  const uint32_t prelude_bytes;
  const uint32_t greeting_bytes_max;
  std::unique_ptr<char[]> buffer;
  std::unique_ptr<char[]> greeting;
  // The header tables of the two parsers made per session (both live while the greeting is
  // read), allocated here once so that a session allocates nothing.
  session::HeaderTable prelude_headers;
  session::HeaderTable greeting_headers;
  std::optional<session::Prelude> prelude;
  std::optional<session::OwnerGreeting> owner_greeting;
  std::array<char, kInjectBytesMax> injected;  // written before read
  uint32_t injected_bytes = 0;
  // When the prelude owes the client its next heart-beat (0: none negotiated).
  uint64_t beat_at_ms = 0;
  // The login check: when its node must have answered (connected, then CONNECTED), and when
  // the held connection owes the node the client's next heart-beat (0: none).
  uint64_t login_deadline_ms = 0;
  uint64_t owner_beat_at_ms = 0;
  // Binding (kConnecting, kReplay): when the owner must have answered; the flow's deadline may
  // come earlier, for the client's heart-beats.
  uint64_t bind_deadline_ms = 0;
  // When the prelude's timer must fire: its deadline, or the next heart-beat before it.
  uint64_t prelude_timer_ms() const;
  // Client segments that arrived while the flow was binding, in arrival order: they go to the
  // owner once the flow splices, instead of waiting for the client's retransmission.
  std::array<Frame*, kParkedPerFlowMax> parked{};
  uint32_t parked_count = 0;
};

// The TCP checksum of a segment the gateway terminates (handshake, prelude, greeting). Spliced
// segments are not verified: incremental updates keep a bad checksum bad for the receiver.
inline bool tcp_checksum_ok(const Frame* f, const net::Packet& p) {
  const uint16_t l4_bytes = uint16_t(p.frame_end - p.l4_offset);
  return net::checksum_ok(std::span<const uint8_t>(f->data + p.l4_offset, l4_bytes),
                          net::pseudo_header_sum(p.src_ip, p.dst_ip, net::kProtoTcp, l4_bytes));
}

// Payload bytes per segment the gateway sends itself: the smaller MSS less the option bytes
// every segment carries (RFC 6691: the MSS excludes TCP options). Timestamps: 10 bytes, 12
// with the NOPs that align them.
inline uint32_t segment_bytes_max(uint16_t peer_mss, uint16_t our_mss, bool timestamps) {
  constexpr uint32_t kMssMin = 88;  // Linux's floor for a peer's announced MSS
  uint32_t mss = peer_mss < our_mss ? peer_mss : our_mss;
  if (mss < kMssMin) mss = kMssMin;
  return mss - (timestamps ? 12u : 0u);
}

// The prelude's next deadline in whole milliseconds, rounded up (the timers tick in ms).
inline uint64_t prelude_deadline_ms(const session::Prelude& p) {
  return (uint64_t(p.deadline()) + 999'999) / 1'000'000;
}

inline uint64_t Lcore::Slot::prelude_timer_ms() const {
  uint64_t at = prelude_deadline_ms(*prelude);
  for (const uint64_t t : {beat_at_ms, login_deadline_ms, owner_beat_at_ms}) {
    if (t != 0 && t < at) at = t;
  }
  return at;
}

inline std::string_view payload_of(const Frame* f, const net::Packet& p) {
  return {reinterpret_cast<const char*>(f->data + p.payload_offset), p.payload_bytes};
}

}  // namespace sluice::dpdk::engine
