// The drainer's side of one STOMP connection to a queue's owner, sans I/O: CONNECT with the
// gateway's own credentials and the backlog's vhost, then SENDs pipelined with receipts in a
// bounded window, each RECEIPT matched to its SEND (DESIGN section 6). RabbitMQ answers a
// SEND's receipt once the message is confirmed, and confirms from different queues come in any
// order, so receipts are matched wherever they fall; the caller advances each queue's delivery
// cursor over its own confirmed prefix. The caller moves the bytes and reads the clock.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/session/parser.h"
#include "dataplane/session/stomp.h"

namespace sluice::queue {

// One spilled message on its way to the owner.
struct DrainMessage {
  uint64_t seq = 0;  // the spill log's sequence number
  // The client's headers as the spill log holds them: lines "name:value" each ending in LF,
  // encoded as STOMP 1.2 encodes SEND headers, destination included.
  std::string_view headers;
  std::string_view body;
};

struct DrainSettings {
  static constexpr uint32_t kWindowDefault = 64;
  static constexpr uint32_t kWindowMax = 4096;

  std::string login;
  std::string passcode;
  std::string vhost;                 // the CONNECT frame's host header
  std::string gateway_id;            // sluice-message-id: <gateway_id>-<seq>
  uint32_t window = kWindowDefault;  // SENDs awaiting their RECEIPT, 1 to kWindowMax
  session::FrameLimits limits;       // for the owner's frames
};

// Header name the drainer adds to every message so consumers can drop duplicates; a message
// that already carries one (it came from a peer gateway) keeps it.
inline constexpr std::string_view kMessageIdHeader = "sluice-message-id";

struct DrainEvent {
  enum class Kind : uint8_t {
    kNeedMore,   // feed more of the owner's bytes
    kSkip,       // drop `consumed` bytes (a heart-beat, a frame of no interest); call again
    kConnected,  // the owner accepted the CONNECT; drop `consumed` bytes; sends may start
    kDelivered,  // the owner confirmed `seq` (not necessarily the oldest in flight)
    kFailed,     // `reason` says why; the connection is of no further use
  };
  Kind kind = Kind::kNeedMore;
  size_t consumed = 0;
  uint64_t seq = 0;
  std::string_view reason;
};

class DrainConnection {
 public:
  explicit DrainConnection(const DrainSettings& settings);

  // The CONNECT frame that opens the stream, written into `out`; nothing when it does not fit.
  std::optional<std::string_view> connect(std::span<char> out) const;

  enum class SendResult : uint8_t {
    kSent,        // the frame is in `out` (`written` bytes)
    kNotReady,    // before kConnected or after kFailed
    kWindowFull,  // `window` SENDs await their RECEIPT
    kTooLarge,    // does not fit in `out`
    kBadHeaders,  // the header block is not STOMP 1.2 header lines, or has no destination
  };
  // Writes the SEND of `m`: the client's headers in their order except those the gateway
  // rewrites (content-length, receipt, transaction), sluice-message-id unless the message has
  // one, and receipt:<seq>.
  SendResult send(const DrainMessage& m, std::span<char> out, size_t* written);

  // `buf` starts at the first of the owner's bytes not yet consumed.
  DrainEvent on_bytes(std::string_view buf);

  bool ready() const { return state_ == State::kReady; }
  bool failed() const { return state_ == State::kFailed; }
  size_t in_flight() const { return count_; }
  bool window_open() const { return ready() && count_ < slots_.size(); }
  // Sequence numbers sent and not yet confirmed, in the order they were sent.
  std::vector<uint64_t> unconfirmed() const;

 private:
  enum class State : uint8_t { kConnecting, kReady, kFailed };
  DrainEvent fail(std::string_view reason);

  DrainSettings settings_;
  session::Parser parser_;
  State state_ = State::kConnecting;
  // The SENDs awaiting their RECEIPT: `window` slots, allocated once; a slot is free when its
  // order is 0. Receipts may come in any order, and the window is small: a scan finds them.
  struct Slot {
    uint64_t seq = 0;
    uint64_t order = 0;  // 1, 2, ...: when it was sent
  };
  std::vector<Slot> slots_;
  uint64_t sent_ = 0;
  size_t count_ = 0;
  char reason_[256] = {};
};

}  // namespace sluice::queue
