// Session setup on one lcore of the DPDK engine (issue 7): sessions through the whole
// delayed-binding path (SYN, cookie SYN-ACK, ACK, CONNECT, CONNECTED, SEND, owner SYN, owner
// SYN-ACK, replay, owner CONNECTED) to splice mode, with simulated clients and owners in the
// same process, each then reset by its client and reclaimed by the lcore's timers after the
// linger. Only the lcore's work (burst, tick, take_tx) is timed, not the peers' building and
// parsing of frames. Prints sessions/s per lcore against the target (500,000; ProxyEngine, the
// closest published DPDK delayed-binding proxy, reports about 365,000 per core).
// Usage: splicer_setup_bench [--sessions=N] [--seconds=S]  (--benchmark_* flags are accepted
// and ignored but for a short smoke run: CI passes --benchmark_min_time). Needs no DPDK.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "dataplane/dpdk/engine/lcore.h"
#include "tests/dpdk_sim/sim.h"

namespace {

using namespace sluice;
using namespace sluice::dpdk::sim;
namespace net = sluice::dpdk::net;
using Clock = std::chrono::steady_clock;

constexpr double kTargetPerLcore = 500'000;
constexpr uint64_t kSessionsDefault = 200'000;
constexpr uint64_t kSessionsSmoke = 2'000;
constexpr double kSecondsMaxDefault = 10.0;  // wall-clock bound, peers included
// Sessions started together, each stage of theirs delivered in bursts of kBurst frames, as a
// poll-mode driver would hand them over.
constexpr size_t kBatch = 32;
constexpr size_t kBurst = 32;
// Simulated time per batch: one timer tick. The lcore reclaims a reset flow after
// reset_linger_ms (2 s), so about 2000 batches' flows linger at once: the flow table and
// timer wheel run with tens of thousands of live entries, as they would at a high setup rate.
constexpr uint64_t kBatchNs = 1'000'000;
constexpr uint32_t kLocalIps = 4;  // owner-leg sources: 4 x 40,000 ports, above the lingerers

bool parse_u64(std::string_view text, uint64_t& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && out > 0;
}

dpdk::engine::LcoreConfig bench_config() {
  dpdk::engine::LcoreConfig c = default_config();
  c.flows_max = 1u << 17;
  c.prelude_flows_max = 1024;
  c.local_ips.clear();
  for (uint32_t i = 0; i < kLocalIps; ++i)
    c.local_ips.push_back(kLocalIp + i);
  c.local_port_min = 20000;
  c.local_port_max = 59999;
  return c;
}

struct Session {
  Endpoint client;
  Endpoint owner;
  bool has_owner = false;
};

// The lcore, its heap pool and router, the simulated clock and the time the lcore spent.
class Driver {
 public:
  Driver() : config_(bench_config()) {
    lcore_ = std::make_unique<dpdk::engine::Lcore>(config_, router_, pool_, now_ns_);
    lcore_->add_neighbor(kOwnerIp, kOwnerMac);
  }

  // Delivers `frames` (bytes, rx port) in bursts; returns what the lcore sent, parsed.
  std::vector<Sent> deliver(const std::vector<std::pair<std::vector<uint8_t>, uint16_t>>& frames) {
    std::vector<Sent> out;
    Frame* rx[kBurst];
    for (size_t at = 0; at < frames.size(); at += kBurst) {
      const size_t n = std::min(kBurst, frames.size() - at);
      for (size_t i = 0; i < n; ++i)
        rx[i] = pool_.frame(frames[at + i].first, frames[at + i].second);
      const Clock::time_point t0 = Clock::now();
      lcore_->burst(std::span<Frame*>(rx, n), now_ns_);
      const std::span<Frame*> tx = lcore_->take_tx();
      lcore_ns_ += uint64_t(std::chrono::nanoseconds(Clock::now() - t0).count());
      pending_.assign(tx.begin(), tx.end());
      for (Frame* f : pending_) {
        Sent s;
        s.port = f->port;
        s.bytes.assign(f->data, f->data + f->len);
        s.parsed = net::parse(s.bytes, net::ParseOptions{}, &s.p);
        out.push_back(std::move(s));
        pool_.free(f);
      }
    }
    return out;
  }

