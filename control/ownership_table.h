// The ownership table on the control thread: (vhost, queue) -> node, from three sources with
// precedence pinned > learned > placed (DESIGN section 5). Placements are sticky: once recorded a
// queue keeps its node when nodes are added. Placed and pinned entries persist in the state
// directory; learned ones come back from the broker feeds.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "base/result.h"
#include "control/node.h"

namespace sluice::control {

enum class OwnerSource : uint8_t { kPlaced, kLearned, kPinned };  // ascending precedence
std::string_view owner_source_name(OwnerSource s);

struct Owner {
  NodeIndex node = kNoNode;
  OwnerSource source = OwnerSource::kPlaced;
};

class OwnershipTable {
 public:
  struct Entry {
    NodeIndex placed = kNoNode;
    NodeIndex learned = kNoNode;
    NodeIndex pinned = kNoNode;
    // When a placed entry was last placed, used by a session or confirmed by a feed (steady ms;
    // 0: not yet since the start). Not persisted.
    int64_t placed_seen_ms = 0;
    bool empty() const { return placed == kNoNode && learned == kNoNode && pinned == kNoNode; }
  };

  explicit OwnershipTable(size_t node_count);
  // Nodes are only ever added while running (a reload); indexes in use stay valid.
  void add_nodes(size_t node_count);

  // The entry's winning source, if any.
  std::optional<Owner> lookup(const QueueKey& key) const;
  const Entry* find(const QueueKey& key) const;

  // Records a placement unless one exists (sticky); returns the node that stays placed.
  NodeIndex place(const QueueKey& key, NodeIndex node);
  void learn(const QueueKey& key, NodeIndex node);
  // Drops learned entries whose keys are not in `keep` (a feed poll's full answer); returns the
  // keys dropped, whose owner may have changed.
  std::vector<QueueKey> forget_learned_except(const std::function<bool(const QueueKey&)>& keep);
  // Returns the winning owner before the pin (the pin itself always wins).
  std::optional<Owner> pin(const QueueKey& key, NodeIndex node);
  bool unpin(const QueueKey& key);
  // A session used the key (or it was placed): its placement is not unused.
  void touch_placed(const QueueKey& key, int64_t now_ms);
  // Drops the placements that nothing confirmed for `ttl_ms`: placed entries with no learned or
  // pinned owner (a feed listing the queue confirms it), not touched since `now_ms - ttl_ms`.
  // An entry's first scan since the start only starts its clock. Returns the keys dropped.
  std::vector<QueueKey> forget_unused_placed(int64_t now_ms, int64_t ttl_ms);

  // Sizes the table for `queues` entries, so that growing to that size never rehashes it all in
  // the middle of a batch.
  void reserve(size_t queues) { entries_.reserve(queues); }

  // The state file is rendered off the control thread from a copy of the persisted sources
  // (placed and pinned): once tracking is on, the table remembers which keys changed them, and
  // the copy is brought up to date with set_persisted() for each.
  void track_persisted_changes() { tracking_ = true; }
  // Keys whose placed or pinned node changed since the last call, in order (a key may repeat).
  std::vector<QueueKey> take_persisted_changes() { return std::exchange(changed_, {}); }
  // Sets a key's placed and pinned nodes (kNoNode for none) as another table holds them.
  void set_persisted(const QueueKey& key, NodeIndex placed, NodeIndex pinned);

  size_t size() const { return entries_.size(); }
  size_t count(OwnerSource s) const { return counts_[size_t(s)]; }
  // Queues whose winning owner is the node (least-queues placement counts these).
  std::span<const uint32_t> queues_per_node() const { return per_node_; }
  // fn(const QueueKey&, const Entry&) for every entry, in no particular order.
  template <typename F>
  void for_each(F&& fn) const {
    for (const auto& [key, e] : entries_)
      fn(key, e);
  }

 private:
  static std::optional<Owner> winner(const Entry& e);
  // Keeps counts_ and per_node_ right around a change of one entry.
  void account(const Entry& e, int sign);
  template <typename Change>
  void update(const QueueKey& key, Change&& change);

  std::unordered_map<QueueKey, Entry, QueueKeyHash> entries_;
  bool tracking_ = false;
  std::vector<QueueKey> changed_;
  uint64_t counts_[3] = {0, 0, 0};
  std::vector<uint32_t> per_node_;
};

// The state file: "ownership" in the state directory. Text, versioned, with a checksum line, so a
// truncated or damaged file is detected; written to a temporary file, synced, then renamed.
// Writes placed and pinned entries, naming nodes by name. Nothing on error (the old file stays).
// An error names the file (Error::file) and what failed.
Result<> save_ownership(const OwnershipTable& table, std::span<const NodeSpec> nodes,
                        const std::string& path);
// save_ownership in two steps, so that the slow one (write, fsync, rename) can run off the
// control thread: the file's text, then writing it durably in place of the old one.
std::string render_ownership(const OwnershipTable& table, std::span<const NodeSpec> nodes);
Result<> write_state_file(std::string_view text, const std::string& path);

struct LoadedOwnership {
  size_t placed = 0;
  size_t pinned = 0;
  // Entries naming nodes that are no longer configured: not loaded, reported by name.
  std::vector<std::string> dropped;
};
// Loads into `table`. A missing file is a first start (nothing loaded). A damaged file is an
// error naming it; a copy is kept next to it as "<path>.corrupt" for inspection, and the table is
// left empty so that the caller refuses to start rather than re-place every queue.
Result<LoadedOwnership> load_ownership(OwnershipTable& table, std::span<const NodeSpec> nodes,
                                       const std::string& path);

}  // namespace sluice::control
