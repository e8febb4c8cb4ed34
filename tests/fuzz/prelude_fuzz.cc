// libFuzzer target for a client session from accept to bind: the prelude fed in chunks with fake
// time, then the bind plan and the owner's greeting, or, on a second run, the spill session.
//
// Input: byte 0 chooses the options, byte 1 the owner's answer, the rest is the client stream.
//   byte 0 bits 0-1  chunks: 0 = all at once, 1 = single bytes, 2 = 1..16 bytes, 3 = 1..512
//          bit  2    small config (prelude_bytes_max 512, small frame limits)
//          bits 3-4  versions: 0 = all, 1 = 1.2, 2 = 1.0 and 1.1, 3 = 1.1 and 1.2
//          bit  5    fake time advances between chunks and on_time() is called
//          bits 6-7  spill durability: 0 = at once, 1 = when the session waits, 2 = the second
//                    append fails, 3 = at once and request_end() after the first append
//   byte 1           0: the owner answers CONNECTED for the agreed version; n > 0: the owner's
//                    answer is the last n bytes of the client stream (bytes may serve both)
// Seeds in corpus/prelude start with 0x00 0x00 (all at once, all versions, the owner answers
// CONNECTED); those named *_chunked_* and *_owner_* set other options or an owner's answer.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dataplane/session/session.h"
#include "tests/fuzz/fuzz_rng.h"

namespace {

namespace ss = sluice::session;

constexpr size_t kStreamBytesMax = 128u << 10;
// Every loop below also ends by progress through the input; these only catch a livelock.
constexpr size_t kStepsMax = 1u << 20;
constexpr size_t kRepliesPerNextMax = 4;

using sluice::fuzz::Rng;

enum class Durability : uint8_t { kAtOnce, kWhenWaiting, kFailSecond, kRequestEnd };

struct Options {
  unsigned chunks;
  bool small;
  unsigned versions;
  bool timers;
  Durability durability;
};

Options options_from(uint8_t b) {
  return Options{b & 3u, (b & 4u) != 0, (b >> 3) & 3u, (b & 32u) != 0, Durability(b >> 6)};
}

// `eager`: the login checked by a node (kLogin) and heart-beats on, as sluiced runs by default.
const ss::SessionConfig& config_for(const Options& o, bool eager) {
  static const std::array<ss::SessionConfig, 16> configs = [] {
    std::array<ss::SessionConfig, 16> c;
    for (size_t i = 0; i < c.size(); ++i) {
      ss::VersionSet v;
      switch (i & 3u) {
        case 0:
          v = ss::VersionSet::all();
          break;
        case 1:
          v.add(ss::Version::k1_2);
          break;
        case 2:
          v.add(ss::Version::k1_0);
          v.add(ss::Version::k1_1);
          break;
        default:
          v.add(ss::Version::k1_1);
          v.add(ss::Version::k1_2);
          break;
      }
      c[i].versions = v;
      if (i & 4u) {
        c[i].prelude_bytes_max = 256;
        c[i].frame_limits.frame_bytes_max = 256;
        c[i].frame_limits.header_count_max = 8;
        c[i].frame_limits.header_line_bytes_max = 64;
        c[i].frame_limits.body_bytes_max = 128;
      }
      if (i & 8u) {
        c[i].login_check = ss::LoginCheck::kEager;
        c[i].heartbeat_min_ms = 100;
        c[i].heartbeat_max_ms = 60'000;
      }
      if (!c[i].validate()) __builtin_trap();
    }
    return c;
  }();
  return configs[(eager ? 8u : 0u) | (o.small ? 4u : 0u) | o.versions];
}

// Small spill limits so that the pending-receipt, transaction-count and transaction-size limits
// are reached; the spill buffer must still hold everything a prelude buffers.
constexpr ss::SpillLimits kSpillLimits{4, 3, 1024};

size_t chunk_size(const Options& o, Rng& rng, size_t left) {
  switch (o.chunks) {
    case 0:
      return left;
    case 1:
      return std::min<size_t>(left, 1);
    case 2:
      return std::min(left, 1 + rng.below(16));
    default:
      return std::min(left, 1 + rng.below(512));
  }
}

// Parses bytes that the session core built (CONNECTED, RECEIPT, ERROR) and checks that they are
// whole frames of the expected commands. Returns how many.
size_t expect_frames(std::string_view bytes, ss::Version v, std::initializer_list<ss::Command> ok) {
  ss::Parser p(ss::FrameLimits{});
  p.set_version(v);
  size_t frames = 0;
  while (!bytes.empty()) {
    ss::ParseResult r = p.parse(bytes);
    if (r.status != ss::ParseResult::Status::kFrame) __builtin_trap();
    bool allowed = false;
    for (ss::Command c : ok)
      allowed |= p.frame().command() == c;
    if (!allowed) __builtin_trap();
    bytes.remove_prefix(r.consumed);
    ++frames;
  }
  return frames;
}

struct Session {
  std::string_view stream;
  Options options;
  uint8_t owner_tail;
};

// Drives one prelude over the client stream. Returns the prelude when it ends in kBind (with
// `offered`: how many stream bytes it took), nothing when it closed or the input ran out.
class PreludeRun {
 public:
  PreludeRun(const Session& s, const ss::SessionConfig& config)
      : s_(s),
        config_(config),
        buffer_(config.prelude_bytes_max),
        prelude_(config, buffer_, 0),
        rng_(s.stream) {}

