// The gateway's log: one line per event on stderr, "key=value" fields after a timestamp, the
// level and the event name (DESIGN section 9), with the level adjustable at run time. Never give
// it a secret: passcodes stay out of every field.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "control/config.h"

namespace sluice::control {

using LogField = std::pair<std::string_view, std::string_view>;

// Lines below the level are dropped. Safe from any thread.
void set_log_level(LogLevel level);
LogLevel log_level();
bool log_enabled(LogLevel level);

// Writes "ts=... level=info event=node_down node=rabbit1 reason=\"connect: refused\"": values
// with spaces, quotes, '=' or control bytes are quoted and escaped, so each line parses back.
void log_event(LogLevel level, std::string_view event, std::initializer_list<LogField> fields);
void log_event(LogLevel level, std::string_view event, std::span<const LogField> fields);

// Lines written per level since start (metrics).
uint64_t log_lines(LogLevel level);

// Where lines go; stderr by default. Tests point it at a string (nullptr restores stderr).
void set_log_sink(std::string* sink);

}  // namespace sluice::control
