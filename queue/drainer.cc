// The drainer's thread: one io_uring, connections ("links") to owners per (node, vhost), and
// backlogs read back from the spill log in order.
#include "queue/drainer.h"

#include <liburing.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>

#include "dataplane/session/assert.h"
#include "queue/spill_log.h"

namespace sluice::queue {
namespace {

using session::Nanos;
constexpr Nanos kMilli = session::kNanosPerMilli;
constexpr unsigned kRingEntries = 256;
constexpr Nanos kWaitMax = 10 * kMilli;  // the loop looks at the clock at least this often
constexpr size_t kOutSlackBytes = 16u << 10;
constexpr size_t kOutMinBytes = 256u << 10;
constexpr int kStopWaitRounds = 50;  // x 20 ms for outstanding operations at stop

Nanos now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// kOpCancel completions are not counted in a link's operations: nothing refers to its buffers.
enum Op : uint64_t { kOpConnect = 1, kOpSend = 2, kOpRecv = 3, kOpCancel = 4 };
uint64_t tag(size_t link, Op op) {
  return (uint64_t(link) << 8) | op;
}

}  // namespace

struct Drainer::Impl {
  struct Link;
  struct QueueState {
    std::string vhost;
    std::string queue;
    Link* link = nullptr;
    uint64_t delivered_through = 0;  // the cursor as the drainer knows it
    uint64_t sent_through = 0;       // last sequence number sent on the current connection
    // Sent on the current connection and not behind the cursor yet, in order; true once its
    // RECEIPT came. The cursor moves over the confirmed prefix.
    std::deque<std::pair<uint64_t, bool>> flight;
    bool backlog = false;    // durable, undelivered messages at the last scan
    bool exhausted = false;  // nothing found after sent_through: wait for the next scan
    bool stuck = false;      // a record could not be read or sent: until drain_now()
    std::string waiting;     // why it is not draining
  };
  enum class LinkState : uint8_t { kBackoff, kConnecting, kHandshake, kReady, kClosing, kFree };
  struct Link {
    size_t index = 0;
    DrainTarget target;
    std::string vhost;
    LinkState state = LinkState::kBackoff;
    LinkState after_close = LinkState::kBackoff;
    int fd = -1;
    int ops = 0;  // operations submitted and not completed
    bool send_busy = false;
    bool recv_armed = false;
    size_t out_len = 0;
    size_t out_sending = 0;
    size_t in_len = 0;
    std::vector<char> out;
    std::vector<char> in;
    std::optional<DrainConnection> conn;
    std::deque<std::pair<QueueState*, uint64_t>> flight;  // awaiting RECEIPT, in send order
    std::vector<QueueState*> queues;
    size_t rr = 0;
    Backoff backoff;
    RateLimit rate;
    Nanos retry_at = 0;
    Nanos deadline = 0;
    Nanos last_progress = 0;
    std::string last_error;
    Link(uint32_t base_ms, uint32_t max_ms, uint64_t seed, uint32_t per_second, uint32_t burst)
        : backoff(base_ms, max_ms, seed), rate(per_second, burst) {}
  };

  Impl(Drainer& d) : self(d) {}

  Drainer& self;
  io_uring ring{};
  std::map<std::pair<std::string, std::string>, QueueState> queues;
  std::vector<std::unique_ptr<Link>> links;
  std::vector<uint8_t> read_buf;
  Nanos next_scan = 0;
  uint64_t seeds = 0;

  void log(LogSeverity s, std::string_view event, std::initializer_list<LogField> fields) {
    if (self.options_.log) self.options_.log(s, event, std::span<const LogField>(fields));
  }

  // ---- scanning backlogs and owners ---------------------------------------------------------

  void detach(QueueState& q) {
    if (q.link == nullptr) return;
    auto& v = q.link->queues;
    v.erase(std::remove(v.begin(), v.end(), &q), v.end());
    q.link = nullptr;
  }

