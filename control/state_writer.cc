// The state file's writer thread.
#include "control/state_writer.h"

namespace sluice::control {

StateWriter::StateWriter(std::string path, Done done)
    : path_(std::move(path)), done_(std::move(done)), thread_([this] { run(); }) {}

StateWriter::~StateWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StateWriter::submit(std::string text) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = std::move(text);
  }
  cv_.notify_all();
}

void StateWriter::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !pending_ && !busy_; });
}

void StateWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return pending_ || stop_; });
    if (!pending_) return;  // stopping with nothing left to write
    std::string text = std::move(*pending_);
    pending_.reset();
    busy_ = true;
    lock.unlock();
    std::optional<StateFileError> e = write_state_file(text, path_);
    if (done_) done_(e);
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

}  // namespace sluice::control
