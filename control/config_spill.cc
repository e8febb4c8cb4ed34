// The [spill] and [drain] sections of the config: the spill log's sizes and what happens when it
// is full, and how the drainer reaches the owners.
#include "control/config_reader.h"

namespace sluice::control {

std::string_view spill_on_full_name(SpillOnFull f) {
  return f == SpillOnFull::kDropOldest ? "drop-oldest" : "refuse";
}

namespace config_detail {
namespace {

// Room in a segment beyond the largest frame: the record header, the queue's name record and
// alignment (the spill log checks the exact figure too).
constexpr uint64_t kSegmentSlackBytes = 64u << 10;
constexpr int64_t kMessagesCeiling = int64_t(SpillConfig::kMessagesCeiling);
constexpr int64_t kRateMax = DrainConfig::kRateMax;
constexpr int64_t kBackoffMsMax = 3'600'000;
constexpr int64_t kTimeoutMsMax = 3'600'000;

std::string mib(uint64_t bytes) {
  return std::to_string(bytes) + " (" + std::to_string(bytes >> 20) + " MiB)";
}

}  // namespace

void read_spill(const Table& root, GatewayConfig* c) {
  std::optional<Table> t =
      root.table("spill", {"dir", "max_bytes", "segment_bytes", "queue_messages_max",
                           "queue_bytes_max", "on_full", "users_file", "allow_anonymous"});
  if (!t) return;
  SpillConfig& s = c->spill;
  if (auto v = t->path("dir")) s.dir = *v;
  if (auto v = t->integer("segment_bytes", int64_t(SpillConfig::kSegmentBytesMin),
                          int64_t(SpillConfig::kSegmentBytesMax))) {
    s.segment_bytes = uint64_t(*v);
  }
  if (auto v = t->integer("max_bytes", 1, int64_t(SpillConfig::kBytesCeiling))) {
    s.max_bytes = uint64_t(*v);
  }
  if (auto v = t->integer("queue_messages_max", 1, kMessagesCeiling)) {
    s.queue_messages_max = uint64_t(*v);
  }
  if (auto v = t->integer("queue_bytes_max", 1, int64_t(SpillConfig::kBytesCeiling))) {
    s.queue_bytes_max = uint64_t(*v);
  }
  if (auto v = t->string("on_full")) {
    if (*v == "refuse") {
      s.on_full = SpillOnFull::kRefuse;
    } else if (*v == "drop-oldest") {
      s.on_full = SpillOnFull::kDropOldest;
    } else {
      t->fail_at("on_full", "must be \"refuse\" or \"drop-oldest\"");
    }
  }
  if (auto v = t->path("users_file")) s.users_file = *v;
  if (auto v = t->boolean("allow_anonymous")) s.allow_anonymous = *v;
  if (!s.users_file.empty() && s.allow_anonymous) {
    t->fail_at("allow_anonymous",
               "must not be true with users_file: with a users file every spill session "
               "authenticates; remove one of the two");
  }
  const uint64_t frame = c->session.frame_limits.frame_bytes_max;
  if (s.segment_bytes < frame + kSegmentSlackBytes) {
    t->fail_at("segment_bytes",
               "must hold the largest message: at least limits.frame_bytes_max + "
               "64 KiB = " +
                   mib(frame + kSegmentSlackBytes));
  }
  if (s.max_bytes < 2 * s.segment_bytes) {
    t->fail_at(
        t->get("max_bytes") ? "max_bytes" : "segment_bytes",
        "max_bytes must be at least two segments: 2 x segment_bytes = " + mib(2 * s.segment_bytes));
  }
}

void read_drain(const Table& root, GatewayConfig* c) {
  std::optional<Table> t =
      root.table("drain", {"login", "passcode_file", "window", "rate_per_second", "backoff_base_ms",
                           "backoff_max_ms", "connect_timeout_ms", "receipt_timeout_ms"});
  if (!t) return;
  DrainConfig& d = c->drain;
  if (auto v = t->header_value("login")) d.login = *v;
  if (auto v = t->string("passcode_file")) {
    if (v->find('\0') != std::string::npos) t->fail_at("passcode_file", "must not contain NUL");
    d.passcode_file = *v;
  }
  if (auto v = t->integer("window", 1, DrainConfig::kWindowMax)) d.window = uint32_t(*v);
  if (auto v = t->integer("rate_per_second", 0, kRateMax)) d.rate_per_second = uint32_t(*v);
  if (auto v = t->integer("backoff_base_ms", 1, kBackoffMsMax)) d.backoff_base_ms = uint32_t(*v);
  if (auto v = t->integer("backoff_max_ms", 1, kBackoffMsMax)) d.backoff_max_ms = uint32_t(*v);
  if (d.backoff_max_ms < d.backoff_base_ms) {
    t->fail_at(t->get("backoff_max_ms") ? "backoff_max_ms" : "backoff_base_ms",
               "backoff_max_ms must be at least backoff_base_ms (" +
                   std::to_string(d.backoff_base_ms) + ")");
  }
  if (auto v = t->integer("connect_timeout_ms", 1, kTimeoutMsMax)) {
    d.connect_timeout_ms = uint32_t(*v);
  }
  if (auto v = t->integer("receipt_timeout_ms", 1, kTimeoutMsMax)) {
    d.receipt_timeout_ms = uint32_t(*v);
  }
}

}  // namespace config_detail
}  // namespace sluice::control
