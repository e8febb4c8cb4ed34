// The DPDK engine in sluiced: EAL start-up from [dpdk], the ports, the splicer's lcore on a
// thread of its own with a replica of control's decisions, snapshots for the admin API.
#include "gateway/dpdk_engine.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <span>
#include <thread>

#include "control/log.h"
#include "dataplane/dpdk/dpdk.h"
#include "dataplane/session/prelude.h"
#include "gateway/login_cache.h"
#include "gateway/metrics_families.h"

namespace sluice::gateway {

namespace engine = dpdk::engine;
namespace port = dpdk::port;

namespace {

constexpr uint64_t kRouterPollNs = 10'000'000;  // control's decisions reach the lcore this often
constexpr uint64_t kSnapshotNs = 100'000'000;   // what the admin API sees is this fresh
// Flow table entries the lcore looks at per tick when it lists its sessions: a few hundred
// microseconds at most, so that a large table is walked over several ticks, never in one.
constexpr uint32_t kListingStep = 4096;
constexpr uint32_t kMbufCache = 256;

struct Snapshot {
  engine::LcoreCounters counters;
  port::LoopCounters loop;
  uint32_t flows = 0;
  uint32_t prelude_flows = 0;
  uint32_t lingering_flows = 0;
};

// The admin API's requests for the lcore's sessions and the lcore's answers: a request is a
// ticket, answered once the lcore has walked its flow table, a step per tick
// (DpdkEngine::sessions). The requests come from one thread, the admin API's.
struct FlowViews {
  std::atomic<uint64_t> requested{0};
  std::atomic<size_t> limit{0};  // of the last request, stored before its ticket
  std::mutex mutex;
  std::condition_variable answered_cv;
  uint64_t answered = 0;  // the last ticket answered
  size_t total = 0;       // the sessions found, for the answer's total
  std::vector<control::SessionInfo> sessions;
};

std::string endpoint_text(uint32_t ip, uint16_t port) {
  char text[INET_ADDRSTRLEN] = {};
  const in_addr a{htonl(ip)};
  inet_ntop(AF_INET, &a, text, sizeof text);
  return std::string(text) + ":" + std::to_string(port);
}

// The lcore and what runs beside it on its thread: control's messages and the snapshots.
class LcoreHandler final : public engine::BurstHandler {
 public:
  LcoreHandler(engine::Lcore& lcore, control::ReplicaRouter& router, std::mutex& mutex,
               Snapshot& snapshot, FlowViews& views)
      : lcore_(lcore), router_(router), mutex_(mutex), snapshot_(snapshot), views_(views) {}
  void set_loop(const port::LcoreLoop* loop) { loop_ = loop; }

  void burst(std::span<engine::Frame*> rx, uint64_t now_ns) override { lcore_.burst(rx, now_ns); }
  std::span<engine::Frame*> take_tx() override { return lcore_.take_tx(); }
  bool has_fast_path() const override { return lcore_.has_fast_path(); }
  size_t fast(uint16_t port, std::span<engine::RxBuffer* const> rx, engine::FastRun* runs,
              uint64_t now_ns) override {
    return lcore_.fast(port, rx, runs, now_ns);
  }
  void tick(uint64_t now_ns) override {
    lcore_.tick(now_ns);
    if (now_ns - last_poll_ns_ >= kRouterPollNs) {
      last_poll_ns_ = now_ns;
      router_.poll();
    }
    if (now_ns - last_snapshot_ns_ >= kSnapshotNs) {
      // Never wait for the admin API: a busy lock only delays the snapshot by a period.
      std::unique_lock lock(mutex_, std::try_to_lock);
      if (lock.owns_lock()) {
        last_snapshot_ns_ = now_ns;
        snapshot_.counters = lcore_.counters();
        snapshot_.flows = lcore_.flows();
        snapshot_.prelude_flows = lcore_.prelude_flows();
        snapshot_.lingering_flows = lcore_.lingering_flows();
        if (loop_ != nullptr) snapshot_.loop = loop_->counters();
      }
    }
    // The admin API's request for the sessions: a step of the table per tick, the answer once
    // it is walked. A request that comes while one is walked starts the walk again.
    const uint64_t wanted = views_.requested.load(std::memory_order_acquire);
    if (wanted != views_answered_ && wanted != listing_ticket_) {
      listing_ticket_ = wanted;
      listing_ = engine::Lcore::FlowListing{};
    }
    if (listing_ticket_ != views_answered_ && lcore_.list_flows(listing_, kListingStep)) {
      views_answered_ = listing_ticket_;
      answer_views(listing_ticket_);
    }
  }

