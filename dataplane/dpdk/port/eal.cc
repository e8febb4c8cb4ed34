// EAL start-up behind a once-per-process guard, with errors turned into readable strings.
#include "dataplane/dpdk/port/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>

#include <mutex>

namespace sluice::dpdk::port {
namespace {

// Why no "-d <driver dir>" is appended: Debian-style shared builds of DPDK compile the driver
// directory into librte_eal (RTE_EAL_PMD_PATH) and load every PMD from it when the EAL sees it
// is linked dynamically; static builds link the drivers whole-archive through libdpdk.pc's
// Libs.private. Either way net_null/net_ring/net_af_packet/net_tap register themselves, which
// tests/unit/dpdk_port_test.cc checks. Passing -d for the same directory would only load it
// twice.

enum class EalState { kNever, kRunning, kDone };

std::mutex state_mutex;
EalState state = EalState::kNever;

constexpr const char* kProgramName = "sluice";

}  // namespace

Result<> eal_init(const std::vector<std::string>& args) {
  const std::lock_guard lock(state_mutex);
  if (state != EalState::kNever) {
    return failure(
        "DPDK EAL was already initialized in this process (it can be initialized only once)");
  }
  // rte_eal_init may permute argv, so it gets its own copies of the strings.
  std::vector<std::string> storage;
  storage.reserve(args.size() + 1);
  storage.emplace_back(kProgramName);
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(storage.size() + 1);
  for (std::string& s : storage)
    argv.push_back(s.data());
  argv.push_back(nullptr);

  const int argc = static_cast<int>(storage.size());
  const int parsed = rte_eal_init(argc, argv.data());
  if (parsed < 0) {
    // A failed rte_eal_init cannot be retried either.
    state = EalState::kDone;
    std::string error = "DPDK EAL initialization failed: ";
    error += rte_strerror(rte_errno);
    error += " (check the EAL arguments:";
    for (const std::string& a : args)
      error += " " + a;
    error += ")";
    return failure(error);
  }
  state = EalState::kRunning;
  if (parsed < argc - 1) {
    // Options after "--" or a stray word are not EAL options; refusing them keeps config typos
    // from being ignored silently.
    std::string error = "DPDK EAL arguments not understood:";
    for (int i = parsed + 1; i < argc; ++i) {
      error += " ";
      error += argv[static_cast<size_t>(i)];
    }
    rte_eal_cleanup();
    state = EalState::kDone;
    return failure(error);
  }
  return {};
}

bool eal_running() {
  const std::lock_guard lock(state_mutex);
  return state == EalState::kRunning;
}

void eal_cleanup() {
  const std::lock_guard lock(state_mutex);
  if (state != EalState::kRunning) return;
  rte_eal_cleanup();
  state = EalState::kDone;
}

}  // namespace sluice::dpdk::port
