// The per-lcore flow lookup of the DPDK engine: a fixed-capacity open-addressing hash from a
// TCP 4-tuple to a flow index, sized at start-up and never allocating afterwards.
#pragma once

#include <cstdint>
#include <memory>

namespace sluice::dpdk::flow {

// A TCP 4-tuple as received, in host byte order. 12 bytes, no padding.
struct Tuple {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;

  friend bool operator==(const Tuple&, const Tuple&) = default;
};
static_assert(sizeof(Tuple) == 12);

// The addresses and ports are packed into 64 bits (injective while dst_ip is fixed, as it is
// for one listening address), XORed with `key` and finished with murmur3's fmix64, so every bit
// of the tuple reaches the low bits the table indexes with. The key is a secret drawn at start
// (as Linux keys its conntrack hash): without it a client cannot choose source ports whose
// flows share a slot and grow one probe run long enough to slow every lookup (hash flooding).
inline uint32_t tuple_hash(const Tuple& t, uint64_t key) {
  const uint64_t ips = uint64_t(t.src_ip) << 32 | t.dst_ip;
  const uint64_t ports = uint64_t(t.src_port) << 16 | t.dst_port;
  uint64_t x = ips ^ (ports * 0x9e3779b97f4a7c15ull) ^ key;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return uint32_t(x);
}

// Tuple -> uint32_t (a flow index). Linear probing at a load of at most one half, and
// backward-shift deletion, so there are no tombstones and a run never outgrows what the live
// keys need, however many flows come and go. A slot holds the whole tuple and the value (16
// bytes, four to a cache line); a lookup usually reads one line.
class TupleMap {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;  // find()'s "absent"; never a stored value
  // The table has at least twice as many slots as entries and its size must fit in 32 bits.
  static constexpr uint32_t kCapacityMax = uint32_t(1) << 28;

  // capacity: the most entries the map holds, 1 to kCapacityMax. The table is the smallest
  // power of two >= 2 * capacity slots, allocated here and only here. key: tuple_hash()'s
  // secret (random in production; tests may fix it).
  TupleMap(uint32_t capacity, uint64_t key);

  // The hash find() and prefetch_hash() take: tuple_hash() under this map's key.
  uint32_t hash(const Tuple& t) const { return tuple_hash(t, key_); }

  // False when the tuple is already present or the map holds capacity() entries (the caller
  // counts it and refuses the flow). value must not be kNone.
  bool insert(const Tuple& t, uint32_t value);

  // The tuple's value, or kNone.
  uint32_t find(const Tuple& t) const { return find(t, hash(t)); }
  // The same, `hash` being hash(t), computed once for prefetch() and find().
  uint32_t find(const Tuple& t, uint32_t hash) const {
    uint32_t i = hash & mask_;
    // At most half the slots are full, so an empty slot ends every run.
    for (;;) {
      const Slot& s = slots_[i];
      if (s.value == kNone) return kNone;
      if (s.tuple == t) return s.value;
      i = (i + 1) & mask_;
    }
  }

  // False when the tuple is absent.
  bool erase(const Tuple& t);

  uint32_t size() const { return size_; }
  uint32_t capacity() const { return capacity_; }

  // Asks for the slot find(t) reads first, so that a burst can hash and prefetch every packet's
  // tuple before looking any of them up and their cache misses overlap.
  void prefetch(const Tuple& t) const { prefetch_hash(hash(t)); }
  void prefetch_hash(uint32_t hash) const { __builtin_prefetch(&slots_[hash & mask_]); }

 private:
  // Aligned to its size so that a slot never straddles two cache lines.
  struct alignas(16) Slot {
    Tuple tuple;
    uint32_t value = kNone;  // kNone marks an empty slot
  };
  static_assert(sizeof(Slot) == 16);

  uint64_t key_;
  uint32_t capacity_;
  uint32_t mask_;  // slots - 1
  uint32_t size_ = 0;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace sluice::dpdk::flow