  // True when the prelude ended in kBind.
  bool run() {
    for (size_t step = 0; step < kStepsMax; ++step) {
      size_t taken = 0;
      if (offered_ < s_.stream.size()) {
        const size_t want = chunk_size(s_.options, rng_, s_.stream.size() - offered_);
        taken = prelude_.feed(s_.stream.substr(offered_, want), now_);
        offered_ += taken;
        // Fewer bytes than offered only when the buffer is full.
        if (taken < want && prelude_.buffered_bytes() != config_.prelude_bytes_max) {
          __builtin_trap();
        }
      }
      ss::PreludeEvent ev = drain();
      if (ev.kind == ss::PreludeEvent::Kind::kBind) return true;
      if (ev.kind == ss::PreludeEvent::Kind::kClose) return closed(ev);
      // A full buffer that still needs more would never end: it must have closed.
      if (prelude_.buffered_bytes() == config_.prelude_bytes_max) __builtin_trap();
      if (s_.options.timers) {
        ev = tick();
        if (ev.kind == ss::PreludeEvent::Kind::kClose) return closed(ev);
      }
      if (taken == 0 && offered_ == s_.stream.size()) return false;
    }
    __builtin_trap();
  }

  ss::Prelude& prelude() { return prelude_; }
  std::span<char> buffer() { return buffer_; }
  // The buffer as it was before a login check rewrote the CONNECT (empty without one).
  const std::string& before_login() const { return before_login_; }
  size_t offered() const { return offered_; }

 private:
  ss::PreludeEvent drain() {
    for (size_t i = 0; i <= kRepliesPerNextMax; ++i) {
      ss::PreludeEvent ev = prelude_.next();
      if (ev.kind == ss::PreludeEvent::Kind::kLogin) {
        if (config_.login_check != ss::LoginCheck::kEager) __builtin_trap();
        // The node's CONNECT is the replay's (rewritten in place: keep what came first); a
        // node accepts it or the gateway answers.
        before_login_.assign(buffer_.data(), prelude_.buffered_bytes());
        if (prelude_.connect_frame().empty()) __builtin_trap();
        if (rng_.below(2) == 0) {
          prelude_.login_accepted(
              ss::HeartBeat{uint32_t(rng_.below(3000)), uint32_t(rng_.below(3000))});
          if (!prelude_.accepted()) __builtin_trap();
          continue;
        }
        ev = prelude_.answer_connect("node/1", "s-1", rng_.below(2) == 0);
        if (ev.kind != ss::PreludeEvent::Kind::kReply) __builtin_trap();
      }
      if (ev.kind != ss::PreludeEvent::Kind::kReply) return ev;
      // The only reply before a bind is CONNECTED in the agreed version.
      if (expect_frames(ev.to_client, prelude_.version(), {ss::Command::kConnected}) != 1) {
        __builtin_trap();
      }
    }
    __builtin_trap();
  }

