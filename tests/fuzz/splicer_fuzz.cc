// Fuzz target for the DPDK splicer's flow state machine: the input scripts clients, owners and
// the clock against one lcore (well-formed segments at fuzzed sequence numbers, fuzzed STOMP
// bytes, raw and corrupted frames, route changes, and a step that takes a client the whole way
// to splice mode, so that the splice paths are fuzzed too). Checks: no crash or sanitizer
// report, every frame returns to the pool, the flow limits hold, and every flow ends by its
// deadlines. A second lcore with the established-flow path switched off takes the same script,
// and a third takes it as the DPDK driver delivers frames (the fast path first, Lcore::fast):
// all must send the same frames, byte for byte.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tests/dpdk_sim/sim.h"

namespace {

namespace net = sluice::dpdk::net;
namespace engine = sluice::dpdk::engine;
namespace session = sluice::session;
using namespace sluice::dpdk::sim;

constexpr size_t kClients = 3;
constexpr size_t kStepsMax = 256;

void check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "splicer_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

engine::LcoreConfig fuzz_config(bool established_path, bool eager = false) {
  engine::LcoreConfig c = default_config();
  c.established_path = established_path;
  // The login check at CONNECT, its node the owner's: the held connection and its keeping.
  if (eager) c.session.login_check = sluice::session::LoginCheck::kEager;
  c.flows_max = 8;
  c.prelude_flows_max = 4;
  c.local_port_max = c.local_port_min + 3;  // port exhaustion is reachable
  c.established_idle_ms = 20'000;
  c.fin_timeout_ms = 5'000;
  c.session.prelude_bytes_max = 4096;
  c.session.frame_limits.frame_bytes_max = 4096;
  c.session.frame_limits.header_line_bytes_max = 1024;
  c.session.frame_limits.body_bytes_max = 4096;
  c.ack_storm_max = 4;
  c.parked_frames_max = 10;  // below 4 binding flows' 8 each: the lcore-wide limit is reachable
  return c;
}

struct World {
  explicit World(bool eager)
      : b{fuzz_config(true, eager)},
        g{fuzz_config(false, eager)},  // every segment through the general parse and dispatch
        f{fuzz_config(true, eager)} {  // delivered as the driver does: Lcore::fast first
    for (Bench* x : {&b, &g, &f}) {
      x->lcore->add_neighbor(kOwnerIp, kOwnerMac);
      x->lcore->add_neighbor(kSpillIp, kSpillMac);
      x->router.login_nodes = {x->router.target};
    }
    for (size_t i = 0; i < kClients; ++i)
      clients.push_back(make_client(uint16_t(40000 + i), 0x10000000u * uint32_t(i + 1)));
  }

  Bench b;
  Bench g;
  Bench f;
  std::vector<Endpoint> clients;
  std::map<uint16_t, Endpoint> owners;  // by the gateway's local port

  // What `b` sent, checked against what `g` and `f` sent for the same input.
  static std::vector<Sent> same(std::vector<Sent> out, const std::vector<Sent>& general,
                                const std::vector<Sent>& driver) {
    check(out.size() == general.size(), "the established-flow path sent another number of frames");
    check(driver.size() == general.size(), "the fast path sent another number of frames");
    for (size_t i = 0; i < out.size(); ++i) {
      check(out[i].port == general[i].port && out[i].bytes == general[i].bytes,
            "the established-flow path sent another frame than the general path");
      check(driver[i].port == general[i].port && driver[i].bytes == general[i].bytes,
            "the fast path sent another frame than the general path");
    }
    return out;
  }
  std::vector<Sent> deliver(std::span<const uint8_t> bytes, uint16_t port) {
    std::vector<Sent> out = b.deliver(bytes, port);
    std::vector<Sent> general = g.deliver(bytes, port);
    return same(std::move(out), general, f.deliver_as_driver({f.pool.frame(bytes, port)}));
  }
  std::vector<Sent> advance_ms(uint64_t ms) {
    std::vector<Sent> out = b.advance_ms(ms);
    std::vector<Sent> general = g.advance_ms(ms);
    return same(std::move(out), general, f.advance_ms(ms));
  }
  std::vector<Sent> jump_ms(uint64_t ms) {
    std::vector<Sent> out = b.jump_ms(ms);
    std::vector<Sent> general = g.jump_ms(ms);
    return same(std::move(out), general, f.jump_ms(ms));
  }
  // SYN, ACK, CONNECT, SEND; the owner's SYN-ACK and CONNECTED; then an ACK each way, which
  // lets the lcores retire both sequence maps' edits. Each step as any other (deliver, take):
  // it splices only when the route and the flows' states allow.
  void splice(Endpoint& c) {
    c.snd_nxt = c.isn;
    take(deliver(c.segment(net::kSyn), 0));
    c.snd_nxt = c.isn + 1;
    take(deliver(c.segment(net::kAck), 0));
    take(deliver(c.data(kConnect), 0));
    take(deliver(c.data(kSendQ1), 0));
    for (auto& [local_port, o] : owners) {
      // The owner leg starts at the client's ISN; a fresh one has not answered yet.
      if (o.rcv_nxt != c.isn + 1 || o.snd_nxt != o.isn) continue;
      take(deliver(o.segment(net::kSyn | net::kAck, {}, o.isn), 1));
      o.snd_nxt = o.isn + 1;
      take(deliver(o.data(kOwnerConnected), 1));
      take(deliver(o.segment(net::kAck), 1));
      take(deliver(c.segment(net::kAck), 0));
      break;
    }
  }
  void route(const session::Route& t) { b.router.target = g.router.target = f.router.target = t; }