  // Moves the clock and runs the timers (what they send is freed: only resets to clients
  // that are gone).
  void advance(uint64_t ns) {
    now_ns_ += ns;
    const Clock::time_point t0 = Clock::now();
    lcore_->tick(now_ns_);
    const std::span<Frame*> tx = lcore_->take_tx();
    lcore_ns_ += uint64_t(std::chrono::nanoseconds(Clock::now() - t0).count());
    for (Frame* f : tx)
      pool_.free(f);
  }

  const dpdk::engine::Lcore& lcore() const { return *lcore_; }
  const HeapPool& pool() const { return pool_; }
  uint64_t lcore_ns() const { return lcore_ns_; }

 private:
  dpdk::engine::LcoreConfig config_;
  HeapPool pool_;
  ScriptedRouter router_;
  uint64_t now_ns_ = 1'000'000'000'000;  // 1000 s, as sim::Bench
  std::unique_ptr<dpdk::engine::Lcore> lcore_;
  std::vector<Frame*> pending_;
  uint64_t lcore_ns_ = 0;
};

// The session a frame the lcore sent to a client belongs to (nullptr: none of the batch).
Session* to_client(std::vector<Session>& batch, const Sent& s) {
  for (Session& x : batch)
    if (s.p.dst_ip == x.client.ip && s.p.dst_port == x.client.tcp_port) return &x;
  return nullptr;
}

Session* to_owner(std::vector<Session>& batch, const Sent& s) {
  for (Session& x : batch)
    if (x.has_owner && s.p.src_ip == x.owner.peer_ip && s.p.src_port == x.owner.peer_port)
      return &x;
  return nullptr;
}

using Frames = std::vector<std::pair<std::vector<uint8_t>, uint16_t>>;

// One batch of sessions from SYN to the client's reset; false (with the reason on stderr) when
// the lcore did not answer as the protocol says.
bool run_batch(Driver& d, std::vector<Session>& batch) {
  const auto fail = [](const char* what) {
    std::fprintf(stderr, "splicer_setup_bench: %s\n", what);
    return false;
  };
  Frames in;
  for (Session& x : batch)
    in.emplace_back(x.client.segment(net::kSyn), x.client.port_id);
  size_t answered = 0;
  for (const Sent& s : d.deliver(in)) {
    Session* x = to_client(batch, s);
    if (x == nullptr || !s.tcp() || !s.has(net::kSyn) || !s.has(net::kAck)) continue;
    x->client.snd_nxt = x->client.isn + 1;
    x->client.receive(s);
    ++answered;
  }
  if (answered != batch.size()) return fail("a SYN got no SYN-ACK");

  // The handshake's ACK and the CONNECT back to back, as a client sends them.
  in.clear();
  for (Session& x : batch) {
    in.emplace_back(x.client.segment(net::kAck), x.client.port_id);
    in.emplace_back(x.client.data(kConnect), x.client.port_id);
  }
  answered = 0;
  for (const Sent& s : d.deliver(in)) {
    Session* x = to_client(batch, s);
    if (x == nullptr || !s.tcp() || s.payload().rfind("CONNECTED\n", 0) != 0) continue;
    x->client.receive(s);
    ++answered;
  }
  if (answered != batch.size()) return fail("a CONNECT got no CONNECTED");

  in.clear();
  for (Session& x : batch)
    in.emplace_back(x.client.data(kSendQ1), x.client.port_id);
  answered = 0;
  for (const Sent& s : d.deliver(in)) {
    if (!s.tcp()) continue;
    if (s.port == 0) {
      if (Session* x = to_client(batch, s)) x->client.receive(s);
      continue;
    }
    if (!s.has(net::kSyn)) continue;
    for (Session& x : batch) {
      if (!x.has_owner && s.p.seq == x.client.isn) {
        x.owner = make_owner(s, 0x70000000u + x.client.isn / 3);
        x.has_owner = true;
        ++answered;
        break;
      }
    }
  }
  if (answered != batch.size()) return fail("a SEND did not make the lcore connect to the owner");

  in.clear();
  for (Session& x : batch) {
    in.emplace_back(x.owner.segment(net::kSyn | net::kAck), x.owner.port_id);
    x.owner.snd_nxt = x.owner.isn + 1;
  }
  for (const Sent& s : d.deliver(in)) {
    if (Session* x = s.tcp() && s.port == 1 ? to_owner(batch, s) : nullptr) x->owner.receive(s);
  }

  // The owner acknowledges the replay and sends CONNECTED: splice.
  in.clear();
  for (Session& x : batch)
    in.emplace_back(x.owner.data(kOwnerConnected), x.owner.port_id);
  answered = 0;
  for (const Sent& s : d.deliver(in)) {
    if (s.tcp() && s.port == 1 && to_owner(batch, s) != nullptr) ++answered;
  }
  if (answered != batch.size()) return fail("an owner's CONNECTED was not acknowledged");

  // The client resets: forwarded to the owner, the flow lingers and the timers reclaim it.
  in.clear();
  for (Session& x : batch)
    in.emplace_back(x.client.segment(net::kRst | net::kAck), x.client.port_id);
  answered = 0;
  for (const Sent& s : d.deliver(in)) {
    if (s.tcp() && s.port == 1 && s.has(net::kRst)) ++answered;
  }
  if (answered != batch.size()) return fail("a client's RST did not reach its owner");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t sessions = kSessionsDefault;
  double seconds_max = kSecondsMaxDefault;
  bool smoke = false;
  bool sessions_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    uint64_t value = 0;
    if (arg.starts_with("--benchmark_")) {
      smoke = true;
    } else if (arg.starts_with("--sessions=") && parse_u64(arg.substr(11), value)) {
      sessions = value;
      sessions_given = true;
    } else if (arg.starts_with("--seconds=") && parse_u64(arg.substr(10), value)) {
      seconds_max = double(value);
    } else {
      std::fprintf(stderr, "splicer_setup_bench: unknown or bad argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (smoke && !sessions_given) sessions = kSessionsSmoke;

  Driver d;
  const Clock::time_point start = Clock::now();
  uint64_t started = 0;
  bool ok = true;
  std::vector<Session> batch;
  while (started < sessions) {
    if (std::chrono::duration<double>(Clock::now() - start).count() > seconds_max) break;
    batch.clear();
    const uint64_t n = std::min<uint64_t>(kBatch, sessions - started);
    for (uint64_t i = 0; i < n; ++i) {
      // Distinct client tuples for 15 million sessions: 60,000 ports on each of 250 addresses.
      const uint64_t k = started + i;
      Session x;
      x.client = make_client(uint16_t(1024 + k % 60'000), uint32_t(0x10000000u + k * 100'003u));
      x.client.ip = ip4(10, 0, 1, uint8_t(2 + (k / 60'000) % 250));
      batch.push_back(x);
    }
    started += n;
    if (!run_batch(d, batch)) {
      ok = false;
      break;
    }
    d.advance(kBatchNs);
  }
  // The last lingering flows: the reclaiming is the lcore's work too.
  for (int i = 0; i < 2100 && d.lcore().flows() != 0; ++i)
    d.advance(kBatchNs);
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();

  const dpdk::engine::LcoreCounters& c = d.lcore().counters();
  const double lcore_s = double(d.lcore_ns()) / 1e9;
  const double per_lcore = lcore_s > 0 ? double(c.spliced) / lcore_s : 0;
  const double per_wall = wall_s > 0 ? double(c.spliced) / wall_s : 0;
  std::printf(
      "splicer_setup: sessions through SYN cookie, prelude, bind, owner connect, replay and "
      "greeting to splice mode, then a client RST (reclaimed after the %u ms linger); 1 lcore, "
      "simulated peers in-process, batches of %zu sessions, bursts of %zu frames\n",
      bench_config().reset_linger_ms, kBatch, kBurst);
  std::printf("  sessions spliced           %llu of %llu started (%llu asked)\n",
              static_cast<unsigned long long>(c.spliced), static_cast<unsigned long long>(started),
              static_cast<unsigned long long>(sessions));
  std::printf("  lcore time                 %.3f s (burst + tick + take_tx only)\n", lcore_s);
  std::printf(
      "  sessions/s per lcore       %10.0f  target >= 500000 (ProxyEngine reports "
      "~365,000 per core): %s\n",
      per_lcore, per_lcore >= kTargetPerLcore ? "met" : "NOT met");
  std::printf("  sessions/s wall (peers)    %10.0f  (%.3f s, simulated peers included)\n", per_wall,
              wall_s);
  std::printf("  frames in/out              %llu / %llu, flows left %u, frames outstanding %zu\n",
              static_cast<unsigned long long>(c.rx_frames),
              static_cast<unsigned long long>(c.tx_frames), d.lcore().flows(),
              d.pool().outstanding());
  if (!ok || c.spliced != started || started == 0 || d.lcore().flows() != 0 ||
      d.pool().outstanding() != 0) {
    std::printf("  FAILED: not every session reached splice mode and was reclaimed\n");
    return 1;
  }
  return 0;
}
