// In-place rewrites for full NAT and sequence translation: each helper changes one field of a
// frame parsed as `p`, updates the IPv4 and TCP checksums incrementally (RFC 1624) and keeps
// `p` in step with the bytes. Precondition: `p` was parsed from `frame` (asserted).
#pragma once

#include <cstdint>
#include <span>

#include "dataplane/dpdk/net/packet.h"

namespace sluice::dpdk::net {

// Addresses: the IPv4 header checksum, and for TCP the pseudo-header part of its checksum.
void set_src_ip(std::span<uint8_t> frame, Packet& p, uint32_t ip);
void set_dst_ip(std::span<uint8_t> frame, Packet& p, uint32_t ip);

// TCP fields (p.kind == kTcp).
void set_src_port(std::span<uint8_t> frame, Packet& p, uint16_t port);
void set_dst_port(std::span<uint8_t> frame, Packet& p, uint16_t port);
void set_seq(std::span<uint8_t> frame, Packet& p, uint32_t seq);
void set_ack(std::span<uint8_t> frame, Packet& p, uint32_t ack);
void set_window(std::span<uint8_t> frame, Packet& p, uint16_t window);
// Block `i` < p.options.sack_count.
void set_sack_block(std::span<uint8_t> frame, Packet& p, size_t i, SackBlock block);
// p.options.has_timestamps.
void set_timestamps(std::span<uint8_t> frame, Packet& p, Timestamps ts);

// Full recomputation, for tests and for frames whose checksums are not trusted.
uint16_t compute_ip_checksum(std::span<const uint8_t> frame, const Packet& p);
uint16_t compute_tcp_checksum(std::span<const uint8_t> frame, const Packet& p);

}  // namespace sluice::dpdk::net
