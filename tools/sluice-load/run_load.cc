// The load run's io_uring loop around the sans-I/O Clients.
#include "tools/sluice-load/run_load.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "tools/sluice-load/client.h"
#include "tools/sluice-load/report.h"
#include "tools/sluice-load/uring.h"

namespace sluice::load {

namespace {

constexpr size_t kRecvBytesMin = 256u << 10;
constexpr uint64_t kSubscribeTimeoutNs = 10'000'000'000;  // consumers' CONNECT and SUBSCRIBEs
constexpr uint64_t kDisconnectTimeoutNs = 5'000'000'000;  // DISCONNECT receipts at the end
constexpr uint64_t kWaitNs = 50'000'000;                  // progress and deadlines
constexpr uint64_t kRateTickNs = 1'000'000;               // rate-limited producers' wake-up
constexpr uint64_t kServiceAllNs = 1'000'000;

volatile std::sig_atomic_t g_interrupted = 0;
void on_signal(int) {
  g_interrupted = 1;
}

struct Conn {
  std::unique_ptr<Client> client;
  bool producer = false;
  int fd = -1;
  uint32_t gen = 0;
  bool connecting = false;
  bool recv_armed = false;
  bool send_armed = false;
  bool dead = false;      // shut down; closed once no operation is armed
  bool finished = false;  // closed for good
  std::unique_ptr<char[]> in;
  size_t in_cap = 0;
  size_t in_len = 0;
  std::unique_ptr<char[]> flight;
  size_t flight_len = 0;
  size_t flight_off = 0;
};

enum class Phase : uint8_t { kSubscribing, kProducing, kDraining, kClosing, kDone };

class LoadLoop {
 public:
  explicit LoadLoop(const LoadOptions& o) : o_(o), checker_(o.queues, o.producers()) {
    plan_.options = &o_;
    for (uint32_t q = 0; q < o.queues; ++q)
      plan_.destinations.push_back(o.destination_prefix + o.queue_name(q));
    plan_.run_id = now_ns() ^ (uint64_t(::getpid()) << 40);
    addr_ = ipv4(o.host, o.port);
    const size_t in_cap = std::max(kRecvBytesMin, 2 * (size_t(o.size.max) + (64u << 10)));
    for (uint32_t c = 0; c < o.consumer_connections; ++c)
      add(false, 0, 0, c * o.consumers_per_connection, o.consumers_per_connection, in_cap);
    for (uint32_t c = 0; c < o.connections; ++c)
      add(true, c * o.producers_per_connection, o.producers_per_connection, 0, 0, in_cap);
  }