 private:
  // Lists the lcore's sessions for the admin API and wakes the thread waiting for `ticket`.
  void answer_views(uint64_t ticket);

  engine::Lcore& lcore_;
  control::ReplicaRouter& router_;
  std::mutex& mutex_;
  Snapshot& snapshot_;
  FlowViews& views_;
  uint64_t views_answered_ = 0;  // the last ticket answered
  uint64_t listing_ticket_ = 0;  // the ticket the walk in listing_ is for
  engine::Lcore::FlowListing listing_;
  const port::LcoreLoop* loop_ = nullptr;
  uint64_t last_poll_ns_ = 0;
  uint64_t last_snapshot_ns_ = 0;
};

void LcoreHandler::answer_views(uint64_t ticket) {
  std::vector<control::SessionInfo> out;
  const size_t total = listing_.found.size();
  const size_t limit = views_.limit.load(std::memory_order_relaxed);
  for (engine::Lcore::FlowView& v : lcore_.flow_views(listing_, limit)) {
    control::SessionInfo i;
    i.id = v.id;  // DpdkAdmin numbers the lcore's worker and puts it in the id's top bits
    i.client = endpoint_text(v.client.src_ip, v.client.src_port);
    i.vhost = std::move(v.vhost);
    i.queue = std::move(v.queue);
    // The spill listener is no owner; an owner is known once the flow binds.
    if (!v.to_spill && v.node != UINT32_MAX) i.owner = std::string(router_.node_name(v.node));
    i.state = std::string(v.state);
    i.bytes_in = v.bytes_in;
    i.bytes_out = v.bytes_out;
    i.age_ms = int64_t(v.age_ms);
    out.push_back(std::move(i));
  }
  listing_ = engine::Lcore::FlowListing{};  // its memory too
  std::lock_guard lock(views_.mutex);
  views_.sessions = std::move(out);
  views_.total = total;
  views_.answered = ticket;
  views_.answered_cv.notify_all();
}

std::string mac_text(const port::Port::MacAddr& m) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4],
                m[5]);
  return buf;
}

}  // namespace

struct DpdkEngine::Impl {
  std::unique_ptr<port::MbufPool> pool;
  std::vector<std::unique_ptr<port::Port>> ports;  // [dpdk] ports, then the exception port
  std::unique_ptr<control::ReplicaRouter> router;
  std::unique_ptr<LoginCache> logins;
  std::unique_ptr<engine::Lcore> lcore;
  std::unique_ptr<LcoreHandler> handler;
  std::unique_ptr<port::LcoreLoop> loop;
  std::vector<port::RxSource> rx;
  std::vector<port::Port*> tx;
  std::thread thread;
  std::atomic<bool> stop{false};
  mutable std::mutex mutex;
  Snapshot snapshot;
  mutable FlowViews views;
};

DpdkEngine::DpdkEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DpdkEngine::~DpdkEngine() {
  stop();
}

