// Simulated peers for the DPDK engine's lcore: a heap frame pool, a scripted router, and TCP
// endpoints (client, owner) that build real frames and read what the lcore sends. Shared by
// the packet-level unit tests, the flow state machine's fuzz target and the session-setup
// benchmark.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/dpdk/engine/config.h"
#include "dataplane/dpdk/engine/frame.h"
#include "dataplane/dpdk/engine/lcore.h"
#include "dataplane/dpdk/net/build.h"
#include "dataplane/dpdk/net/packet.h"

namespace sluice::dpdk::sim {

using engine::Frame;

constexpr uint32_t ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return uint32_t(a) << 24 | uint32_t(b) << 16 | uint32_t(c) << 8 | d;
}

constexpr net::MacAddr kPort0Mac{{0x02, 0, 0, 0, 0, 0x10}};
constexpr net::MacAddr kPort1Mac{{0x02, 0, 0, 0, 0, 0x11}};
constexpr net::MacAddr kClientMac{{0x02, 0, 0, 0, 1, 0x02}};
constexpr net::MacAddr kOwnerMac{{0x02, 0, 0, 0, 2, 0x0a}};
constexpr net::MacAddr kSpillMac{{0x02, 0, 0, 0, 3, 0x01}};
constexpr uint32_t kVip = ip4(10, 0, 0, 1);
constexpr uint32_t kClientIp = ip4(10, 0, 1, 2);
constexpr uint32_t kLocalIp = ip4(10, 0, 2, 1);
constexpr uint32_t kOwnerIp = ip4(10, 0, 2, 10);
constexpr uint32_t kSpillIp = ip4(10, 0, 3, 1);
constexpr uint16_t kStompPort = 61613;
constexpr uint16_t kOwnerPort = 61613;
constexpr uint16_t kSpillPort = 61700;

// Frames on the heap, counted, so a test can check that every frame came back.
class HeapPool final : public engine::FramePool {
 public:
  static constexpr uint32_t kRoom = 2048;

  explicit HeapPool(size_t limit = SIZE_MAX) : limit_(limit) {}
  ~HeapPool() override {
    for (Frame* f : free_)
      destroy(f);
  }
  Frame* alloc() override {
    if (outstanding_ >= limit_) return nullptr;
    Frame* f;
    if (!free_.empty()) {
      f = free_.back();
      free_.pop_back();
    } else {
      f = new Frame;
      f->data = new uint8_t[kRoom];
    }
    f->len = 0;
    f->room = kRoom;
    f->port = 0;
    ++outstanding_;
    return f;
  }
  void free(Frame* f) override {
    --outstanding_;
    free_.push_back(f);
  }
  size_t outstanding() const { return outstanding_; }
  void set_limit(size_t limit) { limit_ = limit; }

  // A frame holding `bytes`, as if received on `port`.
  Frame* frame(std::span<const uint8_t> bytes, uint16_t port) {
    Frame* f = alloc();
    if (!bytes.empty()) std::memcpy(f->data, bytes.data(), bytes.size());
    f->len = uint32_t(bytes.size());
    f->port = port;
    return f;
  }

 private:
  static void destroy(Frame* f) {
    delete[] f->data;
    delete f;
  }
  size_t limit_;
  size_t outstanding_ = 0;
  std::vector<Frame*> free_;
};

