// The worker's replica: an open-addressing table of entries (linear probing, backward-shift
// deletion) allocated once at start, and the node states.
#include "control/replica.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <variant>

#include "base/assert.h"

namespace sluice::control {
namespace {

// The table's hash is not stable_hash: it never leaves the process, so it is free to be fast.
// It reads 8 bytes at a time and mixes with 64x64->128-bit multiplies (the construction of
// wyhash, by Wang Yi, public domain). Deterministic for a given seed on a little-endian host.
// Measured on "/" plus 29-byte queue names: 3.6 ns a key against 33 ns for stable_hash (FNV-1a, a
// byte at a time), and with stable_hash in its place the 1M-queue lookup benchmark lost its
// margin over std::unordered_map (1.04 to 1.18 times the map's time on random keys).
__extension__ typedef unsigned __int128 U128;

constexpr uint64_t kP0 = 0xa0761d6478bd642full;
constexpr uint64_t kP1 = 0xe7037ed1a0b428dbull;
constexpr uint64_t kP2 = 0x8ebc6af09c88c6e3ull;

inline uint64_t mum(uint64_t a, uint64_t b) {
  const U128 r = U128(a) * b;
  return uint64_t(r) ^ uint64_t(r >> 64);
}

inline uint64_t read8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint64_t read4(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline uint64_t absorb(uint64_t seed, std::string_view s) {
  const char* p = s.data();
  const size_t n = s.size();
  uint64_t a = 0, b = 0;
  if (n <= 16) {
    if (n >= 4) {
      // Two overlapping pairs of 4-byte reads cover every byte of 4..16.
      const size_t step = (n >> 3) << 2;
      a = (read4(p) << 32) | read4(p + step);
      b = (read4(p + n - 4) << 32) | read4(p + n - 4 - step);
    } else if (n > 0) {
      a = (uint64_t(uint8_t(p[0])) << 16) | (uint64_t(uint8_t(p[n >> 1])) << 8) |
          uint64_t(uint8_t(p[n - 1]));
    }
  } else {
    size_t left = n;
    while (left > 16) {
      seed = mum(read8(p) ^ kP1, read8(p + 8) ^ seed);
      p += 16;
      left -= 16;
    }
    // The last 16 bytes, overlapping what the loop read when n is not a multiple of 16.
    a = read8(p + left - 16);
    b = read8(p + left - 8);
  }
  const U128 r = U128(a ^ kP1) * (b ^ seed);
  return mum(uint64_t(r) ^ kP0 ^ n, uint64_t(r >> 64) ^ kP1);
}

// Equality of n bytes without a call to memcmp: keys are short and of few distinct lengths, so
// the branches on n predict well. Reads stay within the n bytes of each side.
inline bool same_bytes(const char* a, const char* b, size_t n) {
  if (n >= 8) {
    uint64_t diff = 0;
    for (size_t i = 0; i + 8 < n; i += 8)
      diff |= read8(a + i) ^ read8(b + i);
    return (diff | (read8(a + n - 8) ^ read8(b + n - 8))) == 0;
  }
  if (n >= 4) return ((read4(a) ^ read4(b)) | (read4(a + n - 4) ^ read4(b + n - 4))) == 0;
  // Bytes 0, n/2 and n-1 are every byte of 1 to 3.
  if (n == 0) return true;
  return ((a[0] ^ b[0]) | (a[n >> 1] ^ b[n >> 1]) | (a[n - 1] ^ b[n - 1])) == 0;
}

// A vhost as one word that seeds the queue's hash: up to 8 bytes (nearly every vhost; "/" is the
// default) are packed with their length, longer ones hashed. One hash over the queue then covers
// the pair, and swapping vhost and queue gives another hash.
inline uint64_t vhost_word(uint64_t seed, std::string_view vhost) {
  const char* p = vhost.data();
  const size_t n = vhost.size();
  if (n > 8) return absorb(seed ^ kP2, vhost);
  uint64_t w = 0;
  if (n >= 4) {
    w = (read4(p) << 32) | read4(p + n - 4);
  } else if (n > 0) {
    w = (uint64_t(uint8_t(p[0])) << 16) | (uint64_t(uint8_t(p[n >> 1])) << 8) |
        uint64_t(uint8_t(p[n - 1]));
  }
  return seed ^ w ^ (uint64_t(n) << 59) ^ kP2;
}

// Zeroed, cache-line aligned memory for a table, every page touched now so that page faults stay
// off the data path. (Advising transparent huge pages was measured too: no gain on the benchmark's
// host, and slower random lookups, so the memory is ordinary.)
void* take_memory(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return p;
}

size_t slots_for(size_t queues_max) {
  size_t slots = 2;
  while (slots < 2 * queues_max)
    slots <<= 1;
  return slots;
}

}  // namespace

Replica::Replica(std::span<const NodeSpec> nodes, size_t queues_max, ReplicaOptions options)
    : own_placement_(nodes),
      placement_(&own_placement_),
      hash_seed_(options.hash_seed),
      queues_max_(queues_max),
      long_keys_max_(options.long_keys_max != 0
                         ? options.long_keys_max
                         : std::min(queues_max, std::max<size_t>(64, queues_max / 32))),
      mask_(slots_for(queues_max) - 1) {
  SLUICE_ASSERT(nodes.size() <= kNodesMax);
  SLUICE_ASSERT(queues_max >= 1 && queues_max <= kReplicaQueuesMax);
  SLUICE_ASSERT(long_keys_max_ <= queues_max);
  // Zeroed: every slot empty.
  slots_.reset(static_cast<Slot*>(take_memory((mask_ + 1) * sizeof(Slot))));
  long_bytes_.reset(static_cast<char*>(take_memory(long_keys_max_ * kLongKeyBytes)));
  long_free_.reset(new uint32_t[long_keys_max_]);
  // Lowest block first out of the stack.
  for (size_t i = 0; i < long_keys_max_; ++i)
    long_free_[i] = uint32_t(long_keys_max_ - 1 - i);
  long_free_count_ = long_keys_max_;
  std::fill(std::begin(admin_), std::end(admin_), AdminState::kUp);
  // Control sends every node's state before the worker takes sessions; up until then.
  std::fill(std::begin(health_), std::end(health_), HealthState::kUp);
}

void Replica::FreeMemory::operator()(void* p) const {
  std::free(p);
}

// Inlined into lookup(), as the steps below are: with a million entries a lookup waits on cache
// misses, and the fewer instructions each lookup takes, the more lookups the processor's window
// holds at once, so the more misses overlap.
[[gnu::always_inline]] inline uint64_t Replica::hash(std::string_view vhost,
                                                     std::string_view queue) const {
  return absorb(vhost_word(hash_seed_, vhost), queue);
}

[[gnu::always_inline]] inline const char* Replica::key_of(const Slot& s) const {
  if (!(s.flags & kLongKey)) return s.key;
  uint32_t block;
  std::memcpy(&block, s.key, sizeof block);
  return long_bytes_.get() + size_t(block) * kLongKeyBytes;
}

[[gnu::always_inline]] inline bool Replica::matches(const Slot& s, uint32_t hash_low,
                                                    std::string_view vhost,
                                                    std::string_view queue) const {
  if (s.hash_low != hash_low || s.vhost_len != vhost.size() || s.queue_len != queue.size()) {
    return false;
  }
  const char* k = key_of(s);
  return same_bytes(k, vhost.data(), vhost.size()) &&
         same_bytes(k + vhost.size(), queue.data(), queue.size());
}

[[gnu::always_inline]] inline Replica::Probe Replica::probe(uint64_t h, std::string_view vhost,
                                                            std::string_view queue) const {
  const uint32_t hash_low = uint32_t(h);
  size_t i = size_t(h) & mask_;
  // At most size_ <= half the slots are full, so an empty slot ends every run; the bound is for
  // the invariant's sake.
  for (size_t n = 0; n <= mask_; ++n) {
    const Slot& s = slots_[i];
    if (!(s.flags & kUsed)) return {i, false};
    if (matches(s, hash_low, vhost, queue)) return {i, true};
    i = (i + 1) & mask_;
  }
  SLUICE_ASSERT(false && "replica table has no empty slot");
}

[[gnu::always_inline]] inline Route Replica::finish(uint64_t h, std::string_view vhost,
                                                    std::string_view queue) const {
  // The key in its home slot, the common case, without a loop. At half load about a quarter of
  // the keys sit further along their run, most of those in the next slot: asking for that line now
  // overlaps its miss with this one (measured: random lookups over 1M keys took 0.84 of the map's
  // time with it, 0.93 without).
  const Slot& home = slots_[size_t(h) & mask_];
  __builtin_prefetch(&slots_[(size_t(h) + 1) & mask_]);
  if (matches(home, uint32_t(h), vhost, queue)) return route_of(home);
  return probe_route(h, vhost, queue);
}

// Out of line, so that the common case stays short: an absent key, or a key further along its run.
[[gnu::noinline]] Route Replica::probe_route(uint64_t h, std::string_view vhost,
                                             std::string_view queue) const {
  const Probe p = probe(h, vhost, queue);
  return p.found ? route_of(slots_[p.slot]) : Route{};
}

Route Replica::lookup(std::string_view vhost, std::string_view queue) const {
  if (vhost.size() > kVhostBytesMax || queue.size() > kQueueBytesMax) return Route{};
  return finish(hash(vhost, queue), vhost, queue);
}

void Replica::lookup_burst(std::span<const KeyRef> keys, std::span<Route> routes) const {
  SLUICE_ASSERT(keys.size() <= kBurstMax && routes.size() >= keys.size());
  const size_t n = keys.size();
  // Hash the whole burst and prefetch each home slot, then read them (as DPDK's l3fwd stages a
  // burst): the burst's cache misses overlap instead of following each other.
  uint64_t hashes[kBurstMax];
  for (size_t i = 0; i < n; ++i) {
    hashes[i] = hash(keys[i].vhost, keys[i].queue);
    __builtin_prefetch(&slots_[size_t(hashes[i]) & mask_]);
  }
  for (size_t i = 0; i < n; ++i) {
    const KeyRef& k = keys[i];
    if (k.vhost.size() > kVhostBytesMax || k.queue.size() > kQueueBytesMax) {
      routes[i] = Route{};
    } else {
      routes[i] = finish(hashes[i], k.vhost, k.queue);
    }
  }
}

Replica::Slot* Replica::find_or_insert(std::string_view vhost, std::string_view queue) {
  const uint64_t h = hash(vhost, queue);
  const Probe p = probe(h, vhost, queue);
  if (p.found) return &slots_[p.slot];

  const bool long_key = vhost.size() + queue.size() > kInlineKeyBytes;
  if (size_ == queues_max_ || (long_key && long_free_count_ == 0)) {
    ++refused_;
    return nullptr;
  }
  Slot& s = slots_[p.slot];
  s.hash_low = uint32_t(h);
  s.owner = kNoNode;
  s.source = OwnerSource::kPlaced;
  s.flags = kUsed;
  s.vhost_len = uint8_t(vhost.size());
  s.queue_len = uint8_t(queue.size());
  char* k = s.key;
  if (long_key) {
    const uint32_t block = long_free_[--long_free_count_];
    s.flags |= kLongKey;
    std::memcpy(s.key, &block, sizeof block);
    k = long_bytes_.get() + size_t(block) * kLongKeyBytes;
  }
  if (!vhost.empty()) std::memcpy(k, vhost.data(), vhost.size());
  if (!queue.empty()) std::memcpy(k + vhost.size(), queue.data(), queue.size());
  ++size_;
  return &s;
}

void Replica::erase_if_empty(size_t slot) {
  const Slot& s = slots_[slot];
  if (s.owner == kNoNode && !(s.flags & kBacklog)) erase(slot);
}

void Replica::erase(size_t slot) {
  const Slot& gone = slots_[slot];
  if (gone.flags & kLongKey) {
    uint32_t block;
    std::memcpy(&block, gone.key, sizeof block);
    long_free_[long_free_count_++] = block;
  }
  --size_;

  // Backward-shift deletion: pull later members of the run into the hole when their home slot
  // allows it, so that no tombstones build up and every run still ends at an empty slot.
  size_t hole = slot;
  size_t j = slot;
  for (size_t n = 0; n <= mask_; ++n) {
    j = (j + 1) & mask_;
    const Slot& s = slots_[j];
    if (!(s.flags & kUsed)) break;
    const size_t home = size_t(s.hash_low) & mask_;
    // The entry at j may move to the hole if the hole is no nearer to j than its home is.
    if (((j - home) & mask_) >= ((j - hole) & mask_)) {
      slots_[hole] = s;
      hole = j;
    }
  }
  slots_[hole] = Slot{};
}

bool Replica::apply(const ControlToWorker& message) {
  return std::visit([this](const auto& m) { return apply_one(m); }, message);
}

bool Replica::apply_one(const SetOwner& m) {
  SLUICE_ASSERT(m.node < node_count());
  Slot* s = find_or_insert(m.key.vhost(), m.key.queue());
  if (s == nullptr) return false;
  s->owner = m.node;
  s->source = m.source;
  return true;
}

bool Replica::apply_one(const ClearOwner& m) {
  const std::string_view vhost = m.key.vhost(), queue = m.key.queue();
  const Probe p = probe(hash(vhost, queue), vhost, queue);
  if (!p.found) return true;
  slots_[p.slot].owner = kNoNode;
  erase_if_empty(p.slot);
  return true;
}

bool Replica::apply_one(const NodeState& m) {
  SLUICE_ASSERT(m.node < node_count());
  admin_[m.node] = m.admin;
  health_[m.node] = m.health;
  return true;
}

bool Replica::apply_one(const SetNodes& m) {
  SLUICE_ASSERT(m.placement != nullptr);
  // Nodes are only ever added: every index in use stays valid.
  SLUICE_ASSERT(m.placement->node_count() >= placement_->node_count());
  SLUICE_ASSERT(m.placement->node_count() <= kNodesMax);
  placement_ = m.placement;
  return true;
}

bool Replica::apply_one(const SetBacklog& m) {
  const std::string_view vhost = m.key.vhost(), queue = m.key.queue();
  if (!m.has_backlog) {
    const Probe p = probe(hash(vhost, queue), vhost, queue);
    if (!p.found) return true;
    slots_[p.slot].flags &= uint8_t(~kBacklog);
    erase_if_empty(p.slot);
    return true;
  }
  Slot* s = find_or_insert(vhost, queue);
  if (s == nullptr) return false;
  s->flags |= kBacklog;
  return true;
}

bool Replica::apply_one(const Barrier& m) {
  barrier_seq_ = m.seq;
  return true;
}

NodeIndex Replica::placement_of(std::string_view vhost, std::string_view queue) {
  if (key_fit(vhost, queue) != KeyFit::kFits) {
    ++keys_too_long_;
    return kNoNode;
  }
  return placement_->rendezvous(vhost, queue);
}

NodeIndex Replica::place_unknown(std::string_view vhost, std::string_view queue,
                                 WorkerToControl* report) {
  if (key_fit(vhost, queue) != KeyFit::kFits) {
    ++keys_too_long_;
    return kNoNode;
  }
  const NodeIndex node = placement_->rendezvous(vhost, queue);
  if (node == kNoNode) return kNoNode;
  if (Slot* s = find_or_insert(vhost, queue)) {
    SLUICE_ASSERT(s->owner == kNoNode);  // the caller's lookup() found no owner
    s->owner = node;
    s->source = OwnerSource::kPlaced;
  }
  if (report != nullptr) {
    Placed placed;
    placed.node = node;
    const KeyFit fit = placed.key.assign(vhost, queue);
    SLUICE_ASSERT(fit == KeyFit::kFits);
    *report = placed;
  }
  return node;
}

AdminState Replica::node_admin(NodeIndex node) const {
  SLUICE_ASSERT(node < node_count());
  return admin_[node];
}

HealthState Replica::node_health(NodeIndex node) const {
  SLUICE_ASSERT(node < node_count());
  return health_[node];
}

}  // namespace sluice::control
