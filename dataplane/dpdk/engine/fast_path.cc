// The driver's fast path: segments of spliced flows rewritten where the driver received them,
// before they would become Frames, with the flow's constant changes prepared when it spliced.
// It takes only what the established-flow path (splice_established, client_established,
// owner_established) would send unchanged in shape, and must send the same bytes; anything
// else stops it, and the rest of the burst goes the general way (Lcore::burst).
#include <array>
#include <bit>
#include <cstring>
#ifdef __SSE4_1__
#include <smmintrin.h>
#endif

#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/net/checksum.h"

// The loop's second build, for x86-64-v3, with GCC (the project's compiler; clang 14, which
// builds the fuzz targets, has no "x86-64-v3" for __builtin_cpu_supports). The features are
// listed rather than given as arch=x86-64-v3, which GCC would not inline the baseline's
// functions into; the tuning stays the engine's.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SLUICE_FAST_PATH_V3 1
#define SLUICE_TARGET_X86_64_V3 gnu::target("avx,avx2,bmi,bmi2,f16c,fma,lzcnt,movbe")
#else
#define SLUICE_FAST_PATH_V3 0
#endif

namespace sluice::dpdk::engine {

namespace {

constexpr uint32_t kL3 = uint32_t(net::kEthernetBytes);
constexpr uint32_t kL4 = kL3 + uint32_t(net::kIpv4Bytes);
constexpr uint32_t kHeaders = kL4 + uint32_t(net::kTcpBytes);

// Big-endian fields as numbers, and numbers as the fields' bytes.
inline uint32_t host32(uint32_t wire) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap32(wire);
  return wire;
}
inline uint16_t host16(uint16_t wire) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap16(wire);
  return wire;
}
constexpr uint32_t kTimestampOptionWire =
    std::endian::native == std::endian::little ? 0x0a080101 : 0x0101080a;  // NOP NOP TS 10

inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
// a + b with the carry out of bit 31 added back (end-around): the sum keeps its value modulo
// 0xffff (2^32 is 1 modulo 0xffff) and is 0 only when both are.
inline uint32_t add_around32(uint32_t a, uint32_t b) {
  const uint32_t sum = a + b;
  return sum + (sum < a);
}

// 16 bytes of a frame as two words, for the checks of its first 48 bytes three at a time
// (GCC's vector extension: SSE2 on x86-64, plain words elsewhere).
using Words2 = uint64_t __attribute__((vector_size(16)));
inline Words2 load_words2(const uint8_t* p) {
  Words2 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline bool any(Words2 v) {
#ifdef __SSE4_1__
  return _mm_testz_si128(__m128i(v), __m128i(v)) == 0;  // one PTEST
#else
  return (v[0] | v[1]) != 0;
#endif
}
// True when the words differ from `expect` under `mask`: PTEST does the AND.
inline bool differs(Words2 v, Words2 expect, Words2 mask) {
#ifdef __SSE4_1__
  return _mm_testz_si128(__m128i(v ^ expect), __m128i(mask)) == 0;
#else
  return any((v ^ expect) & mask);
#endif
}

// A frame's first 16 bytes with its MAC addresses (bytes 0-11) replaced by the rewrite's: one
// store, bytes 12-15 (the type, IPv4's version and TOS) from `first`, the frame's words as the
// checks loaded them. FastRewrite begins with its MACs.
inline void store_macs(uint8_t* d, Words2 first, const detail::FastRewrite& rw) {
#ifdef __SSE4_1__
  const __m128i macs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&rw));  // and 4 bytes more
  _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_blend_epi16(__m128i(first), macs, 0x3f));
#else
  (void)first;
  std::memcpy(d, rw.macs, 12);
#endif
}

// Bytes 26-41 of a frame, the IPv4 addresses, the ports and the sequence number, as one store
// (FastRewrite keeps its addresses and ports in that order, then 4 bytes more).
inline void store_tuple_seq(uint8_t* at, const detail::FastRewrite& rw, uint32_t seq_wire) {
#ifdef __SSE4_1__
  const __m128i tuple = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&rw.addresses));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm_insert_epi32(tuple, int(seq_wire), 3));
#else
  std::memcpy(at, &rw.addresses, 8);
  std::memcpy(at + 8, &rw.ports, 4);
  std::memcpy(at + 12, &seq_wire, 4);
