// The spill session: the server side of STOMP for a session the gateway terminates itself
// because the owner cannot be reached (DESIGN section 3, SPILL). Every SEND becomes an append
// with a token; RECEIPTs go out strictly in order once the engine reports the tokens durable.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "dataplane/session/config.h"
#include "dataplane/session/parser.h"
#include "dataplane/session/queue_key.h"
#include "dataplane/session/text.h"

namespace sluice::session {

class Prelude;

// What SpillHooks::authenticate() answers.
enum class AuthAnswer : uint8_t {
  kAccepted,
  kRefused,
  kPending,  // checked elsewhere; the answer for the ticket comes later (on_login_checked)
  kBusy,     // too many checks wait already; refused, and the client is told to retry
};

// Decisions the session core leaves to its caller: credentials (users file) and per-queue ACL.
class SpillHooks {
 public:
  // `ticket` names the session to the engine when the answer is kPending; the engine passes the
  // answer to that session's on_login_checked().
  virtual AuthAnswer authenticate(std::optional<std::string_view> login,
                                  std::optional<std::string_view> passcode, uint64_t ticket) = 0;
  virtual bool authorize(std::string_view login, const QueueKey& key) = 0;
  virtual ~SpillHooks() = default;
};

struct SpillLimits {
  static constexpr uint32_t kReceiptsPendingMax = 64;
  static constexpr uint32_t kTxnFramesMax = 256;
  static constexpr uint32_t kTxnBytesMax = 1u << 20;

  uint32_t receipts_pending_max = kReceiptsPendingMax;  // then the session stops reading
  uint32_t txn_frames_max = kTxnFramesMax;              // SENDs in one transaction
  uint32_t txn_bytes_max = kTxnBytesMax;                // bytes retained for an open transaction
};

// Why a spill session ended. Counted by the engine.
enum class SpillEnd : uint8_t {
  kNone,
  kDisconnect,  // client DISCONNECT (RECEIPT after every earlier SEND was durable)
  kAuthFailed,
  kAccessDenied,        // ACL refused a queue
  kSubscribeRefused,    // SUBSCRIBE while the owner is unavailable
  kProtocolError,       // unparsable frame, frame out of place, missing header
  kTransactionRefused,  // a transaction that cannot be applied atomically
  kAppendFailed,        // the spill log refused an append (spill full, disk error)
  kOwnerAvailable,      // request_end(): the owner is back, reconnect
  kHeartBeatTimeout,    // nothing from the client within the heart-beat grace (the engine's)
};
inline constexpr size_t kSpillEndCount = 10;
std::string_view spill_end_name(SpillEnd e);

struct SpillEvent {
  enum class Kind : uint8_t {
    kNeedMore,     // feed more bytes
    kWaitDurable,  // nothing to do until on_durable()/on_append_failed()
    kWaitLogin,    // nothing to do until on_login_checked(); input is kept, not read
    kReply,        // send `to_client` (RECEIPTs), call next() again
    kAppend,       // append `frame` (a SEND) for `key` to the spill log under `token`
    kBatchBegin,   // the next `batch_count` kAppend events are one atomic batch (a COMMIT)
    kBatchEnd,     // end of the batch
    kClose,        // send `to_client` (may be empty), then close; `end` says why
  };
  Kind kind = Kind::kNeedMore;
  std::string_view to_client;
  uint64_t token = 0;
  QueueKey key;
  const Frame* frame = nullptr;
  uint32_t batch_count = 0;
  SpillEnd end = SpillEnd::kNone;
};

class SpillSession {
 public:
  // `buffer`: spill_buffer_bytes(config, limits.txn_bytes_max) bytes, outliving the session.
  SpillSession(const SessionConfig& config, const SpillLimits& limits, std::span<char> buffer,
               SpillHooks& hooks);

