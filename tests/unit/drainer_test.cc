// The drainer against a STOMP broker the test runs on loopback: every queue's backlog delivered
// once and in order, the window respected, reconnects after the owner drops the connection with
// the same sluice-message-id on what is sent again, nothing sent while the owner is down.
#include "queue/drainer.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/session/parser.h"
#include "queue/spill_log.h"

namespace sluice::queue {
namespace {

using namespace std::chrono_literals;

// Polls cond() every millisecond until it holds or `limit` passes; returns cond(). No timing is
// asserted with it: the limits are generous.
template <class Cond>
bool wait_until(std::chrono::milliseconds limit, Cond cond) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  return cond();
}

struct Received {
  std::string destination;
  std::string message_id;
  std::string body;
};

// A STOMP broker for one test: CONNECTED for a CONNECT, RECEIPT for each SEND, unless the
// test's policy says otherwise. One connection at a time.
class FakeBroker {
 public:
  struct Policy {
    // Called for each SEND (1-based count over all connections): false drops the connection
    // before the RECEIPT.
    std::function<bool(uint64_t count)> keep = [](uint64_t) { return true; };
    // Receipts are held until this many SENDs wait (the window test), then sent newest first
    // when `reverse` (RabbitMQ's receipts follow its confirms, which come in any order).
    uint32_t hold_receipts_until = 0;
    bool reverse = false;
    std::string refuse_connect;  // non-empty: ERROR with this message on CONNECT
  };

  explicit FakeBroker(Policy p) : policy_(std::move(p)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    EXPECT_EQ(::listen(fd_, 8), 0);
    thread_ = std::thread([this] { run(); });
  }
  ~FakeBroker() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  std::vector<Received> received() {
    std::lock_guard<std::mutex> lock(mutex_);
    return received_;
  }
  uint32_t connections() const { return connections_; }
  uint32_t max_unreceipted() const { return max_unreceipted_; }
  std::vector<std::string> logins() {
    std::lock_guard<std::mutex> lock(mutex_);
    return logins_;
  }

 private:
  void run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++connections_;
      serve(c);
      ::close(c);
    }
  }

  void serve(int c) {
    session::Parser parser{session::FrameLimits{}};
    std::string in;
    std::vector<std::string> held;
    char buf[65536];
    while (!stop_) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return;
      in.append(buf, size_t(n));
      for (;;) {
        session::ParseResult r = parser.parse(in);
        if (r.status == session::ParseResult::Status::kNeedMore) break;
        if (r.status == session::ParseResult::Status::kError) return;
        if (r.status == session::ParseResult::Status::kFrame) {
          const session::Frame& f = parser.frame();
          if (f.command() == session::Command::kConnect) {
            {
              std::lock_guard<std::mutex> lock(mutex_);
              logins_.push_back(std::string(f.find("login").value_or("")) + "@" +
                                std::string(f.find("host").value_or("")));
            }
            if (!policy_.refuse_connect.empty()) {
              send_all(c,
                       "ERROR\nmessage:" + policy_.refuse_connect + "\n\n" + std::string(1, '\0'));
              return;
            }
            send_all(c, std::string("CONNECTED\nversion:1.2\n\n") + '\0');
            parser.set_version(session::Version::k1_2);
          } else if (f.command() == session::Command::kSend) {
            const uint64_t count = ++sends_;
            if (!policy_.keep(count)) return;
            {
              std::lock_guard<std::mutex> lock(mutex_);
              received_.push_back(Received{std::string(f.find("destination").value_or("")),
                                           std::string(f.find("sluice-message-id").value_or("")),
                                           std::string(f.body())});
            }
            held.push_back("RECEIPT\nreceipt-id:" + std::string(*f.find("receipt")) + "\n\n" +
                           std::string(1, '\0'));
            max_unreceipted_ = std::max<uint32_t>(max_unreceipted_, uint32_t(held.size()));
            if (held.size() >= policy_.hold_receipts_until) {
              if (policy_.reverse) std::reverse(held.begin(), held.end());
              for (const std::string& h : held)
                send_all(c, h);
              held.clear();
            }
          }
        }
        in.erase(0, r.consumed);
      }
    }
  }

  static void send_all(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += size_t(n);
    }
  }

  Policy policy_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sends_{0};
  std::atomic<uint32_t> connections_{0};
  std::atomic<uint32_t> max_unreceipted_{0};
  std::mutex mutex_;
  std::vector<Received> received_;
  std::vector<std::string> logins_;
  std::thread thread_;
};

class DrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-drainer-test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    SpillOptions o;
    o.dir = dir_ + "/spill";
    o.segment_bytes = 1u << 20;
    o.record_bytes_max = 64u << 10;
    o.max_bytes = 64u << 20;
    RecoveryReport report;
    auto opened = SpillLog::open(o, &report);
    ASSERT_TRUE(opened) << opened.error().message;
    log_ = std::move(*opened);
    log_->start();
  }
  void TearDown() override {
    drainer_.reset();
    if (log_) log_->stop();
    log_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Appends `count` messages to each queue, interleaved, and waits until all are durable.
  void spill(const std::vector<std::string>& queues, int count) {
    SpillProducer& p = log_->producer(0);
    uint64_t durable = 0;
    uint64_t appended = 0;
    for (int i = 0; i < count; ++i) {
      for (const std::string& q : queues) {
        const std::string headers = "destination:/queue/" + q + "\ncontent-type:text/plain\n";
        const std::string body = q + "-" + std::to_string(i);
        while (p.append(++token_, "/", q, headers, body) != AppendResult::kQueued) {
          p.poll([&](const Completion& c) { durable += c.status == AppendStatus::kDurable; }, 1024);
          std::this_thread::sleep_for(1ms);
        }
        ++appended;
      }
    }
    ASSERT_TRUE(wait_until(10s, [&] {
      p.poll([&](const Completion& c) { durable += c.status == AppendStatus::kDurable; }, 1024);
      return durable == appended;
    }));
  }

  void start_drainer(uint16_t port, DrainRoute route = {}, uint32_t window = 8,
                     uint32_t rate_per_second = 0) {
    DrainerOptions o;
    o.rate_per_second = rate_per_second;
    o.rate_burst = 1;
    o.gateway_id = "gw1";
    o.login = "sluice";
    o.window = window;
    o.backoff_base_ms = 5;
    o.backoff_max_ms = 50;
    o.scan_interval_ms = 10;
    if (!route) {
      route = [port](std::string_view, std::string_view) {
        return std::optional<DrainTarget>(DrainTarget{0, "127.0.0.1", port});
      };
    }
    drainer_ = std::make_unique<Drainer>(*log_, route, o);
    drainer_->start();
  }

  uint64_t backlog() {
    uint64_t n = 0;
    for (const QueueStats& s : log_->queues())
      n += s.messages;
    return n;
  }

  std::string dir_;
  std::unique_ptr<SpillLog> log_;
  std::unique_ptr<Drainer> drainer_;
  uint64_t token_ = 0;
};

// Per destination, the bodies in the order the broker saw them.
std::map<std::string, std::vector<std::string>> by_queue(const std::vector<Received>& r) {
  std::map<std::string, std::vector<std::string>> out;
  for (const Received& x : r)
    out[x.destination].push_back(x.body);
  return out;
}

std::vector<std::string> expected_bodies(const std::string& q, int count) {
  std::vector<std::string> v;
  v.reserve(size_t(count));
  for (int i = 0; i < count; ++i)
    v.push_back(q + "-" + std::to_string(i));
  return v;
}

TEST_F(DrainerTest, DeliversEveryQueueOnceInOrderAndEmptiesTheBacklog) {
  const std::vector<std::string> queues = {"a", "b", "c"};
  spill(queues, 200);
  FakeBroker broker({});
  start_drainer(broker.port());
  ASSERT_TRUE(wait_until(20s, [&] { return backlog() == 0; })) << backlog();
  const std::vector<Received> got = broker.received();
  EXPECT_EQ(got.size(), 600u);
  auto per = by_queue(got);
  for (const std::string& q : queues)
    EXPECT_EQ(per["/queue/" + q], expected_bodies(q, 200)) << q;
  std::set<std::string> ids;
  for (const Received& r : got) {
    EXPECT_EQ(r.message_id.rfind("gw1-", 0), 0u) << r.message_id;
    ids.insert(r.message_id);
  }
  EXPECT_EQ(ids.size(), 600u);
  EXPECT_EQ(broker.logins(), std::vector<std::string>{"sluice@/"});
  EXPECT_EQ(drainer_->metrics().delivered.load(), 600u);
  EXPECT_EQ(drainer_->metrics().resent.load(), 0u);
}

