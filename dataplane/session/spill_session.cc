// Spill session: STOMP server semantics for sessions terminated at the gateway, with receipts
// released only after durability and transactions applied as one atomic batch.
#include "dataplane/session/spill_session.h"

#include <algorithm>
#include <cstring>

#include "base/assert.h"
#include "dataplane/session/builder.h"
#include "dataplane/session/prelude.h"

namespace sluice::session {

std::string_view spill_end_name(SpillEnd e) {
  switch (e) {
    case SpillEnd::kNone:
      return "none";
    case SpillEnd::kDisconnect:
      return "disconnect";
    case SpillEnd::kAuthFailed:
      return "auth_failed";
    case SpillEnd::kAccessDenied:
      return "access_denied";
    case SpillEnd::kSubscribeRefused:
      return "subscribe_refused";
    case SpillEnd::kProtocolError:
      return "protocol_error";
    case SpillEnd::kTransactionRefused:
      return "transaction_refused";
    case SpillEnd::kAppendFailed:
      return "append_failed";
    case SpillEnd::kHeartBeatTimeout:
      return "heartbeat_timeout";
    case SpillEnd::kOwnerAvailable:
      return "owner_available";
  }
  return "unknown";
}

SpillSession::SpillSession(const SessionConfig& config, const SpillLimits& limits,
                           std::span<char> buffer, SpillHooks& hooks)
    : config_(config),
      limits_(limits),
      buf_(buffer),
      hooks_(hooks),
      parser_(config.frame_limits),
      batch_parser_(config.frame_limits),
      pending_(new Pending[limits.receipts_pending_max]),
      pending_ids_(new char[size_t(limits.receipts_pending_max) * kReceiptIdBytesMax]),
      staged_(new Staged[limits.txn_frames_max]) {
  SLUICE_ASSERT(limits.receipts_pending_max >= 1 && limits.txn_frames_max >= 1);
  SLUICE_ASSERT(buffer.size() >= spill_buffer_bytes(config, limits.txn_bytes_max));
}

void SpillSession::start(const Prelude& prelude, uint64_t ticket) {
  version_ = prelude.version();
  parser_.set_version(version_);
  batch_parser_.set_version(version_);
  std::string_view vhost = prelude.key().vhost;
  SLUICE_ASSERT(vhost.size() <= vhost_.size());
  std::memcpy(vhost_.data(), vhost.data(), vhost.size());
  vhost_len_ = vhost.size();
  std::string_view rest = prelude.after_connect();
  SLUICE_ASSERT(rest.size() <= buf_.size());
  std::memcpy(buf_.data(), rest.data(), rest.size());
  fill_ = rest.size();

  std::optional<std::string_view> login = prelude.login();
  if (login && login->size() > login_.size()) {
    fail(SpillEnd::kAuthFailed, "authentication failed", "login header too long");
    return;
  }
  if (login) {
    std::memcpy(login_.data(), login->data(), login->size());
    login_len_ = login->size();
  }
  switch (hooks_.authenticate(login, prelude.passcode(), ticket)) {
    case AuthAnswer::kAccepted:
      return;
    case AuthAnswer::kPending:
      login_pending_ = true;
      return;
    case AuthAnswer::kRefused:
      refuse_login();
      return;
    case AuthAnswer::kBusy:
      fail(SpillEnd::kAuthFailed, "authentication failed",
           "the gateway is checking too many logins now; connect again later");
      return;
  }
}

void SpillSession::refuse_login() {
  login_len_ = 0;
  fail(SpillEnd::kAuthFailed, "authentication failed",
       "the gateway did not accept the login and passcode of this CONNECT");
}

void SpillSession::on_login_checked(bool accepted) {
  if (!login_pending_) return;
  login_pending_ = false;
  if (!accepted) refuse_login();
}

size_t SpillSession::retain_from() const {
  return txn_open_ && staged_count_ > 0 ? staged_[0].off : parsed_;
}

void SpillSession::compact() {
  const size_t k = retain_from();
  if (k == 0) return;
  std::memmove(buf_.data(), buf_.data() + k, fill_ - k);
  fill_ -= k;
  parsed_ -= k;
  for (uint32_t i = 0; i < staged_count_; ++i)
    staged_[i].off -= uint32_t(k);
}

size_t SpillSession::feed(std::string_view bytes) {
  // Once closing, input is read and dropped: nothing after the ending frame is acted on.
  if (closing_ || closed_) return bytes.size();
  // Input goes back to the front of the buffer as soon as what is retained is small (usually
  // nothing, or part of one frame): the buffer is frame_bytes_max + txn_bytes_max (2 MiB by
  // default), and walking all of it put every received byte on a line out of cache, which
  // made this copy the worker's largest cost in spill mode.
  const size_t k = retain_from();
  if (k > 0 && (fill_ - k <= kRewindBytesMax || bytes.size() > buf_.size() - fill_)) compact();
  size_t n = std::min(bytes.size(), buf_.size() - fill_);
  if (n > 0) std::memcpy(buf_.data() + fill_, bytes.data(), n);
  fill_ += n;
  return n;
}

void SpillSession::fail(SpillEnd end, std::string_view message, std::string_view detail,
                        std::optional<std::string_view> receipt) {
  // The first reason wins, except that a failed append overrides a graceful DISCONNECT: the
  // client must learn that its messages were not all stored.
  if (closing_ && !(end == SpillEnd::kAppendFailed && end_ == SpillEnd::kDisconnect)) return;
  closing_ = true;
  end_ = end;
  ErrorFrame e{message, detail, receipt.value_or(std::string_view{}), {}};
  std::optional<std::string_view> bytes = build_error(final_buf_, version_, e);
  if (!bytes) bytes = build_error(final_buf_, version_, ErrorFrame{message, {}, {}, {}});
  SLUICE_ASSERT(bytes.has_value());
  final_ = *bytes;
}

bool SpillSession::push_receipt(const Frame& f, uint64_t token) {
  std::optional<std::string_view> id = f.find("receipt");
  if (!id) return false;
  SLUICE_ASSERT(pending_count_ < limits_.receipts_pending_max);
  SLUICE_ASSERT(id->size() <= kReceiptIdBytesMax);
  uint32_t slot = (pending_head_ + pending_count_) % limits_.receipts_pending_max;
  pending_[slot] = Pending{token, uint16_t(id->size())};
  std::memcpy(pending_ids_.get() + size_t(slot) * kReceiptIdBytesMax, id->data(), id->size());
  ++pending_count_;
  return true;
}

bool SpillSession::releasable() const {
  if (pending_count_ == 0) return false;
  const Pending& p = pending_[pending_head_];
  return p.token <= durable_ && p.token < failed_;
}

SpillEvent SpillSession::release_receipts() {
  size_t n = 0;
  while (releasable()) {
    const Pending& p = pending_[pending_head_];
    std::string_view id(pending_ids_.get() + size_t(pending_head_) * kReceiptIdBytesMax, p.len);
    std::optional<std::string_view> r =
        build_receipt_raw(std::span<char>(reply_).subspan(n), version_, id);
    if (!r) break;  // reply_ is full; the rest go out on the next call
    n += r->size();
    pending_head_ = (pending_head_ + 1) % limits_.receipts_pending_max;
    --pending_count_;
  }
  SLUICE_ASSERT(n > 0);
  return SpillEvent{SpillEvent::Kind::kReply, std::string_view(reply_.data(), n)};
}

SpillEvent SpillSession::emit_batch() {
  if (batch_next_ == 0) {
    batch_next_ = 1;
    SpillEvent ev{SpillEvent::Kind::kBatchBegin};
    ev.batch_count = staged_count_;
    return ev;
  }
  if (batch_next_ <= staged_count_) {
    const Staged& s = staged_[batch_next_ - 1];
    ++batch_next_;
    // Staged frames were parsed and checked when they arrived; they parse the same again.
    batch_parser_.reset();
    ParseResult r = batch_parser_.parse(std::string_view(buf_.data() + s.off, s.len));
    SLUICE_ASSERT(r.status == ParseResult::Status::kFrame && r.consumed == s.len);
    SpillEvent ev{SpillEvent::Kind::kAppend};
    DestinationError e = destination_key(batch_parser_.frame(), vhost(), config_.owned_prefixes,
                                         destination_, &ev.key);
    SLUICE_ASSERT(e == DestinationError::kNone);
    ev.token = ++last_token_;
    ev.frame = &batch_parser_.frame();
    return ev;
  }
  batch_active_ = false;
  txn_open_ = false;
  staged_count_ = 0;
  SpillEvent ev{SpillEvent::Kind::kBatchEnd};
  ev.token = last_token_;
  return ev;
}

SpillEvent SpillSession::next() {
  // Each pass returns or consumes at least one byte of buf_, so the loop is bounded by fill_.
  for (;;) {
    if (closed_) return SpillEvent{SpillEvent::Kind::kClose, {}, 0, {}, nullptr, 0, end_};
    if (releasable()) return release_receipts();
    if (batch_active_) return emit_batch();
    if (closing_) {
      const bool stuck = pending_count_ > 0 && pending_[pending_head_].token >= failed_;
      if (pending_count_ == 0 || stuck) {
        closed_ = true;
        return SpillEvent{SpillEvent::Kind::kClose, final_, 0, {}, nullptr, 0, end_};
      }
      return SpillEvent{SpillEvent::Kind::kWaitDurable};
    }
    if (login_pending_) return SpillEvent{SpillEvent::Kind::kWaitLogin};
    if (pending_count_ == limits_.receipts_pending_max) {
      return SpillEvent{SpillEvent::Kind::kWaitDurable};
    }
    if (txn_open_ && parsed_ - retain_from() > limits_.txn_bytes_max) {
      detail_.clear();
      detail_ << "a transaction may hold at most txn_bytes_max (" << uint64_t(limits_.txn_bytes_max)
              << " bytes) while spilling";
      fail(SpillEnd::kTransactionRefused, "transaction too large", detail_.view());
      continue;
    }
    ParseResult r = parser_.parse(std::string_view(buf_.data() + parsed_, fill_ - parsed_));
    switch (r.status) {
      case ParseResult::Status::kNeedMore:
        return SpillEvent{};
      case ParseResult::Status::kHeartbeat:
        parsed_ += r.consumed;
        continue;
      case ParseResult::Status::kError:
        fail(SpillEnd::kProtocolError, parse_error_message(r.error),
             "the frame violates STOMP or a configured frame limit");
        continue;
      case ParseResult::Status::kFrame:
        break;
    }
    const size_t begin = parsed_;
    parsed_ += r.consumed;
    SpillEvent ev = on_frame(parser_.frame(), begin);
    if (ev.kind != SpillEvent::Kind::kNeedMore) return ev;
  }
}

SpillEvent SpillSession::on_frame(const Frame& f, size_t begin) {
  std::optional<std::string_view> receipt = f.find("receipt");
  if (receipt && receipt->size() > kReceiptIdBytesMax) {
    detail_.clear();
    detail_ << "receipt header longer than " << uint64_t(kReceiptIdBytesMax) << " bytes";
    fail(SpillEnd::kProtocolError, "receipt header too long", detail_.view());
    return SpillEvent{};
  }
  const Command c = f.command();
  switch (c) {
    case Command::kSend:
      return on_send(f, begin);
    case Command::kSubscribe:
      fail(SpillEnd::kSubscribeRefused, "owner unavailable, retry later",
           "the queue's owner cannot be reached now; subscribe again later", receipt);
      return SpillEvent{};
    case Command::kAck:
    case Command::kNack:
    case Command::kUnsubscribe:
      detail_.clear();
      detail_ << command_name(c) << " outside a subscription: this session has none";
      fail(SpillEnd::kProtocolError, "no subscription", detail_.view(), receipt);
      return SpillEvent{};
    case Command::kBegin:
    case Command::kCommit:
    case Command::kAbort:
      return on_transaction(f, c, receipt);
    case Command::kDisconnect:
      push_receipt(f, last_token_);
      closing_ = true;
      end_ = SpillEnd::kDisconnect;
      txn_open_ = false;  // an open transaction is aborted by DISCONNECT
      staged_count_ = 0;
      return SpillEvent{};
    case Command::kConnect:
    case Command::kStomp:
      fail(SpillEnd::kProtocolError, "already connected", "CONNECT sent twice on one connection",
           receipt);
      return SpillEvent{};
    case Command::kConnected:
    case Command::kMessage:
    case Command::kReceipt:
    case Command::kError:
      detail_.clear();
      detail_ << command_name(c) << " is a server frame";
      fail(SpillEnd::kProtocolError, "unexpected frame", detail_.view(), receipt);
      return SpillEvent{};
  }
  return SpillEvent{};  // every command is handled above
}

SpillEvent SpillSession::on_transaction(const Frame& f, Command c,
                                        std::optional<std::string_view> receipt) {
  std::optional<std::string_view> tx = f.find("transaction");
  if (!tx || tx->empty()) {
    detail_.clear();
    detail_ << command_name(c) << " frame has no transaction header";
    fail(SpillEnd::kProtocolError, "missing transaction header", detail_.view(), receipt);
    return SpillEvent{};
  }
  if (c == Command::kBegin) {
    if (txn_open_) {
      fail(SpillEnd::kTransactionRefused, "transaction refused",
           "one open transaction at a time while the owner is unavailable", receipt);
      return SpillEvent{};
    }
    if (tx->size() > txn_id_.size()) {
      fail(SpillEnd::kProtocolError, "transaction header too long", {}, receipt);
      return SpillEvent{};
    }
    std::memcpy(txn_id_.data(), tx->data(), tx->size());
    txn_id_len_ = tx->size();
    txn_open_ = true;
    staged_count_ = 0;
    push_receipt(f, last_token_);
    return SpillEvent{};
  }
  if (!txn_open_ || *tx != std::string_view(txn_id_.data(), txn_id_len_)) {
    detail_.clear();
    detail_ << command_name(c) << " names a transaction that is not open";
    fail(SpillEnd::kProtocolError, "unknown transaction", detail_.view(), receipt);
    return SpillEvent{};
  }
  if (c == Command::kAbort || staged_count_ == 0) {
    txn_open_ = false;
    staged_count_ = 0;
    push_receipt(f, last_token_);
    return SpillEvent{};
  }
  // COMMIT: the batch takes tokens last_token_+1 .. last_token_+staged_count_; its receipt waits
  // for the last of them.
  push_receipt(f, last_token_ + staged_count_);
  batch_active_ = true;
  batch_next_ = 0;
  return SpillEvent{};
}

SpillEvent SpillSession::on_send(const Frame& f, size_t begin) {
  std::optional<std::string_view> receipt = f.find("receipt");
  SpillEvent ev{SpillEvent::Kind::kAppend};
  DestinationError e = destination_key(f, vhost(), config_.owned_prefixes, destination_, &ev.key);
  if (e != DestinationError::kNone) {
    fail(SpillEnd::kProtocolError, destination_error_message(e),
         "SEND needs a destination header naming a queue", receipt);
    return SpillEvent{};
  }
  if (!hooks_.authorize(std::string_view(login_.data(), login_len_), ev.key)) {
    fail(SpillEnd::kAccessDenied, "access refused", "this login may not send to that destination",
         receipt);
    return SpillEvent{};
  }
  if (std::optional<std::string_view> tx = f.find("transaction")) {
    if (!txn_open_ || *tx != std::string_view(txn_id_.data(), txn_id_len_)) {
      fail(SpillEnd::kProtocolError, "unknown transaction",
           "SEND names a transaction that is not open", receipt);
      return SpillEvent{};
    }
    if (staged_count_ == limits_.txn_frames_max) {
      detail_.clear();
      detail_ << "a transaction may hold at most txn_frames_max ("
              << uint64_t(limits_.txn_frames_max) << ") SENDs while spilling";
      fail(SpillEnd::kTransactionRefused, "transaction too large", detail_.view(), receipt);
      return SpillEvent{};
    }
    staged_[staged_count_++] = Staged{uint32_t(begin), uint32_t(f.bytes().size())};
    push_receipt(f, last_token_);
    return SpillEvent{};
  }
  ev.token = ++last_token_;
  ev.frame = &f;
  push_receipt(f, ev.token);
  return ev;
}

void SpillSession::on_durable(uint64_t token) {
  SLUICE_ASSERT(token <= last_token_);
  durable_ = std::max(durable_, token);
}

void SpillSession::on_append_failed(uint64_t token, std::string_view message) {
  SLUICE_ASSERT(token >= 1 && token <= last_token_);
  failed_ = std::min(failed_, token);
  fail(SpillEnd::kAppendFailed, message,
       "the message was not stored; no later message of this session was acknowledged");
}

void SpillSession::request_end() {
  fail(SpillEnd::kOwnerAvailable, "owner available, reconnect",
       "the queue's owner is reachable again; reconnect to reach it directly");
}

}  // namespace sluice::session
