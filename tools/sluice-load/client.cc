// sluice-load's per-connection STOMP client protocol.
#include "tools/sluice-load/client.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "base/assert.h"
#include "dataplane/session/builder.h"

namespace sluice::load {

using session::Command;
using session::FrameWriter;
using session::Version;

namespace {

constexpr std::string_view kDisconnectReceipt = "disconnect";
constexpr std::string_view kSubscribedReceipt = "subscribed";

session::FrameLimits client_limits() {
  session::FrameLimits l;
  // Room for the largest body plus the broker's headers.
  l.frame_bytes_max = Limits::kBodyBytesMax + (64u << 10);
  l.body_bytes_max = Limits::kBodyBytesMax + (64u << 10);
  return l;
}

std::string_view filler() {
  static const std::string body(Limits::kBodyBytesMax, 'x');
  return body;
}

uint64_t next_random(uint64_t* state) {  // splitmix64: cheap, seedable, good enough for sizes
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool to_u64(std::optional<std::string_view> s, uint64_t* out) {
  if (!s || s->empty()) return false;
  auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), *out);
  return ec == std::errc() && p == s->data() + s->size();
}

}  // namespace

void RunStats::error(std::string_view what) {
  ++errors;
  if (first_error.empty()) first_error = std::string(what);
}

Client::Client(const RunPlan& plan, Checker* checker, RunStats* stats, uint32_t first_producer,
               uint32_t producers, uint32_t first_consumer, uint32_t consumers)
    : plan_(plan),
      o_(*plan.options),
      checker_(checker),
      stats_(stats),
      parser_(client_limits()),
      first_consumer_(first_consumer),
      consumers_(consumers) {
  producers_.resize(producers);
  for (uint32_t i = 0; i < producers; ++i) {
    producers_[i].id = first_producer + i;
    producers_[i].rng = o_.seed * 1000003u + first_producer + i;
    producers_[i].next_queue = (first_producer + i) % o_.queues;
  }
  if (o_.receipts) {
    slots_.resize(size_t(o_.window) * producers);
    for (uint32_t i = uint32_t(slots_.size()); i > 0; --i)
      free_slots_.push_back(i - 1);
  }
  // SUBSCRIBEs all go out at once after CONNECTED: room for each (a destination is short).
  out_cap_ = kOutputHighBytes + kHeadersBytesMax + o_.size.max + 2 * kControlBytesMax +
             size_t(consumers) * kControlBytesMax;
  out_.reset(new char[out_cap_]);
}

void Client::take_output(std::unique_ptr<char[]>* buf, size_t* len) {
  std::swap(*buf, out_);
  *len = out_len_;
  out_len_ = 0;
  if (!out_) out_.reset(new char[out_cap_]);
}

void Client::open() {
  parser_.reset();
  parser_.set_version(Version::k1_0);  // CONNECTED never escapes; 1.2 once agreed
  for (Producer& p : producers_) {
    p.session_sent = 0;
    p.in_flight = 0;
  }
  for (Slot& s : slots_)
    s.used = false;
  free_slots_.clear();
  for (uint32_t i = uint32_t(slots_.size()); i > 0; --i)
    free_slots_.push_back(i - 1);
  in_flight_ = 0;
  out_len_ = 0;
  subscribed_ = consumers_ == 0;
  pending_ack_.clear();
  FrameWriter w(tail(), Command::kConnect, Version::k1_2);
  w.header("accept-version", "1.2").header("host", o_.vhost);
  if (!o_.login.empty()) w.header("login", o_.login);
  if (!o_.passcode.empty()) w.header("passcode", o_.passcode);
  w.header("heart-beat", "0,0");
  auto f = w.finish();
  SLUICE_ASSERT(f);  // options bound login and passcode well below the output's room
  commit(*f);
  state_ = State::kConnecting;
}

void Client::subscribe_all() {
  for (uint32_t i = 0; i < consumers_; ++i) {
    const uint32_t queue = (first_consumer_ + i) % o_.queues;
    FrameWriter w(tail(), Command::kSubscribe, Version::k1_2);
    w.header("id", i).header("destination", plan_.destinations[queue]);
    w.header("ack", o_.ack == AckMode::kAuto     ? "auto"
                    : o_.ack == AckMode::kClient ? "client"
                                                 : "client-individual");
    if (o_.prefetch > 0) w.header("prefetch-count", o_.prefetch);
    // The last one's receipt tells the loop that every subscription exists, so producers may
    // start without their first messages going to a queue nobody reads (the sink drops them).
    if (i + 1 == consumers_) w.header("receipt", kSubscribedReceipt);
    auto f = w.finish();
    if (!f) return fail("SUBSCRIBE does not fit the output buffer (destination too long?)");
    commit(*f);
  }
}

void Client::fail(std::string_view why) {
  if (state_ == State::kFailed) return;
  state_ = State::kFailed;
  stats_->error(why);
}

void Client::on_transport_closed(std::string_view why) {
  if (state_ == State::kClosed || state_ == State::kFailed) return;
  fail(why);
}