namespace {

// The configured ports and the exception port, opened on `pool`, in that order.
Result<std::vector<std::unique_ptr<port::Port>>> open_ports(const control::DpdkConfig& d,
                                                            const std::vector<std::string>& devices,
                                                            port::MbufPool& pool) {
  std::vector<std::unique_ptr<port::Port>> ports;
  for (const std::string& dev : devices) {
    port::PortConfig cfg;
    cfg.device = dev;
    Result<std::unique_ptr<port::Port>> opened = port::Port::open(cfg, pool);
    if (!opened) {
      return failure((dev == d.exception_port ? "dpdk.exception_port: " : "dpdk.ports: ") +
                     opened.error().message);
    }
    ports.push_back(std::move(*opened));
  }
  return ports;
}

// The lcore's settings from the config and the opened ports, with fresh random keys.
Result<engine::LcoreConfig> lcore_config(const control::GatewayConfig& c,
                                         const std::vector<std::string>& devices,
                                         const std::vector<std::unique_ptr<port::Port>>& ports) {
  const control::DpdkConfig& d = c.dpdk;
  auto id_of = [&](const std::string& dev) -> uint16_t {
    for (size_t i = 0; i < devices.size(); ++i)
      if (devices[i] == dev) return ports[i]->id();
    return 0;
  };
  uint16_t max_id = 0;
  for (const auto& p : ports)
    max_id = std::max(max_id, p->id());
  engine::LcoreConfig lc;
  lc.port_macs.resize(size_t(max_id) + 1);
  for (const auto& p : ports)
    std::copy(p->mac().begin(), p->mac().end(), lc.port_macs[p->id()].bytes.begin());
  lc.virtual_ip = d.virtual_ip;
  lc.listen_ports = {c.listen.port};
  lc.local_ips = d.local_ips;
  lc.local_port_min = d.local_port_min;
  lc.local_port_max = d.local_port_max;
  for (const auto& r : d.routes)
    lc.routes.push_back({r.prefix, r.length, r.via, id_of(r.device)});
  lc.spill_ip = d.spill_ip;
  lc.spill_port = d.spill_listen->port;
  if (!d.exception_port.empty()) lc.exception_port = id_of(d.exception_port);
  lc.flows_max = d.flows_max;
  lc.prelude_flows_max = d.prelude_flows_max;
  // Segments held while flows bind take mbufs from the pool rx refills from: a sixteenth.
  lc.parked_frames_max = d.mbufs / 16;
  lc.connect_timeout_ms = c.connect_timeout_ms;
  lc.placements_per_source_per_minute = c.placements_per_source_per_minute;
  lc.session = c.session;
  if (getrandom(lc.cookie_key.data(), lc.cookie_key.size(), 0) != ssize_t(lc.cookie_key.size()) ||
      getrandom(&lc.flow_hash_key, sizeof lc.flow_hash_key, 0) !=
          ssize_t(sizeof lc.flow_hash_key) ||
      getrandom(&lc.local_port_start, sizeof lc.local_port_start, 0) !=
          ssize_t(sizeof lc.local_port_start)) {
    return failure(
        "dpdk: cannot read the SYN cookie and flow hash keys (and the first local port) "
        "from getrandom()");
  }
  if (auto valid = lc.validate(); !valid) return failure("dpdk: " + valid.error().message);
  return lc;
}

}  // namespace

Result<std::unique_ptr<DpdkEngine>> DpdkEngine::open(const control::GatewayConfig& c,
                                                     control::Control::Worker worker,
                                                     control::NodeDirectory& directory) {
  const control::DpdkConfig& d = c.dpdk;
  // The EAL pins the calling thread to its main lcore; every thread sluiced starts later
  // would inherit that. Keep the daemon's own CPU set.
  cpu_set_t cpus;
  const bool have_cpus = pthread_getaffinity_np(pthread_self(), sizeof cpus, &cpus) == 0;
  const Result<> eal = port::eal_init(d.eal_args);
  if (have_cpus) pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
  if (!eal) return failure("dpdk.eal_args: " + eal.error().message);
  auto impl = std::make_unique<Impl>();
  port::MbufPoolConfig pc;
  pc.name = "sluice_mbufs";
  pc.count = d.mbufs;
  pc.cache_size = kMbufCache;
  Result<std::unique_ptr<port::MbufPool>> created = port::MbufPool::create(pc);
  if (!created) return failure("dpdk.mbufs: " + created.error().message);
  impl->pool = std::move(*created);

  std::vector<std::string> devices = d.ports;
  if (!d.exception_port.empty()) devices.push_back(d.exception_port);
  auto ports = open_ports(d, devices, *impl->pool);
  if (!ports) return tl::unexpected(ports.error());
  impl->ports = std::move(*ports);
  Result<engine::LcoreConfig> lc = lcore_config(c, devices, impl->ports);
  if (!lc) return tl::unexpected(lc.error());

  impl->router = std::make_unique<control::ReplicaRouter>(std::move(worker), directory, "dpdk0");
  impl->logins = std::make_unique<LoginCache>(c.login_cache_ms);
  impl->lcore =
      std::make_unique<engine::Lcore>(*lc, *impl->router, *impl->pool, 0, impl->logins.get());
  impl->handler = std::make_unique<LcoreHandler>(*impl->lcore, *impl->router, impl->mutex,
                                                 impl->snapshot, impl->views);
  for (const auto& p : impl->ports) {
    impl->rx.push_back({p.get(), 0});
    impl->tx.push_back(p.get());
  }
  impl->loop = std::make_unique<port::LcoreLoop>(impl->rx, impl->tx, 0, *impl->handler);
  impl->handler->set_loop(impl->loop.get());
  return std::unique_ptr<DpdkEngine>(new DpdkEngine(std::move(impl)));
}