#endif
}

// ~old + new over a 32-bit field, both as they lie in memory.
inline uint64_t change32(uint32_t old_wire, uint32_t new_wire) {
  return uint64_t(uint32_t(~old_wire)) + new_wire;
}

// The TCP checksum's sums are taken over host-order numbers, modulo 0xffff: a checksum is the
// fold of a sum, and the fold of any sum other than 0 depends only on its value modulo 0xffff
// (net::checksum_fold), so two sums that agree modulo 0xffff and are not 0 give the same
// checksum. A 32-bit number is its two 16-bit halves' sum modulo 0xffff (2^16 is 1), so a
// field moved by adding d modulo 2^32 changes the sum by d, less 1 when the addition wrapped
// (2^32 is 1 as well): the sequence and acknowledgment numbers' changes are the run's
// constants but for that carry.
constexpr uint32_t kOnes = 0xffff;
// ~old + new for 32-bit host-order values, modulo 0xffff.
inline uint32_t change_h32(uint32_t old_value, uint32_t new_value) {
  return uint32_t((uint64_t(uint32_t(~old_value)) + new_value) % kOnes);
}
inline uint32_t change_h16(uint16_t old_value, uint16_t new_value) {
  return (uint32_t(uint16_t(~old_value)) + new_value) % kOnes;
}

// The addresses and ports of a tuple (host order) as they lie in a frame.
struct WireTuple {
  uint32_t src_ip;
  uint32_t dst_ip;
  uint32_t ports;
};
WireTuple wire(const flow::Tuple& t) {
  WireTuple w;
  w.src_ip = host32(t.src_ip);
  w.dst_ip = host32(t.dst_ip);
  const uint16_t ports[2] = {host16(t.src_port), host16(t.dst_port)};
  std::memcpy(&w.ports, ports, 4);
  return w;
}

detail::FastRewrite fast_rewrite(const flow::Tuple& old_tuple, const flow::Tuple& new_tuple) {
  const WireTuple o = wire(old_tuple);
  const WireTuple n = wire(new_tuple);
  detail::FastRewrite r;
  const uint32_t addresses[2] = {n.src_ip, n.dst_ip};
  std::memcpy(&r.addresses, addresses, 8);
  r.ports = n.ports;
  const uint64_t ip_sum = change32(o.src_ip, n.src_ip) + change32(o.dst_ip, n.dst_ip);
  r.ip_sum = net::checksum_fold(ip_sum);
  r.tcp_sum = (change_h32(old_tuple.src_ip, new_tuple.src_ip) +
               change_h32(old_tuple.dst_ip, new_tuple.dst_ip) +
               change_h16(old_tuple.src_port, new_tuple.src_port) +
               change_h16(old_tuple.dst_port, new_tuple.dst_port)) %
              kOnes;
  return r;
}

}  // namespace

void Lcore::prepare_fast_checks() {
#if SLUICE_FAST_PATH_V3
  fast_v3_ = config_.fast_path_v3 && __builtin_cpu_supports("x86-64-v3");
#endif
  // Bytes 0-47 of the frames the fast path takes: Ethernet to the port's MAC, type IPv4;
  // version 4 and a 20-byte header; not a fragment (flag MF and the offset clear, DF may be
  // set); protocol TCP; ACK, and none of SYN, FIN and RST (a spliced flow's segments all carry
  // ACK: the rewrite always translates the acknowledgment number). Words 3 and 4 hold the addresses
  // and ports, compared with the flow's; the IPv4 header is bytes 14-33, in words 1 to 4.
  uint8_t mask[48] = {};
  uint8_t expect[48] = {};
  const auto want = [&](size_t at, uint8_t m, uint8_t v) {
    mask[at] = m;
    expect[at] = v;
  };
  for (size_t i = 0; i < 6; ++i)
    mask[i] = 0xff;
  want(12, 0xff, 0x08);
  want(13, 0xff, 0x00);
  want(kL3 + 0, 0xff, 0x45);
  want(kL3 + 6, 0x3f, 0x00);
  want(kL3 + 7, 0xff, 0x00);
  want(kL3 + 9, 0xff, net::kProtoTcp);
  want(kL4 + 13, net::kSyn | net::kFin | net::kRst | net::kAck, net::kAck);
  std::memcpy(fast_checks_.mask.data(), mask, sizeof mask);
  // One flow's frames, in one direction: the same addresses and ports (bytes 26-37) and TCP
  // header length (the high nibble of byte 46).
  for (size_t i = kL3 + 12; i < kL4 + 4; ++i)
    mask[i] = 0xff;
  mask[kL4 + 12] = 0xf0;
  std::memcpy(fast_checks_.run_mask.data(), mask, sizeof mask);
  std::memcpy(fast_checks_.expect.data(), expect, sizeof expect);
  fast_macs_.clear();
  for (const net::MacAddr& mac : config_.port_macs) {
    uint8_t bytes[8] = {};
    std::memcpy(bytes, mac.bytes.data(), 6);
    uint64_t word;
    std::memcpy(&word, bytes, 8);
    fast_macs_.push_back(word);
  }
}