bool Client::producing_done() const {
  if (stopping_) return true;
  return std::all_of(producers_.begin(), producers_.end(),
                     [](const Producer& p) { return p.done; });
}

bool Client::session_complete() const {
  if (o_.session_messages == 0 || producers_.empty() || state_ != State::kReady || in_flight_ > 0)
    return false;
  return std::all_of(producers_.begin(), producers_.end(), [this](const Producer& p) {
    return p.done || stopping_ || p.session_sent >= o_.session_messages;
  });
}

uint32_t Client::pick_queue(Producer& p) {
  switch (o_.spread) {
    case Spread::kFixed:
      return p.id % o_.queues;
    case Spread::kRoundRobin: {
      const uint32_t q = p.next_queue;
      p.next_queue = (q + 1) % o_.queues;
      return q;
    }
    case Spread::kRandom:
      return uint32_t(next_random(&p.rng) % o_.queues);
  }
  return 0;
}

uint32_t Client::pick_size(Producer& p) {
  const SizeSpec& s = o_.size;
  switch (s.kind) {
    case SizeSpec::Kind::kFixed:
      return s.min;
    case SizeSpec::Kind::kUniform:
      return s.min + uint32_t(next_random(&p.rng) % (uint64_t(s.max - s.min) + 1));
    case SizeSpec::Kind::kExponential: {
      const double u = double(next_random(&p.rng) >> 11) * 0x1.0p-53;
      const double v = -std::log1p(-u) * s.mean;
      return uint32_t(std::clamp(v, double(s.min), double(s.max)));
    }
  }
  return s.min;
}

void Client::fill(uint64_t now_ns) {
  next_due_ns_ = 0;
  if (state_ != State::kReady || producers_.empty() || stopping_) return;
  const double ns_per_message = o_.rate > 0 ? 1e9 / o_.rate : 0;
  const size_t n = producers_.size();
  for (size_t k = 0; k < n; ++k) {
    Producer& p = producers_[(next_producer_ + k) % n];
    while (!p.done && out_len_ < kOutputHighBytes) {
      if (o_.session_messages > 0 && p.session_sent >= o_.session_messages) break;
      if (o_.receipts && p.in_flight >= o_.window) break;
      if (ns_per_message > 0) {
        const uint64_t due = plan_.start_ns + uint64_t(double(p.sent) * ns_per_message);
        if (due > now_ns) {
          if (next_due_ns_ == 0 || due < next_due_ns_) next_due_ns_ = due;
          break;
        }
      }
      if (!send_one(p, now_ns)) break;
    }
  }
  next_producer_ = uint32_t((next_producer_ + 1) % n);
}

bool Client::send_one(Producer& p, uint64_t now_ns) {
  const uint32_t queue = pick_queue(p);
  const uint64_t seq = checker_->next_seq(p.id, queue);
  if (seq == ~uint64_t(0)) {  // the run's tracking limit: visible in the summary
    stats_->error("the checker's tracking limit (2^30 messages) was reached; producers stopped");
    p.done = true;
    return false;
  }
  const uint32_t size = pick_size(p);
  FrameWriter w(tail(), Command::kSend, Version::k1_2);
  w.header("destination", plan_.destinations[queue])
      .header(kRunHeader, plan_.run_id)
      .header(kProducerHeader, p.id)
      .header(kQueueHeader, queue)
      .header(kSeqHeader, seq)
      .header(kTimeHeader, now_ns);
  uint32_t slot = 0;
  if (o_.receipts) {
    SLUICE_ASSERT(!free_slots_.empty());  // in_flight < window for this producer
    slot = free_slots_.back();
    const uint64_t receipt = (uint64_t(slots_[slot].gen + 1) << 32) | slot;
    w.header("receipt", receipt);
  }
  auto f = w.finish(filler().substr(0, size));
  SLUICE_ASSERT(f);  // out_cap_ holds kOutputHighBytes + the largest SEND
  commit(*f);
  stats_->bytes_sent += size;
  const uint32_t local = uint32_t(&p - producers_.data());
  if (o_.receipts) {
    free_slots_.pop_back();
    Slot& s = slots_[slot];
    s = Slot{local, queue, s.gen + 1, true, seq, now_ns};
    ++p.in_flight;
    ++in_flight_;
  } else {
    // Without receipts nothing better than "written" exists: every sent message counts as
    // acknowledged, so its loss fails the run.
    checker_->on_acknowledged(p.id, queue, seq);
  }
  ++p.sent;
  ++p.session_sent;
  if (o_.count > 0 && p.sent >= o_.count) p.done = true;
  return true;
}

void Client::disconnect() {
  if (state_ != State::kReady && state_ != State::kConnecting) return;
  if (!pending_ack_.empty()) {
    ack(pending_ack_);
    pending_ack_.clear();
  }
  FrameWriter w(tail(), Command::kDisconnect, Version::k1_2);
  w.header("receipt", kDisconnectReceipt);
  auto f = w.finish();
  SLUICE_ASSERT(f);  // kControlBytesMax is always kept free
  commit(*f);
  state_ = State::kDisconnecting;
}