  Link* link_for(const DrainTarget& t, const std::string& vhost) {
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
    auto fresh = std::make_unique<Link>(o.backoff_base_ms, o.backoff_max_ms,
                                        o.seed * 0x9e3779b97f4a7c15ull + ++seeds, o.rate_per_second,
                                        o.rate_burst);
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

  void scan(Nanos now) {
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

  void publish_status(Nanos now) {
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

  // ---- connections ---------------------------------------------------------------------------

  io_uring_sqe* sqe() {
    io_uring_sqe* s = io_uring_get_sqe(&ring);
    if (s == nullptr) {
      io_uring_submit(&ring);
      s = io_uring_get_sqe(&ring);
    }
    SLUICE_ASSERT(s != nullptr);
    return s;
  }

  void fail(Link& l, Nanos now, std::string_view reason) {
    if (l.state == LinkState::kReady) {
      ++self.metrics_.link_failures;
    } else {
      ++self.metrics_.connect_failures;
    }
    const std::string in_flight = std::to_string(l.flight.size());
    const std::string node = std::to_string(l.target.node);
    const std::string address = l.target.host + ":" + std::to_string(l.target.port);
    log(LogSeverity::kWarn, "drain_connection_failed",
        {{"node", node},
         {"address", address},
         {"vhost", l.vhost},
         {"reason", reason},
         {"in_flight", in_flight}});
    self.metrics_.resent += l.flight.size();
    for (auto& [q, seq] : l.flight)
      q->flight.clear();
    l.flight.clear();
    for (QueueState* q : l.queues) {
      q->sent_through = q->delivered_through;  // what was not confirmed goes again
      q->exhausted = false;
    }
    l.conn.reset();
    l.out_len = 0;
    l.in_len = 0;
    l.last_error = std::string(reason);
    l.retry_at = now + Nanos(l.backoff.next_delay_ms()) * kMilli;
    close_link(l, LinkState::kBackoff);
  }

  // Ends the connection; the link goes to `then` once no operation refers to it any more.
  void close_link(Link& l, LinkState then) {
    l.after_close = then;
    if (l.state == LinkState::kConnecting) {
      // shutdown() does not end a connect in progress (an owner that drops SYNs would hold the
      // link for minutes): cancel it.
      io_uring_sqe* s = sqe();
      io_uring_prep_cancel64(s, tag(l.index, kOpConnect), 0);
      io_uring_sqe_set_data64(s, tag(l.index, kOpCancel));
    }
    if (l.fd >= 0) {
      ::shutdown(l.fd, SHUT_RDWR);  // completes the pending receive
      l.state = LinkState::kClosing;
    } else {
      l.state = then;
    }
  }

  void start_connect(Link& l, Nanos now) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    // Node addresses are usually numeric; a host name is resolved here, on the drainer's thread.
    const std::string port = std::to_string(l.target.port);
    const int rc = ::getaddrinfo(l.target.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0 || res == nullptr) {
      fail(l, now, std::string("cannot resolve ") + l.target.host + ": " + ::gai_strerror(rc));
      return;
    }
    l.fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l.fd < 0) {
      ::freeaddrinfo(res);
      fail(l, now, std::string("socket: ") + std::strerror(errno));
      return;
    }
    const int one = 1;
    ::setsockopt(l.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // The address must outlive the operation: keep it in the link's input buffer, unused yet.
    SLUICE_ASSERT(l.in.size() >= sizeof(sockaddr_storage));
    std::memcpy(l.in.data(), res->ai_addr, res->ai_addrlen);
    const socklen_t len = res->ai_addrlen;
    ::freeaddrinfo(res);
    io_uring_sqe* s = sqe();
    io_uring_prep_connect(s, l.fd, reinterpret_cast<sockaddr*>(l.in.data()), len);
    io_uring_sqe_set_data64(s, tag(l.index, kOpConnect));
    ++l.ops;
    l.state = LinkState::kConnecting;
    l.deadline = now + Nanos(self.options_.connect_timeout_ms) * kMilli;
    DrainSettings ds;
    ds.login = self.options_.login;
    ds.passcode = self.options_.passcode;
    ds.vhost = l.vhost;
    ds.gateway_id = self.options_.gateway_id;
    ds.window = self.options_.window;
    ds.limits = self.options_.limits;
    l.conn.emplace(ds);
    std::optional<std::string_view> connect = l.conn->connect(l.out);
    SLUICE_ASSERT(connect.has_value());
    l.out_len = connect->size();
  }

  void bad_record(QueueState& q, uint64_t seq, std::string_view why) {
    ++self.metrics_.bad_records;
    q.stuck = true;
    const std::string s = std::to_string(seq);
    log(LogSeverity::kError, "drain_record_failed",
        {{"vhost", q.vhost},
         {"queue", q.queue},
         {"seq", s},
         {"reason", why},
         {"action", "the queue's drain stops; sluicectl spill drain retries"}});
  }

  void fill(Link& l, Nanos now) {
    size_t idle = 0;
    while (l.conn->window_open() && !l.queues.empty() && idle < l.queues.size()) {
      QueueState& q = *l.queues[l.rr % l.queues.size()];
      if (q.exhausted || q.stuck) {
        ++l.rr;
        ++idle;
        continue;
      }
      if (l.rate.next_at(now) > now) return;
      RecordLocation loc;
      if (self.log_.locate(q.vhost, q.queue, q.sent_through, std::span(&loc, 1)) == 0) {
        q.exhausted = true;
        ++l.rr;
        ++idle;
        continue;
      }
      if (read_buf.size() < loc.bytes) read_buf.resize(loc.bytes);
      RecordView v;
      if (ReadStatus rs = self.log_.read(loc, read_buf, &v); rs != ReadStatus::kOk) {
        bad_record(q, loc.seq,
                   rs == ReadStatus::kIoError ? "cannot read the record (I/O error)"
                                              : "the record fails its check on reading");
        continue;
      }
      size_t written = 0;
      DrainConnection::SendResult r =
          l.conn->send(DrainMessage{v.seq, v.headers, v.body},
                       std::span(l.out.data() + l.out_len, l.out.size() - l.out_len), &written);
      if (r == DrainConnection::SendResult::kTooLarge) {
        if (l.out_len == 0) bad_record(q, v.seq, "the message does not fit the drain buffer");
        return;  // the next frame goes once the buffer has been sent
      }
      if (r == DrainConnection::SendResult::kBadHeaders) {
        bad_record(q, v.seq, "the stored header block is not STOMP 1.2 header lines");
        continue;
      }
      if (r != DrainConnection::SendResult::kSent) return;
      l.rate.take(now);
      l.out_len += written;
      l.flight.emplace_back(&q, v.seq);
      q.flight.emplace_back(v.seq, false);
      q.sent_through = v.seq;
      ++self.metrics_.sent;
      if (l.flight.size() == 1) l.last_progress = now;
      ++l.rr;
      idle = 0;
    }
  }

  void step(Link& l, Nanos now) {
    switch (l.state) {
      case LinkState::kFree:
        return;
      case LinkState::kBackoff:
        if (l.queues.empty()) {
          l.state = LinkState::kFree;
        } else if (now >= l.retry_at) {
          start_connect(l, now);
        }
        break;
      case LinkState::kConnecting:
      case LinkState::kHandshake:
        if (now > l.deadline) {
          fail(l, now,
               "no CONNECTED within " + std::to_string(self.options_.connect_timeout_ms) + " ms");
        }
        break;
      case LinkState::kReady:
        if (l.queues.empty() && l.flight.empty() && l.out_len == 0) {
          close_link(l, LinkState::kFree);  // nothing left for this owner
          break;
        }
        fill(l, now);
        if (!l.flight.empty() &&
            now - l.last_progress > Nanos(self.options_.receipt_timeout_ms) * kMilli) {
          fail(l, now,
               "no RECEIPT within " + std::to_string(self.options_.receipt_timeout_ms) + " ms");
        }
        break;
      case LinkState::kClosing:
        if (l.ops == 0) {
          ::close(l.fd);
          l.fd = -1;
          l.send_busy = false;
          l.recv_armed = false;
          l.state = l.after_close;
        }
        break;
    }
    if (l.fd < 0 || (l.state != LinkState::kHandshake && l.state != LinkState::kReady)) return;
    if (l.out_len > 0 && !l.send_busy) {
      io_uring_sqe* s = sqe();
      io_uring_prep_send(s, l.fd, l.out.data(), l.out_len, MSG_NOSIGNAL);
      io_uring_sqe_set_data64(s, tag(l.index, kOpSend));
      l.out_sending = l.out_len;
      l.send_busy = true;
      ++l.ops;
    }
    if (!l.recv_armed) {
      io_uring_sqe* s = sqe();
      io_uring_prep_recv(s, l.fd, l.in.data() + l.in_len, l.in.size() - l.in_len, 0);
      io_uring_sqe_set_data64(s, tag(l.index, kOpRecv));
      l.recv_armed = true;
      ++l.ops;
    }
  }

  void on_bytes(Link& l, Nanos now) {
    for (;;) {
      DrainEvent e = l.conn->on_bytes(std::string_view(l.in.data(), l.in_len));
      if (e.consumed > 0) {
        std::memmove(l.in.data(), l.in.data() + e.consumed, l.in_len - e.consumed);
        l.in_len -= e.consumed;
      }
      switch (e.kind) {
        case DrainEvent::Kind::kNeedMore:
          return;
        case DrainEvent::Kind::kSkip:
          break;
        case DrainEvent::Kind::kConnected: {
          l.state = LinkState::kReady;
          l.backoff.reset();
          l.last_error.clear();
          ++self.metrics_.connects;
          const std::string node = std::to_string(l.target.node);
          log(LogSeverity::kInfo, "drain_connected", {{"node", node}, {"vhost", l.vhost}});
          break;
        }
        case DrainEvent::Kind::kDelivered: {
          // The connection checked that `seq` is in flight; receipts come in any order.
          auto it = std::find_if(l.flight.begin(), l.flight.end(),
                                 [&e](const auto& f) { return f.second == e.seq; });
          SLUICE_ASSERT(it != l.flight.end());
          QueueState& q = *it->first;
          l.flight.erase(it);
          for (auto& [seq, confirmed] : q.flight)
            confirmed = confirmed || seq == e.seq;
          uint64_t through = 0;
          while (!q.flight.empty() && q.flight.front().second) {
            through = q.flight.front().first;
            q.flight.pop_front();
            ++self.metrics_.delivered;
          }
          if (through != 0) {
            q.delivered_through = through;
            self.log_.mark_delivered(q.vhost, q.queue, through);
          }
          l.last_progress = now;
          break;
        }
        case DrainEvent::Kind::kFailed:
          fail(l, now, e.reason);
          return;
      }
    }
  }

  void on_completion(io_uring_cqe* cqe, Nanos now) {
    const uint64_t data = io_uring_cqe_get_data64(cqe);
    const size_t index = size_t(data >> 8);
    const Op op = Op(data & 0xff);
    SLUICE_ASSERT(index < links.size());
    if (op == kOpCancel) return;
    Link& l = *links[index];
    --l.ops;
    const int res = cqe->res;
    const bool live = l.state == LinkState::kConnecting || l.state == LinkState::kHandshake ||
                      l.state == LinkState::kReady;
    switch (op) {
      case kOpConnect:
        if (!live) return;
        if (res < 0) {
          fail(l, now, std::string("connect: ") + std::strerror(-res));
          return;
        }
        l.state = LinkState::kHandshake;
        return;
      case kOpSend:
        l.send_busy = false;
        if (!live) return;
        if (res < 0) {
          fail(l, now, std::string("send: ") + std::strerror(-res));
          return;
        }
        SLUICE_ASSERT(size_t(res) <= l.out_sending && l.out_sending <= l.out_len);
        std::memmove(l.out.data(), l.out.data() + res, l.out_len - size_t(res));
        l.out_len -= size_t(res);
        return;
      case kOpRecv:
        l.recv_armed = false;
        if (!live) return;
        if (res <= 0) {
          fail(l, now,
               res == 0 ? std::string("the owner closed the connection")
                        : std::string("recv: ") + std::strerror(-res));
          return;
        }
        l.in_len += size_t(res);
        on_bytes(l, now);
        return;
      case kOpCancel:
        return;  // handled above
    }
  }

  void retry_now(Nanos now) {
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

  Nanos next_wakeup(Nanos now) const {
    Nanos at = std::min(next_scan, now + kWaitMax);
    for (const auto& l : links) {
      if (l->state == LinkState::kBackoff && !l->queues.empty()) at = std::min(at, l->retry_at);
      if (l->state == LinkState::kReady && !l->queues.empty() && l->conn->window_open()) {
        at = std::min(at, l->rate.next_at(now));
      }
    }
    return std::max(at, now);
  }

  void run() {
    const int rc = io_uring_queue_init(kRingEntries, &ring, 0);
    SLUICE_ASSERT(rc == 0);  // checked in start()
    while (!self.stop_.load(std::memory_order_acquire)) {
      Nanos now = now_ns();
      if (self.now_.exchange(false)) retry_now(now);
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
};

Drainer::Drainer(SpillLog& log, DrainRoute route, DrainerOptions options)
    : log_(log), route_(std::move(route)), options_(std::move(options)) {
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
