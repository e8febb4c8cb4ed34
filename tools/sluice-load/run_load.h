// A sluice-load run: the io_uring loop that drives every Client, the phases of a run
// (subscribe, produce, drain, disconnect), progress output and the summary. Returns the exit
// code: 0 passed, 1 failed (loss of acknowledged messages, errors over the threshold).
#pragma once

#include "tools/sluice-load/options.h"

namespace sluice::load {
int run_load(const LoadOptions& options);
}  // namespace sluice::load
