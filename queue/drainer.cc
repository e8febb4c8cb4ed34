// The drainer's thread: one io_uring, connections ("links") to owners per (node, vhost), and
// backlogs read back from the spill log in order. This file: the scan of backlogs and owners, the
// thread's loop, and the public face; the links are in drain_link.cc.
#include "queue/drainer.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/assert.h"
#include "queue/drainer_impl.h"
#include "queue/spill_log.h"

namespace sluice::queue {

using drain_detail::kMilli;
using drain_detail::kOpCancel;
using drain_detail::kOutMinBytes;
using drain_detail::kOutSlackBytes;
using drain_detail::kRingEntries;
using drain_detail::kStopWaitRounds;
using drain_detail::kWaitMax;
using drain_detail::Nanos;
using drain_detail::now_ns;
using drain_detail::Op;

void Drainer::Impl::detach(QueueState& q) {
  if (q.link == nullptr) return;
  auto& v = q.link->queues;
  v.erase(std::remove(v.begin(), v.end(), &q), v.end());
  q.link = nullptr;
}

Drainer::Impl::Link* Drainer::Impl::link_for(const DrainTarget& t, const std::string& vhost) {
  Link* free_slot = nullptr;
  size_t open = 0;
  for (auto& l : links) {
    if (l->state == LinkState::kFree) {
      if (free_slot == nullptr && l->ops == 0) free_slot = l.get();
      continue;
    }
    ++open;
    if (l->state != LinkState::kClosing && l->target == t && l->vhost == vhost) return l.get();
  }
  if (open >= self.options_.links_max) return nullptr;
  const DrainerOptions& o = self.options_;
  auto fresh =
      std::make_unique<Link>(o.backoff_base_ms, o.backoff_max_ms,
                             o.seed * 0x9e3779b97f4a7c15ull + ++seeds, applied_rate, o.rate_burst);
  // A free slot has no queue, no descriptor and no operation left: it can be replaced.
  const size_t index = free_slot != nullptr ? free_slot->index : links.size();
  if (free_slot == nullptr) links.emplace_back();
  fresh->index = index;
  links[index] = std::move(fresh);
  Link& made = *links[index];
  made.target = t;
  made.vhost = vhost;
  made.state = LinkState::kBackoff;
  made.retry_at = 0;
  const size_t out_bytes =
      std::max(kOutMinBytes, size_t(self.log_.options().record_bytes_max) + kOutSlackBytes);
  made.out.resize(out_bytes);
  made.in.resize(size_t(o.limits.frame_bytes_max) + 1);
  return &made;
}

void Drainer::Impl::scan(Nanos now) {
  if (self.options_.on_scan) self.options_.on_scan();
  for (auto& [key, q] : queues)
    q.backlog = false;
  for (const QueueStats& s : self.log_.queues()) {
    if (s.messages == 0) continue;
    auto [it, fresh] = queues.try_emplace({s.vhost, s.queue});
    QueueState& q = it->second;
    if (fresh) {
      q.vhost = s.vhost;
      q.queue = s.queue;
    }
    q.backlog = true;
    q.exhausted = false;
    if (q.flight.empty()) {
      q.delivered_through = std::max(q.delivered_through, s.delivered_seq);
      q.sent_through = q.delivered_through;
    }
    if (q.stuck) {
      detach(q);
      q.waiting =
          "stopped: a record could not be read or sent (see the log; sluicectl spill "
          "drain retries)";
      continue;
    }
    if (!q.flight.empty()) continue;  // stays on its connection until its receipts are in
    std::optional<DrainTarget> t = self.route_(q.vhost, q.queue);
    if (!t) {
      detach(q);
      q.waiting = "waiting: owner down";
      continue;
    }
    Link* l = link_for(*t, q.vhost);
    if (l == nullptr) {
      detach(q);
      q.waiting = "waiting: drain connection limit reached";
      continue;
    }
    if (q.link != l) {
      detach(q);
      q.link = l;
      l->queues.push_back(&q);
    }
  }
  for (auto it = queues.begin(); it != queues.end();) {
    QueueState& q = it->second;
    if (!q.backlog && q.flight.empty()) {
      detach(q);
      it = queues.erase(it);
    } else {
      ++it;
    }
  }
  publish_status(now);
}

void Drainer::Impl::publish_status(Nanos now) {
  std::vector<DrainQueueStatus> out;
  out.reserve(queues.size());
  for (const auto& [key, q] : queues) {
    DrainQueueStatus s{q.vhost, q.queue, q.waiting, std::nullopt};
    if (q.link != nullptr) {
      s.node = q.link->target.node;
      switch (q.link->state) {
        case LinkState::kReady:
          s.state = "draining";
          break;
        case LinkState::kBackoff:
          s.state = "waiting: reconnecting in " +
                    std::to_string(std::max<Nanos>(0, q.link->retry_at - now) / kMilli) + " ms" +
                    (q.link->last_error.empty() ? "" : " (" + q.link->last_error + ")");
          break;
        default:
          s.state = "waiting: connecting";
      }
    }
    out.push_back(std::move(s));
  }
  std::lock_guard<std::mutex> lock(self.status_mutex_);
  self.status_ = std::move(out);
}

void Drainer::Impl::retry_now(Nanos now) {
  for (auto& l : links) {
    if (l->state == LinkState::kBackoff) {
      l->retry_at = now;
      l->backoff.reset();
    }
  }
  for (auto& [key, q] : queues)
    q.stuck = false;
  next_scan = 0;
}

Nanos Drainer::Impl::next_wakeup(Nanos now) const {
  Nanos at = std::min(next_scan, now + kWaitMax);
  for (const auto& l : links) {
    if (l->state == LinkState::kBackoff && !l->queues.empty()) at = std::min(at, l->retry_at);
    if (l->state == LinkState::kReady && !l->queues.empty() && l->conn->window_open()) {
      at = std::min(at, l->rate.next_at(now));
    }
  }
  return std::max(at, now);
}

void Drainer::Impl::run() {
  const int rc = io_uring_queue_init(kRingEntries, &ring, 0);
  SLUICE_ASSERT(rc == 0);  // checked in start()
  while (!self.stop_.load(std::memory_order_acquire)) {
    Nanos now = now_ns();
    if (self.now_.exchange(false)) retry_now(now);
    if (const uint32_t r = self.rate(); r != applied_rate) {
      applied_rate = r;
      for (auto& l : links)
        l->rate.set_rate(r);
    }
    if (now >= next_scan) {
      scan(now);
      next_scan = now + Nanos(self.options_.scan_interval_ms) * kMilli;
    }
    for (size_t i = 0; i < links.size(); ++i)
      step(*links[i], now);
    const Nanos wait = next_wakeup(now) - now;
    __kernel_timespec ts{wait / 1'000'000'000, wait % 1'000'000'000};
    io_uring_cqe* cqe = nullptr;
    const int w = io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts, nullptr);
    if (w < 0 && w != -ETIME && w != -EINTR) {
      log(LogSeverity::kError, "drain_ring_failed", {{"error", std::strerror(-w)}});
    }
    now = now_ns();
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      on_completion(cqe, now);
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
  }
  // Stop: end every connection and wait for the operations that refer to their buffers.
  for (auto& l : links) {
    if (l->fd >= 0) close_link(*l, LinkState::kFree);
  }
  io_uring_submit(&ring);
  for (int round = 0; round < kStopWaitRounds; ++round) {
    int outstanding = 0;
    for (auto& l : links)
      outstanding += l->ops;
    if (outstanding == 0) break;
    __kernel_timespec ts{0, 20 * kMilli};
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) == 0) {
      const uint64_t data = io_uring_cqe_get_data64(cqe);
      if (Op(data & 0xff) != kOpCancel) --links[size_t(data >> 8)]->ops;
      io_uring_cqe_seen(&ring, cqe);
    }
  }
  for (auto& l : links) {
    if (l->fd >= 0) ::close(l->fd);
    l->fd = -1;
  }
  io_uring_queue_exit(&ring);
}

Drainer::Drainer(SpillLog& log, DrainRoute route, DrainerOptions options)
    : log_(log), route_(std::move(route)), options_(std::move(options)) {
  rate_.store(options_.rate_per_second, std::memory_order_relaxed);
  SLUICE_ASSERT(options_.window >= 1 && options_.window <= DrainSettings::kWindowMax);
  SLUICE_ASSERT(options_.links_max >= 1);
}

Drainer::~Drainer() {
  stop();
}

void Drainer::start() {
  SLUICE_ASSERT(!thread_.joinable());
  stop_ = false;
  impl_ = std::make_unique<Impl>(*this);
  thread_ = std::thread([this] { impl_->run(); });
}

void Drainer::stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  thread_.join();
  impl_.reset();
}

void Drainer::drain_now() {
  now_ = true;
}

std::vector<DrainQueueStatus> Drainer::queues() const {
  std::lock_guard<std::mutex> lock(status_mutex_);
  return status_;
}

}  // namespace sluice::queue
