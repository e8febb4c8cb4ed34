#include "control/router.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <time.h>

#include <cstring>

#include "control/log.h"
#include "control/replica_worker.h"

namespace sluice::control {

namespace {

std::string endpoint_text(uint32_t ip, uint16_t port) {
  char text[INET_ADDRSTRLEN] = {};
  const in_addr a{htonl(ip)};
  inet_ntop(AF_INET, &a, text, sizeof text);
  return std::string(text) + ":" + std::to_string(port);
}

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

Result<> NodeDirectory::set(const std::vector<NodeSpec>& nodes) {
  std::vector<sockaddr_in> addrs;
  std::vector<std::string> names;
  for (const NodeSpec& n : nodes) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(n.port);
    if (inet_pton(AF_INET, n.host.c_str(), &a.sin_addr) != 1) {
      addrinfo hints{};
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      int r = getaddrinfo(n.host.c_str(), nullptr, &hints, &res);
      if (r != 0 || res == nullptr) {
        return failure("nodes: " + n.name + ": cannot resolve host " + n.host + ": " +
                       gai_strerror(r));
      }
      a.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
      freeaddrinfo(res);
    }
    addrs.push_back(a);
    names.push_back(n.name);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  addrs_ = std::move(addrs);
  names_ = std::move(names);
  version_.fetch_add(1, std::memory_order_release);
  return {};
}

void NodeDirectory::copy(std::vector<sockaddr_in>* addrs, std::vector<std::string>* names,
                         uint64_t* version) {
  std::lock_guard<std::mutex> lock(mutex_);
  *addrs = addrs_;
  *names = names_;
  *version = version_.load(std::memory_order_relaxed);
}

ReplicaRouter::ReplicaRouter(Control::Worker worker, NodeDirectory& nodes, std::string label)
    : worker_(std::move(worker)), directory_(nodes), label_(std::move(label)) {
  order_.resize(kNodesMax);
  unsent_.reserve(kBacklogMax);
  refresh_nodes();
}

void ReplicaRouter::refresh_nodes() {
  directory_.copy(&addrs_, &names_, &nodes_version_);
}

void ReplicaRouter::poll() {
  worker_.channel->to_worker.pop_some(
      [this](const ControlToWorker& m) { (void)worker_.replica->apply(m); },
      ReplicaWorker::kApplyPerPass);
  if (directory_.version() != nodes_version_) refresh_nodes();
  size_t sent = 0;
  while (sent < unsent_.size() && worker_.channel->to_control.try_push(unsent_[sent]))
    ++sent;
  unsent_.erase(unsent_.begin(), unsent_.begin() + long(sent));
}

void ReplicaRouter::report(const WorkerToControl& m) {
  if (unsent_.empty() && worker_.channel->to_control.try_push(m)) return;
  if (unsent_.size() < kBacklogMax) {
    unsent_.push_back(m);
  } else {
    ++reports_dropped_;  // the ring counts its refusals too (full_count)
  }
}

bool ReplicaRouter::usable(NodeIndex n) const {
  const Replica& r = *worker_.replica;
  return n != kNoNode && n < addrs_.size() && r.node_health(n) == HealthState::kUp &&
         r.node_admin(n) == AdminState::kUp;
}

session::Route ReplicaRouter::direct(NodeIndex n) {
  session::Route d;
  d.kind = session::Route::Kind::kOwner;
  d.node = n;
  d.ip = ntohl(addrs_[n].sin_addr.s_addr);
  d.port = ntohs(addrs_[n].sin_port);
  return d;
}

session::Route ReplicaRouter::route(const session::QueueKey& key, uint64_t session_hash) {
  const session::Route d = decide(key, session_hash);
  if (log_enabled(LogLevel::kDebug)) log_routed(key, d);
  return d;
}

// One line per routing decision at debug level, with what the replica held for the key: which
// engine thread sent a session where, and why (the drain barrier is the backlog flag).
void ReplicaRouter::log_routed(const session::QueueKey& key, const session::Route& d) const {
  const Replica& r = *worker_.replica;
  const Route route = key.default_route ? Route{} : r.lookup(key.vhost, key.queue);
  const char* kind = d.kind == session::Route::Kind::kOwner   ? "direct"
                     : d.kind == session::Route::Kind::kSpill ? "spill"
                                                              : "refuse";
  const std::string_view node =
      d.kind == session::Route::Kind::kOwner ? node_name(d.node) : std::string_view("-");
  const std::string_view owner =
      route.known && route.owner < names_.size() ? std::string_view(names_[route.owner]) : "-";
  log_event(LogLevel::kDebug, "session_routed",
            {{"router", label_},
             {"vhost", key.vhost},
             {"queue", key.queue},
             {"default_route", key.default_route ? "1" : "0"},
             {"route", kind},
             {"node", node},
             {"owner", owner},
             {"backlog", route.backlog ? "1" : "0"}});
}

session::Route ReplicaRouter::decide(const session::QueueKey& key, uint64_t session_hash) {
  Replica& r = *worker_.replica;
  session::Route refuse;
  refuse.kind = session::Route::Kind::kRefuse;
  if (key.default_route) {
    const NodeIndex best = spread(session_hash);
    if (best == kNoNode) {
      refuse.message = "no node available, retry later";
      return refuse;
    }
    return direct(best);
  }
  Route route = r.lookup(key.vhost, key.queue);
  NodeIndex owner = route.owner;
  if (route.known && route.source == OwnerSource::kPlaced) note_used(key);
  if (!route.known) {
    // Placed only once the owner accepts the session's login (confirm_placement): a session
    // that never logs in leaves nothing behind.
    owner = r.placement_of(key.vhost, key.queue);
    if (owner == kNoNode) {
      refuse.message = r.node_count() == 0 ? std::string_view("no node configured")
                                           : std::string_view("queue or vhost name too long");
      return refuse;
    }
  }
  if (route.backlog) return session::Route{};  // the drain barrier: spill
  if (owner >= addrs_.size()) return session::Route{};
  if (usable(owner)) {
    session::Route d = direct(owner);
    d.placement_pending = !route.known;
    return d;
  }
  if (r.node_admin(owner) == AdminState::kDrain && r.node_health(owner) == HealthState::kUp) {
    // No new sessions on a draining node: the next in the queue's rendezvous order.
    const size_t n = r.node_count();
    r.order(key.vhost, key.queue, std::span<NodeIndex>(order_.data(), n));
    for (size_t i = 0; i < n; ++i) {
      if (!usable(order_[i])) continue;
      session::Route d = direct(order_[i]);
      d.placement_pending = !route.known;
      return d;
    }
  }
  return session::Route{};  // down or in maintenance: spill
}

void ReplicaRouter::note_used(const session::QueueKey& key) {
  const uint64_t h = std::hash<std::string_view>{}(key.vhost) * 31 +
                     std::hash<std::string_view>{}(key.queue) + 1;  // never 0
  UsedSlot& slot = used_[h % kUsedSlots];
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  // a few ns through the vDSO, once a session
  const int64_t now_ms = int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
  if (slot.hash == h && now_ms - slot.reported_ms < Used::kReportIntervalMs) return;
  Used used;
  if (used.key.assign(key.vhost, key.queue) != KeyFit::kFits) return;
  slot.hash = h;
  slot.reported_ms = now_ms;
  report(used);
}

NodeIndex ReplicaRouter::spread(uint64_t session_hash, uint32_t rank) const {
  // Rendezvous of the session over the healthy nodes: the highest mixed score wins; `rank`
  // skips that many of the best (a pass per rank: nodes are few).
  const Replica& r = *worker_.replica;
  auto score = [&](NodeIndex n) {
    uint64_t x = session_hash ^ (uint64_t(n + 1) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return x;
  };
  NodeIndex best = kNoNode;
  uint64_t below = UINT64_MAX;  // scores are distinct per node, so "below" is strict
  for (uint32_t pass = 0; pass <= rank; ++pass) {
    best = kNoNode;
    uint64_t best_score = 0;
    for (size_t i = 0; i < r.node_count(); ++i) {
      const auto n = NodeIndex(i);  // at most kNodesMax nodes
      if (!usable(n)) continue;
      const uint64_t x = score(n);
      if (pass > 0 && x >= below) continue;
      if (best == kNoNode || x > best_score) {
        best = n;
        best_score = x;
      }
    }
    if (best == kNoNode) return kNoNode;
    below = best_score;
  }
  return best;
}

session::Route ReplicaRouter::login_node(std::string_view, uint64_t session_hash,
                                         uint32_t attempt) {
  // Every node of the cluster serves every vhost (RabbitMQ's vhosts are cluster-wide), so any
  // healthy node taking new sessions can check a login.
  const NodeIndex n = spread(session_hash, attempt);
  if (n == kNoNode) return session::Route{};
  return direct(n);
}

void ReplicaRouter::confirm_placement(const session::QueueKey& key, uint32_t node) {
  Replica& r = *worker_.replica;
  if (key.default_route || r.lookup(key.vhost, key.queue).known) return;
  WorkerToControl placed;
  if (r.place_unknown(key.vhost, key.queue, &placed) == kNoNode) return;
  (void)node;  // the same rendezvous node the route gave (control may still choose otherwise)
  report(placed);
}

bool ReplicaRouter::owner_up(const session::QueueKey& key) {
  const Replica& r = *worker_.replica;
  const Route route = r.lookup(key.vhost, key.queue);
  if (!route.known) return false;
  return route.owner < addrs_.size() && r.node_health(route.owner) == HealthState::kUp &&
         r.node_admin(route.owner) != AdminState::kMaintenance;
}

void ReplicaRouter::connect_failed(uint32_t node) {
  if (node >= kNoNode) return;
  report(PassiveFailure{NodeIndex(node)});
}

std::string_view ReplicaRouter::node_name(uint32_t node) const {
  return node < names_.size() ? std::string_view(names_[node]) : std::string_view();
}

void ReplicaRouter::session_end(const session::SessionEnd& e) {
  const int64_t now = monotonic_ns();
  if (log_window_ns_ == INT64_MIN || now - log_window_ns_ >= 1'000'000'000) {
    if (log_suppressed_ > 0) {
      log_event(LogLevel::kInfo, "session_end_lines_suppressed",
                {{"lines", std::to_string(log_suppressed_)}});
    }
    log_window_ns_ = now;
    log_lines_ = 0;
    log_suppressed_ = 0;
  }
  if (log_lines_ >= kSessionEndLogsPerSecond) {
    ++log_suppressed_;
    return;
  }
  ++log_lines_;
  const std::string client = endpoint_text(e.client_ip, e.client_port);
  const std::string_view owner = e.node != session::kNoRouteNode ? node_name(e.node) : "-";
  log_event(LogLevel::kInfo, "session_end",
            {{"reason", e.reason},
             {"client", client},
             {"vhost", e.vhost},
             {"login", e.login},
             {"queue", e.queue},
             {"owner", owner},
             {"message", e.message}});
}

void ReplicaRouter::heart_beat_mismatch(uint32_t node, session::HeartBeat client,
                                        session::HeartBeat told, session::HeartBeat owner,
                                        session::HeartBeatCheck check) {
  char client_text[24], told_text[24], owner_text[24];
  log_event(LogLevel::kWarn, "heartbeat_mismatch",
            {{"owner", node_name(node)},
             {"client_heart_beat", session::format_heart_beat(client_text, client)},
             {"told", session::format_heart_beat(told_text, told)},
             {"owner_heart_beat", session::format_heart_beat(owner_text, owner)},
             {"check", session::heart_beat_check_name(check)}});
}

}  // namespace sluice::control
