// `sluice-load serve`: runs the benchmark sink until a signal or its duration ends.
#pragma once

#include "tools/sluice-load/options.h"

namespace sluice::load {
int run_serve(const ServeOptions& options);
}  // namespace sluice::load