// The session core's Router and LoginCache as a test scripts them.
class ScriptedRouter final : public session::Router, public session::LoginCache {
 public:
  void poll() override {}
  session::Route route(const session::QueueKey& key, uint64_t) override {
    last_queue = std::string(key.queue);
    last_vhost = std::string(key.vhost);
    ++routes;
    return target;
  }
  void connect_failed(uint32_t node) override { failed.push_back(node); }
  void confirm_placement(const session::QueueKey& key, uint32_t node) override {
    confirmed.emplace_back(std::string(key.queue), node);
  }
  bool owner_up(const session::QueueKey&) override { return true; }
  std::string_view node_name(uint32_t) const override { return "node"; }
  // The login check's nodes: login_nodes[attempt], none past them.
  session::Route login_node(std::string_view, uint64_t, uint32_t attempt) override {
    ++login_asks;
    if (attempt < login_nodes.size()) return login_nodes[attempt];
    return session::Route{};
  }
  // A one-entry login cache, keyed by the passcode alone (the tests' logins differ in it).
  std::optional<std::string_view> find(std::string_view, std::optional<std::string_view>,
                                       std::optional<std::string_view> passcode,
                                       session::Nanos) override {
    if (cached_passcode.empty() || passcode.value_or("") != cached_passcode) return std::nullopt;
    return cached_server;
  }
  void remember(std::string_view, std::optional<std::string_view>,
                std::optional<std::string_view> passcode, std::string_view server,
                session::Nanos) override {
    cached_passcode = std::string(passcode.value_or(""));
    cached_server = std::string(server);
  }
  void forget(std::string_view, std::optional<std::string_view>,
              std::optional<std::string_view> passcode) override {
    if (passcode.value_or("") == cached_passcode) cached_passcode.clear();
    ++logins_refused;
  }
  void session_end(const session::SessionEnd& e) override {
    ends.push_back(std::string(e.reason) + " vhost=" + std::string(e.vhost) +
                   " login=" + std::string(e.login) + " queue=" + std::string(e.queue) +
                   " message=" + std::string(e.message));
  }

  void heart_beat_mismatch(uint32_t, session::HeartBeat, session::HeartBeat, session::HeartBeat,
                           session::HeartBeatCheck check) override {
    mismatches.push_back(check);
  }

  session::Route target{session::Route::Kind::kOwner, 7, kOwnerIp, kOwnerPort, {}};
  std::vector<session::HeartBeatCheck> mismatches;
  std::vector<session::Route> login_nodes;
  uint32_t login_asks = 0;
  std::string cached_passcode;
  std::string cached_server;
  uint32_t logins_refused = 0;
  std::vector<std::string> ends;
  std::vector<std::pair<std::string, uint32_t>> confirmed;
  std::string last_queue;
  std::string last_vhost;
  std::vector<uint32_t> failed;
  uint64_t routes = 0;
};

// A frame the lcore sent, parsed (checksums verified) and copied.
struct Sent {
  uint16_t port = 0;
  std::vector<uint8_t> bytes;
  net::Packet p;
  net::Reason parsed = net::Reason::kOk;
  std::string payload() const {
    return std::string(reinterpret_cast<const char*>(bytes.data()) + p.payload_offset,
                       p.payload_bytes);
  }
  bool tcp() const { return parsed == net::Reason::kOk && p.kind == net::Kind::kTcp; }
  bool has(uint8_t flag) const { return (p.flags & flag) != 0; }
};

// A frame of any pool (the heap's here, mbufs in the forwarding benchmark) holding `bytes`, as
// if received on `port`; nullptr when the pool is empty or the bytes do not fit.
inline Frame* copy_in(engine::FramePool& pool, std::span<const uint8_t> bytes, uint16_t port) {
  Frame* f = pool.alloc();
  if (f == nullptr) return nullptr;
  if (bytes.size() > f->room) {
    pool.free(f);
    return nullptr;
  }
  if (!bytes.empty()) std::memcpy(f->data, bytes.data(), bytes.size());
  f->len = uint32_t(bytes.size());
  f->port = port;
  return f;
}

// What the lcore sent since the last call, parsed (checksums verified) and copied; the frames
// go back to `pool`, as a port would free them after transmitting.
inline Sent sent_of(const Frame* f) {
  Sent s;
  s.port = f->port;
  s.bytes.assign(f->data, f->data + f->len);
  net::ParseOptions po;
  po.verify_tcp_checksum = true;
  s.parsed = net::parse(s.bytes, po, &s.p);
  return s;
}

inline std::vector<Sent> take_sent(engine::Lcore& lcore, engine::FramePool& pool) {
  std::vector<Sent> out;
  for (Frame* f : lcore.take_tx()) {
    out.push_back(sent_of(f));
    pool.free(f);
  }
  return out;
}

inline engine::LcoreConfig default_config() {
  engine::LcoreConfig c;
  c.port_macs = {kPort0Mac, kPort1Mac};
  c.virtual_ip = kVip;
  c.listen_ports = {kStompPort};
  c.local_ips = {kLocalIp};
  c.local_port_min = 20000;
  c.local_port_max = 20063;
  c.routes = {
      {ip4(10, 0, 1, 0), 24, 0, 0}, {ip4(10, 0, 2, 0), 24, 0, 1}, {ip4(10, 0, 3, 0), 24, 0, 1}};
  c.spill_ip = kSpillIp;
  c.spill_port = kSpillPort;
  c.flows_max = 64;
  c.prelude_flows_max = 16;
  for (size_t i = 0; i < c.cookie_key.size(); ++i)
    c.cookie_key[i] = uint8_t(i * 7 + 1);
  return c;
}

