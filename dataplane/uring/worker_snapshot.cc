// The worker's sessions view: the snapshot its loop fills on request, and the requests and
// waits of the thread that asks (the admin API's).
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "dataplane/uring/worker.h"

namespace sluice::uring::detail {

std::string_view state_name(State s) {
  switch (s) {
    case State::kFree:
      return "free";
    case State::kPrelude:
      return "prelude";
    case State::kLogin:
      return "login";
    case State::kConnecting:
      return "connecting";
    case State::kReplay:
      return "replay";
    case State::kGreeting:
      return "greeting";
    case State::kSpliced:
      return "spliced";
    case State::kSpill:
      return "spill";
    case State::kClosing:
      return "closing";
  }
  return "unknown";
}

void Worker::fill_snapshot() {
  std::vector<SessionView> out;
  const Nanos t = now();
  for (uint32_t i = 0; i < sessions_.size(); ++i) {
    const Session& s = sessions_[i];
    if (s.state == State::kFree) continue;
    SessionView v;
    v.worker = index_;
    v.id = s.id;
    char ip[INET_ADDRSTRLEN] = {};
    in_addr a{s.src_ip};
    inet_ntop(AF_INET, &a, ip, sizeof ip);
    v.client = std::string(ip) + ":" + std::to_string(s.src_port);
    v.vhost.assign(s.key, s.vhost_len);
    v.queue.assign(s.key + s.vhost_len, s.queue_len);
    if (s.node != kNone && s.state != State::kSpill) {
      v.owner = std::string(parts_.router->node_name(s.node));
    }
    v.state = std::string(state_name(s.state));
    v.parked = s.park != kNone;
    v.bytes_in = s.bytes_in;
    v.bytes_out = s.bytes_out;
    v.age_ms = (t - s.started) / session::kNanosPerMilli;
    out.push_back(std::move(v));
  }
  std::sort(out.begin(), out.end(),
            [](const SessionView& a, const SessionView& b) { return a.age_ms > b.age_ms; });
  std::lock_guard<std::mutex> lock(snapshot_mutex_);
  snapshot_ = std::move(out);
  snapshot_done_ = snapshot_requested_.load(std::memory_order_acquire);
  snapshot_cv_.notify_all();
}

uint64_t Worker::request_snapshot() {
  const uint64_t ticket = snapshot_requested_.fetch_add(1, std::memory_order_acq_rel) + 1;
  uint64_t one = 1;
  // An eventfd write fails only when its counter is full, and then the worker is woken anyway.
  (void)!write(wake_fd_.get(), &one, sizeof one);
  return ticket;
}

std::optional<std::vector<SessionView>> Worker::collect_snapshot(
    uint64_t ticket, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(snapshot_mutex_);
  if (!snapshot_cv_.wait_until(lock, deadline, [&] { return snapshot_done_ >= ticket; })) {
    return std::nullopt;
  }
  return snapshot_;
}

}  // namespace sluice::uring::detail
