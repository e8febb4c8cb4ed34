// SYN cookie encoding and validation; the layout is documented in syn_cookie.h.
#include "dataplane/dpdk/splice/syn_cookie.h"

#include <sodium.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "base/assert.h"

namespace sluice::dpdk::splice {
namespace {

constexpr uint32_t kOptionBits = 9;
constexpr uint32_t kOptionMask = (1u << kOptionBits) - 1;
constexpr uint32_t kBodyBits = 32 - SynCookies::kSlotBits;  // 27: three copies of the options
constexpr uint32_t kBodyMask = (1u << kBodyBits) - 1;
constexpr uint32_t kSlotMask = (1u << SynCookies::kSlotBits) - 1;
constexpr uint32_t kNoWindowScale = 15;
constexpr uint8_t kDomainPad = 0;
constexpr uint8_t kDomainBody = 1;

static_assert(3 * kOptionBits == kBodyBits);
static_assert(crypto_shorthash_KEYBYTES == SynCookies::kKeyBytes);
static_assert(crypto_shorthash_BYTES == 8);

// Little-endian stores and load as single moves (byte swaps on a big-endian host): four hashes
// per session, each one's serialisation byte by byte cost about as much as the hash itself.
void put32(uint8_t* p, uint32_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
}

void put16(uint8_t* p, uint16_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap16(v);
  std::memcpy(p, &v, sizeof v);
}

uint64_t get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

uint32_t encode_options(const SynOptions& o) {
  uint32_t ws = kNoWindowScale;
  if (o.window_scale) ws = std::min<uint32_t>(*o.window_scale, SynCookies::kWindowScaleMax);
  return SynCookies::mss_index(o.mss) << 6 | ws << 2 | uint32_t{o.sack_permitted} << 1 |
         uint32_t{o.timestamps};
}

}  // namespace

SynCookies::SynCookies(std::span<const uint8_t, kKeyBytes> key) {
  // crypto_shorthash needs no library state, but sodium_init() is cheap and idempotent.
  const int rc = sodium_init();
  SLUICE_ASSERT(rc >= 0);
  std::copy(key.begin(), key.end(), key_.begin());
}

uint32_t SynCookies::mss_index(uint16_t client_mss) {
  uint32_t idx = 0;
  for (uint32_t i = 0; i < kMssTable.size(); ++i) {
    if (kMssTable[i] <= client_mss) idx = i;
  }
  return idx;
}

uint64_t SynCookies::hash(const FlowKey& k, uint32_t client_isn, uint32_t slot,
                          uint8_t domain) const {
  // Fixed little-endian serialisation so the cookie does not depend on struct padding.
  std::array<uint8_t, 21> in{};
  put32(&in[0], k.saddr);
  put32(&in[4], k.daddr);
  put16(&in[8], k.sport);
  put16(&in[10], k.dport);
  put32(&in[12], client_isn);
  put32(&in[16], slot);
  in[20] = domain;
  std::array<uint8_t, crypto_shorthash_BYTES> out{};
  crypto_shorthash(out.data(), in.data(), in.size(), key_.data());
  return get64(out.data());
}

uint32_t SynCookies::make(const FlowKey& k, uint32_t client_isn, const SynOptions& o,
                          uint32_t now_slot) const {
  const uint32_t opts = encode_options(o);
  const uint32_t body = opts << (2 * kOptionBits) | opts << kOptionBits | opts;
  const uint32_t f = static_cast<uint32_t>(hash(k, client_isn, now_slot, kDomainBody)) & kBodyMask;
  const uint32_t v = (now_slot & kSlotMask) << kBodyBits | (f ^ body);
  const uint32_t pad = static_cast<uint32_t>(hash(k, client_isn, 0, kDomainPad));
  return pad ^ v;
}

std::optional<SynOptions> SynCookies::check(const FlowKey& k, uint32_t client_isn, uint32_t cookie,
                                            uint32_t now_slot) const {
  const uint32_t v = cookie ^ static_cast<uint32_t>(hash(k, client_isn, 0, kDomainPad));
  const uint32_t slot_low = v >> kBodyBits;
  uint32_t slot = 0;
  if (slot_low == (now_slot & kSlotMask)) {
    slot = now_slot;
  } else if (slot_low == ((now_slot - 1) & kSlotMask)) {
    slot = now_slot - 1;
  } else {
    return std::nullopt;
  }
  const uint32_t f = static_cast<uint32_t>(hash(k, client_isn, slot, kDomainBody)) & kBodyMask;
  const uint32_t body = (v & kBodyMask) ^ f;
  const uint32_t opts = body & kOptionMask;
  if (((body >> kOptionBits) & kOptionMask) != opts) return std::nullopt;
  if ((body >> (2 * kOptionBits)) != opts) return std::nullopt;
  const uint32_t ws = (opts >> 2) & 0xF;
  if (ws > kWindowScaleMax && ws != kNoWindowScale) return std::nullopt;

  SynOptions o;
  o.mss = kMssTable[opts >> 6];
  if (ws != kNoWindowScale) o.window_scale = static_cast<uint8_t>(ws);
  o.sack_permitted = (opts >> 1) & 1;
  o.timestamps = opts & 1;
  return o;
}

}  // namespace sluice::dpdk::splice
