// The DPDK engine's door: what a program that runs the engine uses (sluiced's
// gateway/dpdk_engine.cc). The EAL once per process (port/eal.h), the packet buffers
// (port/mbuf_pool.h), the ports (port/port.h), an lcore's poll-mode loop (port/driver.h) and
// the splicer it drives (engine/lcore.h, over the session core's Router and LoginCache).
// Everything else under dataplane/dpdk/ is the engine's own; tests and benchmarks may look
// inside, other modules include this header only.
#pragma once

#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/port/driver.h"
#include "dataplane/dpdk/port/eal.h"
#include "dataplane/dpdk/port/mbuf_pool.h"
#include "dataplane/dpdk/port/port.h"