// The lcore with its pool and router, a clock, and what it sent.
class Bench {
 public:
  explicit Bench(const engine::LcoreConfig& c = default_config(), size_t pool_limit = SIZE_MAX)
      : config(c), pool(pool_limit) {
    lcore = std::make_unique<engine::Lcore>(config, router, pool, now_ns, &router);
  }

  // Delivers frames in one burst and returns what the lcore sent.
  std::vector<Sent> deliver(std::vector<Frame*> frames) {
    lcore->burst(std::span<Frame*>(frames), now_ns);
    return collect();
  }
  std::vector<Sent> deliver(std::span<const uint8_t> bytes, uint16_t port) {
    return deliver(std::vector<Frame*>{pool.frame(bytes, port)});
  }
  // Delivers frames as port::LcoreLoop does: each run of frames from one port is an rx burst,
  // offered to the fast path first (Lcore::fast), its frames sent as they are, the rest of the
  // burst handed to burst(). Returns what was sent, in the order the driver would send it.
  std::vector<Sent> deliver_as_driver(const std::vector<Frame*>& frames) {
    std::vector<Sent> all;
    for (size_t at = 0; at < frames.size();) {
      size_t end = at + 1;
      while (end < frames.size() && frames[end]->port == frames[at]->port)
        ++end;
      std::vector<engine::RxBuffer> buffers(end - at);
      std::vector<engine::RxBuffer*> views;
      for (size_t i = at; i < end; ++i) {
        engine::set_rx_buffer(buffers[i - at], frames[i]->data, uint16_t(frames[i]->len));
        views.push_back(&buffers[i - at]);
      }
      std::vector<engine::FastRun> runs(views.size());
      const size_t run_count = lcore->fast(frames[at]->port, views, runs.data(), now_ns);
      size_t fast = 0;
      for (size_t r = 0; r < run_count; ++r) {
        for (; fast < runs[r].end; ++fast) {
          frames[at + fast]->port = runs[r].port;
          all.push_back(sent_of(frames[at + fast]));
          pool.free(frames[at + fast]);
        }
      }
      fast_taken += fast;
      std::vector<Frame*> rest(frames.begin() + long(at + fast), frames.begin() + long(end));
      if (!rest.empty()) lcore->burst(std::span<Frame*>(rest), now_ns);
      for (Sent& s : collect())
        all.push_back(std::move(s));
      at = end;
    }
    return all;
  }
  // Moves the clock and runs the timers.
  std::vector<Sent> advance_ms(uint64_t ms) {
    std::vector<Sent> all;
    // Step in 1 ms ticks, as the driver would, so backoffs are exercised as they run.
    for (uint64_t i = 0; i < ms; ++i) {
      now_ns += 1'000'000;
      lcore->tick(now_ns);
      for (Sent& s : collect())
        all.push_back(std::move(s));
    }
    return all;
  }
  // Moves the clock in one step (as a stalled lcore would see it) and runs the timers.
  std::vector<Sent> jump_ms(uint64_t ms) {
    now_ns += ms * 1'000'000;
    lcore->tick(now_ns);
    return collect();
  }
  std::vector<Sent> collect() { return take_sent(*lcore, pool); }

  engine::LcoreConfig config;
  HeapPool pool;
  ScriptedRouter router;
  uint64_t now_ns = 1'000'000'000'000;  // 1000 s: cookie slots well away from 0
  std::unique_ptr<engine::Lcore> lcore;
  uint64_t fast_taken = 0;  // frames deliver_as_driver() sent by the fast path
};

