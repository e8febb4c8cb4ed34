// A worker's replica of control's decisions: who owns each (vhost, queue), which queues have a
// spill backlog, and each node's admin and health state. Fed by control's messages on the worker's
// thread; looked up per frame with no lock, no syscall and no allocation (DESIGN sections 4, 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "control/messages.h"
#include "control/node.h"
#include "control/ownership_table.h"
#include "control/placement.h"

namespace sluice::control {

// Keeps slot and block indexes in 32 bits; far above any configured queue count.
inline constexpr size_t kReplicaQueuesMax = size_t(1) << 26;

struct Route {
  NodeIndex owner = kNoNode;  // kNoNode: nobody owns the queue yet (known is false)
  OwnerSource source = OwnerSource::kPlaced;
  bool backlog = false;  // spilled messages wait: they go to the owner before new ones
  bool known = false;
};

struct ReplicaOptions {
  // Keys longer than Replica::kInlineKeyBytes (vhost plus queue) take a block of their own; at
  // most this many. 0 picks queues_max / 32, at least 64 (capped at queues_max).
  size_t long_keys_max = 0;
  // Seeds the table's hash. Fixed by default so that runs repeat; a gateway should pass a random
  // seed chosen at start so that clients cannot pick queue names that collide.
  uint64_t hash_seed = 0x5107'ce00'0000'0001ull;
};

class Replica {
 public:
  // Key bytes kept in the slot itself: "/" plus a 53-byte queue name fits.
  static constexpr size_t kInlineKeyBytes = 54;
  static constexpr size_t kLongKeyBytes = kVhostBytesMax + kQueueBytesMax;

  // All memory is taken here: a table of 64-byte slots, at least 2 * queues_max of them (a power
  // of two; half empty keeps probe runs short), and the long-key blocks. Nothing later allocates.
  // About 128 bytes per queue, plus 510 per long-key block: with the default block count, 143 MiB
  // for a million queues, 18 MiB for 100,000.
  Replica(std::span<const NodeSpec> nodes, size_t queues_max, ReplicaOptions options = {});
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Applies one message from control. False only when a new entry was refused because the
  // replica is full (counted in refused()); the key then reads as unknown.
  bool apply(const ControlToWorker& message);

  // The key's route; not known (owner kNoNode) for an absent key or one longer than the limits.
  Route lookup(std::string_view vhost, std::string_view queue) const;

  // A dataplane burst's lookups at once: routes[i] for keys[i], as lookup() would answer, with the
  // memory accesses of the whole burst overlapped. At most kBurstMax keys.
  struct KeyRef {
    std::string_view vhost;
    std::string_view queue;
  };
  static constexpr size_t kBurstMax = 64;
  void lookup_burst(std::span<const KeyRef> keys, std::span<Route> routes) const;

  // For a key lookup() did not know (a precondition): the rendezvous placement over the configured
  // nodes, recorded here as placed, and a Placed message in *report (when not null) for the caller
  // to push to control. kNoNode, with *report untouched, when the key is longer than a message can
  // carry (counted in keys_too_long(); the broker would refuse the name too) or no node is
  // configured. When the replica is full the placement is still returned and reported, but not
  // recorded (counted in refused()).
  NodeIndex place_unknown(std::string_view vhost, std::string_view queue, WorkerToControl* report);
  // The rendezvous placement place_unknown() would record, recording nothing: a session routes
  // by it until a node accepted its login, and only then is it placed (place_unknown()).
  // kNoNode as place_unknown() answers it.
  NodeIndex placement_of(std::string_view vhost, std::string_view queue);

  size_t node_count() const { return placement_->node_count(); }
  // Every configured node in the key's rendezvous order (a node in drain passes its new
  // sessions to the next); out must hold node_count().
  void order(std::string_view vhost, std::string_view queue, std::span<NodeIndex> out) const {
    placement_->order(vhost, queue, out);
  }
  AdminState node_admin(NodeIndex node) const;
  HealthState node_health(NodeIndex node) const;
  // The sequence number of the last Barrier applied (0 before any).
  uint64_t barrier_seq() const { return barrier_seq_; }

  size_t size() const { return size_; }
  size_t long_keys() const { return long_keys_max_ - long_free_count_; }
  size_t queues_max() const { return queues_max_; }
  size_t long_keys_max() const { return long_keys_max_; }
  size_t slot_count() const { return mask_ + 1; }
  uint64_t refused() const { return refused_; }
  uint64_t keys_too_long() const { return keys_too_long_; }

 private:
  static constexpr uint8_t kUsed = 1;  // zeroed memory is an empty table
  static constexpr uint8_t kBacklog = 2;
  static constexpr uint8_t kLongKey = 4;
  // A slot of the open-addressing table is the entry itself, one cache line: a lookup reads one
  // line (two when the key sits further along its run), never a second array.
  struct alignas(64) Slot {
    uint32_t hash_low;  // the key's home is hash_low & mask_; compared before the key
    NodeIndex owner;
    OwnerSource source;
    uint8_t flags;
    uint8_t vhost_len;
    uint8_t queue_len;
    char key[kInlineKeyBytes];  // vhost then queue; a long key's block index in the first 4 bytes
  };
  static_assert(sizeof(Slot) == 64);

  struct Probe {
    size_t slot;
    bool found;
  };

  uint64_t hash(std::string_view vhost, std::string_view queue) const;
  static Route route_of(const Slot& s) {
    return Route{s.owner, s.source, (s.flags & kBacklog) != 0, s.owner != kNoNode};
  }
  const char* key_of(const Slot& s) const;
  bool matches(const Slot& s, uint32_t hash_low, std::string_view vhost,
               std::string_view queue) const;
  Probe probe(uint64_t h, std::string_view vhost, std::string_view queue) const;
  Route finish(uint64_t h, std::string_view vhost, std::string_view queue) const;
  Route probe_route(uint64_t h, std::string_view vhost, std::string_view queue) const;
  // The key's slot, filled with the key (no owner, no backlog) if absent; null when full.
  Slot* find_or_insert(std::string_view vhost, std::string_view queue);
  // Empties the key's slot if it holds nothing any more.
  void erase_if_empty(size_t slot);
  void erase(size_t slot);

  bool apply_one(const SetOwner& m);
  bool apply_one(const ClearOwner& m);
  bool apply_one(const NodeState& m);
  bool apply_one(const SetBacklog& m);
  bool apply_one(const Barrier& m);
  bool apply_one(const SetNodes& m);

  Placement own_placement_;     // from the constructor's nodes
  const Placement* placement_;  // own_placement_ or control's latest (SetNodes)
  uint64_t hash_seed_;
  size_t queues_max_;
  size_t long_keys_max_;
  size_t mask_;

  // Memory from take_memory(): zeroed and cache-line aligned.
  struct FreeMemory {
    void operator()(void* p) const;
  };
  std::unique_ptr<Slot[], FreeMemory> slots_;
  std::unique_ptr<char[], FreeMemory> long_bytes_;  // long_keys_max_ blocks of kLongKeyBytes
  std::unique_ptr<uint32_t[]> long_free_;           // a stack of free block indexes
  size_t long_free_count_ = 0;

  AdminState admin_[kNodesMax];
  HealthState health_[kNodesMax];
  uint64_t barrier_seq_ = 0;

  size_t size_ = 0;
  uint64_t refused_ = 0;
  uint64_t keys_too_long_ = 0;
};

}  // namespace sluice::control