namespace {

void fill_macs(detail::FastRewrite& rw, const net::MacAddr& dst, const net::MacAddr& src) {
  std::memcpy(rw.macs, dst.bytes.data(), 6);
  std::memcpy(rw.macs + 6, src.bytes.data(), 6);
}

}  // namespace

void Lcore::prepare_fast(Flow& fl) {
  // What client_established() and owner_established() write, as frames arriving on each leg's
  // tuple get it.
  detail::FastRewrite& c2o = fl.c2o_fast;
  c2o = fast_rewrite(fl.client.rx, flow::Tuple{fl.local_ip, fl.owner.rx.src_ip, fl.local_port,
                                               fl.owner.rx.src_port});
  fill_macs(c2o, fl.owner.peer_mac, config_.port_macs[fl.owner.port]);
  c2o.port = fl.owner.port;
  c2o.rescale = fl.client.peer_wscale != fl.owner.our_wscale;
  c2o.window_from = fl.client.peer_wscale;
  c2o.window_to = fl.owner.our_wscale;
  detail::FastRewrite& o2c = fl.o2c_fast;
  o2c = fast_rewrite(fl.owner.rx, flow::Tuple{fl.client.rx.dst_ip, fl.client.rx.src_ip,
                                              fl.client.rx.dst_port, fl.client.rx.src_port});
  fill_macs(o2c, fl.client.peer_mac, config_.port_macs[fl.client.port]);
  o2c.port = fl.client.port;
  o2c.rescale = fl.owner.peer_wscale != fl.client.our_wscale;
  o2c.window_from = fl.owner.peer_wscale;
  o2c.window_to = fl.client.our_wscale;
  if (fl.owner.ts_ok) {
    // The client sees the owner's clock moved by ts_offset: the owner's TSval on its way to
    // the client, the client's echo of it on the way back (NOP, NOP, TS: TSval at 24, TSecr
    // at 28 in the TCP header).
    c2o.ts_at = uint8_t(net::kTcpBytes + 8);
    c2o.ts_delta = 0u - fl.ts_offset;
    o2c.ts_at = uint8_t(net::kTcpBytes + 4);
    o2c.ts_delta = fl.ts_offset;
  }
  fl.fast_ready = true;
}

void Lcore::set_client_port(Flow& fl, uint16_t port) {
  if (fl.client.port == port) return;
  fl.client.port = port;
  if (fl.fast_ready) {
    fill_macs(fl.o2c_fast, fl.client.peer_mac, config_.port_macs[port]);
    fl.o2c_fast.port = port;
  }
}

