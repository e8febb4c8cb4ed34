// Writes the state file on a thread of its own: rendering the text is quick and happens on the
// control thread, but write + fsync + rename + directory fsync can take tens of milliseconds, and
// the control thread must keep probing, answering the admin API and feeding workers meanwhile.
// Only the newest text matters: a text submitted while another waits replaces it.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "control/ownership_table.h"

namespace sluice::control {

class StateWriter {
 public:
  // Called on the writer's thread after each write.
  using Done = std::function<void(const std::optional<StateFileError>&)>;

  StateWriter(std::string path, Done done);
  ~StateWriter();  // finishes the pending write, then joins
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  void submit(std::string text);
  // Waits until nothing is pending or being written.
  void wait_idle();
  const std::string& path() const { return path_; }

 private:
  void run();

  const std::string path_;
  Done done_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<std::string> pending_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sluice::control
