// The drainer's STOMP client protocol on one connection.
#include "queue/drain_connection.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "base/assert.h"
#include "dataplane/session/builder.h"

namespace sluice::queue {

using session::Command;
using session::Version;

namespace {

// Headers the gateway writes itself: the body's length, the receipt it waits for, and the
// transaction, which was committed when the messages were spilled. These names hold no octet
// that STOMP 1.2 escapes, so the encoded name compares as it is.
bool rewritten(std::string_view name) {
  return name == "content-length" || name == "receipt" || name == "transaction";
}

}  // namespace

DrainConnection::DrainConnection(const DrainSettings& settings)
    : settings_(settings), parser_(settings.limits), slots_(settings.window) {
  SLUICE_ASSERT(settings.window >= 1 && settings.window <= DrainSettings::kWindowMax);
  parser_.set_version(Version::k1_0);  // CONNECTED never escapes; 1.2 once agreed
}

std::optional<std::string_view> DrainConnection::connect(std::span<char> out) const {
  session::FrameWriter w(out, Command::kConnect, Version::k1_2);
  w.header("accept-version", "1.2").header("host", settings_.vhost);
  if (!settings_.login.empty()) w.header("login", settings_.login);
  if (!settings_.passcode.empty()) w.header("passcode", settings_.passcode);
  w.header("heart-beat", "0,0");
  return w.finish();
}

DrainConnection::SendResult DrainConnection::send(const DrainMessage& m, std::span<char> out,
                                                  size_t* written) {
  if (state_ != State::kReady) return SendResult::kNotReady;
  if (count_ == slots_.size()) return SendResult::kWindowFull;
  session::FrameWriter w(out, Command::kSend, Version::k1_2);
  bool has_id = false;
  bool has_destination = false;
  std::string_view rest = m.headers;
  while (!rest.empty()) {
    const size_t lf = rest.find('\n');
    if (lf == std::string_view::npos) return SendResult::kBadHeaders;
    const std::string_view line = rest.substr(0, lf);
    rest.remove_prefix(lf + 1);
    const size_t colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos || line.find('\r') != line.npos ||
        line.find('\0') != line.npos || !session::header_escapes_valid(line, Version::k1_2)) {
      return SendResult::kBadHeaders;
    }
    const std::string_view name = line.substr(0, colon);
    if (rewritten(name)) continue;
    has_id = has_id || name == kMessageIdHeader;
    has_destination = has_destination || name == "destination";
    w.line_raw(line);  // checked above: only lack of room can fail it
  }
  if (!has_destination) return SendResult::kBadHeaders;
  if (!has_id) {
    char id[96];
    const int n =
        std::snprintf(id, sizeof id, "%.*s-%llu", int(settings_.gateway_id.size()),
                      settings_.gateway_id.data(), static_cast<unsigned long long>(m.seq));
    SLUICE_ASSERT(n > 0);
    w.header(kMessageIdHeader, std::string_view(id, std::min(size_t(n), sizeof id - 1)));
  }
  w.header("receipt", m.seq);
  std::optional<std::string_view> frame = w.finish(m.body);
  if (!frame) return SendResult::kTooLarge;
  auto free =
      std::find_if(slots_.begin(), slots_.end(), [](const Slot& x) { return x.order == 0; });
  SLUICE_ASSERT(free != slots_.end());  // count_ < window
  *free = Slot{m.seq, ++sent_};
  ++count_;
  *written = frame->size();
  return SendResult::kSent;
}

DrainEvent DrainConnection::fail(std::string_view reason) {
  state_ = State::kFailed;
  const size_t n = std::min(reason.size(), sizeof reason_);
  std::copy_n(reason.data(), n, reason_);
  DrainEvent e;
  e.kind = DrainEvent::Kind::kFailed;
  e.reason = std::string_view(reason_, n);
  return e;
}

DrainEvent DrainConnection::on_bytes(std::string_view buf) {
  if (state_ == State::kFailed) return fail(std::string_view(reason_));
  session::ParseResult r = parser_.parse(buf);
  DrainEvent e;
  e.consumed = r.consumed;
  switch (r.status) {
    case session::ParseResult::Status::kNeedMore:
      return e;
    case session::ParseResult::Status::kHeartbeat:
      e.kind = DrainEvent::Kind::kSkip;
      return e;
    case session::ParseResult::Status::kError: {
      char why[160];
      std::string_view what = session::parse_error_message(r.error);
      const int n = std::snprintf(why, sizeof why, "unparsable frame from the owner: %.*s",
                                  int(what.size()), what.data());
      return fail(std::string_view(why, size_t(std::max(n, 0))));
    }
    case session::ParseResult::Status::kFrame:
      break;
  }
  const session::Frame& f = parser_.frame();
  if (f.command() == Command::kError) {
    char why[256];
    std::string_view msg = f.find("message").value_or("(no message header)");
    const int n = std::snprintf(why, sizeof why, "the owner answered ERROR: %.*s",
                                int(std::min(msg.size(), size_t(200))), msg.data());
    DrainEvent x = fail(std::string_view(why, size_t(std::max(n, 0))));
    x.consumed = r.consumed;
    return x;
  }
  if (state_ == State::kConnecting) {
    if (f.command() != Command::kConnected) {
      DrainEvent x = fail("the owner's first frame is not CONNECTED");
      x.consumed = r.consumed;
      return x;
    }
    std::optional<std::string_view> v = f.find("version");
    if (v && *v != "1.2") {
      DrainEvent x = fail("the owner did not agree to STOMP 1.2");
      x.consumed = r.consumed;
      return x;
    }
    state_ = State::kReady;
    parser_.set_version(Version::k1_2);
    e.kind = DrainEvent::Kind::kConnected;
    return e;
  }
  if (f.command() != Command::kReceipt) {
    // The drainer subscribes to nothing: any other frame is out of place.
    DrainEvent x = fail("unexpected frame from the owner (only RECEIPT and ERROR are expected)");
    x.consumed = r.consumed;
    return x;
  }
  std::optional<std::string_view> id = f.find("receipt-id");
  uint64_t seq = 0;
  if (!id ||
      std::from_chars(id->data(), id->data() + id->size(), seq).ptr != id->data() + id->size()) {
    DrainEvent x = fail("RECEIPT without a receipt-id the drainer sent");
    x.consumed = r.consumed;
    return x;
  }
  auto slot = std::find_if(slots_.begin(), slots_.end(),
                           [seq](const Slot& x) { return x.order != 0 && x.seq == seq; });
  if (slot == slots_.end()) {
    DrainEvent x = fail("RECEIPT for no SEND in flight");
    x.consumed = r.consumed;
    return x;
  }
  *slot = Slot{};
  --count_;
  e.kind = DrainEvent::Kind::kDelivered;
  e.seq = seq;
  return e;
}

std::vector<uint64_t> DrainConnection::unconfirmed() const {
  std::vector<Slot> used;
  for (const Slot& x : slots_)
    if (x.order != 0) used.push_back(x);
  std::sort(used.begin(), used.end(),
            [](const Slot& a, const Slot& b) { return a.order < b.order; });
  std::vector<uint64_t> out;
  out.reserve(used.size());
  for (const Slot& x : used)
    out.push_back(x.seq);
  return out;
}

}  // namespace sluice::queue
