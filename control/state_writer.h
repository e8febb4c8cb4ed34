// Writes the state file on a thread of its own. The control thread only hands over what changed
// (keys whose placed or pinned node changed, with their new values); this thread keeps its own
// copy of the persisted entries, renders the file from it and writes it (write + fsync + rename +
// directory fsync can take tens of milliseconds, rendering a large table a few more), so the
// control thread keeps probing, answering the admin API and feeding workers meanwhile.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/ownership_table.h"

namespace sluice::control {

struct PersistedChange {
  QueueKey key;
  NodeIndex placed = kNoNode;  // kNoNode: none
  NodeIndex pinned = kNoNode;
};

class StateWriter {
 public:
  // Called on the writer's thread after each write.
  using Done = std::function<void(const Result<>&)>;

  StateWriter(std::string path, size_t node_count, Done done);
  ~StateWriter();  // finishes the pending write, then joins
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  // Applies `changes` to the writer's copy and writes the file; `nodes` names the node indexes
  // (nodes are only ever added). Changes submitted while a write runs are applied after it, and
  // one write covers them all. An empty list still writes (a retry after a failed write).
  void submit(std::vector<PersistedChange> changes, std::vector<NodeSpec> nodes);
  // Waits until nothing is pending or being written.
  void wait_idle();
  const std::string& path() const { return path_; }

 private:
  void run();

  const std::string path_;
  Done done_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<PersistedChange> pending_;
  std::vector<NodeSpec> pending_nodes_;
  bool requested_ = false;
  bool busy_ = false;
  bool stop_ = false;
  // Only the writer's thread touches the copy.
  OwnershipTable copy_;
  std::vector<NodeSpec> nodes_;
  std::thread thread_;
};

}  // namespace sluice::control
