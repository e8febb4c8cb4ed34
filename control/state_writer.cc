// The state file's writer thread and its copy of the persisted ownership entries.
#include "control/state_writer.h"

namespace sluice::control {

StateWriter::StateWriter(std::string path, size_t node_count, Done done)
    : path_(std::move(path)),
      done_(std::move(done)),
      copy_(node_count),
      thread_([this] { run(); }) {}

StateWriter::~StateWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StateWriter::submit(std::vector<PersistedChange> changes, std::vector<NodeSpec> nodes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.empty()) {
      pending_ = std::move(changes);
    } else {
      pending_.insert(pending_.end(), std::make_move_iterator(changes.begin()),
                      std::make_move_iterator(changes.end()));
    }
    pending_nodes_ = std::move(nodes);
    requested_ = true;
  }
  cv_.notify_all();
}

void StateWriter::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !requested_ && !busy_; });
}

void StateWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return requested_ || stop_; });
    if (!requested_) return;  // stopping with nothing left to write
    std::vector<PersistedChange> changes = std::move(pending_);
    pending_.clear();
    nodes_ = std::move(pending_nodes_);
    pending_nodes_.clear();
    requested_ = false;
    busy_ = true;
    lock.unlock();
    copy_.add_nodes(nodes_.size());
    for (const PersistedChange& c : changes)
      copy_.set_persisted(c.key, c.placed, c.pinned);
    Result<> e = write_state_file(render_ownership(copy_, nodes_), path_);
    if (done_) done_(e);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace sluice::control