// One TCP endpoint on the wire: builds its segments, tracks its sequence numbers.
struct Endpoint {
  net::MacAddr mac;
  net::MacAddr gw_mac;
  uint16_t port_id = 0;  // the lcore port it is behind
  uint32_t ip = 0;
  uint16_t tcp_port = 0;
  uint32_t peer_ip = 0;
  uint16_t peer_port = 0;
  uint32_t isn = 0;
  uint32_t snd_nxt = 0;  // next byte it sends
  uint32_t rcv_nxt = 0;  // next byte it expects
  uint16_t mss = 1460;
  std::optional<uint8_t> wscale = 7;
  bool sack = true;
  bool timestamps = true;
  uint32_t ts_value = 5000;
  uint32_t ts_echo = 0;
  uint16_t window = 1000;  // field value (scaled by wscale after the handshake)

  std::vector<uint8_t> segment(uint8_t flags, std::string_view payload = {},
                               std::optional<uint32_t> seq = std::nullopt,
                               std::span<const net::SackBlock> sack_blocks = {}) const {
    net::TcpSegment s;
    s.src_mac = mac;
    s.dst_mac = gw_mac;
    s.src_ip = ip;
    s.dst_ip = peer_ip;
    s.src_port = tcp_port;
    s.dst_port = peer_port;
    s.seq = seq.value_or(snd_nxt);
    s.ack = (flags & net::kAck) ? rcv_nxt : 0;
    s.flags = flags;
    s.window = window;
    if (flags & net::kSyn) {
      s.options.mss = mss;
      s.options.window_scale = wscale;
      s.options.sack_permitted = sack;
    }
    if (timestamps) s.options.timestamps = net::Timestamps{ts_value, ts_echo};
    s.options.sack = sack_blocks;
    s.payload =
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
    std::vector<uint8_t> out(2048);
    out.resize(net::build_tcp_segment(s, out));
    return out;
  }
  // Sends bytes (advancing snd_nxt).
  std::vector<uint8_t> data(std::string_view payload, uint8_t extra_flags = 0) {
    auto f = segment(net::kAck | net::kPsh | extra_flags, payload);
    snd_nxt += uint32_t(payload.size()) + ((extra_flags & net::kFin) ? 1 : 0);
    return f;
  }
  // Takes what a received segment carries (in order) and its timestamp.
  void receive(const Sent& s) {
    if (s.p.options.has_timestamps) ts_echo = s.p.options.timestamps.value;
    const uint32_t end =
        s.p.seq + s.p.payload_bytes + (s.has(net::kSyn) ? 1 : 0) + (s.has(net::kFin) ? 1 : 0);
    if (s.has(net::kSyn) || s.p.seq == rcv_nxt) rcv_nxt = end;
  }
};

inline Endpoint make_client(uint16_t src_port = 40000, uint32_t isn = 0x10000000) {
  Endpoint c;
  c.mac = kClientMac;
  c.gw_mac = kPort0Mac;
  c.port_id = 0;
  c.ip = kClientIp;
  c.tcp_port = src_port;
  c.peer_ip = kVip;
  c.peer_port = kStompPort;
  c.isn = isn;
  c.snd_nxt = isn;
  return c;
}

// The owner as the lcore's SYN found it: its ISN, options and the gateway's address.
inline Endpoint make_owner(const Sent& syn, uint32_t isn = 0x70000000, uint32_t ip = kOwnerIp,
                           const net::MacAddr& mac = kOwnerMac) {
  Endpoint o;
  o.mac = mac;
  o.gw_mac = kPort1Mac;
  o.port_id = 1;
  o.ip = ip;
  o.tcp_port = syn.p.dst_port;
  o.peer_ip = syn.p.src_ip;
  o.peer_port = syn.p.src_port;
  o.isn = isn;
  o.snd_nxt = isn;
  o.rcv_nxt = syn.p.seq + 1;
  o.wscale = 9;
  o.ts_value = 900000;
  o.ts_echo = syn.p.options.timestamps.value;
  return o;
}

inline std::string stomp_frame(std::string_view command,
                               const std::vector<std::pair<std::string, std::string>>& headers,
                               std::string_view body = {}) {
  std::string f(command);
  f += '\n';
  for (const auto& [k, v] : headers)
    f.append(k).append(":").append(v).append("\n");
  f += '\n';
  f += body;
  f += '\0';
  return f;
}