  // Takes over a prelude that ended in kBind and was routed to spill: authenticates its CONNECT
  // credentials and re-reads every byte that came after the CONNECT. Call once, first.
  // `ticket` goes to SpillHooks::authenticate(). No frame after the CONNECT is read before the
  // login is accepted.
  void start(const Prelude& prelude, uint64_t ticket);
  // The answer to a login authenticate() left kPending. Ignored once the session is closing.
  void on_login_checked(bool accepted);
  size_t feed(std::string_view bytes);
  // Views in the event are valid until the next call to next() or feed().
  SpillEvent next();
  // Every token <= `token` is durable. Tokens are reported in order.
  void on_durable(uint64_t token);
  // The append of `token` was refused (spill full, disk error); `message` goes into the ERROR.
  // Receipts that depend on it are never sent.
  void on_append_failed(uint64_t token, std::string_view message);
  // The owner is available again: answer what is pending, then ERROR and close.
  void request_end();

  uint64_t last_token() const { return last_token_; }
  uint64_t durable_token() const { return durable_; }
  size_t receipts_pending() const { return pending_count_; }
  Version version() const { return version_; }
  std::string_view vhost() const { return std::string_view(vhost_.data(), vhost_len_); }

 private:
  struct Pending {
    uint64_t token;  // released once durable_ >= token
    uint16_t len;
  };
  struct Staged {
    uint32_t off;
    uint32_t len;
  };

  SpillEvent on_frame(const Frame& f, size_t begin);
  SpillEvent on_send(const Frame& f, size_t begin);
  // BEGIN, COMMIT and ABORT.
  SpillEvent on_transaction(const Frame& f, Command c, std::optional<std::string_view> receipt);
  void refuse_login();
  void fail(SpillEnd end, std::string_view message, std::string_view detail,
            std::optional<std::string_view> receipt = std::nullopt);
  bool push_receipt(const Frame& f, uint64_t token);
  bool releasable() const;
  SpillEvent release_receipts();
  SpillEvent emit_batch();
  void compact();
  size_t retain_from() const;
  // feed() moves up to this many retained bytes to the buffer's front to keep writing there.
  static constexpr size_t kRewindBytesMax = 4096;

  const SessionConfig& config_;
  SpillLimits limits_;
  std::span<char> buf_;
  SpillHooks& hooks_;
  Parser parser_;
  Parser batch_parser_;
  Version version_ = Version::k1_0;
  size_t fill_ = 0;
  size_t parsed_ = 0;

  // Tokens: appended in order; durable_ and failed_ move forward only.
  uint64_t last_token_ = 0;
  uint64_t durable_ = 0;
  uint64_t failed_ = UINT64_MAX;

  // Pending receipts: a FIFO of fixed-size slots.
  std::unique_ptr<Pending[]> pending_;
  std::unique_ptr<char[]> pending_ids_;
  uint32_t pending_head_ = 0;
  uint32_t pending_count_ = 0;

  // The one open transaction and its SENDs, retained in buf_ until COMMIT or ABORT.
  bool txn_open_ = false;
  std::array<char, kTransactionIdBytesMax> txn_id_;  // written before read
  size_t txn_id_len_ = 0;
  std::unique_ptr<Staged[]> staged_;
  uint32_t staged_count_ = 0;
  // COMMIT in progress: emitting kBatchBegin, the appends, kBatchEnd.
  bool batch_active_ = false;
  uint32_t batch_next_ = 0;  // 0: kBatchBegin not yet sent; k: staged k-1 sent

  bool login_pending_ = false;  // authenticate() answered kPending; no frame is read meanwhile
  // Closing: stop reading, release what can be released, then send final_ and close.
  bool closing_ = false;
  bool closed_ = false;
  SpillEnd end_ = SpillEnd::kNone;
  std::string_view final_;

  std::array<char, kVhostBytesMax> vhost_;  // written before read
  size_t vhost_len_ = 0;
  std::array<char, kLoginBytesMax> login_;  // written before read
  size_t login_len_ = 0;
  std::array<char, kDestinationBytesMax> destination_;  // written before read
  std::array<char, 4096> reply_;                        // written before read
  std::array<char, 1024> final_buf_;                    // written before read
  detail::Text<256> detail_;
};

}  // namespace sluice::session
