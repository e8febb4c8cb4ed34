// The drainer's connections to owners ("links"): connect, the STOMP handshake, sending backlog
// records within the window and the rate, receipts, failures and backoff.
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
using drain_detail::kOpConnect;
using drain_detail::kOpRecv;
using drain_detail::kOpSend;
using drain_detail::Nanos;
using drain_detail::Op;
using drain_detail::tag;

io_uring_sqe* Drainer::Impl::sqe() {
  io_uring_sqe* s = io_uring_get_sqe(&ring);
  if (s == nullptr) {
    io_uring_submit(&ring);
    s = io_uring_get_sqe(&ring);
  }
  SLUICE_ASSERT(s != nullptr);
  return s;
}

void Drainer::Impl::fail(Link& l, Nanos now, std::string_view reason) {
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
void Drainer::Impl::close_link(Link& l, LinkState then) {
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

void Drainer::Impl::start_connect(Link& l, Nanos now) {
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

void Drainer::Impl::bad_record(QueueState& q, uint64_t seq, std::string_view why) {
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

void Drainer::Impl::fill(Link& l, Nanos now) {
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

void Drainer::Impl::step(Link& l, Nanos now) {
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

void Drainer::Impl::on_bytes(Link& l, Nanos now) {
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

void Drainer::Impl::on_completion(io_uring_cqe* cqe, Nanos now) {
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

}  // namespace sluice::queue
