// Prelude state machine: CONNECT negotiation, buffering until the first SEND or SUBSCRIBE,
// limits and deadlines, and the in-place CONNECT rewrite that makes the bind plan.
#include "dataplane/session/prelude.h"

#include <algorithm>
#include <cstring>

#include "base/assert.h"
#include "dataplane/session/builder.h"

namespace sluice::session {
namespace {

// accept-version: comma separated; unknown versions (a future "1.3") are ignored.
VersionSet parse_accept_version(std::string_view v) {
  VersionSet set;
  while (!v.empty()) {
    size_t comma = v.find(',');
    std::string_view tok = v.substr(0, comma);
    while (!tok.empty() && (tok.front() == ' ' || tok.front() == '\t'))
      tok.remove_prefix(1);
    while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\t'))
      tok.remove_suffix(1);
    if (auto ver = parse_version(tok)) set.add(*ver);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return set;
}

}  // namespace

std::string_view prelude_end_name(PreludeEnd e) {
  switch (e) {
    case PreludeEnd::kNone:
      return "none";
    case PreludeEnd::kDisconnect:
      return "disconnect";
    case PreludeEnd::kProtocolError:
      return "protocol_error";
    case PreludeEnd::kNotConnectFirst:
      return "not_connect_first";
    case PreludeEnd::kVersion:
      return "version";
    case PreludeEnd::kBadHeader:
      return "bad_header";
    case PreludeEnd::kTooLarge:
      return "too_large";
    case PreludeEnd::kFrameTimeout:
      return "frame_timeout";
    case PreludeEnd::kIdleTimeout:
      return "idle_timeout";
    case PreludeEnd::kHeartBeatTimeout:
      return "heartbeat_timeout";
    case PreludeEnd::kLoginRefused:
      return "login_refused";
  }
  return "unknown";
}

Prelude::Prelude(const SessionConfig& config, std::span<char> buffer, Nanos now)
    : config_(config),
      buf_(buffer.first(config.prelude_bytes_max)),
      parser_(config.frame_limits),
      last_feed_(now),
      last_frame_(now) {
  SLUICE_ASSERT(buffer.size() >= config.prelude_bytes_max);
}

Prelude::Prelude(const SessionConfig& config, std::span<char> buffer, Nanos now,
                 HeaderTable& headers)
    : config_(config),
      buf_(buffer.first(config.prelude_bytes_max)),
      parser_(config.frame_limits, headers),
      last_feed_(now),
      last_frame_(now) {
  SLUICE_ASSERT(buffer.size() >= config.prelude_bytes_max);
}

size_t Prelude::feed(std::string_view bytes, Nanos now) {
  if (state_ != State::kAwaitConnect && state_ != State::kLogin && state_ != State::kConnected) {
    return 0;
  }
  size_t n = std::min(bytes.size(), buf_.size() - fill_);
  if (n > 0) std::memcpy(buf_.data() + fill_, bytes.data(), n);
  fill_ += n;
  last_feed_ = now;
  return n;
}

PreludeEvent Prelude::close(PreludeEnd end, std::string_view message, std::string_view detail,
                            std::string_view version_header, std::string_view receipt) {
  state_ = State::kClosed;
  ErrorFrame e{message, detail, receipt, version_header};
  std::optional<std::string_view> bytes = build_error(reply_, version_, e);
  // Messages are ours and short; a detail that cannot be encoded is left out rather than lost.
  if (!bytes)
    bytes = build_error(reply_, version_, ErrorFrame{message, {}, receipt, version_header});
  SLUICE_ASSERT(bytes.has_value());
  return PreludeEvent{PreludeEvent::Kind::kClose, *bytes, end};
}

std::string_view Prelude::receipt_of(const Frame& f) {
  std::optional<std::string_view> r = f.find("receipt");
  return r && r->size() <= kReceiptIdBytesMax ? *r : std::string_view();
}

PreludeEvent Prelude::next() {
  switch (state_) {
    case State::kLogin:
      return PreludeEvent{};  // the engine has the login checked first
    case State::kBound:
    case State::kPlanTaken:
      return PreludeEvent{PreludeEvent::Kind::kBind, {}, PreludeEnd::kNone};
    case State::kClosed:
      return PreludeEvent{PreludeEvent::Kind::kClose, {}, PreludeEnd::kNone};
    case State::kAwaitConnect:
    case State::kConnected:
      break;
  }
  // Each pass consumes at least one byte or returns, so the loop ends within fill_ passes.
  for (;;) {
    ParseResult r = parser_.parse(std::string_view(buf_.data() + parsed_, fill_ - parsed_));
    switch (r.status) {
      case ParseResult::Status::kNeedMore:
        // The destination is in the headers: bind without waiting for the body, so a first SEND
        // larger than prelude_bytes_max still reaches its owner (the body streams after).
        if (state_ == State::kConnected && parser_.in_body()) {
          const Frame& head =
              parser_.head(std::string_view(buf_.data() + parsed_, fill_ - parsed_));
          if (head.command() == Command::kSend || head.command() == Command::kSubscribe) {
            return on_destination(head);
          }
        }
        if (!parser_.frame_in_progress()) {
          frame_started_ = kNever;
        } else if (frame_started_ == kNever) {
          frame_started_ = last_feed_;
        }
        if (fill_ == buf_.size()) {
          detail_.clear();
          detail_ << "no SEND or SUBSCRIBE within prelude_bytes_max (" << uint64_t(buf_.size())
                  << " bytes)";
          return close(PreludeEnd::kTooLarge, "prelude too large", detail_.view());
        }
        return PreludeEvent{};
      case ParseResult::Status::kHeartbeat:
        parsed_ += r.consumed;
        if (state_ == State::kAwaitConnect) connect_begin_ = parsed_;
        continue;
      case ParseResult::Status::kError:
        return close(PreludeEnd::kProtocolError, parse_error_message(r.error),
                     "the frame violates STOMP or a configured frame limit");
      case ParseResult::Status::kFrame:
        break;
    }
    const size_t begin = parsed_;
    parsed_ += r.consumed;
    last_frame_ = last_feed_;
    frame_started_ = kNever;
    const Frame& f = parser_.frame();
    if (state_ == State::kAwaitConnect) {
      if (f.command() == Command::kConnect || f.command() == Command::kStomp) {
        return on_connect(f, begin);
      }
      detail_.clear();
      detail_ << "the first frame must be CONNECT or STOMP, got " << command_name(f.command());
      return close(PreludeEnd::kNotConnectFirst, "expected CONNECT", detail_.view());
    }
    switch (f.command()) {
      case Command::kConnect:
      case Command::kStomp:
        return close(PreludeEnd::kProtocolError, "already connected",
                     "CONNECT sent twice on one connection", {}, receipt_of(f));
      case Command::kSend:
      case Command::kSubscribe:
        return on_destination(f);
      case Command::kDisconnect:
        return on_disconnect(f);
      case Command::kConnected:
      case Command::kMessage:
      case Command::kReceipt:
      case Command::kError:
        detail_.clear();
        detail_ << command_name(f.command()) << " is a server frame";
        return close(PreludeEnd::kProtocolError, "unexpected frame", detail_.view(), {},
                     receipt_of(f));
      default:
        // BEGIN, COMMIT, ABORT, ACK, NACK, UNSUBSCRIBE: buffered for the owner, in order.
        continue;
    }
  }
}

PreludeEvent Prelude::on_connect(const Frame& f, size_t frame_begin) {
  SLUICE_ASSERT(frame_begin == connect_begin_);
  // One pass over the headers (CONNECT is never escaped); the first of a repeated header wins.
  std::optional<std::string_view> av, hb, host, login, passcode;
  for (size_t i = 0; i < f.header_count(); ++i) {
    const Header h = f.header(i);
    std::optional<std::string_view>* slot = nullptr;
    switch (h.name.size()) {
      case 4:
        slot = h.name == "host" ? &host : nullptr;
        break;
      case 5:
        slot = h.name == "login" ? &login : nullptr;
        break;
      case 8:
        slot = h.name == "passcode" ? &passcode : nullptr;
        break;
      case 10:
        slot = h.name == "heart-beat" ? &hb : nullptr;
        break;
      case 14:
        slot = h.name == "accept-version" ? &av : nullptr;
        break;
      default:
        break;
    }
    if (slot && !*slot) *slot = h.value;
  }
  VersionSet offered;
  if (av) {
    offered = parse_accept_version(*av);
  } else {
    offered.add(Version::k1_0);  // STOMP 1.0 clients send no accept-version
  }
  std::optional<Version> agreed = (offered & config_.versions).highest();
  if (!agreed) {
    detail_.clear();
    detail_ << "this gateway supports STOMP " << config_.versions.list();
    return close(PreludeEnd::kVersion, "unsupported STOMP version", detail_.view(),
                 config_.versions.list());
  }
  std::optional<HeartBeat> client_hb = hb ? parse_heart_beat(*hb) : HeartBeat{};
  if (!client_hb) {
    return close(PreludeEnd::kBadHeader, "invalid heart-beat header",
                 "heart-beat must be two decimal numbers, e.g. heart-beat:0,0");
  }
  std::string_view vhost = config_.default_vhost;
  if (host && !host->empty()) vhost = *host;
  if (vhost.size() > vhost_.size()) {
    detail_.clear();
    detail_ << "host header longer than " << uint64_t(vhost_.size()) << " bytes";
    return close(PreludeEnd::kBadHeader, "host header too long", detail_.view());
  }
  std::memcpy(vhost_.data(), vhost.data(), vhost.size());
  key_.vhost = std::string_view(vhost_.data(), vhost.size());
  auto span_of = [&](std::optional<std::string_view> v) {
    return v ? Span{uint32_t(v->data() - buf_.data()), uint32_t(v->size()), true} : Span{};
  };
  login_ = span_of(login);
  passcode_ = span_of(passcode);
  connect_end_ = parsed_;
  version_ = *agreed;
  parser_.set_version(version_);
  client_hb_ = config_.heartbeat_max_ms == 0 ? HeartBeat{} : *client_hb;
  state_ = State::kLogin;
  if (config_.login_check == LoginCheck::kEager) {
    return PreludeEvent{PreludeEvent::Kind::kLogin, {}, PreludeEnd::kNone};
  }
  return answer_connect(config_.server, {});
}

PreludeEvent Prelude::answer_connect(std::string_view server, std::string_view session_id,
                                     bool verified) {
  SLUICE_ASSERT(state_ == State::kLogin);
  accepted_ = verified;
  // STOMP 1.0 has no heart-beats: the gateway keeps none.
  told_hb_ = version_ == Version::k1_0 ? HeartBeat{}
                                       : answer_heart_beat(client_hb_, config_.heartbeat_min_ms,
                                                           config_.heartbeat_max_ms);
  state_ = State::kConnected;
  std::optional<std::string_view> reply =
      build_connected(reply_, version_, server, told_hb_, session_id);
  if (!reply) reply = build_connected(reply_, version_, config_.server, told_hb_, {});
  SLUICE_ASSERT(reply.has_value());
  return PreludeEvent{PreludeEvent::Kind::kReply, *reply, PreludeEnd::kNone};
}

void Prelude::login_accepted(HeartBeat node_answer) {
  SLUICE_ASSERT(state_ == State::kLogin);
  told_hb_ = node_answer;
  accepted_ = true;
  state_ = State::kConnected;
}

PreludeEvent Prelude::on_destination(const Frame& f) {
  QueueKey key;
  DestinationError e = destination_key(f, key_.vhost, config_.owned_prefixes, destination_, &key);
  if (e != DestinationError::kNone) {
    detail_.clear();
    detail_ << command_name(f.command()) << " destination: " << destination_error_message(e)
            << " (at most " << uint64_t(kDestinationBytesMax) << " bytes)";
    return close(PreludeEnd::kBadHeader, destination_error_message(e), detail_.view(), {},
                 receipt_of(f));
  }
  key_ = key;
  bind_command_ = f.command();
  state_ = State::kBound;
  return PreludeEvent{PreludeEvent::Kind::kBind, {}, PreludeEnd::kNone};
}

PreludeEvent Prelude::on_disconnect(const Frame& f) {
  state_ = State::kClosed;
  std::optional<std::string_view> receipt = f.find("receipt");
  // A RECEIPT says the session was served: only for a login some node accepted (or that the
  // gateway, with login_check deferred, never checks).
  const bool served = accepted_ || config_.login_check == LoginCheck::kDeferred;
  if (!receipt || !served) {
    return PreludeEvent{PreludeEvent::Kind::kClose, {}, PreludeEnd::kDisconnect};
  }
  if (receipt->size() > kReceiptIdBytesMax) {
    detail_.clear();
    detail_ << "receipt header longer than " << uint64_t(kReceiptIdBytesMax) << " bytes";
    return close(PreludeEnd::kBadHeader, "receipt header too long", detail_.view());
  }
  std::optional<std::string_view> bytes = build_receipt_raw(reply_, version_, *receipt);
  SLUICE_ASSERT(bytes.has_value());
  return PreludeEvent{PreludeEvent::Kind::kClose, *bytes, PreludeEnd::kDisconnect};
}

PreludeEvent Prelude::on_time(Nanos now) {
  if (state_ != State::kAwaitConnect && state_ != State::kConnected) return PreludeEvent{};
  const Nanos heart_beat_grace = heart_beat_grace_ns();
  if (heart_beat_grace != 0 && now - last_feed_ >= heart_beat_grace) {
    detail_.clear();
    detail_ << "nothing received for " << uint64_t(heart_beat_grace / kNanosPerMilli) << " ms, "
            << uint64_t(kHeartBeatGraceFactor) << " times the negotiated heart-beat interval";
    return close(PreludeEnd::kHeartBeatTimeout, "heart-beat timeout", detail_.view());
  }
  if (frame_started_ != kNever && now - frame_started_ >= config_.frame_timeout_ns) {
    detail_.clear();
    detail_ << "a frame did not complete within frame_timeout ("
            << uint64_t(config_.frame_timeout_ns / kNanosPerMilli) << " ms)";
    return close(PreludeEnd::kFrameTimeout, "frame timeout", detail_.view());
  }
  if (now - last_frame_ >= config_.prelude_idle_timeout_ns) {
    detail_.clear();
    detail_ << "no SEND or SUBSCRIBE within prelude_idle_timeout ("
            << uint64_t(config_.prelude_idle_timeout_ns / kNanosPerMilli) << " ms)";
    return close(PreludeEnd::kIdleTimeout, "prelude idle timeout", detail_.view());
  }
  return PreludeEvent{};
}

Nanos Prelude::heart_beat_grace_ns() const {
  if (state_ != State::kConnected) return 0;
  return Nanos(heart_beat_intervals().client_to_server_ms) * kNanosPerMilli * kHeartBeatGraceFactor;
}

Nanos Prelude::deadline() const {
  if (state_ != State::kAwaitConnect && state_ != State::kConnected) return kNever;
  Nanos idle = last_frame_ + config_.prelude_idle_timeout_ns;
  if (const Nanos grace = heart_beat_grace_ns(); grace != 0) {
    idle = std::min(idle, last_feed_ + grace);
  }
  if (frame_started_ == kNever) return idle;
  return std::min(idle, frame_started_ + config_.frame_timeout_ns);
}

std::optional<std::string_view> Prelude::connect_value(Span s) const {
  if (!s.present || state_ == State::kAwaitConnect) return std::nullopt;
  return std::string_view(buf_.data() + s.off, s.len);
}

std::string_view Prelude::after_connect() const {
  SLUICE_ASSERT(state_ == State::kBound);
  return std::string_view(buf_.data() + connect_end_, fill_ - connect_end_);
}

std::string_view Prelude::connect_frame() {
  SLUICE_ASSERT(state_ != State::kAwaitConnect && state_ != State::kClosed);
  if (connect_rewritten_ == 0) rewrite_connect();
  return std::string_view(buf_.data(), connect_rewritten_);
}

BindPlan Prelude::take_bind_plan() {
  SLUICE_ASSERT(state_ == State::kBound);
  state_ = State::kPlanTaken;
  BindPlan plan;
  plan.connect = connect_frame();
  plan.rest = std::string_view(buf_.data() + connect_end_, fill_ - connect_end_);
  plan.connect_bytes_removed = uint32_t(connect_end_ - connect_rewritten_);
  return plan;
}

void Prelude::rewrite_connect() {
  // The CONNECT is known to be well formed: LF-terminated lines (optional CR), a blank line,
  // the NUL. Rewrites only shrink lines, so writing at w <= r is safe; the login and passcode
  // spans move with their lines.
  char* b = buf_.data();
  size_t r = connect_begin_;
  size_t w = 0;
  const size_t end = connect_end_;
  auto copy = [&](size_t from, size_t n) {
    for (Span* sp : {&login_, &passcode_}) {
      if (sp->present && sp->off >= from && sp->off < from + n) sp->off -= uint32_t(from - w);
    }
    std::memmove(b + w, b + from, n);
    w += n;
  };
  auto put = [&](std::string_view s) {
    std::memcpy(b + w, s.data(), s.size());
    w += s.size();
  };
  size_t lf = size_t(static_cast<char*>(std::memchr(b + r, '\n', end - r)) - b);
  copy(r, lf + 1 - r);  // command line
  r = lf + 1;
  bool heart_beat_done = false;
  bool accept_version_done = false;
  for (;;) {
    lf = size_t(static_cast<char*>(std::memchr(b + r, '\n', end - r)) - b);
    const bool crlf = lf > r && b[lf - 1] == '\r';
    const std::string_view line(b + r, lf - r - (crlf ? 1 : 0));
    const std::string_view eol = crlf ? "\r\n" : "\n";
    if (line.empty()) break;
    const std::string_view name = line.substr(0, line.find(':'));
    if (name == "heart-beat" && config_.heartbeat_max_ms == 0) {
      // Heart-beats off: the owner is told none, as the client was.
      if (!heart_beat_done) {
        put("heart-beat:0,0");
        put(eol);
        heart_beat_done = true;
      }
    } else if (name == "accept-version") {
      // Repeats are dropped so the owner cannot read a different first value.
      if (!accept_version_done) {
        put("accept-version:");
        put(version_name(version_));
        put(eol);
        accept_version_done = true;
      }
    } else {
      copy(r, lf + 1 - r);
    }
    r = lf + 1;
  }
  copy(r, end - r);  // blank line and NUL
  connect_rewritten_ = w;
}

}  // namespace sluice::session
