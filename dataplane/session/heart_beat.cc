// Heart-beat header parsing, the gateway's answer, negotiation and the owner's answer check.
#include "dataplane/session/heart_beat.h"

#include <algorithm>

#include "base/assert.h"

namespace sluice::session {
namespace {

// A number of at most 10 digits that fits 32 bits.
std::optional<uint32_t> parse_ms(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v > UINT32_MAX) return std::nullopt;
  return uint32_t(v);
}

uint32_t interval(uint32_t sender_can, uint32_t receiver_wants) {
  return sender_can == 0 || receiver_wants == 0 ? 0 : std::max(sender_can, receiver_wants);
}

}  // namespace

std::optional<HeartBeat> parse_heart_beat(std::string_view v) {
  const size_t comma = v.find(',');
  if (comma == std::string_view::npos) return std::nullopt;
  std::optional<uint32_t> x = parse_ms(v.substr(0, comma));
  std::optional<uint32_t> y = parse_ms(v.substr(comma + 1));
  if (!x || !y) return std::nullopt;
  return HeartBeat{*x, *y};
}

std::string_view format_heart_beat(std::span<char> out, HeartBeat hb) {
  SLUICE_ASSERT(out.size() >= 21);
  size_t n = 0;
  auto put = [&](uint32_t v) {
    char digits[10];
    size_t k = 0;
    do {
      digits[k++] = char('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0)
      out[n++] = digits[--k];
  };
  put(hb.x);
  out[n++] = ',';
  put(hb.y);
  return std::string_view(out.data(), n);
}

HeartBeat answer_heart_beat(HeartBeat client, uint32_t min_ms, uint32_t max_ms) {
  if (max_ms == 0) return HeartBeat{};
  SLUICE_ASSERT(min_ms <= max_ms);
  auto clamp = [&](uint32_t v) { return v == 0 ? 0 : std::clamp(v, min_ms, max_ms); };
  // sx answers cy (what the client wants to receive), sy answers cx (what it can send).
  return HeartBeat{clamp(client.y), clamp(client.x)};
}

HeartBeatIntervals negotiate(HeartBeat client, HeartBeat server) {
  return HeartBeatIntervals{interval(client.x, server.y), interval(server.x, client.y)};
}

HeartBeatCheck check_owner_heart_beat(HeartBeat client, HeartBeat told, HeartBeat owner) {
  const HeartBeatIntervals t = negotiate(client, told);
  const HeartBeatIntervals o = negotiate(client, owner);
  if (t == o) return HeartBeatCheck::kSame;
  // The client sends every t.client_to_server_ms (never when 0); the owner gives up on it after
  // missing o.client_to_server_ms.
  if (o.client_to_server_ms != 0 &&
      (t.client_to_server_ms == 0 || t.client_to_server_ms > o.client_to_server_ms)) {
    return HeartBeatCheck::kOwnerStricter;
  }
  if (t.server_to_client_ms != 0 &&
      (o.server_to_client_ms == 0 || o.server_to_client_ms > t.server_to_client_ms)) {
    return HeartBeatCheck::kOwnerSlower;
  }
  return HeartBeatCheck::kOtherwise;
}

std::string_view heart_beat_check_name(HeartBeatCheck c) {
  switch (c) {
    case HeartBeatCheck::kSame:
      return "same";
    case HeartBeatCheck::kOwnerSlower:
      return "owner_slower";
    case HeartBeatCheck::kOwnerStricter:
      return "owner_stricter";
    case HeartBeatCheck::kOtherwise:
      return "otherwise";
  }
  return "unknown";
}

}  // namespace sluice::session
