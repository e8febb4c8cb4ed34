#include "gateway/engine_parts.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <time.h>

#include <cstring>

#include "control/log.h"
#include "control/replica_worker.h"

namespace sluice::gateway {

std::optional<std::string> NodeDirectory::set(const std::vector<control::NodeSpec>& nodes) {
  std::vector<sockaddr_in> addrs;
  std::vector<std::string> names;
  for (const control::NodeSpec& n : nodes) {
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
        return "nodes: " + n.name + ": cannot resolve host " + n.host + ": " + gai_strerror(r);
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
  return std::nullopt;
}

void NodeDirectory::copy(std::vector<sockaddr_in>* addrs, std::vector<std::string>* names,
                         uint64_t* version) {
  std::lock_guard<std::mutex> lock(mutex_);
  *addrs = addrs_;
  *names = names_;
  *version = version_.load(std::memory_order_relaxed);
}

ReplicaRouter::ReplicaRouter(control::Control::Worker worker, NodeDirectory& nodes,
                             std::string label)
    : worker_(std::move(worker)), directory_(nodes), label_(std::move(label)) {
  order_.resize(control::kNodesMax);
  unsent_.reserve(kBacklogMax);
  refresh_nodes();
}

void ReplicaRouter::refresh_nodes() {
  directory_.copy(&addrs_, &names_, &nodes_version_);
}

void ReplicaRouter::poll() {
  worker_.channel->to_worker.pop_some(
      [this](const control::ControlToWorker& m) { (void)worker_.replica->apply(m); },
      control::ReplicaWorker::kApplyPerPass);
  if (directory_.version() != nodes_version_) refresh_nodes();
  size_t sent = 0;
  while (sent < unsent_.size() && worker_.channel->to_control.try_push(unsent_[sent]))
    ++sent;
  unsent_.erase(unsent_.begin(), unsent_.begin() + long(sent));
}

void ReplicaRouter::report(const control::WorkerToControl& m) {
  if (unsent_.empty() && worker_.channel->to_control.try_push(m)) return;
  if (unsent_.size() < kBacklogMax) {
    unsent_.push_back(m);
  } else {
    ++reports_dropped_;  // the ring counts its refusals too (full_count)
  }
}

bool ReplicaRouter::usable(control::NodeIndex n) const {
  const control::Replica& r = *worker_.replica;
  return n != control::kNoNode && n < addrs_.size() &&
         r.node_health(n) == control::HealthState::kUp &&
         r.node_admin(n) == control::AdminState::kUp;
}

uring::RouteDecision ReplicaRouter::direct(control::NodeIndex n) {
  uring::RouteDecision d;
  d.kind = uring::RouteDecision::Kind::kDirect;
  d.node = n;
  d.addr = addrs_[n];
  return d;
}

uring::RouteDecision ReplicaRouter::route(const session::QueueKey& key, uint64_t session_hash) {
  const uring::RouteDecision d = decide(key, session_hash);
  if (control::log_enabled(control::LogLevel::kDebug)) log_routed(key, d);
  return d;
}

// One line per routing decision at debug level, with what the replica held for the key: which
// engine thread sent a session where, and why (the drain barrier is the backlog flag).
void ReplicaRouter::log_routed(const session::QueueKey& key, const uring::RouteDecision& d) const {
  const control::Replica& r = *worker_.replica;
  const control::Route route =
      key.default_route ? control::Route{} : r.lookup(key.vhost, key.queue);
  const char* kind = d.kind == uring::RouteDecision::Kind::kDirect  ? "direct"
                     : d.kind == uring::RouteDecision::Kind::kSpill ? "spill"
                                                                    : "refuse";
  const std::string_view node =
      d.kind == uring::RouteDecision::Kind::kDirect ? node_name(d.node) : std::string_view("-");
  const std::string_view owner =
      route.known && route.owner < names_.size() ? std::string_view(names_[route.owner]) : "-";
  control::log_event(control::LogLevel::kDebug, "session_routed",
                     {{"router", label_},
                      {"vhost", key.vhost},
                      {"queue", key.queue},
                      {"default_route", key.default_route ? "1" : "0"},
                      {"route", kind},
                      {"node", node},
                      {"owner", owner},
                      {"backlog", route.backlog ? "1" : "0"}});
}

uring::RouteDecision ReplicaRouter::decide(const session::QueueKey& key, uint64_t session_hash) {
  control::Replica& r = *worker_.replica;
  uring::RouteDecision refuse;
  refuse.kind = uring::RouteDecision::Kind::kRefuse;
  if (key.default_route) {
    const control::NodeIndex best = spread(session_hash);
    if (best == control::kNoNode) {
      refuse.message = "no node available, retry later";
      return refuse;
    }
    return direct(best);
  }
  control::Route route = r.lookup(key.vhost, key.queue);
  control::NodeIndex owner = route.owner;
  if (route.known && route.source == control::OwnerSource::kPlaced) note_used(key);
  if (!route.known) {
    // Placed only once the owner accepts the session's login (confirm_placement): a session
    // that never logs in leaves nothing behind.
    owner = r.placement_of(key.vhost, key.queue);
    if (owner == control::kNoNode) {
      refuse.message = r.node_count() == 0 ? std::string_view("no node configured")
                                           : std::string_view("queue or vhost name too long");
      return refuse;
    }
  }
  if (route.backlog) return uring::RouteDecision{};  // the drain barrier: spill
  if (owner >= addrs_.size()) return uring::RouteDecision{};
  if (usable(owner)) {
    uring::RouteDecision d = direct(owner);
    d.placement_pending = !route.known;
    return d;
  }
  if (r.node_admin(owner) == control::AdminState::kDrain &&
      r.node_health(owner) == control::HealthState::kUp) {
    // No new sessions on a draining node: the next in the queue's rendezvous order.
    const size_t n = r.node_count();
    r.order(key.vhost, key.queue, std::span<control::NodeIndex>(order_.data(), n));
    for (size_t i = 0; i < n; ++i) {
      if (!usable(order_[i])) continue;
      uring::RouteDecision d = direct(order_[i]);
      d.placement_pending = !route.known;
      return d;
    }
  }
  return uring::RouteDecision{};  // down or in maintenance: spill
}

void ReplicaRouter::note_used(const session::QueueKey& key) {
  const uint64_t h = std::hash<std::string_view>{}(key.vhost) * 31 +
                     std::hash<std::string_view>{}(key.queue) + 1;  // never 0
  UsedSlot& slot = used_[h % kUsedSlots];
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);  // a few ns through the vDSO, once a session
  const int64_t now_ms = int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
  if (slot.hash == h && now_ms - slot.reported_ms < control::Used::kReportIntervalMs) return;
  control::Used used;
  if (used.key.assign(key.vhost, key.queue) != control::KeyFit::kFits) return;
  slot.hash = h;
  slot.reported_ms = now_ms;
  report(used);
}

control::NodeIndex ReplicaRouter::spread(uint64_t session_hash, uint32_t rank) const {
  // Rendezvous of the session over the healthy nodes: the highest mixed score wins; `rank`
  // skips that many of the best (a pass per rank: nodes are few).
  const control::Replica& r = *worker_.replica;
  auto score = [&](control::NodeIndex n) {
    uint64_t x = session_hash ^ (uint64_t(n + 1) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return x;
  };
  control::NodeIndex best = control::kNoNode;
  uint64_t below = UINT64_MAX;  // scores are distinct per node, so "below" is strict
  for (uint32_t pass = 0; pass <= rank; ++pass) {
    best = control::kNoNode;
    uint64_t best_score = 0;
    for (control::NodeIndex n = 0; n < r.node_count(); ++n) {
      if (!usable(n)) continue;
      const uint64_t x = score(n);
      if (pass > 0 && x >= below) continue;
      if (best == control::kNoNode || x > best_score) {
        best = n;
        best_score = x;
      }
    }
    if (best == control::kNoNode) return control::kNoNode;
    below = best_score;
  }
  return best;
}

uring::RouteDecision ReplicaRouter::login_node(std::string_view, uint64_t session_hash,
                                               uint32_t attempt) {
  // Every node of the cluster serves every vhost (RabbitMQ's vhosts are cluster-wide), so any
  // healthy node taking new sessions can check a login.
  const control::NodeIndex n = spread(session_hash, attempt);
  if (n == control::kNoNode) return uring::RouteDecision{};
  return direct(n);
}

void ReplicaRouter::confirm_placement(const session::QueueKey& key, uint32_t node) {
  control::Replica& r = *worker_.replica;
  if (key.default_route || r.lookup(key.vhost, key.queue).known) return;
  control::WorkerToControl placed;
  if (r.place_unknown(key.vhost, key.queue, &placed) == control::kNoNode) return;
  (void)node;  // the same rendezvous node the route gave (control may still choose otherwise)
  report(placed);
}

bool ReplicaRouter::owner_up(const session::QueueKey& key) {
  const control::Replica& r = *worker_.replica;
  const control::Route route = r.lookup(key.vhost, key.queue);
  if (!route.known) return false;
  return route.owner < addrs_.size() && r.node_health(route.owner) == control::HealthState::kUp &&
         r.node_admin(route.owner) != control::AdminState::kMaintenance;
}

void ReplicaRouter::connect_failed(uint32_t node) {
  if (node >= control::kNoNode) return;
  report(control::PassiveFailure{control::NodeIndex(node)});
}

std::string_view ReplicaRouter::node_name(uint32_t node) const {
  return node < names_.size() ? std::string_view(names_[node]) : std::string_view();
}

uring::SpillSink::Result ProducerSink::append(uint64_t token, std::string_view vhost,
                                              std::string_view queue, std::string_view headers,
                                              std::string_view body, std::string_view* why) {
  switch (producer_.append(token, vhost, queue, headers, body)) {
    case queue::AppendResult::kQueued:
      return Result::kQueued;
    case queue::AppendResult::kRingFull:
    case queue::AppendResult::kArenaFull:
      return Result::kBusy;
    case queue::AppendResult::kTooLarge:
      *why = "message too large for the spill log";
      return Result::kRefused;
    case queue::AppendResult::kBadName:
      *why = "queue name not accepted by the spill log";
      return Result::kRefused;
  }
  *why = "spill log refused the message";
  return Result::kRefused;
}

size_t ProducerSink::poll(std::span<Done> out) {
  size_t n = 0;
  producer_.poll(
      [&](const queue::Completion& c) {
        out[n++] = Done{c.token, c.status == queue::AppendStatus::kDurable,
                        queue::append_status_message(c.status)};
      },
      out.size());
  return n;
}

}  // namespace sluice::gateway
