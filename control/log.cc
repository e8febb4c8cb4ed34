// key=value event log with a run-time level.
#include "control/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace sluice::control {
namespace {

std::atomic<uint8_t> g_level{uint8_t(LogLevel::kInfo)};
std::atomic<uint64_t> g_lines[4];
std::mutex g_mutex;
std::string* g_sink = nullptr;  // guarded by g_mutex

bool needs_quotes(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

void append_value(std::string& out, std::string_view v) {
  if (!needs_quotes(v)) {
    out += v;
    return;
  }
  out += '"';
  for (unsigned char c : v) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < ' ' || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void append_timestamp(std::string& out) {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = std::time_t(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];  // room for any int the compiler imagines; the text is 24 bytes
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms % 1000));
  out += buf;
}

}  // namespace

void set_log_level(LogLevel level) {
  g_level.store(uint8_t(level), std::memory_order_relaxed);
}

LogLevel log_level() {
  return LogLevel(g_level.load(std::memory_order_relaxed));
}

bool log_enabled(LogLevel level) {
  return uint8_t(level) >= g_level.load(std::memory_order_relaxed);
}

void log_event(LogLevel level, std::string_view event, std::initializer_list<LogField> fields) {
  log_event(level, event, std::span<const LogField>(fields.begin(), fields.size()));
}

void log_event(LogLevel level, std::string_view event, std::span<const LogField> fields) {
  if (!log_enabled(level)) return;
  std::string line;
  line.reserve(128);
  line += "ts=";
  append_timestamp(line);
  line += " level=";
  line += log_level_name(level);
  line += " event=";
  append_value(line, event);
  for (const LogField& f : fields) {
    line += ' ';
    line += f.first;
    line += '=';
    append_value(line, f.second);
  }
  line += '\n';
  g_lines[size_t(level)].fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_sink != nullptr) {
    *g_sink += line;
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
}

uint64_t log_lines(LogLevel level) {
  return g_lines[size_t(level)].load(std::memory_order_relaxed);
}

void set_log_sink(std::string* sink) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_sink = sink;
}

}  // namespace sluice::control