namespace {

// The flow and direction of the frames being taken, and what they share (Lcore::fast).
struct Run {
  Words2 expect[3];  // the frames' first 48 bytes under FastChecks::run_mask
  detail::Flow* fl = nullptr;
  detail::Leg* in = nullptr;  // the leg the frames arrive on
  const detail::FastRewrite* rw = nullptr;
  uint32_t flow = detail::kNoSlot;
  uint32_t seq_base = 0;
  uint32_t ack_base = 0;
  // The TCP checksum's change but for the sequence and acknowledgment numbers' carries and the
  // old checksum, modulo 0xffff, plus 0xffff so that a frame's sum is never 0 (see kOnes).
  uint32_t tcp_change = 0;
  // The IPv4 header's addresses (bytes 26-33), summed as they lie, with end-around carry.
  uint32_t ip_addresses = 0;
  uint32_t header_bytes = 0;  // the TCP header's, options included
  uint32_t headers = 0;       // the IPv4 and TCP headers': a frame's IPv4 length less its payload
  uint32_t ts_at = 0;         // the timestamp that moves (FastRewrite::ts_at), 0 if none
  bool rare = false;          // a window to rescale or switch_port
  bool from_client = false;
  bool switch_port = false;  // the client's frames arrive on another port (set_client_port)
};

// A run matches no frame: the flags a frame the fast path takes never has (SYN).
inline void clear(Run& run) {
  run.flow = detail::kNoSlot;
  run.fl = nullptr;
  uint8_t bytes[48] = {};
  bytes[kL4 + 13] = net::kSyn;
  std::memcpy(run.expect, bytes, sizeof bytes);
}

// Starts a run on flow `id`, if its frames may take the fast path: spliced or lingering, and
// no edit in either sequence map (with one, segments may carry bytes the gateway removed or
// acknowledge bytes it injected: the general path's cases). Inlined, so that the run stays in
// registers.
[[gnu::always_inline]] inline bool start(Run& run, detail::Flow* flows, uint32_t id,
                                         bool from_client, const Words2 (&expect)[3],
                                         uint16_t port) {
  detail::Flow& fl = flows[id];
  if (!fl.fast_ready || (fl.c2o.edits() | fl.o2c.edits()) != 0) return false;
  std::memcpy(run.expect, expect, sizeof run.expect);
  run.flow = id;
  run.fl = &fl;
  run.from_client = from_client;
  run.in = from_client ? &fl.client : &fl.owner;
  run.rw = from_client ? &fl.c2o_fast : &fl.o2c_fast;
  run.seq_base = from_client ? fl.c2o.base() : fl.o2c.base();
  run.ack_base = from_client ? fl.o2c.base() : fl.c2o.base();
  uint8_t head[48];  // the run's bytes 0-47, as they lie under the run's mask
  std::memcpy(head, expect, sizeof head);
  run.ip_addresses = add_around32(load32(head + kL3 + 12), load32(head + kL3 + 16));
  run.header_bytes = uint32_t(head[kL4 + 12] >> 4) * 4;
  run.headers = uint32_t(net::kIpv4Bytes) + run.header_bytes;
  run.ts_at = run.header_bytes == net::kTcpBytes ? 0 : run.rw->ts_at;
  run.switch_port = from_client && fl.client.port != port;
  run.rare = run.rw->rescale || run.switch_port;
  // The moving timestamp changes the sum as the sequence number does.
  const uint32_t ts_delta = run.ts_at != 0 ? run.rw->ts_delta : 0;
  run.tcp_change = uint32_t(run.rw->tcp_sum) + run.seq_base % kOnes +
                   (kOnes - run.ack_base % kOnes) + ts_delta % kOnes + kOnes;
  return true;
}

// What each frame of a run reads, as values: Lcore::fast keeps them in a local, which the
// compiler may hold in registers (the Run is reached through memory, and each store into a
// frame, bytes that may alias anything, would make it load the Run's fields again).
struct RunFrame {
  const detail::FastRewrite* rw;
  detail::Leg* in;
  uint32_t seq_base;
  uint32_t ack_base;
  uint32_t tcp_change;
  uint32_t ip_addresses;
  uint32_t headers;
  uint32_t ts_at;
  bool options;  // the TCP header has the timestamp option
  bool rare;
  // None of the three above: the frames of such a run (the usual shape without timestamps)
  // skip their tests with this one.
  bool plain;
};

inline RunFrame frame_view(const Run& run) {
  const bool options = run.header_bytes != net::kTcpBytes;
  return {run.rw,
          run.in,
          run.seq_base,
          run.ack_base,
          run.tcp_change,
          run.ip_addresses,
          run.headers,
          run.ts_at,
          options,
          run.rare,
          !options && run.ts_at == 0 && !run.rare};
}

// The burst's checks as locals: the fixed fields every frame the fast path takes has, and the
// mask of the fields one run's frames share (Lcore::FastChecks' words).
[[gnu::always_inline]] inline void load_checks(Words2 (&run_mask)[3], Words2 (&fixed_mask)[3],
                                               Words2 (&fixed_expect)[3], const uint64_t* run,
                                               const uint64_t* mask, const uint64_t* expect,
                                               uint64_t mac) {
  std::memcpy(run_mask, run, sizeof run_mask);
  std::memcpy(fixed_mask, mask, sizeof fixed_mask);
  std::memcpy(fixed_expect, expect, sizeof fixed_expect);
  fixed_expect[0][0] = mac;
}

// The run of the last flow taken, if any: its frames match the run's words and skip the lookup
// and the checks that hold for all of that flow's frames. `key` is Lcore::FastKey's words.
[[gnu::always_inline]] inline void resume(Run& run, detail::Flow* flows, const uint64_t* key,
                                          uint32_t flow, bool from_client, uint64_t mac,
                                          uint16_t port) {
  clear(run);
  if (flow == detail::kNoSlot) return;
  Words2 expect[3];
  std::memcpy(expect, key, sizeof expect);
  expect[0][0] = mac;
  start(run, flows, flow, from_client, expect, port);
}

// The run the burst ended on, kept for the next burst (Lcore::FastKey's fields).
[[gnu::always_inline]] inline void keep(const Run& run, uint64_t* key, uint32_t& flow,
                                        bool& from_client) {
  if (run.flow != detail::kNoSlot) {
    std::memcpy(key, run.expect, sizeof run.expect);
    flow = run.flow;
    from_client = run.from_client;
  } else {
    std::memset(key, 0, sizeof run.expect);
    flow = detail::kNoSlot;
    from_client = false;
  }
}

// What holds for all the frames a run took is written once, when the run ends: the flow was
// seen now, the leg's ACK-storm count is back to 0 (each frame taken resets it), the packets and
// bytes (the lcore's and the flow's). `run_from` is the run's first frame, `run_bytes` the payload
// bytes of its frames; packets and bytes are [from the owner, from the client]. Scalars, not a
// struct: the per-frame sum stays in a register.
[[gnu::always_inline]] inline void end_run(const Run& run, size_t run_from, size_t end,
                                           uint64_t now_ms, uint64_t& run_bytes,
                                           uint64_t (&packets)[2], uint64_t (&bytes)[2]) {
  if (end == run_from) return;
  run.fl->last_seen_ms = now_ms;
  run.in->storm_count = 0;
  run.fl->spliced_bytes[run.from_client] += run_bytes;
  packets[run.from_client] += end - run_from;
  bytes[run.from_client] += run_bytes;
  run_bytes = 0;
}

// Lines ahead of their turn, as a frame's are rarely in the cache when the loop reaches it: the
// buffer 8 frames on (where its data lies) for reading, the headers of the frame 4 on for
// writing. Both fetches overlap this frame's work. One test (`ahead`) for the frames that have
// both, which are most of a burst.
[[gnu::always_inline]] inline void prefetch_ahead(std::span<RxBuffer* const> rx, size_t i,
                                                  size_t ahead) {
  if (i < ahead) [[likely]] {
    __builtin_prefetch(rx[i + 8], 0);
    __builtin_prefetch(rx_data(rx[i + 4]), 1);
  } else if (i + 4 < rx.size()) {
    __builtin_prefetch(rx_data(rx[i + 4]), 1);
  }
}

// Stage 1 for a frame outside the current run: net::parse_established()'s checks of the fixed
// fields, on the bytes as they lie, then the flow's lookup. The flow's slot, or kNone when the
// frame is for the general path; `tuple` is the frame's.
[[gnu::always_inline]] inline uint32_t classify(const uint8_t* d, const Words2 (&v)[3],
                                                const Words2 (&fixed_mask)[3],
                                                const Words2 (&fixed_expect)[3],
                                                const flow::TupleMap& tuples, flow::Tuple& tuple) {
  if (any(((v[0] ^ fixed_expect[0]) & fixed_mask[0]) | ((v[1] ^ fixed_expect[1]) & fixed_mask[1]) |
          ((v[2] ^ fixed_expect[2]) & fixed_mask[2]))) {
    return flow::TupleMap::kNone;
  }
  const uint32_t header_bytes = uint32_t(d[kL4 + 12] >> 4) * 4;
  if (header_bytes != net::kTcpBytes && header_bytes != net::kTcpBytes + 12) {
    return flow::TupleMap::kNone;
  }
  const uint8_t* const ip = d + kL3;
  const uint8_t* const t = d + kL4;
  tuple = {host32(load32(ip + 12)), host32(load32(ip + 16)), host16(load16(t)),
           host16(load16(t + 2))};
  return tuples.find(tuple);
}

// Stage 2, the checks that differ from frame to frame: the lengths, the timestamp option's
// layout and the IPv4 header checksum. False for a frame the general path takes; else its
// payload's bytes and its IPv4 bytes 8-11 (TTL, protocol, checksum).
//
// The IPv4 header's sum: the run's addresses, bytes 0-7 as one 64-bit number and bytes 8-11 as
// a 32-bit one, added in 64 bits. Each part lies at an even offset in the header, and 2^16 and
// 2^32 are 1 modulo 0xffff, so the sum is that of the header's 16-bit words modulo 0xffff. On a
// little-endian machine bytes 0-7 as a number are below 2^56 (byte 7, the fragment offset's low
// byte, is 0 under the run's mask), so no carry is lost; elsewhere they are taken as two 32-bit
// words. The sum folds to all ones exactly when it is a multiple of 0xffff other than 0
// (net::checksum_fold), and it is never 0: the version byte (0x45, under the run's mask) is in
// it. The multiple is tested by a multiplication, with no fold.
[[gnu::always_inline]] inline bool frame_fits(const uint8_t* d, uint32_t len, const RunFrame& h,
                                              uint32_t& payload, uint32_t& ip_tail) {
  const uint8_t* const ip = d + kL3;
  const uint8_t* const t = d + kL4;
  const uint32_t total = host16(load16(ip + 2));
  if (total < h.headers || len - kL3 < total) return false;
  payload = total - h.headers;
  if (!h.plain && h.options && load32(t + net::kTcpBytes) != kTimestampOptionWire) return false;
  uint64_t ip_head;  // bytes 0-7: version to fragment offset
  std::memcpy(&ip_head, ip, sizeof ip_head);
  if constexpr (std::endian::native != std::endian::little) {
    ip_head = (ip_head & 0xffffffffu) + (ip_head >> 32);
  }
  ip_tail = load32(ip + 8);
  return (ip_head + ip_tail + h.ip_addresses) % kOnes == 0;
}

// Stage 3, ack_storm()'s bookkeeping: false for a pure ACK that repeats the last one, which is
// left to it.
[[gnu::always_inline]] inline bool ack_news(const uint8_t* t, uint32_t payload, uint32_t ack,
                                            detail::Leg& in) {
  if (payload != 0) return true;
  const uint8_t flags = t[13];
  if ((flags & ~(net::kAck | net::kPsh | net::kEce | net::kCwr)) != 0) return true;
  const uint16_t window = host16(load16(t + 14));
  if (ack == in.last_ack && window == in.last_window) return false;
  in.last_ack = ack;
  in.last_window = window;
  return true;
}

// Stage 4, the rewrite, as client_established()/owner_established() and
// net::rewrite_established(): the MACs, the tuple, the sequence and acknowledgment numbers and
// the moving timestamp. The TCP checksum's change is the run's less the sequence number's carry
// and plus the acknowledgment number's borrow, over host-order numbers (kOnes); returned as the
// sum still to fold.
[[gnu::always_inline]] inline uint32_t rewrite(uint8_t* d, Words2 first, const RunFrame& h,
                                               uint32_t ack_host) {
  uint8_t* const t = d + kL4;
  const detail::FastRewrite& rw = *h.rw;
  store_macs(d, first, rw);
  uint32_t seq;
  const bool seq_carry = __builtin_add_overflow(host32(load32(t + 4)), h.seq_base, &seq);
  uint32_t ack;
  const bool ack_borrow = __builtin_sub_overflow(ack_host, h.ack_base, &ack);
  const uint32_t new_seq_wire = host32(seq);
  const uint32_t new_ack_wire = host32(ack);
  store_tuple_seq(d + kL3 + 12, rw, new_seq_wire);
  std::memcpy(t + 8, &new_ack_wire, 4);
  uint32_t tcp_sum =
      (kOnes - host16(load16(t + 16))) + h.tcp_change + uint32_t(ack_borrow) - uint32_t(seq_carry);
  if (!h.plain && h.ts_at != 0) {
    uint8_t* const field = t + h.ts_at;
    uint32_t value;
    tcp_sum -= __builtin_add_overflow(host32(load32(field)), rw.ts_delta, &value);
    const uint32_t value_wire = host32(value);
    std::memcpy(field, &value_wire, 4);
  }
  return tcp_sum;
}

// The window rescaled between the legs' scales (a rare run's frames); the sum takes the change.
[[gnu::always_inline]] inline void rescale(uint8_t* t, const detail::FastRewrite& rw,
                                           uint32_t& tcp_sum) {
  const uint16_t window = host16(load16(t + 14));
  const uint16_t new_window = splice::rescale_window(window, rw.window_from, rw.window_to);
  tcp_sum += (kOnes - window) + new_window;
  const uint16_t new_window_wire = host16(new_window);
  std::memcpy(t + 14, &new_window_wire, 2);
}

// Stage 5, the checksums. The IPv4 one is ~checksum, from the word stage 2 read (the checksum
// is its upper half as it lies in a little-endian word, its lower half in a big-endian one),
// plus the run's change, folded: two 16-bit numbers, so one end-around carry is the whole fold
// (checksum_fold32).
[[gnu::always_inline]] inline void write_checksums(uint8_t* d, uint32_t ip_tail,
                                                   const detail::FastRewrite& rw,
                                                   uint32_t tcp_sum) {
  const uint16_t ip_check_inverse =
      std::endian::native == std::endian::little ? uint16_t(~ip_tail >> 16) : uint16_t(~ip_tail);
  uint16_t ip_sum;
  const bool ip_carry = __builtin_add_overflow(ip_check_inverse, rw.ip_sum, &ip_sum);
  const uint16_t ip_check = uint16_t(~(ip_sum + ip_carry));
  std::memcpy(d + kL3 + 10, &ip_check, 2);
  const uint16_t tcp_check = host16(uint16_t(~net::checksum_fold32(tcp_sum)));
  std::memcpy(d + kL4 + 16, &tcp_check, 2);
}

// What the burst's frames add to the lcore's counters: `frames` taken, the packets and bytes
// of each direction ([0] from the owner, [1] from the client).
[[gnu::always_inline]] inline void count_burst(LcoreCounters& c, size_t frames,
                                               const uint64_t (&packets)[2],
                                               const uint64_t (&bytes)[2]) {
  c.rx_frames += frames;
  c.tx_frames += frames;
  c.established_path += frames;
  c.fast_path += frames;
  c.c2o_packets += packets[1];
  c.c2o_bytes += bytes[1];
  c.o2c_packets += packets[0];
  c.o2c_bytes += bytes[0];
}

}  // namespace