  int run() {
    tty_ = ::isatty(STDERR_FILENO) == 1;
    start_ns_ = now_ns();
    last_report_ns_ = start_ns_;
    phase_deadline_ = start_ns_ + kSubscribeTimeoutNs;
    for (uint32_t i = 0; i < conns_.size(); ++i)
      if (!conns_[i].producer) connect(i);
    if (o_.consumer_connections == 0) start_producing(now_ns());
    next_report_ = start_ns_ + uint64_t(o_.interval_s * 1e9);
    while (phase_ != Phase::kDone) {
      uint64_t wait = o_.rate > 0 && phase_ == Phase::kProducing ? kRateTickNs : kWaitNs;
      if (!touched_.empty()) wait = 0;  // connections closed last round wait for their service
      if (!ring_.submit_and_wait(wait)) {
        stats_.error("io_uring wait failed");
        break;
      }
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(ring_.get(), head, cqe) {
        ++seen;
        complete(cqe->user_data, cqe->res);
      }
      io_uring_cq_advance(ring_.get(), seen);
      const uint64_t now = now_ns();
      if (now >= next_service_all_) {
        next_service_all_ = now + kServiceAllNs;
        touched_.clear();
        for (uint32_t i = 0; i < conns_.size(); ++i)
          service(i, now);
      } else {
        // service() may touch connections again (kill): they wait for the next round.
        batch_.swap(touched_);
        for (uint32_t i : batch_)
          service(i, now);
        batch_.clear();
      }
      advance_phase(now);
      if (now >= next_report_) report(now);
    }
    if (tty_ && reported_) std::fputc('\n', stderr);
    for (Conn& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
    const Summary s = summarize(o_, checker_, stats_, elapsed_s_);
    std::fputs((o_.json ? format_json(o_, s) : format_text(o_, s)).c_str(), stdout);
    std::fflush(stdout);
    return s.failures.empty() ? 0 : 1;
  }

 private:
  void add(bool producer, uint32_t first_p, uint32_t np, uint32_t first_c, uint32_t nc,
           size_t in_cap) {
    Conn c;
    c.producer = producer;
    c.client = std::make_unique<Client>(plan_, &checker_, &stats_, first_p, np, first_c, nc);
    c.in.reset(new char[in_cap]);
    c.in_cap = in_cap;
    c.flight.reset(new char[c.client->output_capacity()]);
    conns_.push_back(std::move(c));
  }

  void connect(uint32_t i) {
    Conn& c = conns_[i];
    const int fd = tcp_socket();
    if (fd < 0) {
      c.finished = true;
      return stats_.error("socket: " + errno_text(fd));
    }
    c.fd = fd;
    c.dead = false;
    c.in_len = 0;
    c.connecting = true;
    io_uring_sqe* s = ring_.sqe();
    io_uring_prep_connect(s, fd, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_);
    io_uring_sqe_set_data64(s, pack(i, c.gen, Op::kConnect));
    c.client->open();
  }

  void kill(uint32_t i, bool for_good) {
    Conn& c = conns_[i];
    if (c.fd < 0) return;
    if (!c.dead) {
      c.dead = true;
      ::shutdown(c.fd, SHUT_RDWR);
    }
    c.finished = c.finished || for_good;
    if (c.recv_armed || c.send_armed || c.connecting) return;  // closed when they complete
    ::close(c.fd);
    c.fd = -1;
    ++c.gen;
    touched_.push_back(i);
  }

  void arm_recv(uint32_t i) {
    Conn& c = conns_[i];
    if (c.recv_armed || c.dead || c.connecting || c.in_len == c.in_cap) return;
    io_uring_sqe* s = ring_.sqe();
    io_uring_prep_recv(s, c.fd, c.in.get() + c.in_len, c.in_cap - c.in_len, 0);
    io_uring_sqe_set_data64(s, pack(i, c.gen, Op::kRecv));
    c.recv_armed = true;
  }

  void arm_send(uint32_t i) {
    Conn& c = conns_[i];
    io_uring_sqe* s = ring_.sqe();
    io_uring_prep_send(s, c.fd, c.flight.get() + c.flight_off, c.flight_len - c.flight_off,
                       MSG_NOSIGNAL);
    io_uring_sqe_set_data64(s, pack(i, c.gen, Op::kSend));
    c.send_armed = true;
  }

  void complete(uint64_t ud, int res) {
    const uint32_t i = conn_of(ud);
    Conn& c = conns_[i];
    touched_.push_back(i);
    switch (op_of(ud)) {
      case Op::kConnect:
        c.connecting = false;
        if (res < 0) {
          c.client->on_transport_closed("connect to " + o_.host + ":" + std::to_string(o_.port) +
                                        ": " + errno_text(res));
          return kill(i, true);
        }
        if (c.dead) return kill(i, c.finished);
        return;
      case Op::kRecv:
        c.recv_armed = false;
        if (res <= 0 || c.dead) {
          if (!c.dead)
            c.client->on_transport_closed(res == 0 ? "connection closed by the peer"
                                                   : "recv: " + errno_text(res));
          return kill(i, c.finished || c.client->state() != Client::State::kClosed);
        }
        c.in_len += size_t(res);
        return;
      case Op::kSend:
        c.send_armed = false;
        if (res < 0 || c.dead) {
          if (!c.dead) c.client->on_transport_closed("send: " + errno_text(res));
          return kill(i, true);
        }
        c.flight_off += size_t(res);
        if (c.flight_off < c.flight_len) arm_send(i);
        return;
      case Op::kAccept:
        return;
    }
  }

  void service(uint32_t i, uint64_t now) {
    Conn& c = conns_[i];
    if (c.fd < 0) {
      // New-session mode: the last session closed; open the next while there is work.
      if (!c.finished && c.producer && phase_ == Phase::kProducing && !c.client->producing_done()) {
        connect(i);
      }
      return;
    }
    if (c.dead || c.connecting) return;
    Client& cl = *c.client;
    if (c.in_len > 0) {
      const size_t used = cl.on_bytes(std::string_view(c.in.get(), c.in_len), now);
      std::memmove(c.in.get(), c.in.get() + used, c.in_len - used);
      c.in_len -= used;
    }
    if (cl.state() == Client::State::kFailed) return kill(i, true);
    if (phase_ == Phase::kProducing && c.producer) cl.fill(now);
    if (cl.session_complete()) cl.disconnect();
    if (!c.send_armed && cl.pending_bytes() > 0) {
      cl.take_output(&c.flight, &c.flight_len);
      c.flight_off = 0;
      arm_send(i);
    }
    if (cl.state() == Client::State::kClosed && !c.send_armed) {
      // New-session mode ends the session here; at the end of the run every connection does.
      return kill(i, phase_ != Phase::kProducing || cl.producing_done());
    }
    arm_recv(i);
  }

  void start_producing(uint64_t now) {
    phase_ = Phase::kProducing;
    produce_start_ns_ = now;
    plan_.start_ns = now;
    phase_deadline_ = now + uint64_t(o_.duration_s * 1e9);
    for (uint32_t i = 0; i < conns_.size(); ++i)
      if (conns_[i].producer) connect(i);
  }

  bool all(bool (*pred)(const Conn&)) const {
    return std::all_of(conns_.begin(), conns_.end(), pred);
  }

  void advance_phase(uint64_t now) {
    // Throughput is over the time work was done: a drain that waits out its timeout for a
    // lost message does not count.
    const CheckTotals& t = checker_.counts();
    if (t.sent + t.acknowledged + t.received != activity_) {
      activity_ = t.sent + t.acknowledged + t.received;
      last_activity_ns_ = now;
    }
    if (g_interrupted && phase_ < Phase::kDraining) {
      g_interrupted = 0;
      stop_producing(now);
    }
    switch (phase_) {
      case Phase::kSubscribing: {
        const bool ready =
            all([](const Conn& c) { return c.producer || c.finished || c.client->subscribed(); });
        if (ready) return start_producing(now);
        if (now >= phase_deadline_) {
          stats_.error("consumers were not subscribed within 10 s");
          return close_all(now);
        }
        return;
      }
      case Phase::kProducing: {
        const bool done = all(
            [](const Conn& c) { return !c.producer || c.finished || c.client->producing_done(); });
        if (done || now >= phase_deadline_) stop_producing(now);
        return;
      }
      case Phase::kDraining: {
        const bool receipts_in = all(
            [](const Conn& c) { return !c.producer || c.finished || c.client->in_flight() == 0; });
        const bool delivered = o_.consumers() == 0 || checker_.outstanding() == 0;
        if ((receipts_in && delivered) || now >= phase_deadline_) {
          close_all(now);
        }
        return;
      }
      case Phase::kClosing:
        if (all([](const Conn& c) { return c.fd < 0; }) || now >= phase_deadline_)
          phase_ = Phase::kDone;
        return;
      case Phase::kDone:
        return;
    }
  }

  void stop_producing(uint64_t now) {
    for (Conn& c : conns_)
      c.client->stop_producing();
    phase_ = Phase::kDraining;
    phase_deadline_ = now + uint64_t(o_.drain_timeout_s * 1e9);
  }

  void close_all(uint64_t now) {
    if (produce_start_ns_ > 0)
      elapsed_s_ = double(std::max(last_activity_ns_, produce_start_ns_) - produce_start_ns_) / 1e9;
    phase_ = Phase::kClosing;
    phase_deadline_ = now + kDisconnectTimeoutNs;
    for (uint32_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      c.finished = true;
      if (c.fd >= 0 && !c.dead && !c.connecting && c.client->state() == Client::State::kReady) {
        c.client->disconnect();
      } else if (c.fd >= 0) {
        kill(i, true);
      }
      touched_.push_back(i);
    }
  }

  void report(uint64_t now) {
    next_report_ = now + uint64_t(o_.interval_s * 1e9);
    const CheckTotals& t = checker_.counts();
    const uint64_t done = o_.receipts ? t.acknowledged : t.sent;
    const double dt = double(now - last_report_ns_ ? now - last_report_ns_ : 1) / 1e9;
    const double rate = last_report_ns_ ? double(done - last_done_) / dt : 0;
    last_report_ns_ = now;
    last_done_ = done;
    uint64_t in_flight = 0;
    for (const Conn& c : conns_)
      in_flight += c.client->in_flight();
    const std::string line =
        format_progress(double(now - start_ns_) / 1e9, t, rate, in_flight, stats_.errors);
    std::fprintf(stderr, tty_ ? "\r%s\033[K" : "%s\n", line.c_str());
    reported_ = true;
  }

  const LoadOptions& o_;
  Checker checker_;
  RunStats stats_;
  RunPlan plan_;
  Ring ring_;
  sockaddr_in addr_{};
  std::vector<Conn> conns_;
  std::vector<uint32_t> touched_;
  std::vector<uint32_t> batch_;
  Phase phase_ = Phase::kSubscribing;
  uint64_t start_ns_ = 0;
  uint64_t produce_start_ns_ = 0;
  uint64_t phase_deadline_ = 0;
  uint64_t next_service_all_ = 0;
  uint64_t next_report_ = 0;
  uint64_t last_report_ns_ = 0;
  uint64_t last_done_ = 0;
  double elapsed_s_ = 0;
  uint64_t activity_ = 0;
  uint64_t last_activity_ns_ = 0;
  bool tty_ = false;
  bool reported_ = false;
};

}  // namespace

int run_load(const LoadOptions& options) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  LoadLoop loop(options);
  return loop.run();
}

}  // namespace sluice::load
