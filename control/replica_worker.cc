// The replica-only worker loop.
#include "control/replica_worker.h"

#include <chrono>

namespace sluice::control {

ReplicaWorker::ReplicaWorker(Control::Worker worker, uint32_t idle_sleep_us)
    : worker_(std::move(worker)), idle_sleep_us_(idle_sleep_us), thread_([this] { run(); }) {}

ReplicaWorker::~ReplicaWorker() {
  stop();
}

void ReplicaWorker::stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void ReplicaWorker::run() {
  Replica& replica = *worker_.replica;
  uint64_t applied = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    const size_t n = worker_.channel->to_worker.pop_some(
        [&](const ControlToWorker& m) { (void)replica.apply(m); }, kApplyPerPass);
    if (n == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(idle_sleep_us_));
      continue;
    }
    applied += n;
    applied_.store(applied, std::memory_order_release);
  }
}

}  // namespace sluice::control