inline size_t Lcore::fast_frames(uint16_t port, std::span<RxBuffer* const> rx, FastRun* runs,
                                 uint64_t now_ns) {
  // The kernel's frames (TAP port) are addressed to their next hop: the general path.
  if (!config_.established_path || port >= fast_macs_.size() || from_kernel_port(port)) return 0;
  if (rx.size() > UINT16_MAX) rx = rx.first(UINT16_MAX);  // FastRun::end
  advance_clock(now_ns);
  // Locals, not members, in the loop: its stores into the frames (bytes, which may alias
  // anything) would otherwise make the compiler load the members again for every frame.
  const uint64_t mac = fast_macs_[port];
  const uint64_t now_ms = now_ms_;
  Flow* const flows = flows_.data();
  Words2 run_mask[3];
  Words2 fixed_mask[3];
  Words2 fixed_expect[3];
  load_checks(run_mask, fixed_mask, fixed_expect, fast_checks_.run_mask.data(),
              fast_checks_.mask.data(), fast_checks_.expect.data(), mac);
  Run run;
  resume(run, flows, fast_key_.expect.data(), fast_key_.flow, fast_key_.from_client, mac, port);
  uint64_t packets[2] = {0, 0};  // [from the owner, from the client]
  uint64_t bytes[2] = {0, 0};
  size_t run_from = 0;     // the run's first frame
  uint64_t run_bytes = 0;  // the payload bytes of the run's frames so far
  // The frames taken as spans of one port (FastRun): the current one began at port_from.
  size_t port_runs = 0;
  size_t port_from = 0;
  uint16_t out_port = run.flow != detail::kNoSlot ? run.rw->port : 0;
  // The run's words, out of the Run (which the steps reach through memory), so that they
  // may stay in registers.
  Words2 run_expect[3];
  std::memcpy(run_expect, run.expect, sizeof run_expect);
  RunFrame h = frame_view(run);
  const size_t ahead = rx.size() > 8 ? rx.size() - 8 : 0;
  size_t i = 0;
  for (; i < rx.size(); ++i) {
    const RxBuffer* const b = rx[i];
    prefetch_ahead(rx, i, ahead);
    uint8_t* const d = rx_data(b);
    const uint32_t len = rx_len(b);
    // At least kHeaders: the words below are in the frame. A buffer of several segments
    // (which the driver's general path refuses) is left to it.
    if (len < kHeaders || rx_segments(b) != 1) break;
    const Words2 v[3] = {load_words2(d), load_words2(d + 16), load_words2(d + 32)};
    if (differs(v[0], run_expect[0], run_mask[0]) || differs(v[1], run_expect[1], run_mask[1]) ||
        differs(v[2], run_expect[2], run_mask[2])) [[unlikely]] {
      // Another flow, or no frame for the fast path.
      end_run(run, run_from, i, now_ms, run_bytes, packets, bytes);
      run_from = i;
      flow::Tuple tuple;
      const uint32_t id = classify(d, v, fixed_mask, fixed_expect, tuples_, tuple);
      if (id == flow::TupleMap::kNone) break;
      const Words2 expect[3] = {v[0] & run_mask[0], v[1] & run_mask[1], v[2] & run_mask[2]};
      if (!start(run, flows, id, flows[id].client.rx == tuple, expect, port)) break;
      std::memcpy(run_expect, expect, sizeof run_expect);
      h = frame_view(run);
      if (run.rw->port != out_port) {
        if (i != port_from) runs[port_runs++] = {uint16_t(i), out_port};
        port_from = i;
        out_port = run.rw->port;
      }
    }
    uint32_t payload;
    uint32_t ip_tail;
    if (!frame_fits(d, len, h, payload, ip_tail)) break;
    uint8_t* const t = d + kL4;
    const uint32_t ack_host = host32(load32(t + 8));
    if (!ack_news(t, payload, ack_host, *h.in)) break;
    uint32_t tcp_sum = rewrite(d, v[0], h, ack_host);
    if (!h.plain && h.rare) [[unlikely]] {
      if (run.switch_port) {
        set_client_port(*run.fl, port);
        run.switch_port = false;
        run.rare = h.rw->rescale;
        h.rare = run.rare;
      }
      if (h.rw->rescale) rescale(t, *h.rw, tcp_sum);
    }
    write_checksums(d, ip_tail, *h.rw, tcp_sum);
    run_bytes += payload;
  }
  end_run(run, run_from, i, now_ms, run_bytes, packets, bytes);
  if (i != port_from) runs[port_runs++] = {uint16_t(i), out_port};
  keep(run, fast_key_.expect.data(), fast_key_.flow, fast_key_.from_client);
  count_burst(counters_, i, packets, bytes);
  return port_runs;
}

