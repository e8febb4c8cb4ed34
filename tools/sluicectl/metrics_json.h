// `sluicectl metrics --json`: Prometheus' text exposition (format 0.0.4) turned into one JSON
// object, so scripts need no Prometheus parser.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace sluice::sluicectl {

// One member per sample, in exposition order: the key is the sample's name and labels exactly
// as exposed ("sluice_node_up{node=\"rabbit1\"}", "sluice_ownership_queues"), the value a JSON
// number (an integer when the value is whole), or the string "NaN", "+Inf" or "-Inf".
// Comments (# HELP, # TYPE) and timestamps are left out. A line that is not a sample is an
// error naming its line number.
Result<nlohmann::ordered_json> metrics_to_json(std::string_view text);

}  // namespace sluice::sluicectl