void DpdkEngine::start() {
  Impl& i = *impl_;
  i.thread = std::thread([&i] {
    pthread_setname_np(pthread_self(), "sluice-lcore0");
    i.loop->run(i.stop);
  });
  control::log_event(control::LogLevel::kInfo, "dpdk_started",
                     {{"ports", std::to_string(i.ports.size())}, {"lcores", "1"}});
}

void DpdkEngine::stop() {
  Impl& i = *impl_;
  if (!i.thread.joinable()) return;
  i.stop.store(true);
  i.thread.join();
  for (auto& p : i.ports)
    p->stop();
}

control::DataplaneStatus DpdkEngine::status() const {
  const Impl& i = *impl_;
  control::DataplaneStatus s;
  s.engine = "dpdk";
  for (const auto& p : i.ports) {
    const port::PortStats st = p->stats();
    s.ports.push_back({p->name(), mac_text(p->mac()), st.ipackets, st.opackets, st.ibytes,
                       st.obytes, st.imissed, st.ierrors, st.oerrors, st.rx_nombuf});
  }
  std::lock_guard lock(i.mutex);
  const Snapshot& n = i.snapshot;
  s.lcores.push_back({0, n.flows, n.prelude_flows, n.lingering_flows, n.counters.spliced,
                      n.counters.rx_frames, n.counters.tx_frames, n.loop.tx_dropped});
  return s;
}