size_t Lcore::fast_baseline(uint16_t port, std::span<RxBuffer* const> rx, FastRun* runs,
                            uint64_t now_ns) {
  return fast_frames(port, rx, runs, now_ns);
}

#if SLUICE_FAST_PATH_V3
// The same loop with MOVBE (byte swaps folded into loads and stores), BMI2 and three-operand
// vector instructions: fewer instructions per frame where the CPU has them (the figures are in
// bench/RESULTS.md).
[[SLUICE_TARGET_X86_64_V3]] size_t Lcore::fast_x86_64_v3(uint16_t port,
                                                         std::span<RxBuffer* const> rx,
                                                         FastRun* runs, uint64_t now_ns) {
  return fast_frames(port, rx, runs, now_ns);
}
#else
size_t Lcore::fast_x86_64_v3(uint16_t port, std::span<RxBuffer* const> rx, FastRun* runs,
                             uint64_t now_ns) {
  return fast_frames(port, rx, runs, now_ns);  // never called: fast_v3_ stays false
}
#endif

size_t Lcore::fast(uint16_t port, std::span<RxBuffer* const> rx, FastRun* runs, uint64_t now_ns) {
  return fast_v3_ ? fast_x86_64_v3(port, rx, runs, now_ns) : fast_baseline(port, rx, runs, now_ns);
}

}  // namespace sluice::dpdk::engine