  void take(std::vector<Sent> out) {
    check(b.lcore->flows() == g.lcore->flows() &&
              b.lcore->lingering_flows() == g.lcore->lingering_flows() &&
              b.lcore->parked_frames() == g.lcore->parked_frames(),
          "the established-flow path left other flows than the general path");
    check(f.lcore->flows() == g.lcore->flows() &&
              f.lcore->lingering_flows() == g.lcore->lingering_flows() &&
              f.lcore->parked_frames() == g.lcore->parked_frames(),
          "the fast path left other flows than the general path");
    check(f.pool.outstanding() == f.lcore->parked_frames(), "a frame did not return to the pool");
    // Only the segments binding flows hold stay out between bursts, within their limits.
    check(b.pool.outstanding() == b.lcore->parked_frames(), "a frame did not return to the pool");
    check(b.lcore->parked_frames() <= b.config.parked_frames_max, "parked_frames_max exceeded");
    check(b.lcore->flows() <= b.config.flows_max, "flows_max exceeded");
    check(b.lcore->prelude_flows() <= b.config.prelude_flows_max, "prelude_flows_max exceeded");
    check(b.lcore->lingering_flows() + b.lcore->prelude_flows() <= b.lcore->flows(),
          "lingering or prelude flows counted beyond the flows");
    for (const Sent& s : out) {
      if (!s.tcp()) continue;
      if (s.port == 0) {
        for (Endpoint& c : clients)
          if (s.p.dst_port == c.tcp_port) c.receive(s);
      } else if (s.has(net::kSyn) && !s.has(net::kAck)) {
        owners[s.p.src_port] = make_owner(s, 0x70000000u + s.p.src_port, s.p.dst_ip,
                                          s.p.dst_ip == kSpillIp ? kSpillMac : kOwnerMac);
      } else if (auto it = owners.find(s.p.src_port); it != owners.end()) {
        it->second.receive(s);
      }
    }
  }
};

std::string script_bytes(FuzzedDataProvider& in) {
  static const std::string kScripts[] = {
      kConnect,
      kSendQ1,
      stomp_frame("SUBSCRIBE", {{"destination", "/queue/q2"}, {"id", "1"}}),
      stomp_frame("DISCONNECT", {{"receipt", "x"}}),
      stomp_frame("STOMP", {{"accept-version", "1.0,1.1"}, {"host", "v"}}),
      kOwnerConnected,
      stomp_frame("ERROR", {{"message", "no"}}),
      "\n",
  };
  const std::string& s = kScripts[in.ConsumeIntegralInRange<size_t>(0, std::size(kScripts) - 1)];
  if (in.ConsumeBool()) return in.ConsumeRandomLengthString(512);
  const size_t from = in.ConsumeIntegralInRange<size_t>(0, s.size());
  const size_t n = in.ConsumeIntegralInRange<size_t>(0, s.size() - from);
  return s.substr(from, n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const sluice::Result<> config_valid = fuzz_config(true).validate();
  check(config_valid.has_value(), config_valid ? "" : config_valid.error().message.c_str());
  FuzzedDataProvider in(data, size);
  World w(in.ConsumeBool());
  for (size_t step = 0; step < kStepsMax && in.remaining_bytes() > 0; ++step) {
    Endpoint& c = w.clients[in.ConsumeIntegralInRange<size_t>(0, kClients - 1)];
    Endpoint* o = nullptr;
    if (!w.owners.empty()) {
      auto it = w.owners.begin();
      std::advance(it, in.ConsumeIntegralInRange<size_t>(0, w.owners.size() - 1));
      o = &it->second;
    }
    const int32_t seq_shift = in.ConsumeBool() ? in.ConsumeIntegralInRange<int32_t>(-600, 600) : 0;
    switch (in.ConsumeIntegralInRange<int>(0, 14)) {
      case 0:
        c.snd_nxt = c.isn;
        w.take(w.deliver(c.segment(net::kSyn), 0));
        c.snd_nxt = c.isn + 1;
        break;
      case 1:
        w.take(w.deliver(c.segment(net::kAck, {}, c.snd_nxt + uint32_t(seq_shift)), 0));
        break;
      case 2: {
        const std::string bytes = script_bytes(in);
        w.take(
            w.deliver(c.segment(net::kAck | net::kPsh, bytes, c.snd_nxt + uint32_t(seq_shift)), 0));
        if (seq_shift == 0) c.snd_nxt += uint32_t(bytes.size());
        break;
      }
      case 3:
        w.take(w.deliver(c.segment(net::kAck | net::kFin, {}, c.snd_nxt + uint32_t(seq_shift)), 0));
        if (seq_shift == 0) c.snd_nxt += 1;
        break;
      case 4:
        w.take(w.deliver(c.segment(net::kRst | (in.ConsumeBool() ? net::kAck : 0), {},
                                   c.snd_nxt + uint32_t(seq_shift)),
                         0));
        break;
      case 5:
        if (o != nullptr) {
          w.take(w.deliver(o->segment(net::kSyn | net::kAck, {}, o->isn), 1));
          o->snd_nxt = o->isn + 1;
        }
        break;
      case 6:
        if (o != nullptr) {
          const std::string bytes = script_bytes(in);
          w.take(w.deliver(
              o->segment(net::kAck | net::kPsh, bytes, o->snd_nxt + uint32_t(seq_shift)), 1));
          if (seq_shift == 0) o->snd_nxt += uint32_t(bytes.size());
        }
        break;
      case 7:
        if (o != nullptr) {
          const uint8_t flags = in.PickValueInArray<uint8_t>(
              {net::kAck, net::kAck | net::kFin, net::kRst, net::kRst | net::kAck});
          w.take(w.deliver(o->segment(flags, {}, o->snd_nxt + uint32_t(seq_shift)), 1));
          if ((flags & net::kFin) && seq_shift == 0) o->snd_nxt += 1;
        }
        break;
      case 8:
        w.take(w.advance_ms(in.ConsumeIntegralInRange<uint64_t>(1, 400)));
        break;
      case 9:
        w.take(w.jump_ms(in.ConsumeIntegralInRange<uint64_t>(1, 3'000'000)));
        break;
      case 10: {
        // A raw frame.
        const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange<size_t>(0, 200));
        w.take(w.deliver(bytes, uint16_t(in.ConsumeIntegralInRange<int>(0, 1))));
        break;
      }
      case 11: {
        // A well-formed segment with one byte changed.
        auto bytes = c.segment(net::kAck | net::kPsh, script_bytes(in));
        if (!bytes.empty()) {
          bytes[in.ConsumeIntegralInRange<size_t>(0, bytes.size() - 1)] ^=
              uint8_t(in.ConsumeIntegralInRange<int>(1, 255));
        }
        w.take(w.deliver(bytes, 0));
        break;
      }
      case 12: {
        const int k = in.ConsumeIntegralInRange<int>(0, 2);
        w.route(k == 0 ? session::Route{session::Route::Kind::kOwner, 1, kOwnerIp, kOwnerPort, {}}
                : k == 1
                    ? session::Route{session::Route::Kind::kSpill, UINT32_MAX, 0, 0, {}}
                    : session::Route{session::Route::Kind::kRefuse, UINT32_MAX, 0, 0, "refused"});
        break;
      }
      case 13:
        // The client acknowledges what it has and changes its window.
        c.window = in.ConsumeIntegral<uint16_t>();
        w.take(w.deliver(c.segment(net::kAck), 0));
        break;
      case 14:
        // The client taken along the whole delayed-binding path in one step, which random
        // steps almost never find: then the fuzzed steps after it work on a spliced flow.
        w.splice(c);
        break;
    }
  }
  // Every state has a deadline: with the clock run far enough, every flow ends.
  for (int i = 0; i < 6; ++i)
    w.take(w.jump_ms(3'600'000));
  check(w.b.lcore->flows() == 0, "a flow outlived every deadline");
  check(w.b.lcore->prelude_flows() == 0, "a prelude slot was not returned");
  check(w.b.lcore->lingering_flows() == 0, "a lingering flow was not uncounted when freed");
  check(w.b.lcore->parked_frames() == 0, "a held segment outlived its flow");
  return 0;
}