namespace {

// A counter family of one sample, as most of the lcore's counters are.
struct CounterRow {
  const char* name;
  const char* help;
  uint64_t value;
};

void counter_families(Families& f, std::span<const CounterRow> rows) {
  for (const CounterRow& c : rows)
    f.one(c.name, "counter", c.help, double(c.value));
}

void flow_gauges(Families& f, const Snapshot& n) {
  f.one("sluice_dpdk_flows", "gauge", "Flows on the DPDK engine's lcores, every state.", n.flows);
  f.one("sluice_dpdk_prelude_flows", "gauge", "Flows in the prelude or binding.", n.prelude_flows);
  f.one("sluice_dpdk_lingering_flows", "gauge",
        "Flows that ended and wait for stragglers (fin_timeout_ms, reset_linger_ms).",
        n.lingering_flows);
}

// Frames, handshakes, binds and placements; tx drops are the ports' and the lcore's tx array's.
void traffic_counters(Families& f, const Snapshot& n) {
  const engine::LcoreCounters& k = n.counters;
  const CounterRow rows[] = {
      {"sluice_dpdk_rx_frames_total", "Frames received.", k.rx_frames},
      {"sluice_dpdk_tx_frames_total", "Frames sent.", k.tx_frames},
      {"sluice_dpdk_tx_dropped_total", "Frames a port's tx ring refused.",
       n.loop.tx_dropped + k.tx_full},
      {"sluice_dpdk_syn_cookies_total", "SYN-ACKs with a cookie sent.", k.syn_cookies_sent},
      {"sluice_dpdk_cookies_bad_total", "ACKs whose cookie did not verify.", k.cookies_bad},
      {"sluice_dpdk_flows_refused_total", "Handshakes refused at flows_max.", k.flows_refused},
      {"sluice_dpdk_spliced_total", "Flows that reached splice mode.", k.spliced},
      {"sluice_dpdk_binds_spill_total", "Sessions sent to the spill listener.", k.binds_spill},
      {"sluice_dpdk_owner_failures_total", "Owner SYNs refused or unanswered (passive health).",
       k.owner_refused + k.owner_timeouts},
      {"sluice_dpdk_retransmits_total", "Segments the gateway sent again.", k.retransmits},
      {"sluice_dpdk_placements_rate_limited_total",
       "Placements not recorded: the client address placed "
       "placement.placements_per_source_per_minute new queues this minute.",
       k.placements_rate_limited},
  };
  counter_families(f, rows);
}

// What the lcore does while it speaks for a session: heart-beats and the login check.
void login_counters(Families& f, const engine::LcoreCounters& k) {
  const CounterRow rows[] = {
      {"sluice_dpdk_heartbeats_sent_total",
       "Heart-beat EOLs the gateway sent for sessions it speaks for (to clients, and to the "
       "login check's held connections).",
       k.heartbeats_sent},
      {"sluice_dpdk_heartbeat_mismatch_allowed_total",
       "Owner CONNECTEDs with other heart-beats than the client was told, the session kept.",
       k.heartbeat_mismatch_allowed},
      {"sluice_dpdk_heartbeat_mismatch_refused_total",
       "Owner CONNECTEDs with stricter heart-beats than the client was told: refused.",
       k.heartbeat_mismatch_refused},
      {"sluice_dpdk_login_accepted_total", "CONNECTs a node accepted at the login check.",
       k.login_accepted},
      {"sluice_dpdk_login_refused_total", "CONNECTs a node refused (its ERROR sent on).",
       k.login_refused},
      {"sluice_dpdk_login_failed_total",
       "Login checks a node could not take (refused, closed, silent): the next node is asked.",
       k.login_failed},
      {"sluice_dpdk_login_cached_total", "CONNECTs answered from the login cache.", k.login_cached},
      {"sluice_dpdk_login_unchecked_total",
       "CONNECTs the gateway answered because no node could check them.", k.login_unchecked},
      {"sluice_dpdk_login_conn_kept_total",
       "Login check connections kept as the owner's (the node owned the destination).",
       k.login_conn_kept},
      {"sluice_dpdk_login_conn_closed_total",
       "Login check connections closed (another owner, a spill, or the node spoke).",
       k.login_conn_closed},
  };
  counter_families(f, rows);
}

// The life of flows and of their segments: fast paths, parking, expiry, resets, drops.
void flow_counters(Families& f, const engine::LcoreCounters& k) {
  const CounterRow rows[] = {
      {"sluice_dpdk_ack_storm_drops_total", "Repeated pure ACKs cut.", k.ack_storm_drops},
      {"sluice_dpdk_established_path_total",
       "Segments of spliced flows rewritten without the general parse and dispatch.",
       k.established_path},
      {"sluice_dpdk_fast_path_total",
       "Of those, segments the driver's fast path rewrote where they were received.", k.fast_path},
      {"sluice_dpdk_binding_parked_total",
       "Client segments held while their flow bound, sent on at the splice.", k.binding_parked},
      {"sluice_dpdk_binding_park_full_total",
       "Client segments not held while their flow bound (limit reached): sent again by the "
       "client.",
       k.binding_park_full},
      {"sluice_dpdk_flows_created_total", "Flows opened by a valid cookie.", k.flows_created},
      {"sluice_dpdk_flows_expired_total",
       "Flows freed by a deadline (idle, connect, prelude, linger).", k.flows_expired},
      {"sluice_dpdk_flows_reopened_total",
       "Client SYNs on a lingering flow's tuple, taken as a new session.", k.flows_reopened},
      {"sluice_dpdk_lingering_evicted_total",
       "Lingering flows freed early for a new flow or owner leg (flow table or local ports full).",
       k.lingering_evicted},
      {"sluice_dpdk_flow_resets_total", "RSTs seen on a spliced flow.", k.flow_resets},
      {"sluice_dpdk_resets_sent_total", "RSTs the gateway sent.", k.resets_sent},
      {"sluice_dpdk_rx_not_handled_total",
       "Valid frames for no flow, address or service of the engine.", k.rx_not_handled},
      {"sluice_dpdk_bad_tcp_checksum_total", "TCP segments with a wrong checksum.",
       k.bad_tcp_checksum},
      {"sluice_dpdk_pool_empty_total", "Frames the gateway could not make.", k.pool_empty},
      {"sluice_dpdk_out_of_order_total",
       "Prelude segments past the next expected byte (dropped, acknowledged again).",
       k.out_of_order},
      {"sluice_dpdk_duplicates_total", "Prelude segments already taken.", k.duplicates},
      {"sluice_dpdk_retransmit_giveups_total",
       "Flows ended because the gateway's own segments were never acknowledged.",
       k.retransmit_giveups},
      {"sluice_dpdk_owner_errors_total", "Owners whose first frame was an ERROR or not STOMP.",
       k.owner_errors},
      {"sluice_dpdk_local_ports_exhausted_total",
       "Owner legs without a free local address and port.", k.local_ports_exhausted},
  };
  counter_families(f, rows);
}

// The families with a label: prelude ends and parser refusals by reason, bytes by direction.
void labelled_families(Families& f, const engine::LcoreCounters& k) {
  f.family("sluice_dpdk_prelude_ends_total", "counter",
           "Preludes the gateway ended itself, by reason.");
  for (size_t r = 0; r < k.prelude_ends.size(); ++r) {
    f.sample("sluice_dpdk_prelude_ends_total",
             std::string("reason=\"") +
                 std::string(session::prelude_end_name(session::PreludeEnd(r))) + "\"",
             double(k.prelude_ends[r]));
  }
  f.family("sluice_dpdk_spliced_bytes_total", "counter", "Payload bytes rewritten in splice mode.");
  f.sample("sluice_dpdk_spliced_bytes_total", "direction=\"client_to_owner\"", double(k.c2o_bytes));
  f.sample("sluice_dpdk_spliced_bytes_total", "direction=\"owner_to_client\"", double(k.o2c_bytes));
  f.family("sluice_dpdk_rx_invalid_total", "counter", "Frames refused by the parser, by reason.");
  for (size_t r = 1; r < k.rx_invalid.size(); ++r) {
    f.sample("sluice_dpdk_rx_invalid_total",
             std::string("reason=\"") + dpdk::net::reason_name(dpdk::net::Reason(r)) + "\"",
             double(k.rx_invalid[r]));
  }
}

}  // namespace