inline const std::string kConnect = stomp_frame(
    "CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "10000,10000"}});
inline const std::string kSendQ1 = stomp_frame(
    "SEND", {{"destination", "/queue/q1"}, {"receipt", "r1"}, {"content-length", "5"}}, "hello");
inline const std::string kOwnerConnected =
    stomp_frame("CONNECTED", {{"version", "1.2"}, {"server", "RabbitMQ/3.10"}});

// Where the owner leg of a session sits: the lcore port the owner is behind and that port's
// MAC (the defaults match default_config()).
struct OwnerSide {
  uint16_t port_id = 1;
  net::MacAddr gw_mac = kPort1Mac;
  // What the owner's SYN-ACK offers.
  std::optional<uint8_t> wscale = 9;
  bool timestamps = true;
  uint32_t isn = 0x70000000;
  uint32_t ts_value = 900000;
};

struct Spliced {
  std::optional<Endpoint> owner;  // set when the session reached splice mode
  std::string error;              // otherwise: the step that went wrong
};

// Takes `client` through the whole delayed-binding path on any lcore and pool, every frame
// copied into a buffer of `pool` (so an lcore over mbufs frees what it drops into the right
// pool): SYN, cookie SYN-ACK, ACK, CONNECT, CONNECTED, SEND, owner SYN, owner SYN-ACK,
// replay, owner CONNECTED. The lcore must know the owner's MAC (add_neighbor) and route
// the owner's address to `owner.port_id`; the router picks the owner's address.
inline Spliced splice_session(engine::Lcore& lcore, engine::FramePool& pool, Endpoint& client,
                              uint64_t now_ns, const OwnerSide& owner_side = {}) {
  Spliced r;
  const auto deliver = [&](std::span<const uint8_t> bytes, uint16_t port) {
    Frame* f = copy_in(pool, bytes, port);
    if (f == nullptr) return std::vector<Sent>{};
    Frame* frames[] = {f};
    lcore.burst(frames, now_ns);
    return take_sent(lcore, pool);
  };
  const auto tcp_to = [](const std::vector<Sent>& out, uint16_t port) {
    std::vector<Sent> on;
    for (const Sent& s : out)
      if (s.port == port && s.tcp()) on.push_back(s);
    return on;
  };

  auto out = deliver(client.segment(net::kSyn), client.port_id);
  if (out.size() != 1 || !out[0].tcp() || !out[0].has(net::kSyn) || !out[0].has(net::kAck)) {
    r.error = "the client's SYN got no SYN-ACK";
    return r;
  }
  client.snd_nxt = client.isn + 1;
  client.receive(out[0]);
  if (!deliver(client.segment(net::kAck), client.port_id).empty()) {
    r.error = "the handshake's ACK got an answer";
    return r;
  }
  out = deliver(client.data(kConnect), client.port_id);
  if (out.size() != 1 || out[0].payload().rfind("CONNECTED\n", 0) != 0) {
    r.error = "CONNECT got no CONNECTED";
    return r;
  }
  client.receive(out[0]);
  out = deliver(client.data(kSendQ1), client.port_id);
  const std::vector<Sent> syns = tcp_to(out, owner_side.port_id);
  if (syns.size() != 1 || !syns[0].has(net::kSyn) || syns[0].has(net::kAck)) {
    r.error = "SEND did not make the lcore connect to the owner";
    return r;
  }
  Endpoint owner = make_owner(syns[0], owner_side.isn);
  owner.ts_value = owner_side.ts_value;
  owner.port_id = owner_side.port_id;
  owner.gw_mac = owner_side.gw_mac;
  owner.wscale = owner_side.wscale;
  owner.timestamps = owner_side.timestamps;
  out = deliver(owner.segment(net::kSyn | net::kAck), owner.port_id);
  owner.snd_nxt = owner.isn + 1;
  const std::vector<Sent> replay = tcp_to(out, owner.port_id);
  if (replay.empty()) {
    r.error = "the owner's SYN-ACK got no replay";
    return r;
  }
  for (const Sent& s : replay)
    owner.receive(s);
  out = deliver(owner.data(kOwnerConnected), owner.port_id);
  if (tcp_to(out, owner.port_id).size() != 1) {
    r.error = "the owner's CONNECTED was not acknowledged";
    return r;
  }
  if (lcore.flow_state(flow::Tuple{client.ip, client.peer_ip, client.tcp_port, client.peer_port}) !=
      engine::detail::FlowState::kSpliced) {
    r.error = "the owner's CONNECTED did not splice the session";
    return r;
  }
  r.owner = owner;
  return r;
}

}  // namespace sluice::dpdk::sim
