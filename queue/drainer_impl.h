// Private to the drainer: its thread's state. The scan of backlogs and owners and the thread's
// loop are in drainer.cc, the connections to owners in drain_link.cc.
#pragma once

#include <liburing.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "queue/drain_connection.h"
#include "queue/drain_pacing.h"
#include "queue/drainer.h"

namespace sluice::queue {
namespace drain_detail {

using session::Nanos;
constexpr Nanos kMilli = session::kNanosPerMilli;
constexpr unsigned kRingEntries = 256;
constexpr Nanos kWaitMax = 10 * kMilli;  // the loop looks at the clock at least this often
constexpr size_t kOutSlackBytes = 16u << 10;
constexpr size_t kOutMinBytes = 256u << 10;
constexpr int kStopWaitRounds = 50;  // x 20 ms for outstanding operations at stop

inline Nanos now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// kOpCancel completions are not counted in a link's operations: nothing refers to its buffers.
enum Op : uint64_t { kOpConnect = 1, kOpSend = 2, kOpRecv = 3, kOpCancel = 4 };
inline uint64_t tag(size_t link, Op op) {
  return (uint64_t(link) << 8) | op;
}

}  // namespace drain_detail

struct Drainer::Impl {
  using Nanos = drain_detail::Nanos;

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
  uint32_t applied_rate = self.rate();  // Drainer::set_rate as the links pace now

  void log(LogSeverity s, std::string_view event, std::initializer_list<LogField> fields) {
    if (self.options_.log) self.options_.log(s, event, std::span<const LogField>(fields));
  }

  // drainer.cc: the scan of backlogs and owners, and the thread's loop.
  void detach(QueueState& q);
  // The link to (target, vhost), opened if need be; nullptr at links_max.
  Link* link_for(const DrainTarget& t, const std::string& vhost);
  void scan(Nanos now);
  void publish_status(Nanos now);
  void retry_now(Nanos now);
  Nanos next_wakeup(Nanos now) const;
  void run();

  // drain_link.cc: the connections.
  io_uring_sqe* sqe();
  void fail(Link& l, Nanos now, std::string_view reason);
  // Ends the connection; the link goes to `then` once no operation refers to it any more.
  void close_link(Link& l, LinkState then);
  void start_connect(Link& l, Nanos now);
  void bad_record(QueueState& q, uint64_t seq, std::string_view why);
  void fill(Link& l, Nanos now);
  void step(Link& l, Nanos now);
  void on_bytes(Link& l, Nanos now);
  void on_completion(io_uring_cqe* cqe, Nanos now);
};

}  // namespace sluice::queue