void Client::ack(std::string_view id) {
  FrameWriter w(tail(), Command::kAck, Version::k1_2);
  w.header_raw("id", id);
  auto f = w.finish();
  if (!f) return fail("ACK does not fit the output buffer (ack id too long?)");
  commit(*f);
}

size_t Client::on_bytes(std::string_view buf, uint64_t now_ns) {
  size_t consumed = 0;
  while (state_ != State::kFailed && state_ != State::kClosed && room(2 * kControlBytesMax)) {
    session::ParseResult r = parser_.parse(buf.substr(consumed));
    if (r.status == session::ParseResult::Status::kNeedMore) break;
    if (r.status == session::ParseResult::Status::kError) {
      fail(std::string("unparsable frame from the peer: ") +
           std::string(session::parse_error_message(r.error)));
      break;
    }
    if (r.status == session::ParseResult::Status::kFrame) on_frame(parser_.frame(), now_ns);
    consumed += r.consumed;
  }
  if (!pending_ack_.empty() && room(kControlBytesMax)) {
    ack(pending_ack_);  // client mode: one cumulative ACK per batch of input
    pending_ack_.clear();
  }
  return consumed;
}

void Client::on_frame(const session::Frame& f, uint64_t now_ns) {
  switch (f.command()) {
    case Command::kConnected: {
      if (state_ != State::kConnecting) return fail("CONNECTED out of place");
      std::optional<std::string_view> v = f.find("version");
      if (v && *v != "1.2") return fail("the peer did not agree to STOMP 1.2");
      parser_.set_version(Version::k1_2);
      state_ = State::kReady;
      subscribe_all();
      return;
    }
    case Command::kReceipt:
      return on_receipt(f, now_ns);
    case Command::kMessage:
      return on_message(f, now_ns);
    case Command::kError: {
      std::string why = "ERROR from the peer: ";
      why += f.find("message").value_or("(no message header)");
      return fail(why.substr(0, 300));
    }
    default:
      return fail(std::string("unexpected ") + std::string(session::command_name(f.command())) +
                  " frame from the peer");
  }
}

void Client::on_receipt(const session::Frame& f, uint64_t now_ns) {
  std::optional<std::string_view> id = f.find("receipt-id");
  if (id && *id == kDisconnectReceipt) {
    if (state_ != State::kDisconnecting) return fail("DISCONNECT receipt out of place");
    state_ = State::kClosed;
    if (o_.session_messages > 0) ++stats_->sessions;
    return;
  }
  if (id && *id == kSubscribedReceipt) {
    subscribed_ = true;
    return;
  }
  uint64_t v = 0;
  if (!to_u64(id, &v)) return fail("RECEIPT without a receipt-id sluice-load sent");
  const uint32_t slot = uint32_t(v & 0xffffffffu);
  if (slot >= slots_.size() || !slots_[slot].used || slots_[slot].gen != uint32_t(v >> 32))
    return fail("RECEIPT for no SEND in flight");
  Slot& s = slots_[slot];
  Producer& p = producers_[s.producer];
  checker_->on_acknowledged(p.id, s.queue, s.seq);
  stats_->receipt_latency_ns.record(now_ns - s.sent_ns);
  ++stats_->receipts;
  s.used = false;
  free_slots_.push_back(slot);
  --p.in_flight;
  --in_flight_;
}

void Client::on_message(const session::Frame& f, uint64_t now_ns) {
  ++stats_->deliveries;
  uint64_t sub = 0, run = 0, producer = 0, seq = 0, ts = 0, queue = 0;
  if (!to_u64(f.find("subscription"), &sub) || sub >= consumers_)
    return fail("MESSAGE for no subscription of this connection");
  const uint32_t consumer = first_consumer_ + uint32_t(sub);
  const uint32_t sub_queue = consumer % o_.queues;
  if (!to_u64(f.find(kRunHeader), &run) || run != plan_.run_id ||
      !to_u64(f.find(kProducerHeader), &producer) || !to_u64(f.find(kSeqHeader), &seq) ||
      !to_u64(f.find(kQueueHeader), &queue) || queue != sub_queue) {
    ++stats_->foreign;  // another run's leftovers, or not from sluice-load: not ours to check
  } else {
    stats_->bytes_received += f.body().size();
    if (to_u64(f.find(kTimeHeader), &ts) && ts <= now_ns)
      stats_->delivery_latency_ns.record(now_ns - ts);
    checker_->on_received(consumer, sub_queue, uint32_t(producer), seq);
  }
  if (o_.ack == AckMode::kAuto) return;
  std::optional<std::string_view> id = f.find("ack");
  if (!id) return fail("MESSAGE without an ack header in a client ack mode");
  if (o_.ack == AckMode::kClientIndividual) return ack(*id);
  pending_ack_.assign(id->data(), id->size());
}

}  // namespace sluice::load
