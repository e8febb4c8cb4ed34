// Start and stop DPDK's Environment Abstraction Layer, once per process, from config-given args.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"

namespace sluice::dpdk::port {

// Initializes the EAL with `args` (EAL options only, without a program name: e.g. "--no-huge",
// "--vdev", "net_af_packet0,iface=veth0"). The error names what went wrong. DPDK allows one
// initialization per process, even after eal_cleanup(), so a second call returns an error
// instead of touching DPDK. Drivers for virtual devices (net_null,
// net_ring, net_af_packet, net_tap...) need no extra argument: see eal.cc.
Result<> eal_init(const std::vector<std::string>& args);

// True between a successful eal_init() and eal_cleanup().
bool eal_running();

// Releases the EAL's resources; every Port and MbufPool must be gone by then. No-op when the
// EAL is not running.
void eal_cleanup();

}  // namespace sluice::dpdk::port
