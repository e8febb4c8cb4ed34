// SYN cookies for the client leg of the DPDK splicer: a stateless handshake that keeps the MSS
// and the TCP options the owner SYN needs later (DESIGN section 7).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace sluice::dpdk::splice {

// The client leg's 4-tuple. Byte order is the caller's choice; make() and check() must be given
// the same representation.
struct FlowKey {
  uint32_t saddr = 0;
  uint32_t daddr = 0;
  uint16_t sport = 0;
  uint16_t dport = 0;

  friend bool operator==(const FlowKey&, const FlowKey&) = default;
};

// The client SYN's options that the cookie carries.
struct SynOptions {
  uint16_t mss = 536;                   // RFC 9293: 536 when the SYN carries no MSS option
  std::optional<uint8_t> window_scale;  // shift count, 0..14; nullopt: option absent
  bool sack_permitted = false;
  bool timestamps = false;  // presence only; the TSval itself is not kept

  friend bool operator==(const SynOptions&, const SynOptions&) = default;
};

// Cookie layout. With H = SipHash-2-4 (libsodium crypto_shorthash) over the little-endian
// bytes saddr | daddr | sport | dport | client_isn | slot | domain, let pad = low 32 bits of
// H(slot 0, domain 0) and F = low 27 bits of H(slot, domain 1), slot being the full 32-bit
// time counter. Then
//
//   cookie = pad XOR v,   v = slot[4:0] << 27 | (F XOR (o << 18 | o << 9 | o))
//
// where o is 9 bits: mss_index (3) << 6 | wscale (4) << 2 | sack << 1 | ts, and wscale is the
// shift 0..14 or 15 when the client sent no window scale option. check() strips pad, recovers
// the slot from its 5 low bits (the current or the previous slot only), strips F and requires
// the three 9-bit copies of o to agree and wscale to be 0..14 or 15.
//
// What survives: the MSS rounded down to kMssTable, the window scale shift (values above 14
// are clamped to 14, RFC 7323), SACK-permitted, and whether timestamps were offered.
// What is lost: the exact MSS, the TSval/TSecr values (the caller needs the ACK's own
// timestamp option to learn them again), any other option (TFO, MD5, unknown kinds), and
// the SYN's window and payload.
//
// Properties: a blind guess is accepted with probability about 2 * 2^-5 * 2^-18 = 2^-22; a
// flip of any single cookie bit is always rejected unless it lands in the slot bits and
// produces the previous slot, where it has a 2^-18 chance. The option copies are keyed by F,
// not by a separate MAC: a client that knows its own cookie can change the options it
// claimed, which it could equally have put in its SYN; it cannot make a cookie for another
// tuple, ISN or slot.
class SynCookies {
 public:
  static constexpr std::array<uint16_t, 8> kMssTable = {536,  1220, 1300, 1360,
                                                        1400, 1440, 1460, 8960};
  static constexpr size_t kKeyBytes = 16;
  static constexpr uint32_t kSlotBits = 5;
  static constexpr uint8_t kWindowScaleMax = 14;

  // key: kKeyBytes bytes from a random source (the caller reads it; nothing here does I/O).
  explicit SynCookies(std::span<const uint8_t, kKeyBytes> key);

  // now_slot: seconds / 64 from the caller's clock.
  uint32_t make(const FlowKey& k, uint32_t client_isn, const SynOptions& o,
                uint32_t now_slot) const;

  // client_isn: the final ACK's seq - 1; cookie: its ack - 1. Accepts cookies made in now_slot
  // or now_slot - 1; returns the options as stored (MSS from kMssTable).
  std::optional<SynOptions> check(const FlowKey& k, uint32_t client_isn, uint32_t cookie,
                                  uint32_t now_slot) const;

  // The kMssTable index used for a client MSS: the largest entry not above it, or 0 when the
  // client's MSS is below every entry (536, as Linux does).
  static uint32_t mss_index(uint16_t client_mss);

 private:
  uint64_t hash(const FlowKey& k, uint32_t client_isn, uint32_t slot, uint8_t domain) const;

  std::array<uint8_t, kKeyBytes> key_{};
};

}  // namespace sluice::dpdk::splice
