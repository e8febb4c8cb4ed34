// The prelude: the gateway speaks the server side of STOMP until the session names a destination
// (DESIGN section 3). Sans-I/O: bytes and the time go in, events come out; the engine sends,
// connects and arms timers. The bytes live in a buffer the engine sized at start.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "dataplane/session/config.h"
#include "dataplane/session/heart_beat.h"
#include "dataplane/session/parser.h"
#include "dataplane/session/queue_key.h"
#include "dataplane/session/stomp.h"
#include "dataplane/session/text.h"

namespace sluice::session {

// Why a prelude ended without a destination. Counted by the engine, one metric each.
enum class PreludeEnd : uint8_t {
  kNone,
  kDisconnect,        // DISCONNECT before a destination (RECEIPT sent if asked): not an error
  kProtocolError,     // a frame that cannot be parsed, or a frame out of place
  kNotConnectFirst,   // first frame not CONNECT/STOMP
  kVersion,           // no common STOMP version
  kBadHeader,         // CONNECT/SEND/SUBSCRIBE header missing, malformed or too long
  kTooLarge,          // prelude_bytes_max reached before a destination
  kFrameTimeout,      // a started frame did not complete within frame_timeout
  kIdleTimeout,       // no complete frame for prelude_idle_timeout
  kHeartBeatTimeout,  // nothing from the client for kHeartBeatGraceFactor of its interval
  kLoginRefused,      // the node checking the login answered ERROR (set by the engine)
};
inline constexpr size_t kPreludeEndCount = 11;
std::string_view prelude_end_name(PreludeEnd e);

struct PreludeEvent {
  enum class Kind : uint8_t {
    kNeedMore,  // feed more bytes (or call on_time at deadline())
    kReply,     // send `to_client`, then call next() again
    kLogin,     // login_check eager: have the CONNECT (connect_frame()) checked by a node, then
                // login_accepted() or answer_connect(); next() waits until then
    kBind,      // destination known: key(), bind_command(), then take_bind_plan() or spill
    kClose,     // send `to_client` (may be empty), then close; `end` says why
  };
  Kind kind = Kind::kNeedMore;
  std::string_view to_client;
  PreludeEnd end = PreludeEnd::kNone;
};

// What to send to the owner once connected: `connect` (the client's CONNECT with accept-version
// narrowed to the agreed version, and heart-beat as the client sent it, or 0,0 when heart-beats
// are off), then `rest` (every byte after the CONNECT, unchanged). The DPDK engine shifts
// sequence numbers by `connect_bytes_removed`.
struct BindPlan {
  std::string_view connect;
  std::string_view rest;
  uint32_t connect_bytes_removed = 0;
};

class Prelude {
 public:
  // `buffer` must hold config.prelude_bytes_max bytes and outlive the session. `now`: accept time.
  Prelude(const SessionConfig& config, std::span<char> buffer, Nanos now);
  // The same with the parser's header table lent by the caller (config.frame_limits'
  // header_count_max at least, outliving the prelude): no allocation at all.
  Prelude(const SessionConfig& config, std::span<char> buffer, Nanos now, HeaderTable& headers);

  // Copies client bytes into the buffer; returns how many were taken. Fewer than offered means
  // the buffer is full: keep the rest (it belongs to the spliced stream if a bind follows).
  size_t feed(std::string_view bytes, Nanos now);
  // Next event. kReply may be followed by more events: call until kNeedMore, kBind or kClose.
  PreludeEvent next();
  // Deadline check; kClose with ERROR when a deadline has passed, else kNeedMore.
  PreludeEvent on_time(Nanos now);
  // When on_time must next be called: frame deadline while a frame is in progress, else the
  // idle deadline.
  Nanos deadline() const;

  // After kLogin: the CONNECTED a node sent for connect_frame() reached the client; its
  // heart-beat header (absent: 0,0) is what the client was told.
  void login_accepted(HeartBeat node_answer);
  // After kLogin when no node can check the login (or a verified login was cached): the
  // gateway's own CONNECTED, with `server` and, when not empty, `session`. kReply. `verified`:
  // a node accepted this login before (the login cache), so the session counts as accepted.
  PreludeEvent answer_connect(std::string_view server, std::string_view session_id,
                              bool verified = false);
  // True once a node accepted this session's login (its CONNECTED reached the client).
  bool accepted() const { return accepted_; }
  // The CONNECT as the owner gets it (see BindPlan), rewritten in place once; from kLogin on.
  std::string_view connect_frame();

  // Heart-beats: the client's header, what it was told, and the intervals that follow.
  HeartBeat client_heart_beat() const { return client_hb_; }
  HeartBeat told_heart_beat() const { return told_hb_; }
  HeartBeatIntervals heart_beat_intervals() const { return negotiate(client_hb_, told_hb_); }

  // After kBind:
  const QueueKey& key() const { return key_; }
  Command bind_command() const { return bind_command_; }
  Version version() const { return version_; }
  // The client's CONNECT credentials, from kLogin on.
  std::optional<std::string_view> login() const { return connect_value(login_); }
  std::optional<std::string_view> passcode() const { return connect_value(passcode_); }
  // Every buffered byte after the CONNECT frame (the spill session re-reads them).
  std::string_view after_connect() const;
  // Rewrites the CONNECT in place (it never grows) and returns the replay. Once only.
  BindPlan take_bind_plan();
  size_t buffered_bytes() const { return fill_; }

 private:
  PreludeEvent close(PreludeEnd end, std::string_view message, std::string_view detail,
                     std::string_view version_header = {}, std::string_view receipt = {});
  // `f`'s raw receipt header when it fits an ERROR's receipt-id, else empty.
  static std::string_view receipt_of(const Frame& f);
  void rewrite_connect();
  // How long the client may stay silent before the session ends (0: no heart-beats from it).
  Nanos heart_beat_grace_ns() const;
  PreludeEvent on_connect(const Frame& f, size_t frame_begin);
  PreludeEvent on_destination(const Frame& f);
  PreludeEvent on_disconnect(const Frame& f);

  enum class State : uint8_t { kAwaitConnect, kLogin, kConnected, kBound, kPlanTaken, kClosed };
  struct Span {
    uint32_t off = 0;
    uint32_t len = 0;
    bool present = false;
  };
  std::optional<std::string_view> connect_value(Span s) const;

  const SessionConfig& config_;
  std::span<char> buf_;
  Parser parser_;
  State state_ = State::kAwaitConnect;
  Version version_ = Version::k1_0;
  size_t fill_ = 0;
  size_t parsed_ = 0;
  size_t connect_begin_ = 0;
  size_t connect_end_ = 0;
  size_t connect_rewritten_ = 0;  // bytes of the rewritten CONNECT; 0 until rewrite_connect()
  HeartBeat client_hb_;
  HeartBeat told_hb_;
  bool accepted_ = false;
  Nanos last_feed_ = 0;
  Nanos last_frame_ = 0;
  Nanos frame_started_ = kNever;
  Command bind_command_ = Command::kSend;
  Span login_;
  Span passcode_;
  QueueKey key_;
  std::array<char, kVhostBytesMax> vhost_;              // written before read
  std::array<char, kDestinationBytesMax> destination_;  // written before read
  std::array<char, 1024> reply_;                        // written before read
  detail::Text<256> detail_;
};

}  // namespace sluice::session