// drain.rate_per_second changed while the drainer runs reaches the connection already open.
TEST_F(DrainerTest, ARateChangedWhileRunningPacesTheOpenConnection) {
  spill({"a"}, 50);
  FakeBroker broker({});
  start_drainer(broker.port(), {}, 8, /*rate_per_second=*/1);
  EXPECT_EQ(drainer_->rate(), 1u);
  ASSERT_TRUE(wait_until(10s, [&] { return broker.received().size() >= 1; }));
  // One message a second, from a bucket of one: a slow machine only delivers fewer.
  std::this_thread::sleep_for(300ms);
  EXPECT_LE(broker.received().size(), 2u);
  drainer_->set_rate(0);  // no limit: the rest goes
  ASSERT_TRUE(wait_until(20s, [&] { return backlog() == 0; })) << backlog();
  EXPECT_EQ(by_queue(broker.received())["/queue/a"], expected_bodies("a", 50));
  EXPECT_EQ(drainer_->rate(), 0u);
}

TEST_F(DrainerTest, NeverHasMoreThanTheWindowWithoutReceiptAndTakesThemInAnyOrder) {
  spill({"a", "b"}, 100);
  FakeBroker::Policy p;
  p.hold_receipts_until = 5;  // the broker answers in bursts of five, newest first
  p.reverse = true;
  FakeBroker broker(p);
  start_drainer(broker.port(), {}, /*window=*/5);
  ASSERT_TRUE(wait_until(20s, [&] { return backlog() == 0; })) << backlog();
  EXPECT_EQ(broker.max_unreceipted(), 5u);
  EXPECT_EQ(by_queue(broker.received())["/queue/a"], expected_bodies("a", 100));
  EXPECT_EQ(by_queue(broker.received())["/queue/b"], expected_bodies("b", 100));
  EXPECT_EQ(drainer_->metrics().delivered.load(), 200u);
  EXPECT_EQ(drainer_->metrics().resent.load(), 0u);
}

TEST_F(DrainerTest, ReconnectsAfterTheOwnerDropsAndResendsWithTheSameIds) {
  const std::vector<std::string> queues = {"a", "b"};
  spill(queues, 150);
  FakeBroker::Policy p;
  // Drops the connection at the 60th and the 170th SEND, before their receipts.
  p.keep = [](uint64_t n) { return n != 60 && n != 170; };
  FakeBroker broker(p);
  start_drainer(broker.port());
  ASSERT_TRUE(wait_until(20s, [&] { return backlog() == 0; })) << backlog();
  EXPECT_GE(broker.connections(), 3u);
  EXPECT_GE(drainer_->metrics().resent.load(), 1u);
  const std::vector<Received> got = broker.received();
  // Every message arrived; the ones sent again carry the id they had the first time, and each
  // queue's first arrivals are in order.
  std::map<std::string, std::string> body_of_id;
  std::map<std::string, std::vector<std::string>> first_seen;
  for (const Received& r : got) {
    auto [it, fresh] = body_of_id.try_emplace(r.message_id, r.body);
    EXPECT_EQ(it->second, r.body) << r.message_id;
    if (fresh) first_seen[r.destination].push_back(r.body);
  }
  EXPECT_EQ(body_of_id.size(), 300u);
  for (const std::string& q : queues)
    EXPECT_EQ(first_seen["/queue/" + q], expected_bodies(q, 150)) << q;
}

TEST_F(DrainerTest, WaitsWhileTheOwnerIsDownThenDrains) {
  spill({"a"}, 20);
  FakeBroker broker({});
  std::atomic<bool> up{false};
  const uint16_t port = broker.port();
  start_drainer(port, [&up, port](std::string_view, std::string_view) {
    return up ? std::optional<DrainTarget>(DrainTarget{3, "127.0.0.1", port}) : std::nullopt;
  });
  ASSERT_TRUE(wait_until(5s, [&] {
    auto s = drainer_->queues();
    return s.size() == 1 && s[0].state == "waiting: owner down";
  }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(broker.connections(), 0u);
  EXPECT_EQ(backlog(), 20u);
  up = true;
  ASSERT_TRUE(wait_until(20s, [&] { return backlog() == 0; })) << backlog();
  EXPECT_EQ(by_queue(broker.received())["/queue/a"], expected_bodies("a", 20));
}

TEST_F(DrainerTest, RefusedConnectBacksOffAndKeepsTheBacklog) {
  spill({"a"}, 5);
  FakeBroker::Policy p;
  p.refuse_connect = "Access refused for user 'sluice'";
  FakeBroker broker(p);
  start_drainer(broker.port());
  ASSERT_TRUE(wait_until(10s, [&] { return drainer_->metrics().connect_failures.load() >= 3; }));
  EXPECT_EQ(backlog(), 5u);
  EXPECT_EQ(drainer_->metrics().delivered.load(), 0u);
  ASSERT_TRUE(wait_until(5s, [&] {
    auto s = drainer_->queues();
    return s.size() == 1 && s[0].state.find("Access refused") != std::string::npos;
  }));
}

}  // namespace
}  // namespace sluice::queue