  // Advances fake time, mostly a little, sometimes past the frame or idle deadline.
  ss::PreludeEvent tick() {
    const size_t r = rng_.below(64);
    if (r == 0) {
      now_ += config_.prelude_idle_timeout_ns;
    } else if (r <= 2) {
      now_ += config_.frame_timeout_ns;
    } else {
      now_ += ss::Nanos(rng_.below(1000)) * ss::kNanosPerMilli;
    }
    const ss::Nanos deadline = prelude_.deadline();
    ss::PreludeEvent ev = prelude_.on_time(now_);
    // on_time closes exactly when the deadline has passed.
    if ((ev.kind == ss::PreludeEvent::Kind::kClose) != (now_ >= deadline)) __builtin_trap();
    if (ev.kind == ss::PreludeEvent::Kind::kClose && ev.end != ss::PreludeEnd::kFrameTimeout &&
        ev.end != ss::PreludeEnd::kIdleTimeout && ev.end != ss::PreludeEnd::kHeartBeatTimeout) {
      __builtin_trap();
    }
    return ev;
  }

  bool closed(const ss::PreludeEvent& ev) {
    if (ev.end == ss::PreludeEnd::kNone) __builtin_trap();
    if (!ev.to_client.empty() && expect_frames(ev.to_client, prelude_.version(),
                                               {ss::Command::kError, ss::Command::kReceipt}) != 1) {
      __builtin_trap();
    }
    // Closed for good: no more bytes are taken.
    if (prelude_.feed("\n", now_) != 0) __builtin_trap();
    return false;
  }

