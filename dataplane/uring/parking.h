// Parking's table: the ring's sparse fixed-file table, in pairs of slots, where the two sockets
// of a parked session wait instead of the descriptor table. Which sessions park, and when they
// come back, is the worker's (worker_splice.cc); this holds the pairs, their registration and
// the failures' count.
#pragma once

#include <liburing.h>

#include <cstdint>
#include <vector>

#include "base/assert.h"
#include "dataplane/uring/engine.h"

namespace sluice::uring {

// IORING_OP_FIXED_FD_INSTALL (Linux 6.8; liburing 2.3 predates it): installs a fixed file of
// the ring as a normal descriptor.
inline constexpr uint8_t kOpFixedFdInstall = 54;

class ParkingTable {
 public:
  static constexpr uint32_t kNoPair = UINT32_MAX;

  // Registers `pairs` pairs of slots in the ring; sessions park above `above` sessions in the
  // engine. nullptr when parking is on, else why it is not.
  const char* open(io_uring& ring, uint32_t pairs, uint32_t above) {
    SLUICE_ASSERT(above != EngineOptions::kParkNever);
    io_uring_probe* probe = io_uring_get_probe_ring(&ring);
    const bool install = probe != nullptr && io_uring_opcode_supported(probe, kOpFixedFdInstall);
    if (probe != nullptr) io_uring_free_probe(probe);
    if (!install) return "the kernel has no IORING_OP_FIXED_FD_INSTALL (Linux 6.8)";
    if (pairs == 0 || io_uring_register_files_sparse(&ring, pairs * 2) < 0) {
      return "the ring's fixed-file table could not be registered";
    }
    above_ = above;
    free_.reserve(pairs);
    for (uint32_t i = pairs; i > 0; --i)
      free_.push_back(i - 1);
    return nullptr;
  }

  bool enabled() const { return above_ != EngineOptions::kParkNever; }
  // Whether a session that could park should, with `engine_sessions` in the engine.
  bool wanted(uint32_t engine_sessions) const {
    return enabled() && engine_sessions > above_ && !free_.empty();
  }

  // Puts the two sockets in a free pair: the pair, not yet taken (take() once the ring holds
  // them, release() if not), or kNoPair with the update's result in *err (a short update is
  // undone).
  uint32_t put(io_uring& ring, int cfd, int ofd, int* err) {
    SLUICE_ASSERT(!free_.empty());
    const uint32_t p = free_.back();
    int fds[2] = {cfd, ofd};
    const int r = io_uring_register_files_update(&ring, 2 * p, fds, 2);
    if (r == 2) return p;
    if (r > 0) empty(ring, p);  // one slot taken: give it back
    *err = r;
    return kNoPair;
  }
  void take(uint32_t pair) {
    SLUICE_ASSERT(!free_.empty() && free_.back() == pair);
    free_.pop_back();
  }
  // Empties a pair put but not taken.
  void release(io_uring& ring, uint32_t pair) { empty(ring, pair); }
  // Empties a taken pair (the ring's references to its sockets go) and frees it.
  void give(io_uring& ring, uint32_t pair) {
    empty(ring, pair);
    free_.push_back(pair);
  }

  // A socket's slot: 2 pair (client), 2 pair + 1 (owner).
  static int slot(uint32_t pair, int side) { return int(2 * pair + uint32_t(side)); }

  // Counts a failure (to park, or to get a descriptor back): true for the first of every 1000,
  // the ones to log.
  bool failed() { return errors_++ % 1000 == 0; }
  uint64_t failures() const { return errors_; }

 private:
  static void empty(io_uring& ring, uint32_t pair) {
    int none[2] = {-1, -1};
    io_uring_register_files_update(&ring, 2 * pair, none, 2);
  }

  uint32_t above_ = EngineOptions::kParkNever;
  std::vector<uint32_t> free_;  // pairs of fixed-file slots
  uint64_t errors_ = 0;
};

}  // namespace sluice::uring