std::string DpdkEngine::metrics_text() const {
  Snapshot n;
  {
    std::lock_guard lock(impl_->mutex);
    n = impl_->snapshot;
  }
  Families f;
  flow_gauges(f, n);
  traffic_counters(f, n);
  login_counters(f, n.counters);
  flow_counters(f, n.counters);
  labelled_families(f, n.counters);
  return f.take();
}

std::optional<std::vector<control::SessionInfo>> DpdkEngine::sessions(
    size_t limit, std::chrono::milliseconds wait, size_t* total) const {
  FlowViews& v = impl_->views;
  v.limit.store(limit, std::memory_order_relaxed);
  const uint64_t ticket = v.requested.fetch_add(1, std::memory_order_acq_rel) + 1;
  std::unique_lock lock(v.mutex);
  if (!v.answered_cv.wait_for(lock, wait, [&] { return v.answered >= ticket; })) {
    return std::nullopt;
  }
  *total = v.total;
  return v.sessions;
}

std::vector<control::SessionInfo> DpdkAdmin::sessions(size_t limit, size_t* total,
                                                      std::vector<uint32_t>* unanswered) {
  std::vector<control::SessionInfo> out = uring_.sessions(limit, total, unanswered);
  size_t found = 0;
  std::optional<std::vector<control::SessionInfo>> flows =
      dpdk_.sessions(limit - std::min(limit, out.size()), kSessionsWait, &found);
  if (!flows) {
    unanswered->push_back(lcore_worker_);
    return out;
  }
  *total += found;
  for (control::SessionInfo& i : *flows) {
    if (out.size() >= limit) break;
    i.worker = lcore_worker_;
    i.id |= uint64_t(lcore_worker_) << 48;  // as the io_uring workers number their sessions
    out.push_back(std::move(i));
  }
  return out;
}

control::SessionTotals DpdkAdmin::totals() {
  control::SessionTotals t = uring_.totals();
  const control::DataplaneStatus s = dpdk_.status();
  for (const auto& l : s.lcores) {
    t.active += l.flows - l.lingering_flows;  // a lingering flow is no longer a session
    t.prelude += l.prelude_flows;
  }
  return t;
}

}  // namespace sluice::gateway