  const Session& s_;
  const ss::SessionConfig& config_;
  std::string before_login_;
  std::vector<char> buffer_;
  ss::Prelude prelude_;
  Rng rng_;
  size_t offered_ = 0;
  ss::Nanos now_ = 0;
};

// The first frame of `bytes` after any heart-beats, parsed as the prelude did (CONNECT headers
// are never escaped). Sets `begin` to the frame's offset.
std::optional<std::string> first_frame(std::string_view bytes, const ss::FrameLimits& limits,
                                       size_t* begin) {
  ss::Parser p(limits);
  size_t at = 0;
  for (;;) {
    ss::ParseResult r = p.parse(bytes.substr(at));
    if (r.status == ss::ParseResult::Status::kHeartbeat) {
      at += r.consumed;
      continue;
    }
    if (r.status != ss::ParseResult::Status::kFrame) return std::nullopt;
    *begin = at;
    return std::string(p.frame().bytes());
  }
}

struct HeaderList {
  ss::Command command = ss::Command::kConnect;
  std::vector<std::pair<std::string, std::string>> kept;  // neither heart-beat nor accept-version
  std::vector<std::string> heart_beats;
  std::vector<std::string> accept_versions;
  size_t body_size = 0;
};

HeaderList headers_of(std::string_view frame_bytes, const ss::FrameLimits& limits, ss::Version v) {
  ss::Parser p(limits);
  p.set_version(v);
  ss::ParseResult r = p.parse(frame_bytes);
  // Exactly one frame, no heart-beat before it, nothing after it.
  if (r.status != ss::ParseResult::Status::kFrame || r.consumed != frame_bytes.size()) {
    __builtin_trap();
  }
  const ss::Frame& f = p.frame();
  if (f.escaped()) __builtin_trap();
  HeaderList h;
  h.command = f.command();
  h.body_size = f.body().size();
  for (size_t i = 0; i < f.header_count(); ++i) {
    ss::Header hd = f.header(i);
    if (hd.name == "heart-beat") {
      h.heart_beats.emplace_back(hd.value);
    } else if (hd.name == "accept-version") {
      h.accept_versions.emplace_back(hd.value);
    } else {
      h.kept.emplace_back(hd.name, hd.value);
    }
  }
  return h;
}

// The owner's greeting, parsed from the whole answer and from growing prefixes of it: the
// results must agree and describe bytes of the answer.
void check_greeting(const Session& s, const ss::SessionConfig& config, ss::Version agreed) {
  std::array<char, 256> connected_buf;
  std::string answer;
  const bool well_behaved = s.owner_tail == 0;
  if (well_behaved) {
    std::optional<std::string_view> c = ss::build_connected(connected_buf, agreed, "owner");
    if (!c) __builtin_trap();
    answer = *c;
  } else {
    answer = s.stream.substr(s.stream.size() - std::min<size_t>(s.owner_tail, s.stream.size()));
  }
  ss::OwnerGreeting whole(config.frame_limits, agreed);
  const ss::GreetingResult w = whole.on_bytes(answer);
  if (well_behaved && (w.kind != ss::GreetingResult::Kind::kStrip || w.consumed != answer.size())) {
    __builtin_trap();
  }

  // The engine accumulates the owner's bytes; each call sees a copy of exactly the bytes so far,
  // so ASan reports a read past them.
  ss::OwnerGreeting pieces(config.frame_limits, agreed);
  Rng rng(answer);
  std::unique_ptr<char[]> acc;
  ss::GreetingResult g;
  size_t have = 0;
  while (have < answer.size()) {
    have += chunk_size(s.options, rng, answer.size() - have);
    acc.reset(new char[have]);
    std::memcpy(acc.get(), answer.data(), have);
    g = pieces.on_bytes(std::string_view(acc.get(), have));
    if (g.kind != ss::GreetingResult::Kind::kNeedMore) break;
  }

  if (g.kind != w.kind || g.consumed != w.consumed || g.to_client != w.to_client) {
    __builtin_trap();
  }
  switch (w.kind) {
    case ss::GreetingResult::Kind::kNeedMore:
      break;
    case ss::GreetingResult::Kind::kStrip:
      if (w.consumed == 0 || w.consumed > answer.size() || answer[w.consumed - 1] != '\0') {
        __builtin_trap();
      }
      break;
    case ss::GreetingResult::Kind::kForwardError:
      // The owner's ERROR, byte for byte, from the answer.
      if (w.to_client.data() < answer.data() ||
          w.to_client.data() + w.to_client.size() != answer.data() + w.consumed) {
        __builtin_trap();
      }
      expect_frames(w.to_client, agreed, {ss::Command::kError});
      break;
    case ss::GreetingResult::Kind::kProtocolError:
      if (w.reason.empty() || expect_frames(w.to_client, agreed, {ss::Command::kError}) != 1) {
        __builtin_trap();
      }
      break;
  }
}

// After kBind: the key, the CONNECT rewrite, and the owner's greeting.
void check_bind(const Session& s, const ss::SessionConfig& config, PreludeRun& run) {
  ss::Prelude& p = run.prelude();
  const ss::QueueKey& key = p.key();
  if (key.vhost.empty() || key.vhost.size() > ss::kVhostBytesMax) __builtin_trap();
  if (!key.default_route && key.queue.empty()) __builtin_trap();
  if (p.bind_command() != ss::Command::kSend && p.bind_command() != ss::Command::kSubscribe) {
    __builtin_trap();
  }

  std::span<char> buf = run.buffer();
  const std::string rest(p.after_connect());
  const size_t connect_end = size_t(p.after_connect().data() - buf.data());
  size_t connect_begin = 0;
  const std::string_view as_sent =
      run.before_login().empty() ? std::string_view(buf.data(), connect_end)
                                 : std::string_view(run.before_login()).substr(0, connect_end);
  std::optional<std::string> original = first_frame(as_sent, config.frame_limits, &connect_begin);
  if (!original || connect_begin + original->size() != connect_end) __builtin_trap();
  const HeaderList before = headers_of(*original, config.frame_limits, p.version());

  const std::optional<std::string> login(p.login()), passcode(p.passcode());
  const ss::BindPlan plan = p.take_bind_plan();
  // The rewrite moves the credentials with their lines: they read as the client sent them.
  if (std::optional<std::string>(p.login()) != login) __builtin_trap();
  if (std::optional<std::string>(p.passcode()) != passcode) __builtin_trap();
  auto sent = [&](std::string_view name) -> std::optional<std::string> {
    for (const auto& [n, v] : before.kept)
      if (n == name) return v;
    return std::nullopt;
  };
  if (login != sent("login") || passcode != sent("passcode")) __builtin_trap();
  if (plan.connect.data() != buf.data() || plan.connect.size() > original->size()) {
    __builtin_trap();
  }
  if (plan.rest.data() != buf.data() + connect_end || plan.rest != rest) __builtin_trap();
  if (plan.connect_bytes_removed != connect_end - plan.connect.size()) __builtin_trap();

  // One CONNECT or STOMP: heart-beat forced to 0,0 when heart-beats are off (else kept as sent)
  // and accept-version narrowed to the agreed version (each at most once, present when the
  // client's was), every other header unchanged.
  const HeaderList after = headers_of(plan.connect, config.frame_limits, p.version());
  if (after.command != before.command || after.kept != before.kept || after.body_size != 0) {
    __builtin_trap();
  }
  if (config.heartbeat_max_ms == 0) {
    if (after.heart_beats.size() != (before.heart_beats.empty() ? 0u : 1u)) __builtin_trap();
    if (!after.heart_beats.empty() && after.heart_beats[0] != "0,0") __builtin_trap();
  } else if (after.heart_beats != before.heart_beats) {
    __builtin_trap();
  }
  if (after.accept_versions.size() != (before.accept_versions.empty() ? 0u : 1u)) {
    __builtin_trap();
  }
  if (!after.accept_versions.empty() && after.accept_versions[0] != ss::version_name(p.version())) {
    __builtin_trap();
  }

  check_greeting(s, config, p.version());
}

// Accepts every login: at once, or (`later`) after the session has waited for the answer.
class AcceptAll final : public ss::SpillHooks {
 public:
  ss::AuthAnswer authenticate(std::optional<std::string_view>, std::optional<std::string_view>,
                              uint64_t) override {
    asked = true;
    return later ? ss::AuthAnswer::kPending : ss::AuthAnswer::kAccepted;
  }
  bool authorize(std::string_view, const ss::QueueKey&) override { return true; }
  bool later = false;
  bool asked = false;
};

// After kBind on the second run: the owner is unreachable, the gateway spills the session.
void run_spill(const Session& s, const ss::SessionConfig& config, PreludeRun& run) {
  AcceptAll hooks;
  hooks.later = (s.stream.size() & 1) != 0;  // half the inputs: the login answered later
  const size_t bytes = ss::spill_buffer_bytes(config, kSpillLimits.txn_bytes_max);
  std::unique_ptr<char[]> buf(new char[bytes]);
  ss::SpillSession spill(config, kSpillLimits, std::span<char>(buf.get(), bytes), hooks);
  spill.start(run.prelude(), 1);
  bool answered = false;

  const Durability durability = s.options.durability;
  Rng rng(s.stream.substr(run.offered()));
  size_t offered = run.offered();
  uint64_t token = 0;
  uint64_t failed = 0;      // 0: none; else the token whose append failed
  int64_t batch_left = -1;  // appends still expected in the open batch; -1: no batch
  bool end_requested = false;
  // Durability is reported for tokens below a failed one only, and never mid-batch.
  auto durable_limit = [&] { return failed ? failed - 1 : spill.last_token(); };
  auto make_durable = [&] {
    const uint64_t t = durable_limit();
    if (batch_left < 0 && spill.durable_token() < t) {
      spill.on_durable(t);
      return true;
    }
    return false;
  };

  for (size_t step = 0; step < kStepsMax; ++step) {
    if (spill.receipts_pending() > kSpillLimits.receipts_pending_max) __builtin_trap();
    ss::SpillEvent ev = spill.next();
    switch (ev.kind) {
      case ss::SpillEvent::Kind::kNeedMore: {
        if (batch_left >= 0) __builtin_trap();  // a batch is emitted without input
        if (offered == s.stream.size()) {
          if (make_durable()) continue;
          if (durability == Durability::kRequestEnd && !end_requested) {
            end_requested = true;
            spill.request_end();
            continue;
          }
          return;  // the client has sent everything and nothing is left to do
        }
        const size_t want = chunk_size(s.options, rng, s.stream.size() - offered);
        const size_t taken = spill.feed(s.stream.substr(offered, want));
        // Asking for more while taking nothing would stall the connection for good.
        if (taken == 0) __builtin_trap();
        offered += taken;
        break;
      }
      case ss::SpillEvent::Kind::kWaitDurable:
        // Waiting when everything that can become durable is would stall for good.
        if (!make_durable()) __builtin_trap();
        break;
      case ss::SpillEvent::Kind::kWaitLogin:
        // Only a login left pending is waited for, and only once.
        if (!hooks.later || !hooks.asked || answered) __builtin_trap();
        answered = true;
        spill.on_login_checked(true);
        break;
      case ss::SpillEvent::Kind::kReply:
        if (ev.to_client.empty() ||
            expect_frames(ev.to_client, spill.version(), {ss::Command::kReceipt}) == 0) {
          __builtin_trap();
        }
        break;
      case ss::SpillEvent::Kind::kAppend:
        if (ev.frame == nullptr || ev.frame->command() != ss::Command::kSend) __builtin_trap();
        if (hooks.later && !answered) __builtin_trap();  // nothing before the login is accepted
        if (ev.token != ++token || ev.token != spill.last_token()) __builtin_trap();
        if (!ev.key.default_route && ev.key.queue.empty()) __builtin_trap();
        if (batch_left == 0) __builtin_trap();
        if (batch_left > 0) --batch_left;
        if (durability == Durability::kFailSecond && ev.token == 2 && failed == 0) {
          failed = ev.token;
          spill.on_append_failed(ev.token, "spill full");
        } else if (durability == Durability::kAtOnce || durability == Durability::kRequestEnd) {
          make_durable();
        }
        if (durability == Durability::kRequestEnd && !end_requested) {
          end_requested = true;
          spill.request_end();
        }
        break;
      case ss::SpillEvent::Kind::kBatchBegin:
        if (batch_left != -1 || ev.batch_count == 0) __builtin_trap();
        batch_left = ev.batch_count;
        break;
      case ss::SpillEvent::Kind::kBatchEnd:
        if (batch_left != 0 || ev.token != spill.last_token()) __builtin_trap();
        batch_left = -1;
        if (durability != Durability::kWhenWaiting) make_durable();
        break;
      case ss::SpillEvent::Kind::kClose:
        if (ev.end == ss::SpillEnd::kNone || batch_left >= 0) __builtin_trap();
        if (!ev.to_client.empty() &&
            expect_frames(ev.to_client, spill.version(),
                          {ss::Command::kError, ss::Command::kReceipt}) != 1) {
          __builtin_trap();
        }
        return;
    }
  }
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size - 2 > kStreamBytesMax) return 0;
  const Session s{std::string_view(reinterpret_cast<const char*>(data) + 2, size - 2),
                  options_from(data[0]), data[1]};
  const ss::SessionConfig& config = config_for(s.options, (data[1] & 0x80u) != 0);

  // Owner reachable: replay the rewritten CONNECT and read the owner's greeting.
  PreludeRun first(s, config);
  const bool bound = first.run();
  if (bound) check_bind(s, config, first);

  // Owner unreachable: the same session, spilled. The prelude must behave the same again.
  PreludeRun second(s, config);
  if (second.run() != bound) __builtin_trap();
  if (bound) {
    if (second.offered() != first.offered()) __builtin_trap();
    run_spill(s, config, second);
  }
  return 0;
}
