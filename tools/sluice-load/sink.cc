// The benchmark sink's STOMP server side.
#include "tools/sluice-load/sink.h"

#include <algorithm>

#include "dataplane/session/builder.h"

namespace sluice::load {

using session::Command;
using session::FrameWriter;
using session::Version;

namespace {

constexpr size_t kFrameOverheadBytes = 512;  // MESSAGE headers the sink adds to a SEND's

session::FrameLimits sink_limits() {
  session::FrameLimits l;
  l.frame_bytes_max = (1u << 20) + (64u << 10);
  l.body_bytes_max = (1u << 20) + (64u << 10);
  return l;
}

// Appends a frame built by `build(span)` to `out`, growing it to fit.
template <typename Build>
bool append(std::string& out, size_t room, Build build) {
  const size_t old = out.size();
  out.resize(old + room);
  std::optional<std::string_view> f = build(std::span<char>(out.data() + old, room));
  out.resize(old + (f ? f->size() : 0));
  return bool(f);
}

}  // namespace

Sink::Sink(uint32_t connections_max) : connections_max_(connections_max) {}

uint32_t Sink::open() {
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else if (conns_.size() < connections_max_) {
    id = uint32_t(conns_.size());
    conns_.emplace_back();
  } else {
    return ~uint32_t(0);
  }
  Conn& c = conns_[id];
  if (!c.parser) c.parser = std::make_unique<session::Parser>(sink_limits());
  c.parser->reset();
  c.parser->set_version(Version::k1_0);
  c.out.clear();
  c.open = true;
  c.connected = c.closing = c.dirty = c.congested = false;
  ++stats_.connections;
  return id;
}

void Sink::close(uint32_t id) {
  Conn& c = conns_[id];
  if (!c.open) return;
  c.open = false;
  if (c.congested) --congested_;
  c.congested = false;
  c.out.clear();
  for (auto& [name, d] : destinations_) {
    std::erase_if(d.subs, [id](const Subscription& s) { return s.conn == id; });
  }
  std::erase_if(destinations_, [](const auto& kv) { return kv.second.subs.empty(); });
  free_.push_back(id);
}

void Sink::take_output(uint32_t id, std::string* buf) {
  Conn& c = conns_[id];
  buf->clear();
  std::swap(*buf, c.out);
  if (c.congested) {
    c.congested = false;
    --congested_;
  }
}

void Sink::clear_dirty() {
  for (uint32_t d : dirty_)
    conns_[d].dirty = false;
  dirty_.clear();
}

void Sink::wrote(uint32_t id) {
  Conn& c = conns_[id];
  if (!c.dirty) {
    c.dirty = true;
    dirty_.push_back(id);
  }
  if (!c.congested && c.out.size() > kCongestedBytes) {
    c.congested = true;
    ++congested_;
  }
}

size_t Sink::on_bytes(uint32_t id, std::string_view buf) {
  size_t consumed = 0;
  Conn& c = conns_[id];
  while (c.open && !c.closing && congested_ == 0) {
    session::ParseResult r = c.parser->parse(buf.substr(consumed));
    if (r.status == session::ParseResult::Status::kNeedMore) break;
    if (r.status == session::ParseResult::Status::kError) {
      error(id, session::parse_error_message(r.error));
      break;
    }
    if (r.status == session::ParseResult::Status::kFrame) on_frame(id, c.parser->frame());
    consumed += r.consumed;
  }
  return consumed;
}

void Sink::error(uint32_t id, std::string_view message) {
  Conn& c = conns_[id];
  ++stats_.errors;
  append(c.out, 1024, [&](std::span<char> s) {
    return session::build_error(s, c.parser->version(), {message, {}, {}, {}});
  });
  c.closing = true;
  wrote(id);
}

void Sink::receipt(uint32_t id, const session::Frame& f) {
  std::optional<std::string_view> r = f.find("receipt");
  if (!r) return;
  Conn& c = conns_[id];
  ++stats_.receipts;
  if (!append(c.out, r->size() + 64, [&](std::span<char> s) {
        return session::build_receipt_raw(s, c.parser->version(), *r);
      })) {
    return error(id, "receipt header does not fit");
  }
  wrote(id);
}

void Sink::on_frame(uint32_t id, const session::Frame& f) {
  Conn& c = conns_[id];
  if (!c.connected) {
    if (f.command() != Command::kConnect && f.command() != Command::kStomp)
      return error(id, "the first frame must be CONNECT or STOMP");
    session::VersionSet offered;
    std::string_view accept = f.find("accept-version").value_or("1.0");
    for (std::string_view v : {"1.0", "1.1", "1.2"})
      if (accept.find(v) != std::string_view::npos) offered.add(*session::parse_version(v));
    const Version v = offered.highest().value_or(Version::k1_0);
    append(c.out, 256,
           [&](std::span<char> s) { return session::build_connected(s, v, "sluice-load-sink"); });
    c.parser->set_version(v);
    c.connected = true;
    return wrote(id);
  }
  switch (f.command()) {
    case Command::kSend: {
      ++stats_.sends;
      std::optional<std::string_view> dest = f.find("destination");
      if (!dest) return error(id, "SEND without a destination header");
      deliver(f, *dest);
      return receipt(id, f);
    }
    case Command::kSubscribe: {
      std::optional<std::string_view> dest = f.find("destination");
      std::optional<std::string_view> sub = f.find("id");
      if (!dest || !sub) return error(id, "SUBSCRIBE needs destination and id headers");
      const std::string_view ack = f.find("ack").value_or("auto");
      if (ack != "auto" && ack != "client" && ack != "client-individual")
        return error(id, "ack must be auto, client or client-individual");
      destinations_[std::string(*dest)].subs.push_back(
          Subscription{id, std::string(*sub), ack != "auto"});
      return receipt(id, f);
    }
    case Command::kUnsubscribe: {
      std::optional<std::string_view> sub = f.find("id");
      for (auto& [name, d] : destinations_)
        std::erase_if(d.subs, [&](const Subscription& s) { return s.conn == id && sub == s.id; });
      return receipt(id, f);
    }
    case Command::kDisconnect:
      c.closing = true;
      receipt(id, f);
      return wrote(id);
    case Command::kAck:
    case Command::kNack:
    case Command::kBegin:
    case Command::kCommit:
    case Command::kAbort:
      // Accepted and forgotten: the sink keeps no unacknowledged messages and no transactions.
      return receipt(id, f);
    default:
      return error(id, "the sink takes SEND, SUBSCRIBE, UNSUBSCRIBE, ACK, NACK, DISCONNECT");
  }
}

void Sink::deliver(const session::Frame& send, std::string_view destination) {
  scratch_.assign(destination.data(), destination.size());
  auto it = destinations_.find(scratch_);
  if (it == destinations_.end() || it->second.subs.empty()) {
    ++stats_.dropped;
    return;
  }
  Destination& d = it->second;
  const Subscription& sub = d.subs[d.next++ % d.subs.size()];
  Conn& to = conns_[sub.conn];
  const Version v = to.parser->version();
  const uint64_t mid = ++message_id_;
  const bool ok = append(to.out, send.bytes().size() + kFrameOverheadBytes, [&](std::span<char> s) {
    FrameWriter w(s, Command::kMessage, v);
    w.header_raw("subscription", sub.id).header("message-id", mid);
    if (sub.client_ack && v == Version::k1_2) w.header("ack", mid);
    for (size_t i = 0; i < send.header_count(); ++i) {
      const session::Header h = send.header(i);
      if (h.name == "receipt" || h.name == "content-length" || h.name == "subscription" ||
          h.name == "message-id" || h.name == "ack")
        continue;
      // Both sides agreed the same version with this sink in practice; a mismatch in escaping
      // rules only matters for octets sluice-load never sends.
      w.header_raw(h.name, h.value);
    }
    return w.finish(send.body());
  });
  if (!ok) {
    ++stats_.errors;
    return;
  }
  ++stats_.delivered;
  wrote(sub.conn);
}

}  // namespace sluice::load
