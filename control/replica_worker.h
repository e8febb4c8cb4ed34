// A worker thread that keeps its replica current and nothing else: what sluiced runs until an
// engine (io_uring, DPDK) takes the worker's place and drains the ring in its own loop. The
// propagation benchmark uses it too, as a stand-in for an engine's worker.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "control/control.h"

namespace sluice::control {

class ReplicaWorker {
 public:
  // Messages applied per pass; a pass that finds none sleeps idle_sleep_us.
  static constexpr size_t kApplyPerPass = 256;

  ReplicaWorker(Control::Worker worker, uint32_t idle_sleep_us = 500);
  ~ReplicaWorker();  // stops
  ReplicaWorker(const ReplicaWorker&) = delete;
  ReplicaWorker& operator=(const ReplicaWorker&) = delete;

  void stop();

  // Read from other threads: how many messages were applied (release-stored after applying,
  // so an acquire load that sees N also sees the first N messages' effects in the replica).
  uint64_t applied() const { return applied_.load(std::memory_order_acquire); }
  // The replica: only read it from another thread after applied() says what you wait for, and
  // only keys that no later message changes (the benchmark's case).
  const Replica& replica() const { return *worker_.replica; }

 private:
  void run();

  Control::Worker worker_;
  uint32_t idle_sleep_us_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> applied_{0};
  std::thread thread_;
};

}  // namespace sluice::control
