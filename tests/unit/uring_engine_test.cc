// The io_uring engine end to end on loopback: a real client socket, the engine's worker, and a
// fake owner the test drives (replay, stripped CONNECTED, splice both ways, half-close, reset,
// owner ERROR and silence), spill sessions against a fake sink whose durability the test
// controls, limits, stop and the sessions view. Every wait is bounded; no timing is asserted
// except where the behaviour is a timeout.
#include "dataplane/uring/engine.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "tests/unit/result_util.h"
#include "tests/unit/stomp_frames.h"

namespace sluice::uring {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using session::testing::frame;

// Generous bound for anything that should happen "at once".
constexpr std::chrono::milliseconds kWait = 5s;

// Polls cond() every millisecond until it holds or `limit` passes; returns cond().
template <class Cond>
bool wait_until(std::chrono::milliseconds limit, Cond cond) {
  const auto deadline = Clock::now() + limit;
  while (!cond() && Clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  return cond();
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return int(std::max<int64_t>(0, left.count()));
}

sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

// A TCP socket bound to a port of the kernel's choice on loopback, not listening yet; the port in
// *port.
int bound_loopback_socket(uint16_t* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(0);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// `n` bytes (a multiple of 8) from a generator seeded with `seed`.
std::string random_bytes(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&out[i], &v, 8);
  }
  return out;
}

// A CONNECT with `headers` (each ending in a newline), then `n` padding headers of `len` bytes.
std::string padded_connect(std::string_view headers, int n, size_t len) {
  std::string connect = "CONNECT\n" + std::string(headers);
  for (int i = 0; i < n; ++i)
    connect += "x-pad" + std::to_string(i) + ":" + std::string(len, 'p') + "\n";
  connect += "\n";
  connect.push_back('\0');
  return connect;
}

// One end of a TCP connection with bounded reads and writes. Bytes read are kept in buffer()
// until taken, so frames and raw bytes can be read in any mix.
class Conn {
 public:
  enum class End : uint8_t { kOpen, kEof, kReset, kTimeout };

  Conn() = default;
  explicit Conn(int fd) : fd_(fd) {}
  ~Conn() { close(); }
  Conn(Conn&& o) noexcept : fd_(std::exchange(o.fd_, -1)), buf_(std::move(o.buf_)) {}
  Conn& operator=(Conn&& o) noexcept {
    close();
    fd_ = std::exchange(o.fd_, -1);
    buf_ = std::move(o.buf_);
    return *this;
  }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send_all(std::string_view bytes, std::chrono::milliseconds limit = kWait) {
    const auto deadline = Clock::now() + limit;
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        off += size_t(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      pollfd p{fd_, POLLOUT, 0};
      if (Clock::now() >= deadline) return false;
      ::poll(&p, 1, std::min(ms_left(deadline), 50));
    }
    return true;
  }

  // One read (waiting up to `limit`): kOpen when bytes were added to the buffer.
  End read_some(std::chrono::milliseconds limit) {
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, int(limit.count()));
    if (r <= 0) return End::kTimeout;
    char tmp[64 << 10];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, MSG_DONTWAIT);
    if (n > 0) {
      buf_.append(tmp, size_t(n));
      return End::kOpen;
    }
    if (n == 0) return End::kEof;
    if (errno == EAGAIN || errno == EINTR) return End::kOpen;
    last_errno_ = errno;
    return End::kReset;
  }

  // Exactly `n` bytes (from the buffer first), or nothing when EOF, a reset or `limit` came first.
  std::optional<std::string> read_exact(size_t n, std::chrono::milliseconds limit = kWait) {
    const auto deadline = Clock::now() + limit;
    while (buf_.size() < n) {
      if (Clock::now() >= deadline) return std::nullopt;
      End e = read_some(std::chrono::milliseconds(std::min(ms_left(deadline), 100)));
      if (e == End::kEof || e == End::kReset) return std::nullopt;
    }
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }

  // One frame up to and including its NUL (the frames read here carry no NUL in their body).
  std::optional<std::string> read_frame(std::chrono::milliseconds limit = kWait) {
    const auto deadline = Clock::now() + limit;
    while (true) {
      size_t nul = buf_.find('\0');
      if (nul != std::string::npos) {
        std::string out = buf_.substr(0, nul + 1);
        buf_.erase(0, nul + 1);
        return out;
      }
      if (Clock::now() >= deadline) return std::nullopt;
      End e = read_some(std::chrono::milliseconds(std::min(ms_left(deadline), 100)));
      if (e == End::kEof || e == End::kReset) return std::nullopt;
    }
  }

  // Reads (keeping what comes) until EOF or a reset; kTimeout when `limit` passed first.
  End wait_end(std::chrono::milliseconds limit = kWait) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      End e = read_some(std::chrono::milliseconds(std::min(ms_left(deadline), 100)));
      if (e == End::kEof || e == End::kReset) return e;
    }
    return End::kTimeout;
  }

  // True when no byte and no EOF arrived within `period`.
  bool quiet_for(std::chrono::milliseconds period) {
    const size_t before = buf_.size();
    const auto deadline = Clock::now() + period;
    while (Clock::now() < deadline) {
      End e = read_some(std::chrono::milliseconds(std::max(1, ms_left(deadline))));
      if (e == End::kEof || e == End::kReset) return false;
    }
    return buf_.size() == before;
  }

  std::string& buffer() { return buf_; }
  int last_errno() const { return last_errno_; }

 private:
  int fd_ = -1;
  std::string buf_;
  int last_errno_ = 0;
};

Conn connect_to(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return Conn();
  }
  return Conn(fd);
}

// The queue's owner: a loopback listener the test accepts from, then drives the connection.
class FakeOwner {
 public:
  FakeOwner() {
    fd_ = bound_loopback_socket(&port_);
    EXPECT_EQ(::listen(fd_, 16), 0);
  }
  ~FakeOwner() { ::close(fd_); }
  FakeOwner(const FakeOwner&) = delete;
  FakeOwner& operator=(const FakeOwner&) = delete;

  sockaddr_in addr() const { return loopback(port_); }
  std::optional<Conn> accept(std::chrono::milliseconds limit = kWait) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(limit.count())) <= 0) return std::nullopt;
    int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return std::nullopt;
    return Conn(c);
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A port where nothing listens: bound (so nobody else takes it) but not listening, so a connect
// is refused.
class ClosedPort {
 public:
  ClosedPort() { fd_ = bound_loopback_socket(&port_); }
  ~ClosedPort() { ::close(fd_); }
  sockaddr_in addr() const { return loopback(port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A listener whose accept queue is full: further SYNs are dropped, so a connect neither
// succeeds nor fails until its timeout.
class FullListener {
 public:
  FullListener() {
    fd_ = bound_loopback_socket(&port_);
    EXPECT_EQ(::listen(fd_, 0), 0);
    // Fill the queue until a connect hangs (bounded).
    sockaddr_in a = loopback(port_);
    for (int i = 0; i < 16; ++i) {
      int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      fillers_.push_back(c);
      (void)!::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a);
      pollfd p{c, POLLOUT, 0};
      if (::poll(&p, 1, 200) == 0) {
        full_ = true;
        break;
      }
    }
  }
  ~FullListener() {
    for (int c : fillers_)
      ::close(c);
    ::close(fd_);
  }
  bool full() const { return full_; }
  sockaddr_in addr() const { return loopback(port_); }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  bool full_ = false;
  std::vector<int> fillers_;
};

constexpr uint32_t kOwnerNode = 7;

class FakeRouter final : public session::Router {
 public:
  void set_direct(sockaddr_in addr) {
    std::lock_guard<std::mutex> l(mu_);
    decision_ = owner_route(kOwnerNode, addr);
  }
  void set_spill() {
    std::lock_guard<std::mutex> l(mu_);
    decision_ = session::Route{};
  }
  void set_refuse() {
    std::lock_guard<std::mutex> l(mu_);
    decision_ = session::Route{session::Route::Kind::kRefuse, session::kNoRouteNode, 0, 0,
                               "no node for queue"};
  }
  void set_owner_up(bool up) { owner_up_.store(up); }
  std::vector<uint32_t> failed() const {
    std::lock_guard<std::mutex> l(mu_);
    return failed_;
  }
  std::vector<std::pair<std::string, std::string>> routed() const {
    std::lock_guard<std::mutex> l(mu_);
    return routed_;
  }

  // The node that checks logins (login_check eager); none by default: the gateway answers.
  void set_login_node(sockaddr_in addr, uint32_t node = kOwnerNode) {
    std::lock_guard<std::mutex> l(mu_);
    login_ = owner_route(node, addr);
  }
  void set_placement_pending(bool pending) {
    std::lock_guard<std::mutex> l(mu_);
    decision_.placement_pending = pending;
  }
  std::vector<std::pair<std::string, uint32_t>> confirmed() const {
    std::lock_guard<std::mutex> l(mu_);
    return confirmed_;
  }

  // How each session ended, as "reason client=ip:port queue=q owner=node message=m".
  std::vector<std::string> ends() const {
    std::lock_guard<std::mutex> l(mu_);
    return ends_;
  }
  std::vector<session::HeartBeatCheck> mismatches() const {
    std::lock_guard<std::mutex> l(mu_);
    return mismatches_;
  }

  void poll() override {}
  session::Route route(const session::QueueKey& key, uint64_t) override {
    std::lock_guard<std::mutex> l(mu_);
    routed_.emplace_back(std::string(key.vhost), std::string(key.queue));
    return decision_;
  }
  // One login node: a second attempt finds none.
  session::Route login_node(std::string_view, uint64_t, uint32_t attempt) override {
    std::lock_guard<std::mutex> l(mu_);
    return attempt == 0 ? login_ : session::Route{};
  }
  void confirm_placement(const session::QueueKey& key, uint32_t node) override {
    std::lock_guard<std::mutex> l(mu_);
    confirmed_.emplace_back(std::string(key.queue), node);
  }
  bool owner_up(const session::QueueKey&) override { return owner_up_.load(); }
  void connect_failed(uint32_t node) override {
    std::lock_guard<std::mutex> l(mu_);
    failed_.push_back(node);
  }
  std::string_view node_name(uint32_t node) const override {
    return node == kOwnerNode ? "owner-a" : "unknown";
  }
  void session_end(const session::SessionEnd& e) override {
    const in_addr a{htonl(e.client_ip)};
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &a, ip, sizeof ip);
    std::lock_guard<std::mutex> l(mu_);
    ends_.push_back(std::string(e.reason) + " client=" + ip + ":" + std::to_string(e.client_port) +
                    " queue=" + std::string(e.queue) + " owner=" +
                    (e.node == session::kNoRouteNode ? "-" : std::string(node_name(e.node))) +
                    " message=" + std::string(e.message));
  }
  void heart_beat_mismatch(uint32_t, session::HeartBeat, session::HeartBeat, session::HeartBeat,
                           session::HeartBeatCheck check) override {
    std::lock_guard<std::mutex> l(mu_);
    mismatches_.push_back(check);
  }

 private:
  static session::Route owner_route(uint32_t node, sockaddr_in addr) {
    return session::Route{
        session::Route::Kind::kOwner, node, ntohl(addr.sin_addr.s_addr), ntohs(addr.sin_port), {}};
  }

  mutable std::mutex mu_;
  session::Route decision_;
  std::vector<uint32_t> failed_;
  std::vector<std::pair<std::string, std::string>> routed_;
  session::Route login_;
  std::vector<std::pair<std::string, uint32_t>> confirmed_;
  std::vector<std::string> ends_;
  std::vector<session::HeartBeatCheck> mismatches_;
  std::atomic<bool> owner_up_{false};
};

// The spill log's producer end: durable at once by default; hold() keeps completions back until
// release(), to check that no RECEIPT goes out before durability.
class FakeSink final : public SpillSink {
 public:
  struct Record {
    std::string vhost;
    std::string queue;
    std::string headers;
    std::string body;
  };

  FakeSink() : efd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  ~FakeSink() override { ::close(efd_); }

  void hold() {
    std::lock_guard<std::mutex> l(mu_);
    holding_ = true;
  }
  void release() {
    std::lock_guard<std::mutex> l(mu_);
    holding_ = false;
    if (armed_ && !queued_.empty()) {
      uint64_t one = 1;
      (void)!::write(efd_, &one, sizeof one);
      armed_ = false;
    }
  }
  std::vector<Record> records() const {
    std::lock_guard<std::mutex> l(mu_);
    return records_;
  }

  // The next `n` appends answer kBusy.
  void busy_for(int n) {
    std::lock_guard<std::mutex> l(mu_);
    busy_left_ = n;
  }

  Result append(uint64_t token, std::string_view vhost, std::string_view queue,
                std::string_view headers, std::string_view body, std::string_view*) override {
    std::lock_guard<std::mutex> l(mu_);
    if (busy_left_ > 0) {
      --busy_left_;
      return Result::kBusy;
    }
    records_.push_back(
        Record{std::string(vhost), std::string(queue), std::string(headers), std::string(body)});
    queued_.push_back(Done{token, true, {}});
    return Result::kQueued;
  }
  size_t poll(std::span<Done> out) override {
    std::lock_guard<std::mutex> l(mu_);
    if (holding_) return 0;
    const size_t n = std::min(out.size(), queued_.size());
    for (size_t i = 0; i < n; ++i) {
      out[i] = queued_.front();
      queued_.pop_front();
    }
    return n;
  }
  uint64_t in_flight() const override {
    std::lock_guard<std::mutex> l(mu_);
    return queued_.size();
  }
  bool arm_notify() override {
    std::lock_guard<std::mutex> l(mu_);
    if (!holding_ && !queued_.empty()) return false;
    armed_ = true;
    return true;
  }
  int notify_fd() const override { return efd_; }

 private:
  mutable std::mutex mu_;
  int efd_ = -1;
  bool holding_ = false;
  bool armed_ = false;
  int busy_left_ = 0;
  std::deque<Done> queued_;
  std::vector<Record> records_;
};

// Spill credentials and ACL. The login kLaterLogin is answered kPending: the test answers it
// with answer_oldest(), through LoginAnswers as the gateway's verifier thread does.
constexpr std::string_view kLaterLogin = "later";
class FakeHooks final : public session::SpillHooks, public LoginAnswers {
 public:
  FakeHooks() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  session::AuthAnswer authenticate(std::optional<std::string_view> login,
                                   std::optional<std::string_view>, uint64_t ticket) override {
    if (login == kLaterLogin) {
      std::lock_guard<std::mutex> l(mu_);
      pending_.push_back(ticket);
      return session::AuthAnswer::kPending;
    }
    return authenticate_ok.load() ? session::AuthAnswer::kAccepted : session::AuthAnswer::kRefused;
  }
  bool authorize(std::string_view, const session::QueueKey&) override {
    return authorize_ok.load();
  }
  size_t poll(std::span<Answer> out) override {
    std::lock_guard<std::mutex> l(mu_);
    const size_t n = std::min(out.size(), answers_.size());
    std::copy_n(answers_.begin(), n, out.begin());
    answers_.erase(answers_.begin(), answers_.begin() + ptrdiff_t(n));
    return n;
  }
  int notify_fd() const override { return fd_.get(); }

  // Test thread: answers the oldest login left pending; false when none is.
  bool answer_oldest(bool accepted) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (pending_.empty()) return false;
      answers_.push_back(Answer{pending_.front(), accepted});
      pending_.pop_front();
    }
    return notify();
  }
  // Test thread: answers for the oldest pending login's slot with another generation (as for
  // a session that has ended), leaving that login pending.
  bool answer_stale(bool accepted) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (pending_.empty()) return false;
      answers_.push_back(Answer{pending_.front() ^ 1, accepted});
    }
    return notify();
  }
  size_t pending() const {
    std::lock_guard<std::mutex> l(mu_);
    return pending_.size();
  }

  std::atomic<bool> authenticate_ok{true};
  std::atomic<bool> authorize_ok{true};

 private:
  bool notify() {
    const uint64_t one = 1;
    return write(fd_.get(), &one, sizeof one) == sizeof one;
  }
  base::Fd fd_;
  mutable std::mutex mu_;
  std::deque<uint64_t> pending_;
  std::vector<Answer> answers_;
};

LogFn nullptr_log() {
  return [](LogLevel, std::string_view, std::span<const LogField>) {};
}

// A frame's command and headers (no unescaping: the tests use plain values).
std::string command_of(std::string_view f) {
  return std::string(f.substr(0, f.find('\n')));
}
std::optional<std::string> header_of(std::string_view f, std::string_view name) {
  size_t pos = f.find('\n');
  while (pos != std::string_view::npos && pos + 1 < f.size()) {
    const size_t begin = pos + 1;
    const size_t end = f.find('\n', begin);
    if (end == std::string_view::npos || end == begin) break;
    std::string_view line = f.substr(begin, end - begin);
    if (line.substr(0, line.find(':')) == name) {
      return std::string(line.substr(line.find(':') + 1));
    }
    pos = end;
  }
  return std::nullopt;
}

const std::string kConnect = frame(
    "CONNECT", {{"accept-version", "1.0,1.1,1.2"}, {"host", "/"}, {"heart-beat", "10000,10000"}});
// What the owner must receive for kConnect: heart-beat forced to 0,0, the version narrowed.
const std::string kReplayedConnect =
    frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "0,0"}});
const std::string kSend = frame(
    "SEND", {{"destination", "/queue/q1"}, {"receipt", "r1"}, {"content-length", "5"}}, "hello");
const std::string kSubscribe =
    frame("SUBSCRIBE", {{"destination", "/queue/q1"}, {"id", "0"}, {"ack", "client"}});
const std::string kOwnerConnected =
    frame("CONNECTED", {{"version", "1.2"}, {"server", "owner/1"}, {"heart-beat", "0,0"}});
const std::string kReceipt = frame("RECEIPT", {{"receipt-id", "r1"}});
// A CONNECT whose login FakeHooks leaves pending.
const std::string kLaterConnect =
    frame("CONNECT",
          {{"accept-version", "1.2"}, {"host", "/"}, {"login", kLaterLogin}, {"passcode", "pw"}});

// Every case runs in both splice modes (splice(2) on the worker thread and IORING_OP_SPLICE),
// and in the first with every idle spliced session parked (EngineOptions::park_sessions_above 0),
// so that each spliced case also runs through parking and unparking.
struct Mode {
  EngineOptions::SpliceMode splice;
  bool park;
};

class UringEngineTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    options_.splice = GetParam().splice;
    options_.park_sessions_above = GetParam().park ? 0 : EngineOptions::kParkNever;
    options_.listen_host = "127.0.0.1";
    options_.listen_port = 0;
    options_.workers = 1;
    options_.sessions_max = 64;
    options_.prelude_sessions_max = 64;
    options_.spill_sessions_max = 8;
    options_.recv_buffers = 64;
    options_.ring_entries = 256;
    options_.connect_timeout_ms = 2'000;
  }

  // Opens and starts the engine with the fixture's options, config and fakes.
  void start_engine() {
    std::string error;
    std::vector<WorkerParts> parts{WorkerParts{&router_, &sink_, &hooks_, nullptr, &hooks_}};
    LogFn log = [this](LogLevel, std::string_view event, std::span<const LogField> fields) {
      std::string line(event);
      for (const auto& [k, v] : fields)
        line += " " + std::string(k) + "=" + std::string(v);
      std::lock_guard<std::mutex> l(log_mu_);
      log_.push_back(std::move(line));
    };
    auto opened = Engine::open(options_, config_, std::move(parts), log);
    if (!opened) error = opened.error().message;
    if (!opened && error.find("io_uring") != std::string::npos) {
      GTEST_SKIP() << "SKIPPED: io_uring is unavailable on this host: " << error;
    }
    ASSERT_TRUE(opened) << error;
    engine_ = std::move(*opened);
    ASSERT_NE(engine_->port(), 0);
    engine_->start();
  }

  // An engine of two workers (not started), the second with its own router and sink.
  void open_two_workers(FakeRouter* router2, FakeSink* sink2) {
    options_.workers = 2;
    std::string error;
    auto opened =
        Engine::open(options_, config_,
                     {WorkerParts{&router_, &sink_, &hooks_}, WorkerParts{router2, sink2, &hooks_}},
                     nullptr_log());
    if (!opened) error = opened.error().message;
    if (!opened && error.find("io_uring") != std::string::npos) GTEST_SKIP() << error;
    ASSERT_TRUE(opened) << error;
    engine_ = std::move(*opened);
  }

  void TearDown() override {
    if (engine_) engine_->stop(0);
    std::lock_guard<std::mutex> l(log_mu_);
    for (const auto& line : log_)
      std::printf("engine log: %s\n", line.c_str());
  }

  const WorkerCounters& counters() const { return engine_->counters(0); }
  uint64_t active() const { return counters().active.load(); }
  Conn client() {
    Conn c = connect_to(engine_->port());
    EXPECT_TRUE(c.valid()) << "connect to the engine failed";
    return c;
  }

  // CONNECT from a new client, and the gateway's own CONNECTED back.
  void connect_client(Conn* c, const std::string& connect = kConnect) {
    *c = client();
    ASSERT_TRUE(c->send_all(connect));
    std::optional<std::string> connected = c->read_frame();
    ASSERT_TRUE(connected) << "no CONNECTED from the gateway";
    ASSERT_EQ(command_of(*connected), "CONNECTED") << *connected;
  }

  // The engine started, the route set to spill, and a new client past CONNECTED.
  void start_spilling(Conn* c, const std::string& connect = kConnect) {
    ASSERT_NO_FATAL_FAILURE(start_engine());
    router_.set_spill();
    ASSERT_NO_FATAL_FAILURE(connect_client(c, connect));
  }

  // The engine started, the route set to spill, and a client past CONNECTED with kLaterConnect
  // that has sent kSend: its login waits in FakeHooks for the test's answer.
  void start_with_login_pending(Conn* c) {
    ASSERT_NO_FATAL_FAILURE(start_spilling(c, kLaterConnect));
    ASSERT_TRUE(c->send_all(kSend));
    ASSERT_TRUE(wait_until(kWait, [&] { return hooks_.pending() == 1; }));
  }

  // The next frame `c` reads is kReceipt.
  static void expect_receipt(Conn& c, std::string_view who) {
    std::optional<std::string> receipt = c.read_frame();
    ASSERT_TRUE(receipt) << who << " got: " << c.buffer();
    EXPECT_EQ(*receipt, kReceipt) << who;
  }

  // The engine started; a new client past CONNECTED sends `first` with the route set to the
  // owner: the gateway connects to the owner (accepted into *o), which reads the replay,
  // kReplayedConnect + `first` (into *replay when given).
  void start_and_reach_owner(Conn* c, Conn* o, const std::string& first = kSend,
                             std::string* replay = nullptr) {
    ASSERT_NO_FATAL_FAILURE(start_engine());
    router_.set_direct(owner_.addr());
    ASSERT_NO_FATAL_FAILURE(connect_client(c));
    ASSERT_TRUE(c->send_all(first));
    std::optional<Conn> accepted = owner_.accept();
    ASSERT_TRUE(accepted) << "the gateway did not connect to the owner";
    *o = std::move(*accepted);
    std::optional<std::string> got = o->read_exact(kReplayedConnect.size() + first.size());
    ASSERT_TRUE(got) << "owner got: " << o->buffer();
    if (replay) *replay = std::move(*got);
  }

  // An eager engine with `node` checking logins (as node index `index`) and the owner routed
  // direct; a new client's CONNECT reaches `node`, accepted into *l, which has read it.
  void start_eager_with_login_node(FakeOwner& node, uint32_t index, Conn* c,
                                   std::optional<Conn>* l) {
    config_ = session::SessionConfig::gateway_defaults();
    ASSERT_NO_FATAL_FAILURE(start_engine());
    router_.set_login_node(node.addr(), index);
    router_.set_direct(owner_.addr());
    *c = client();
    ASSERT_TRUE(c->send_all(kConnect));
    *l = node.accept();
    ASSERT_TRUE(*l) << "no login check reached the node";
  }

  // Closes `c` with a reset (SO_LINGER 0) instead of a FIN.
  static void close_with_reset(Conn& c) {
    linger l{1, 0};
    ASSERT_EQ(::setsockopt(c.fd(), SOL_SOCKET, SO_LINGER, &l, sizeof l), 0);
    c.close();
  }

  // The next frame `c` reads is an ERROR with this message, then EOF (each within `limit`).
  void expect_error_then_eof(Conn& c, const std::string& message,
                             std::chrono::milliseconds limit = kWait) {
    std::optional<std::string> got = c.read_frame(limit);
    ASSERT_TRUE(got) << "client got: " << c.buffer();
    EXPECT_EQ(command_of(*got), "ERROR") << *got;
    EXPECT_EQ(header_of(*got, "message"), message) << *got;
    EXPECT_EQ(c.wait_end(limit), Conn::End::kEof);
  }

  // With a limit of two sessions (set by the caller): two held, a third refused with `message`;
  // once one of the two ends, a new session is let in.
  void expect_third_refused_until_a_slot_frees(const std::string& message) {
    ASSERT_NO_FATAL_FAILURE(start_engine());
    Conn a = client();
    Conn b = client();
    ASSERT_TRUE(wait_until(kWait, [&] { return active() == 2; }));
    Conn third = client();
    ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(third, message));
    a.close();
    ASSERT_TRUE(wait_until(kWait, [&] { return active() == 1; }));
    Conn d;
    ASSERT_NO_FATAL_FAILURE(connect_client(&d));
  }

  // The engine started; client CONNECT + SEND (receipt r1) through the gateway to the owner,
  // which answers CONNECTED (stripped) and the RECEIPT, which the client receives. The session is
  // spliced afterwards.
  void start_and_splice(Conn* c, Conn* o) {
    std::string replay;
    ASSERT_NO_FATAL_FAILURE(start_and_reach_owner(c, o, kSend, &replay));
    ASSERT_EQ(replay, kReplayedConnect + kSend);
    ASSERT_TRUE(o->send_all(kOwnerConnected));
    ASSERT_TRUE(wait_until(kWait, [&] { return counters().splicing.load() == 1; }));
    ASSERT_TRUE(o->send_all(kReceipt));
    std::optional<std::string> receipt = c->read_frame();
    ASSERT_TRUE(receipt) << "client got: " << c->buffer();
    ASSERT_EQ(*receipt, kReceipt);
    if (GetParam().park) {
      // Idle now: parked, so that what the case does next goes through unparking.
      ASSERT_TRUE(wait_until(kWait, [&] { return counters().parked.load() == 1; }));
    }
  }

  session::SessionConfig config_;
  EngineOptions options_;
  FakeRouter router_;
  FakeSink sink_;
  FakeHooks hooks_;
  FakeOwner owner_;
  std::mutex log_mu_;
  std::vector<std::string> log_;
  std::unique_ptr<Engine> engine_;  // last: stopped before the fakes go
};

// --- Splice ---------------------------------------------------------------------------------

TEST_P(UringEngineTest, SpliceReplaysConnectStripsOwnerConnectedAndRelaysReceipt) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  Conn c = client();
  ASSERT_TRUE(c.send_all(kConnect));
  std::optional<std::string> connected = c.read_frame();
  ASSERT_TRUE(connected);
  EXPECT_EQ(command_of(*connected), "CONNECTED");
  EXPECT_EQ(header_of(*connected, "version"), "1.2");
  EXPECT_EQ(header_of(*connected, "heart-beat"), "0,0");
  ASSERT_TRUE(header_of(*connected, "server"));
  EXPECT_EQ(header_of(*connected, "server")->rfind("sluice/", 0), 0u) << *connected;

  ASSERT_TRUE(c.send_all(kSend));
  std::optional<Conn> o = owner_.accept();
  ASSERT_TRUE(o) << "the gateway did not connect to the owner";
  std::optional<std::string> replay = o->read_exact(kReplayedConnect.size() + kSend.size());
  ASSERT_TRUE(replay) << "owner got: " << o->buffer();
  EXPECT_EQ(*replay, kReplayedConnect + kSend);
  ASSERT_EQ(router_.routed().size(), 1u);
  EXPECT_EQ(router_.routed()[0], (std::pair<std::string, std::string>{"/", "q1"}));

  // CONNECTED alone, then (once spliced) the RECEIPT: the client sees only the RECEIPT.
  ASSERT_TRUE(o->send_all(kOwnerConnected));
  ASSERT_TRUE(wait_until(kWait, [&] { return counters().splicing.load() == 1; }));
  ASSERT_TRUE(o->send_all(kReceipt));
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  EXPECT_TRUE(c.quiet_for(50ms)) << "unexpected bytes: " << c.buffer();
  EXPECT_EQ(counters().spliced.load(), 1u);
  EXPECT_EQ(counters().owner_error.load(), 0u);
  EXPECT_TRUE(router_.failed().empty());
  EXPECT_TRUE(sink_.records().empty());
}

TEST_P(UringEngineTest, SessionsOneAfterAnotherReuseTheSlotsHeaderTables) {
  // Each session parses its prelude and the owner's greeting with a header table; the slot keeps
  // both, so sessions after the first make none (no allocation per session).
  constexpr uint64_t kSessions = 5;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  for (uint64_t i = 1; i <= kSessions; ++i) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(connect_client(&c));
    ASSERT_TRUE(c.send_all(kSend));
    std::optional<Conn> o = owner_.accept();
    ASSERT_TRUE(o) << "session " << i << ": the gateway did not connect to the owner";
    ASSERT_TRUE(o->read_exact(kReplayedConnect.size() + kSend.size())) << o->buffer();
    ASSERT_TRUE(o->send_all(kOwnerConnected + kReceipt));
    std::optional<std::string> receipt = c.read_frame();
    ASSERT_TRUE(receipt) << "session " << i << ": client got: " << c.buffer();
    EXPECT_EQ(*receipt, kReceipt);
    c.close();
    o->close();
    ASSERT_TRUE(wait_until(kWait, [&] { return active() == 0; })) << "session " << i;
    EXPECT_EQ(counters().spliced.load(), i);
    EXPECT_EQ(counters().header_tables.load(), 2u) << "session " << i;
  }
}

TEST_P(UringEngineTest, SpliceRelaysEightMebibytesExactlyBothWays) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));

  constexpr size_t kBulk = 8u << 20;
  const std::string data = random_bytes(kBulk, 42);
  // The owner echoes what it reads; the client writes from one thread and reads here.
  std::string owner_got;
  std::atomic<bool> echo_ok{true};
  std::thread echo([&] {
    const auto deadline = Clock::now() + 30s;
    while (owner_got.size() < kBulk && Clock::now() < deadline) {
      const size_t before = o.buffer().size();
      Conn::End e = o.read_some(100ms);
      if (e == Conn::End::kEof || e == Conn::End::kReset) break;
      if (o.buffer().size() > before) {
        owner_got += o.buffer();
        std::string chunk;
        chunk.swap(o.buffer());
        if (!o.send_all(chunk, 30s)) {
          echo_ok = false;
          break;
        }
      }
    }
  });
  std::atomic<bool> sent_ok{false};
  std::thread writer([&] { sent_ok = c.send_all(data, 30s); });
  std::optional<std::string> back = c.read_exact(kBulk, 40s);
  writer.join();
  echo.join();
  EXPECT_TRUE(sent_ok.load());
  EXPECT_TRUE(echo_ok.load());
  ASSERT_EQ(owner_got.size(), kBulk);
  EXPECT_TRUE(owner_got == data) << "client -> owner bytes differ";
  ASSERT_TRUE(back) << "client got " << c.buffer().size() << " of " << kBulk << " bytes back";
  EXPECT_TRUE(*back == data) << "owner -> client bytes differ";
  // Spliced bytes only: the replay went before the splice, the RECEIPT through it.
  EXPECT_EQ(counters().bytes_in.load(), kBulk);
  EXPECT_EQ(counters().bytes_out.load(), kBulk + kReceipt.size());
}

// One more session through the running engine: the client's CONNECT and SEND reach the
// owner (accepted into *o), which answers CONNECTED; returns once `spliced` sessions are.
void splice_another(FakeOwner& owner, uint16_t port, Conn* c, Conn* o, uint64_t spliced,
                    const WorkerCounters& counters) {
  *c = connect_to(port);
  ASSERT_TRUE(c->valid());
  ASSERT_TRUE(c->send_all(kConnect));
  std::optional<std::string> connected = c->read_frame();
  ASSERT_TRUE(connected && command_of(*connected) == "CONNECTED");
  ASSERT_TRUE(c->send_all(kSend));
  std::optional<Conn> accepted = owner.accept();
  ASSERT_TRUE(accepted) << "the gateway did not connect to the owner";
  *o = std::move(*accepted);
  ASSERT_TRUE(o->read_exact(kReplayedConnect.size() + kSend.size()));
  ASSERT_TRUE(o->send_all(kOwnerConnected));
  ASSERT_TRUE(wait_until(kWait, [&] { return counters.spliced.load() == spliced; }));
}

// The client writes `data` while the owner waits before reading it all: the gateway's socket
// from the client fills, so each splice from it takes a whole pipe. True when the owner got
// exactly `data`.
bool stream_to_owner(Conn& c, Conn& o, const std::string& data) {
  std::atomic<bool> sent_ok{false};
  std::thread writer([&] { sent_ok = c.send_all(data, 30s); });
  std::this_thread::sleep_for(200ms);
  std::optional<std::string> got = o.read_exact(data.size(), 30s);
  writer.join();
  return sent_ok.load() && got && *got == data;
}

TEST_P(UringEngineTest, AStreamThatFillsItsPipeGetsItGrownAndTheGrownPipeIsKept) {
  options_.pipe_bytes = 64u << 10;
  options_.pipe_bytes_max = 1u << 20;
  options_.grown_pipes_max = 4;
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  const std::string data = random_bytes(8u << 20, 11);
  ASSERT_TRUE(stream_to_owner(c, o, data)) << "client -> owner bytes differ";
  if (GetParam().splice == EngineOptions::SpliceMode::kInline) {
    // Only the client's direction streamed: one pipe grew.
    EXPECT_EQ(counters().pipes_grown.load(), 1u);
    EXPECT_EQ(counters().grown_pipes.load(), 1u);
  } else {
    // IORING_OP_SPLICE keeps each direction's pipe for the session, at pipe_bytes.
    EXPECT_EQ(counters().pipes_grown.load(), 0u);
    EXPECT_EQ(counters().grown_pipes.load(), 0u);
  }
  // Both directions still work after the growth.
  const std::string back = frame("MESSAGE", {{"destination", "/queue/q1"}, {"message-id", "b"}});
  ASSERT_TRUE(o.send_all(back));
  std::optional<std::string> got = c.read_frame();
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, back);
  c.close();
  o.close();
  ASSERT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  // Empty, the grown pipe waits in its pool for the next stream.
  EXPECT_EQ(counters().grown_pipes.load(),
            GetParam().splice == EngineOptions::SpliceMode::kInline ? 1u : 0u);
}

TEST_P(UringEngineTest, GrownPipesStayWithinTheirLimitAndTheOtherStreamsStillFlow) {
  options_.pipe_bytes = 64u << 10;
  options_.pipe_bytes_max = 1u << 20;
  options_.grown_pipes_max = 1;
  Conn c1, o1;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c1, &o1));
  Conn c2, o2;
  ASSERT_NO_FATAL_FAILURE(splice_another(owner_, engine_->port(), &c2, &o2, 2, counters()));
  std::atomic<bool> done{false};
  std::atomic<uint64_t> most{0};
  std::thread watch([&] {
    while (!done.load()) {
      most = std::max(most.load(), counters().grown_pipes.load());
      std::this_thread::sleep_for(1ms);
    }
  });
  const std::string data1 = random_bytes(4u << 20, 21);
  const std::string data2 = random_bytes(4u << 20, 22);
  std::atomic<bool> ok2{false};
  std::thread second([&] { ok2 = stream_to_owner(c2, o2, data2); });
  const bool ok1 = stream_to_owner(c1, o1, data1);
  second.join();
  done = true;
  watch.join();
  EXPECT_TRUE(ok1) << "first session: client -> owner bytes differ";
  EXPECT_TRUE(ok2.load()) << "second session: client -> owner bytes differ";
  EXPECT_LE(most.load(), 1u);
  EXPECT_LE(counters().grown_pipes.load(), 1u);
  if (GetParam().splice == EngineOptions::SpliceMode::kInline) {
    EXPECT_GE(counters().pipes_grown.load(), 1u);
  } else {
    EXPECT_EQ(counters().pipes_grown.load(), 0u);
  }
}

TEST_P(UringEngineTest, PipesNeverGrowWithGrownPipesMaxZero) {
  options_.grown_pipes_max = 0;
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  ASSERT_TRUE(stream_to_owner(c, o, random_bytes(4u << 20, 31)));
  EXPECT_EQ(counters().pipes_grown.load(), 0u);
  EXPECT_EQ(counters().grown_pipes.load(), 0u);
}

TEST_P(UringEngineTest, BytesPipelinedBehindTheSendReachTheOwnerInOrder) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  // CONNECT, SEND and 1 MiB more in one go, before the gateway has even answered: part lands in
  // the prelude buffer, part is left in the socket for the splice.
  const std::string tail = random_bytes(1u << 20, 7);
  Conn c = client();
  std::atomic<bool> sent_ok{false};
  std::thread writer([&] { sent_ok = c.send_all(kConnect + kSend + tail, 20s); });
  std::optional<Conn> o = owner_.accept();
  ASSERT_TRUE(o);
  // The owner answers the CONNECT (the rest streams once it has: the splice starts then).
  std::optional<std::string> head = o->read_exact(kReplayedConnect.size() + kSend.size());
  ASSERT_TRUE(head);
  ASSERT_TRUE(o->send_all(kOwnerConnected));
  std::optional<std::string> got = o->read_exact(tail.size(), 20s);
  writer.join();
  EXPECT_TRUE(sent_ok.load());
  EXPECT_EQ(*head, kReplayedConnect + kSend);
  ASSERT_TRUE(got) << "owner got " << o->buffer().size() << " bytes of the tail";
  EXPECT_TRUE(*got == tail) << "the bytes after the SEND differ";
  std::optional<std::string> connected = c.read_frame();
  ASSERT_TRUE(connected);
  EXPECT_EQ(command_of(*connected), "CONNECTED");
  EXPECT_EQ(header_of(*connected, "server")->rfind("sluice/", 0), 0u);
}

TEST_P(UringEngineTest, OwnerBytesThatCameWithConnectedReachTheClient) {
  Conn c;
  Conn o;
  std::string replay;
  ASSERT_NO_FATAL_FAILURE(start_and_reach_owner(&c, &o, kSubscribe, &replay));
  EXPECT_EQ(replay, kReplayedConnect + kSubscribe);
  const std::string message = frame("MESSAGE",
                                    {{"destination", "/queue/q1"},
                                     {"message-id", "m1"},
                                     {"subscription", "0"},
                                     {"content-length", "3"}},
                                    "abc");
  ASSERT_TRUE(o.send_all(kOwnerConnected + message));
  std::optional<std::string> got = c.read_frame();
  ASSERT_TRUE(got) << "client got: " << c.buffer();
  EXPECT_EQ(*got, message);
  // The splice runs afterwards, both ways.
  const std::string ack = frame("ACK", {{"id", "m1"}});
  ASSERT_TRUE(c.send_all(ack));
  std::optional<std::string> ack_got = o.read_exact(ack.size());
  ASSERT_TRUE(ack_got);
  EXPECT_EQ(*ack_got, ack);
  const std::string second = frame("MESSAGE", {{"destination", "/queue/q1"}, {"message-id", "m2"}});
  ASSERT_TRUE(o.send_all(second));
  std::optional<std::string> got2 = c.read_frame();
  ASSERT_TRUE(got2);
  EXPECT_EQ(*got2, second);
}

TEST_P(UringEngineTest, HalfCloseFromClientPassesOnAndOwnerCanStillAnswer) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  ASSERT_EQ(::shutdown(c.fd(), SHUT_WR), 0);
  EXPECT_EQ(o.wait_end(), Conn::End::kEof) << "the owner did not read EOF";
  EXPECT_TRUE(o.buffer().empty());
  const std::string late = frame("MESSAGE", {{"destination", "/queue/q1"}, {"message-id", "late"}});
  ASSERT_TRUE(o.send_all(late));
  std::optional<std::string> got = c.read_frame();
  ASSERT_TRUE(got) << "client got: " << c.buffer();
  EXPECT_EQ(*got, late);
  EXPECT_EQ(active(), 1u);
  o.close();
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_TRUE(c.buffer().empty());
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  EXPECT_EQ(counters().splicing.load(), 0u);
  EXPECT_EQ(counters().closed.load(), 1u);
  EXPECT_EQ(counters().resets.load(), 0u);
}

// Both ends close while the gateway's socket to the client still queues the owner's last bytes
// (the client has not read them yet): the session ends with a FIN after them, never a reset that
// would drop them. A parked session has SO_LINGER set for its reset (maybe_park); a graceful close
// must take it off first.
TEST_P(UringEngineTest, ClosingWithBytesStillQueuedForASlowClientDeliversThemAll) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  ASSERT_EQ(::shutdown(c.fd(), SHUT_WR), 0);
  ASSERT_EQ(o.wait_end(), Conn::End::kEof) << "the owner did not read EOF";
  // More than the client's receive window (it reads nothing yet) and less than what the
  // gateway's send buffer holds, so that the session can end with bytes still queued.
  constexpr size_t kTail = 1u << 20;
  const std::string tail = random_bytes(kTail, 7);
  ASSERT_TRUE(o.send_all(tail, 10s));
  ASSERT_EQ(::shutdown(o.fd(), SHUT_WR), 0);
  ASSERT_TRUE(wait_until(kWait, [&] { return active() == 0; }))
      << "the session did not end before the client read";
  std::optional<std::string> got = c.read_exact(kTail, 10s);
  ASSERT_TRUE(got) << "the client got " << c.buffer().size() << " of " << kTail << " bytes";
  EXPECT_TRUE(*got == tail) << "owner -> client bytes differ";
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_EQ(counters().resets.load(), 0u);
}

TEST_P(UringEngineTest, HalfCloseFromOwnerPassesOnAndClientCanStillSend) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  ASSERT_EQ(::shutdown(o.fd(), SHUT_WR), 0);
  EXPECT_EQ(c.wait_end(), Conn::End::kEof) << "the client did not read EOF";
  const std::string late = frame("SEND", {{"destination", "/queue/q1"}}, "x");
  ASSERT_TRUE(c.send_all(late));
  std::optional<std::string> got = o.read_exact(late.size());
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, late);
  c.close();
  EXPECT_EQ(o.wait_end(), Conn::End::kEof);
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

TEST_P(UringEngineTest, ClientResetMidSpliceEndsTheOwnerSide) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  ASSERT_TRUE(c.send_all(std::string(1000, 'x')));
  ASSERT_TRUE(o.read_exact(1000));
  const auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(close_with_reset(c));
  Conn::End end = o.wait_end();
  EXPECT_TRUE(end == Conn::End::kReset || end == Conn::End::kEof) << int(end);
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  EXPECT_EQ(counters().splicing.load(), 0u);
}

// DESIGN section 3: "half-close and reset are propagated". A client's reset must reach the owner
// as a reset, not as an orderly end of stream.
TEST_P(UringEngineTest, ClientResetReachesTheOwnerAsReset) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  ASSERT_NO_FATAL_FAILURE(close_with_reset(c));
  ASSERT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  Conn::End end = o.wait_end();
  EXPECT_EQ(end, Conn::End::kReset) << "the owner read an orderly EOF (FIN) for a client reset";
  EXPECT_EQ(counters().resets.load(), 1u);
}

// --- Parking ----------------------------------------------------------------------------------

// Sockets this process holds a descriptor for (the test's own ends and listeners, and the
// gateway's sockets that are not parked).
size_t socket_descriptors() {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::error_code ec2;
    const std::filesystem::path target = std::filesystem::read_symlink(e.path(), ec2);
    if (!ec2 && target.native().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

TEST_P(UringEngineTest, IdleSplicedSessionsParkTheirDescriptorsAndGetThemBackForBytes) {
  constexpr int kSessions = 6;
  options_.park_sessions_above = 0;  // every mode asks; only the inline one can park
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  const bool parks = GetParam().splice == EngineOptions::SpliceMode::kInline;
  const size_t before = socket_descriptors();
  std::vector<Conn> cs(kSessions);
  std::vector<Conn> os(kSessions);
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_NO_FATAL_FAILURE(connect_client(&cs[i]));
    ASSERT_TRUE(cs[i].send_all(kSend));
    std::optional<Conn> accepted = owner_.accept();
    ASSERT_TRUE(accepted);
    os[i] = std::move(*accepted);
    ASSERT_TRUE(os[i].read_exact(kReplayedConnect.size() + kSend.size()));
    ASSERT_TRUE(os[i].send_all(kOwnerConnected));
  }
  ASSERT_TRUE(wait_until(kWait, [&] { return counters().splicing.load() == kSessions; }));
  if (!parks) {
    // IORING_OP_SPLICE keeps the descriptors in its splices: nothing parks, and it says why.
    EXPECT_EQ(counters().parks.load(), 0u);
    std::lock_guard<std::mutex> l(log_mu_);
    EXPECT_TRUE(std::any_of(log_.begin(), log_.end(), [](const std::string& line) {
      return line.rfind("parking_unavailable", 0) == 0;
    }));
    return;
  }
  ASSERT_TRUE(wait_until(kWait, [&] { return counters().parked.load() == kSessions; }))
      << "parked " << counters().parked.load();
  // The test holds both ends of each session (client and owner); the gateway holds none.
  EXPECT_EQ(socket_descriptors(), before + 2 * kSessions);
  // Bytes both ways through every parked session, then each parks again once idle.
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < kSessions; ++i) {
      const std::string up =
          random_bytes(1000 + 7919 * size_t(i) + size_t(round), uint64_t(i) + 10 * uint64_t(round));
      ASSERT_TRUE(cs[i].send_all(up));
      std::optional<std::string> got = os[i].read_exact(up.size());
      ASSERT_TRUE(got) << "session " << i;
      EXPECT_EQ(*got, up);
      const std::string down =
          frame("MESSAGE", {{"destination", "/queue/q1"}, {"message-id", std::to_string(i)}});
      ASSERT_TRUE(os[i].send_all(down));
      std::optional<std::string> back = cs[i].read_frame();
      ASSERT_TRUE(back) << "session " << i;
      EXPECT_EQ(*back, down);
    }
    ASSERT_TRUE(wait_until(kWait, [&] { return counters().parked.load() == kSessions; }));
  }
  EXPECT_GE(counters().unparks.load(), uint64_t(2 * kSessions));
  EXPECT_GE(counters().parks.load(), uint64_t(3 * kSessions));
  EXPECT_EQ(counters().unpark_failed.load(), 0u);
  EXPECT_EQ(socket_descriptors(), before + 2 * kSessions);
  // A half-close from a parked client reaches the owner, which can still answer.
  ASSERT_EQ(::shutdown(cs[0].fd(), SHUT_WR), 0);
  EXPECT_EQ(os[0].wait_end(kWait), Conn::End::kEof);
  ASSERT_TRUE(os[0].send_all(kReceipt));
  std::optional<std::string> last = cs[0].read_frame();
  ASSERT_TRUE(last);
  EXPECT_EQ(*last, kReceipt);
  // A reset from a parked owner reaches its client as a reset.
  close_with_reset(os[1]);
  EXPECT_EQ(cs[1].wait_end(kWait), Conn::End::kReset);
  // The others end with their clients; every slot and descriptor is given back.
  for (int i = 0; i < kSessions; ++i)
    cs[i].close();
  for (int i = 2; i < kSessions; ++i)
    EXPECT_EQ(os[i].wait_end(kWait), Conn::End::kEof) << "session " << i;
  for (int i = 0; i < kSessions; ++i)
    os[i].close();  // a half-closed session ends with the owner's side
  const bool ended = wait_until(kWait, [&] { return active() == 0; });
  if (!ended) {
    size_t total = 0;
    std::vector<uint32_t> unanswered;
    for (const SessionView& v : engine_->sessions(10, &total, &unanswered))
      ADD_FAILURE() << "left: " << v.client << " " << v.state << " in " << v.bytes_in << " out "
                    << v.bytes_out;
  }
  ASSERT_TRUE(ended);
  EXPECT_EQ(counters().parked.load(), 0u);
}

// The lowest descriptor number this process does not use: with the soft open-file limit set
// to it, no new descriptor can be had.
int lowest_free_descriptor() {
  int fd = 0;
  while (::fcntl(fd, F_GETFD) != -1)
    ++fd;
  return fd;
}

TEST_P(UringEngineTest, AParkedSessionWhoseDescriptorsCannotComeBackIsClosedAndCounted) {
  options_.park_sessions_above = 0;
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  const bool parks = GetParam().splice == EngineOptions::SpliceMode::kInline;
  if (parks) {
    ASSERT_TRUE(wait_until(kWait, [&] { return counters().parked.load() == 1; }));
  }
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit none = saved;
  none.rlim_cur = rlim_t(lowest_free_descriptor());
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &none), 0);
  const bool sent = c.send_all(kSend);
  Conn::End owner_end = Conn::End::kOpen;
  std::optional<std::string> relayed;
  if (parks) {
    owner_end = o.wait_end(kWait);
  } else {
    relayed = o.read_exact(kSend.size());
  }
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(sent);
  if (!parks) {
    // IORING_OP_SPLICE keeps its descriptors: the limit changes nothing for the session.
    ASSERT_TRUE(relayed);
    EXPECT_EQ(*relayed, kSend);
    EXPECT_EQ(counters().unpark_failed.load(), 0u);
    return;
  }
  // Parked, the session needs two new descriptors for the bytes: EMFILE, so it is closed (its
  // sockets go with its fixed-file slots), counted, and nothing of the SEND reaches the owner.
  // Both peers see a reset, as for any failed session: the owner's socket held no unread bytes,
  // so without SO_LINGER set at parking it would have ended with a FIN.
  EXPECT_EQ(owner_end, Conn::End::kReset);
  EXPECT_TRUE(o.buffer().empty()) << o.buffer().size() << " bytes reached the owner";
  EXPECT_EQ(c.wait_end(kWait), Conn::End::kReset);
  ASSERT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  EXPECT_EQ(counters().unpark_failed.load(), 1u);
  EXPECT_EQ(counters().parked.load(), 0u);
  std::lock_guard<std::mutex> l(log_mu_);
  EXPECT_TRUE(std::any_of(log_.begin(), log_.end(), [](const std::string& line) {
    return line.rfind("unpark_failed", 0) == 0;
  }));
}

// --- The owner's first frame ------------------------------------------------------------------

TEST_P(UringEngineTest, OwnerErrorOnConnectIsForwardedAndBothSidesClose) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_reach_owner(&c, &o));
  const std::string error =
      frame("ERROR", {{"message", "access refused"}, {"content-length", "12"}}, "bad passcode");
  ASSERT_TRUE(o.send_all(error));
  std::optional<std::string> got = c.read_exact(error.size());
  ASSERT_TRUE(got) << "client got: " << c.buffer();
  EXPECT_EQ(*got, error);
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_TRUE(c.buffer().empty()) << "after the ERROR: " << c.buffer();
  Conn::End owner_end = o.wait_end();
  EXPECT_TRUE(owner_end == Conn::End::kEof || owner_end == Conn::End::kReset);
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  EXPECT_EQ(counters().owner_error.load(), 1u);
  EXPECT_EQ(counters().spliced.load(), 0u);
  // The router is told how the session ended, for its log line.
  const std::vector<std::string> ends = router_.ends();
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].rfind("owner_error client=127.0.0.1:", 0), 0u) << ends[0];
  EXPECT_NE(ends[0].find(" queue=q1 owner=owner-a message=access refused"), std::string::npos)
      << ends[0];
}

TEST_P(UringEngineTest, OwnerGarbageInsteadOfConnectedClosesWithError) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_reach_owner(&c, &o));
  ASSERT_TRUE(o.send_all(frame("MESSAGE", {{"destination", "/queue/q1"}})));
  std::optional<std::string> got = c.read_frame();
  ASSERT_TRUE(got) << "client got: " << c.buffer();
  EXPECT_EQ(command_of(*got), "ERROR") << *got;
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  EXPECT_EQ(counters().owner_protocol.load(), 1u);
}

TEST_P(UringEngineTest, OwnerThatNeverAnswersGetsTheClientAnErrorAfterConnectTimeout) {
  options_.connect_timeout_ms = 300;
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_reach_owner(&c, &o));
  const auto t0 = Clock::now();
  std::optional<std::string> got = c.read_frame(3s);
  const auto elapsed = Clock::now() - t0;
  ASSERT_TRUE(got) << "no ERROR within 3 s; client got: " << c.buffer();
  EXPECT_EQ(command_of(*got), "ERROR");
  EXPECT_EQ(header_of(*got, "message"), "owner did not answer") << *got;
  EXPECT_GE(elapsed, 200ms);
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_EQ(router_.failed(), std::vector<uint32_t>{kOwnerNode});
  EXPECT_EQ(counters().owner_timeout.load(), 1u);
  EXPECT_TRUE(sink_.records().empty()) << "a replayed SEND must not be spilled as well";
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

// --- Spill ----------------------------------------------------------------------------------

// The DPDK engine's spill listener: the lcore has decided, so every session spills without
// being routed again (here the router would have sent it to a live owner).
TEST_P(UringEngineTest, SpillOnlyListenerSpillsEverySessionWithoutRouting) {
  options_.spill_only = true;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c));
  ASSERT_TRUE(c.send_all(kSend));
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  ASSERT_EQ(sink_.records().size(), 1u);
  EXPECT_EQ(sink_.records()[0].queue, "q1");
  EXPECT_TRUE(router_.routed().empty());
  EXPECT_EQ(counters().spilled.load(), 1u);
  EXPECT_EQ(counters().spliced.load(), 0u);
  EXPECT_FALSE(owner_.accept(100ms)) << "the gateway connected to the owner";
  // The owner is reported up: the spill session ends as any does, and the client is told why.
  router_.set_owner_up(true);
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(c, "owner available, reconnect"));
}

TEST_P(UringEngineTest, ConnectRefusedFallsBackToSpillAndReceiptWaitsForDurability) {
  ClosedPort closed;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(closed.addr());
  sink_.hold();
  // STOMP 1.0 (no accept-version): header values are raw octets, a colon included.
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c, frame("CONNECT", {{"host", "/"}})));
  const std::string body("he\0llo", 6);
  const std::string send = frame("SEND",
                                 {{"destination", "/queue/q1"},
                                  {"receipt", "r1"},
                                  {"x-note", "a:b\\c"},
                                  {"content-length", "6"}},
                                 body);
  ASSERT_TRUE(c.send_all(send));
  ASSERT_TRUE(wait_until(kWait, [&] { return sink_.records().size() == 1; }));
  EXPECT_EQ(router_.failed(), std::vector<uint32_t>{kOwnerNode});
  EXPECT_EQ(counters().connect_failed.load(), 1u);
  EXPECT_EQ(counters().spilled.load(), 1u);
  const FakeSink::Record r = sink_.records()[0];
  EXPECT_EQ(r.vhost, "/");
  EXPECT_EQ(r.queue, "q1");
  EXPECT_EQ(r.headers, "destination:/queue/q1\nreceipt:r1\nx-note:a\\cb\\\\c\ncontent-length:6\n");
  EXPECT_EQ(r.body, body);

  EXPECT_TRUE(c.quiet_for(200ms)) << "sent before the record was durable: " << c.buffer();
  sink_.release();
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  // The session goes on as a spill session.
  const std::string send2 = frame("SEND", {{"destination", "/queue/q1"}, {"receipt", "r2"}}, "2");
  ASSERT_TRUE(c.send_all(send2));
  std::optional<std::string> receipt2 = c.read_frame();
  ASSERT_TRUE(receipt2);
  EXPECT_EQ(*receipt2, frame("RECEIPT", {{"receipt-id", "r2"}}));
  EXPECT_EQ(sink_.records().size(), 2u);
  c.close();
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

TEST_P(UringEngineTest, SpillRouteTerminatesTheSessionAtTheGateway) {
  Conn c;
  ASSERT_NO_FATAL_FAILURE(start_spilling(&c));
  ASSERT_TRUE(c.send_all(kSend));
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  ASSERT_EQ(sink_.records().size(), 1u);
  EXPECT_EQ(sink_.records()[0].body, "hello");
  EXPECT_TRUE(router_.failed().empty());
  EXPECT_EQ(counters().spilling.load(), 1u);
}

TEST_P(UringEngineTest, SpillSubscribeGetsErrorAndClose) {
  Conn c;
  ASSERT_NO_FATAL_FAILURE(start_spilling(&c));
  ASSERT_TRUE(c.send_all(kSubscribe));
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(c, "owner unavailable, retry later"));
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  EXPECT_TRUE(sink_.records().empty());
}

TEST_P(UringEngineTest, SpillSessionEndsWhenTheOwnerIsUpAfterPendingReceipts) {
  sink_.hold();
  Conn c;
  ASSERT_NO_FATAL_FAILURE(start_spilling(&c));
  ASSERT_TRUE(c.send_all(kSend));
  ASSERT_TRUE(wait_until(kWait, [&] { return sink_.records().size() == 1; }));
  router_.set_owner_up(true);
  // The owner is back, but the record is not durable yet: nothing goes out.
  EXPECT_TRUE(c.quiet_for(300ms)) << "client got: " << c.buffer();
  sink_.release();
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(c, "owner available, reconnect"));
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

TEST_P(UringEngineTest, RefusedRouteGetsErrorWithTheRoutersMessage) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_refuse();
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c));
  ASSERT_TRUE(c.send_all(kSend));
  std::optional<std::string> got = c.read_frame();
  ASSERT_TRUE(got);
  EXPECT_EQ(header_of(*got, "message"), "no node for queue") << *got;
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_EQ(counters().refused_route.load(), 1u);
  ASSERT_TRUE(wait_until(kWait, [&] { return !router_.ends().empty(); }));
  EXPECT_EQ(router_.ends()[0].rfind("route client=127.0.0.1:", 0), 0u) << router_.ends()[0];
  EXPECT_NE(router_.ends()[0].find(" queue=q1 owner=- message=no node for queue"),
            std::string::npos)
      << router_.ends()[0];
}

// --- Limits ---------------------------------------------------------------------------------

TEST_P(UringEngineTest, SessionsMaxRefusesTheThirdConnectionWithError) {
  options_.sessions_max = 2;
  ASSERT_NO_FATAL_FAILURE(expect_third_refused_until_a_slot_frees("too many sessions"));
  EXPECT_EQ(counters().refused_sessions_max.load(), 1u);
}

TEST_P(UringEngineTest, SessionsPerSourceMaxRefusesWithError) {
  options_.sessions_per_source_max = 2;
  ASSERT_NO_FATAL_FAILURE(
      expect_third_refused_until_a_slot_frees("too many sessions from this address"));
  EXPECT_EQ(counters().refused_per_source.load(), 1u);
}

// limits.* changed at run time (`sluicectl set`, a reload): the next sessions get the new
// limits, the open ones stay, and a limit cannot go above what the workers were sized for.
TEST_P(UringEngineTest, SessionLimitsChangedAtRunTimeApplyToTheNextSessions) {
  options_.sessions_max = 3;
  options_.prelude_sessions_max = 3;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  const LiveLimits start = engine_->limits();
  EXPECT_EQ(start, (LiveLimits{3, options_.sessions_per_source_max, 3, 2'000}));

  // Lowered below the sessions open: those stay, the next is refused.
  Conn a = client();
  Conn b = client();
  ASSERT_TRUE(wait_until(kWait, [&] { return active() == 2; }));
  LiveLimits one = start;
  one.sessions_max = 1;
  ASSERT_EQ(error_of(engine_->set_limits(one)), "");
  Conn refused = client();
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(refused, "too many sessions"));
  EXPECT_EQ(active(), 2u);
  EXPECT_EQ(counters().refused_sessions_max.load(), 1u);

  // Per source and in prelude, likewise.
  LiveLimits per_source = start;
  per_source.sessions_per_source_max = 2;
  ASSERT_EQ(error_of(engine_->set_limits(per_source)), "");
  Conn third = client();
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(third, "too many sessions from this address"));
  LiveLimits prelude = start;
  prelude.prelude_sessions_max = 2;
  ASSERT_EQ(error_of(engine_->set_limits(prelude)), "");
  Conn fourth = client();
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(fourth, "too many sessions in prelude"));

  // Back to the values at start: the third session is served.
  ASSERT_EQ(error_of(engine_->set_limits(start)), "");
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c));
  EXPECT_EQ(active(), 3u);

  // Above what the workers were sized for, or zero: refused, nothing changes.
  LiveLimits more = start;
  more.sessions_max = 4;
  std::string why = error_of(engine_->set_limits(more));
  ASSERT_FALSE(why.empty());
  EXPECT_NE(why.find("limits.sessions_max: 4 is above 3"), std::string::npos) << why;
  more = start;
  more.prelude_sessions_max = 4;
  why = error_of(engine_->set_limits(more));
  ASSERT_FALSE(why.empty());
  EXPECT_NE(why.find("limits.prelude_sessions_max"), std::string::npos) << why;
  more = start;
  more.connect_timeout_ms = 0;
  EXPECT_FALSE(engine_->set_limits(more));
  EXPECT_EQ(engine_->limits(), start);
}

// connect_timeout_ms changed at run time is the next connect's linked timeout.
TEST_P(UringEngineTest, ConnectTimeoutChangedAtRunTimeAppliesToTheNextConnect) {
  FullListener full;
  if (!full.full()) GTEST_SKIP() << "SKIPPED: could not fill a listener's accept queue";
  options_.connect_timeout_ms = 60'000;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  LiveLimits l = engine_->limits();
  l.connect_timeout_ms = 300;
  ASSERT_EQ(error_of(engine_->set_limits(l)), "");
  router_.set_direct(full.addr());
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c));
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.send_all(kSend));
  std::optional<std::string> receipt = c.read_frame(5s);
  const auto elapsed = Clock::now() - t0;
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  EXPECT_GE(elapsed, 250ms);
  EXPECT_EQ(counters().connect_failed.load(), 1u);
}

TEST_P(UringEngineTest, PreludeFrameTimeoutGetsError) {
  config_.frame_timeout_ns = 300 * session::kNanosPerMilli;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  Conn c = client();
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.send_all("CONNECT\naccept-version:1.2\n"));
  std::optional<std::string> got = c.read_frame(3s);
  const auto elapsed = Clock::now() - t0;
  ASSERT_TRUE(got) << "client got: " << c.buffer();
  EXPECT_EQ(command_of(*got), "ERROR");
  EXPECT_EQ(header_of(*got, "message"), "frame timeout") << *got;
  EXPECT_GE(elapsed, 250ms);
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

TEST_P(UringEngineTest, ConnectOverPreludeBytesMaxGetsError) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  Conn c = client();
  // Nine 8000-byte headers: 72 KB, over the default prelude_bytes_max (64 KiB), each line under
  // the header line limit.
  const std::string connect = padded_connect("accept-version:1.2\n", 9, 8000);
  (void)c.send_all(connect);  // the gateway may stop reading before the end
  std::optional<std::string> got = c.read_frame();
  ASSERT_TRUE(got) << "client got " << c.buffer().size() << " bytes: " << c.buffer();
  EXPECT_EQ(command_of(*got), "ERROR");
  EXPECT_EQ(header_of(*got, "message"), "prelude too large") << *got;
  Conn::End end = c.wait_end();
  EXPECT_TRUE(end == Conn::End::kEof || end == Conn::End::kReset);
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

// --- Stop and the sessions view ---------------------------------------------------------------

TEST_P(UringEngineTest, StopGivesSplicedSessionsTheGraceThenClosesThem) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  const auto t0 = Clock::now();
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    engine_->stop(200);
    stopped = true;
  });
  // Still relayed during the grace.
  const std::string during = frame("MESSAGE", {{"destination", "/queue/q1"}, {"message-id", "g"}});
  EXPECT_TRUE(o.send_all(during));
  std::optional<std::string> got = c.read_frame(1s);
  EXPECT_TRUE(got);
  if (got) {
    EXPECT_EQ(*got, during);
  }
  EXPECT_TRUE(wait_until(3s, [&] { return stopped.load(); })) << "stop(200) did not return";
  stopper.join();
  const auto elapsed = Clock::now() - t0;
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 3s);
  Conn::End ce = c.wait_end(1s);
  EXPECT_TRUE(ce == Conn::End::kEof || ce == Conn::End::kReset);
  Conn::End oe = o.wait_end(1s);
  EXPECT_TRUE(oe == Conn::End::kEof || oe == Conn::End::kReset);
  EXPECT_EQ(active(), 0u);
  // The listener is gone.
  Conn late = connect_to(engine_->port());
  EXPECT_FALSE(late.valid());
}

TEST_P(UringEngineTest, StopSendsGatewayStoppingToPreludeSessions) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c));
  const auto t0 = Clock::now();
  engine_->stop(200);
  EXPECT_LT(Clock::now() - t0, 3s);
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(c, "gateway stopping", 1s));
  EXPECT_EQ(counters().refused_stopping.load(), 1u);
}

TEST_P(UringEngineTest, SessionsListsSplicedSessionWithQueueAndBytes) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_splice(&c, &o));
  size_t total = 0;
  std::vector<uint32_t> unanswered{7};
  std::vector<SessionView> v = engine_->sessions(10, &total, &unanswered);
  EXPECT_TRUE(unanswered.empty());
  ASSERT_EQ(total, 1u);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].state, "spliced");
  // start_and_splice waits until the session is parked when the mode parks.
  EXPECT_EQ(v[0].parked, GetParam().park);
  EXPECT_EQ(v[0].vhost, "/");
  EXPECT_EQ(v[0].queue, "q1");
  EXPECT_EQ(v[0].owner, "owner-a");
  EXPECT_EQ(v[0].client.rfind("127.0.0.1:", 0), 0u) << v[0].client;
  EXPECT_GT(v[0].bytes_in, 0u);
  EXPECT_GT(v[0].bytes_out, 0u);
  EXPECT_GE(v[0].age_ms, 0);
  // And none once it has ended.
  c.close();
  o.close();
  ASSERT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
  v = engine_->sessions(10, &total, &unanswered);
  EXPECT_EQ(total, 0u);
  EXPECT_TRUE(v.empty());
}

// --- More edges ---------------------------------------------------------------------------------

// The prelude buffer fills in the middle of a receive that also completes the SEND's head: what
// did not fit (the carry) must follow the buffered bytes in the replay, and the rest of the body
// must follow through the splice, byte for byte.
TEST_P(UringEngineTest, CarryBeyondThePreludeBufferIsReplayedInOrder) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  // A CONNECT of about 60 KiB (8 padding headers), answered before anything else is sent.
  const std::string connect = padded_connect("accept-version:1.2\nhost:/\n", 8, 7600);
  ASSERT_LT(connect.size(), config_.prelude_bytes_max - 1000);
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c, connect));
  // Then a SEND whose head fits, with a 256 KiB body: one write, so one receive takes the end of
  // the prelude buffer and more.
  const std::string body = random_bytes(256u << 10, 11);
  const std::string send =
      frame("SEND", {{"destination", "/queue/q1"}, {"content-length", std::to_string(body.size())}},
            body);
  std::atomic<bool> sent_ok{false};
  std::thread writer([&] { sent_ok = c.send_all(send, 20s); });
  std::optional<Conn> o = owner_.accept();
  ASSERT_TRUE(o);
  // The replayed CONNECT is the original one without accept-version's extra values: same here.
  std::optional<std::string> replay_connect = o->read_exact(connect.size());
  ASSERT_TRUE(replay_connect);
  EXPECT_TRUE(*replay_connect == connect) << "replayed CONNECT differs";
  ASSERT_TRUE(o->send_all(kOwnerConnected));
  std::optional<std::string> got = o->read_exact(send.size(), 20s);
  writer.join();
  EXPECT_TRUE(sent_ok.load());
  ASSERT_TRUE(got) << "owner got " << o->buffer().size() << " of " << send.size() << " bytes";
  EXPECT_TRUE(*got == send) << "the SEND reached the owner altered";
}

// Many SENDs in one write to a spill session: more than receipts_pending_max, across several
// receive buffers. Every SEND is appended once, in order, and every RECEIPT comes, in order.
TEST_P(UringEngineTest, SpillHandlesManyPipelinedSendsInOrder) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_spill();
  constexpr int kSends = 1000;
  std::string all = kConnect;
  std::string expected_receipts;
  for (int i = 0; i < kSends; ++i) {
    const std::string id = "r" + std::to_string(i);
    all += frame("SEND", {{"destination", "/queue/q1"}, {"receipt", id}}, "m" + std::to_string(i));
    expected_receipts += frame("RECEIPT", {{"receipt-id", id}});
  }
  Conn c = client();
  std::atomic<bool> sent_ok{false};
  std::thread writer([&] { sent_ok = c.send_all(all, 20s); });
  std::optional<std::string> connected = c.read_frame();
  ASSERT_TRUE(connected);
  EXPECT_EQ(command_of(*connected), "CONNECTED");
  std::optional<std::string> receipts = c.read_exact(expected_receipts.size(), 20s);
  writer.join();
  EXPECT_TRUE(sent_ok.load());
  ASSERT_TRUE(receipts) << "client got " << c.buffer().size() << " of " << expected_receipts.size()
                        << " bytes of receipts";
  EXPECT_TRUE(*receipts == expected_receipts);
  std::vector<FakeSink::Record> records = sink_.records();
  ASSERT_EQ(records.size(), size_t(kSends));
  for (int i = 0; i < kSends; ++i)
    EXPECT_EQ(records[size_t(i)].body, "m" + std::to_string(i)) << i;
}

TEST_P(UringEngineTest, SpillDisconnectReceiptWaitsForEarlierSends) {
  sink_.hold();
  Conn c;
  ASSERT_NO_FATAL_FAILURE(start_spilling(&c));
  const std::string send = frame("SEND", {{"destination", "/queue/q1"}}, "x");
  ASSERT_TRUE(c.send_all(send + frame("DISCONNECT", {{"receipt", "bye"}})));
  ASSERT_TRUE(wait_until(kWait, [&] { return sink_.records().size() == 1; }));
  EXPECT_TRUE(c.quiet_for(200ms)) << "client got: " << c.buffer();
  sink_.release();
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, frame("RECEIPT", {{"receipt-id", "bye"}}));
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

// Stop with a spill session whose record is not durable yet: the RECEIPT still comes once it is,
// then the session ends and stop returns.
TEST_P(UringEngineTest, StopAnswersPendingSpillReceiptsBeforeEnding) {
  sink_.hold();
  Conn c;
  ASSERT_NO_FATAL_FAILURE(start_spilling(&c));
  ASSERT_TRUE(c.send_all(kSend));
  ASSERT_TRUE(wait_until(kWait, [&] { return sink_.records().size() == 1; }));
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    engine_->stop(200);
    stopped = true;
  });
  EXPECT_TRUE(c.quiet_for(100ms)) << "client got: " << c.buffer();
  sink_.release();
  std::optional<std::string> receipt = c.read_frame(2s);
  EXPECT_TRUE(receipt) << "client got: " << c.buffer();
  if (receipt) {
    EXPECT_EQ(*receipt, kReceipt);
  }
  Conn::End end = c.wait_end(3s);
  EXPECT_TRUE(end == Conn::End::kEof || end == Conn::End::kReset) << int(end);
  EXPECT_TRUE(wait_until(3s, [&] { return stopped.load(); })) << "stop did not return";
  if (!stopped.load()) sink_.release();
  stopper.join();
}

TEST_P(UringEngineTest, OwnerClosingBeforeConnectedGetsTheClientAnError) {
  Conn c;
  Conn o;
  ASSERT_NO_FATAL_FAILURE(start_and_reach_owner(&c, &o));
  o.close();
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(c, "owner closed the connection"));
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

// A connect that neither succeeds nor fails (the owner's accept queue is full): the linked
// timeout ends it after connect_timeout_ms, control hears of it, the session spills.
TEST_P(UringEngineTest, ConnectTimeoutFallsBackToSpill) {
  FullListener full;
  if (!full.full()) GTEST_SKIP() << "SKIPPED: could not fill a listener's accept queue";
  options_.connect_timeout_ms = 300;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(full.addr());
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c));
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.send_all(kSend));
  std::optional<std::string> receipt = c.read_frame(3s);
  const auto elapsed = Clock::now() - t0;
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  EXPECT_GE(elapsed, 250ms);
  EXPECT_EQ(router_.failed(), std::vector<uint32_t>{kOwnerNode});
  EXPECT_EQ(counters().connect_failed.load(), 1u);
  EXPECT_EQ(sink_.records().size(), 1u);
}

// A worker that does not answer in time (here: not running yet) is named, and the others are
// still listed: every worker is asked before any answer is awaited.
TEST_P(UringEngineTest, SessionsNameTheWorkersThatDoNotAnswer) {
  FakeRouter router2;
  FakeSink sink2;
  ASSERT_NO_FATAL_FAILURE(open_two_workers(&router2, &sink2));
  if (IsSkipped()) return;
  size_t total = 9;
  std::vector<uint32_t> unanswered;
  std::vector<SessionView> v = engine_->sessions(10, &total, &unanswered, 50ms);
  EXPECT_EQ(unanswered, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(total, 0u);
  EXPECT_TRUE(v.empty());
  engine_->start();
  Conn c = client();
  ASSERT_TRUE(wait_until(kWait, [&] {
    return engine_->counters(0).active.load() + engine_->counters(1).active.load() == 1;
  }));
  v = engine_->sessions(10, &total, &unanswered);
  EXPECT_TRUE(unanswered.empty());
  EXPECT_EQ(total, 1u);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].state, "prelude");
  engine_->stop(0);  // before router2 and sink2 go
  engine_.reset();
}

// sessions_max holds across workers exactly.
TEST_P(UringEngineTest, SessionsMaxHoldsAcrossWorkers) {
  options_.sessions_max = 3;
  FakeRouter router2;
  FakeSink sink2;
  ASSERT_NO_FATAL_FAILURE(open_two_workers(&router2, &sink2));
  if (IsSkipped()) return;
  engine_->start();
  auto total_active = [&] {
    return engine_->counters(0).active.load() + engine_->counters(1).active.load();
  };
  std::vector<Conn> held;
  held.reserve(3);
  for (int i = 0; i < 3; ++i)
    held.push_back(client());
  ASSERT_TRUE(wait_until(kWait, [&] { return total_active() == 3; }));
  for (int i = 0; i < 4; ++i) {
    Conn extra = client();
    std::optional<std::string> got = extra.read_frame();
    ASSERT_TRUE(got) << "extra connection " << i << " got: " << extra.buffer();
    EXPECT_EQ(header_of(*got, "message"), "too many sessions") << *got;
  }
  EXPECT_EQ(total_active(), 3u);
  size_t total = 0;
  std::vector<uint32_t> unanswered;
  engine_->sessions(10, &total, &unanswered);
  EXPECT_EQ(total, 3u);
  EXPECT_TRUE(unanswered.empty());
  engine_->stop(0);
  engine_.reset();
}

// Fewer receive buffers than sessions that speak at once: a receive that finds none is retried,
// nobody is dropped.
TEST_P(UringEngineTest, ReceiveBufferShortageIsRetried) {
  options_.recv_buffers = 2;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  constexpr int kClients = 16;
  std::vector<Conn> cs;
  cs.reserve(kClients);
  for (int i = 0; i < kClients; ++i)
    cs.push_back(client());
  ASSERT_TRUE(wait_until(kWait, [&] { return active() == kClients; }));
  for (auto& c : cs)
    ASSERT_TRUE(c.send_all(kConnect));
  for (int i = 0; i < kClients; ++i) {
    std::optional<std::string> got = cs[size_t(i)].read_frame();
    ASSERT_TRUE(got) << "client " << i << " got: " << cs[size_t(i)].buffer();
    EXPECT_EQ(command_of(*got), "CONNECTED");
  }
}

// CONNECT and DISCONNECT (no receipt) in one write: the CONNECTED already queued for the client
// must still be sent before the close.
TEST_P(UringEngineTest, PreludeDisconnectDoesNotDropTheQueuedConnected) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  Conn c = client();
  ASSERT_TRUE(c.send_all(kConnect + frame("DISCONNECT", {})));
  std::optional<std::string> got = c.read_frame();
  ASSERT_TRUE(got) << "client got: " << c.buffer();
  EXPECT_EQ(command_of(*got), "CONNECTED");
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

TEST_P(UringEngineTest, SpillSessionsMaxRefusesWithError) {
  options_.spill_sessions_max = 1;
  Conn a;
  ASSERT_NO_FATAL_FAILURE(start_spilling(&a));
  ASSERT_TRUE(a.send_all(kSend));
  ASSERT_TRUE(a.read_frame());
  Conn b;
  ASSERT_NO_FATAL_FAILURE(connect_client(&b));
  ASSERT_TRUE(b.send_all(kSend));
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(b, "owner unavailable, retry later"));
  EXPECT_EQ(counters().refused_spill_max.load(), 1u);
}

TEST_P(UringEngineTest, PreludeSessionsMaxRefusesWithError) {
  options_.prelude_sessions_max = 1;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  Conn a = client();
  ASSERT_TRUE(wait_until(kWait, [&] { return active() == 1; }));
  Conn b = client();
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(b, "too many sessions in prelude"));
  EXPECT_EQ(counters().refused_prelude_max.load(), 1u);
}

TEST_P(UringEngineTest, PreludeIdleTimeoutGetsError) {
  config_.prelude_idle_timeout_ns = 300 * session::kNanosPerMilli;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c));
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(c, "prelude idle timeout", 3s));
  EXPECT_TRUE(wait_until(kWait, [&] { return active() == 0; }));
}

TEST_P(UringEngineTest, SpillRefusesBadCredentialsAndAcl) {
  hooks_.authenticate_ok = false;
  Conn a;
  ASSERT_NO_FATAL_FAILURE(start_spilling(&a));
  ASSERT_TRUE(a.send_all(kSend));
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(a, "authentication failed"));
  hooks_.authenticate_ok = true;
  hooks_.authorize_ok = false;
  Conn b;
  ASSERT_NO_FATAL_FAILURE(connect_client(&b));
  ASSERT_TRUE(b.send_all(kSend));
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(b, "access refused"));
  EXPECT_TRUE(sink_.records().empty());
}

// A login checked elsewhere holds its own session only: another spill session of the same
// worker logs in, sends and gets its receipt meanwhile; the first goes on once answered.
TEST_P(UringEngineTest, SpillLoginCheckedLaterHoldsOnlyItsOwnSession) {
  Conn a;
  ASSERT_NO_FATAL_FAILURE(start_with_login_pending(&a));
  Conn b;
  ASSERT_NO_FATAL_FAILURE(connect_client(&b));
  ASSERT_TRUE(b.send_all(kSend));
  ASSERT_NO_FATAL_FAILURE(expect_receipt(b, "client b"));
  ASSERT_EQ(sink_.records().size(), 1u) << "a's SEND went to the spill log before its login";
  EXPECT_EQ(hooks_.pending(), 1u);
  ASSERT_TRUE(hooks_.answer_oldest(true));
  ASSERT_NO_FATAL_FAILURE(expect_receipt(a, "client a"));
  EXPECT_EQ(sink_.records().size(), 2u);
}

TEST_P(UringEngineTest, SpillLoginRefusedLaterGetsAuthenticationError) {
  Conn a;
  ASSERT_NO_FATAL_FAILURE(start_with_login_pending(&a));
  ASSERT_TRUE(hooks_.answer_oldest(false));
  ASSERT_NO_FATAL_FAILURE(expect_error_then_eof(a, "authentication failed"));
  EXPECT_TRUE(sink_.records().empty());
  EXPECT_EQ(counters().spill_end[size_t(session::SpillEnd::kAuthFailed)].load(), 1u);
}

// An answer for a session that has ended meanwhile goes nowhere, though its slot may serve
// another session by then: the ticket's generation is not that session's.
TEST_P(UringEngineTest, SpillLoginAnswerOfAnotherGenerationIsDropped) {
  Conn a;
  ASSERT_NO_FATAL_FAILURE(start_with_login_pending(&a));
  ASSERT_TRUE(hooks_.answer_stale(true));
  // A round trip of another session on the same worker: the stale answer has been read by then.
  Conn b;
  ASSERT_NO_FATAL_FAILURE(connect_client(&b));
  ASSERT_TRUE(b.send_all(kSend));
  std::optional<std::string> receipt_b = b.read_frame();
  ASSERT_TRUE(receipt_b) << "client b got: " << b.buffer();
  EXPECT_EQ(sink_.records().size(), 1u) << "the stale answer let a's SEND through";
  ASSERT_TRUE(hooks_.answer_oldest(true));
  ASSERT_NO_FATAL_FAILURE(expect_receipt(a, "client a"));
  EXPECT_EQ(sink_.records().size(), 2u);
}

TEST_P(UringEngineTest, SpillAppendBusyIsRetried) {
  sink_.busy_for(3);
  Conn c;
  ASSERT_NO_FATAL_FAILURE(start_spilling(&c));
  ASSERT_TRUE(c.send_all(kSend));
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  EXPECT_EQ(sink_.records().size(), 1u);
  EXPECT_GE(counters().appends_busy.load(), 1u);
}

// --- Login check (login_check eager), placements, heart-beats -------------------------------

// What a node checking the login gets for kConnect: the version narrowed, heart-beat as sent.
const std::string kLoginConnect =
    frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "10000,10000"}});

TEST_P(UringEngineTest, EagerLoginAnswersWithTheNodesConnectedAndKeepsItsConnection) {
  Conn c;
  std::optional<Conn> o;
  ASSERT_NO_FATAL_FAILURE(start_eager_with_login_node(owner_, kOwnerNode, &c, &o));
  router_.set_placement_pending(true);  // read when the SEND binds
  std::optional<std::string> got = o->read_exact(kLoginConnect.size());
  ASSERT_TRUE(got) << "node got: " << o->buffer();
  EXPECT_EQ(*got, kLoginConnect);
  // Nothing reaches the client before the node answered, and nothing is placed.
  EXPECT_TRUE(c.quiet_for(50ms));
  ASSERT_TRUE(o->send_all(kOwnerConnected));
  std::optional<std::string> connected = c.read_frame();
  ASSERT_TRUE(connected) << "client got: " << c.buffer();
  EXPECT_EQ(*connected, kOwnerConnected);  // the node's own, byte for byte
  EXPECT_TRUE(router_.confirmed().empty());

  // The node owns the destination: the same connection carries the session, no CONNECT again.
  ASSERT_TRUE(c.send_all(kSend));
  got = o->read_exact(kSend.size());
  ASSERT_TRUE(got) << "node got: " << o->buffer();
  EXPECT_EQ(*got, kSend);
  ASSERT_TRUE(wait_until(kWait, [&] { return counters().splicing.load() == 1; }));
  ASSERT_TRUE(o->send_all(kReceipt));
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << "client got: " << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  EXPECT_FALSE(owner_.accept(100ms)) << "a second connection to the node";
  EXPECT_EQ(counters().login_accepted.load(), 1u);
  EXPECT_EQ(counters().login_conn_kept.load(), 1u);
  const auto confirmed = router_.confirmed();
  ASSERT_EQ(confirmed.size(), 1u);
  EXPECT_EQ(confirmed[0], (std::pair<std::string, uint32_t>{"q1", kOwnerNode}));
}

TEST_P(UringEngineTest, EagerLoginRefusedForwardsTheNodesErrorAndRoutesNothing) {
  config_ = session::SessionConfig::gateway_defaults();
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_login_node(owner_.addr());
  router_.set_direct(owner_.addr());
  router_.set_placement_pending(true);
  Conn c = client();
  // The client sends its SEND at once, without waiting for CONNECTED.
  ASSERT_TRUE(c.send_all(kConnect + kSend));
  std::optional<Conn> o = owner_.accept();
  ASSERT_TRUE(o);
  ASSERT_TRUE(o->read_exact(kLoginConnect.size())) << o->buffer();
  const std::string refused =
      frame("ERROR", {{"message", "Bad CONNECT"}, {"content-type", "text/plain"}},
            "Access refused for user 'guest'");
  ASSERT_TRUE(o->send_all(refused));
  std::optional<std::string> got = c.read_frame();
  ASSERT_TRUE(got) << "client got: " << c.buffer();
  EXPECT_EQ(*got, refused);
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  // The SEND behind it never reached the node, never was routed, and nothing was placed.
  EXPECT_EQ(o->wait_end(), Conn::End::kEof);
  EXPECT_TRUE(o->buffer().empty()) << o->buffer();
  EXPECT_TRUE(router_.routed().empty());
  EXPECT_TRUE(router_.confirmed().empty());
  EXPECT_EQ(counters().login_refused.load(), 1u);
  EXPECT_EQ(counters().prelude_end[size_t(session::PreludeEnd::kLoginRefused)].load(), 1u);
}

TEST_P(UringEngineTest, EagerLoginOnAnotherNodeBindsToTheOwnerWithAFreshReplay) {
  FakeOwner login_node;
  Conn c;
  std::optional<Conn> l;
  ASSERT_NO_FATAL_FAILURE(start_eager_with_login_node(login_node, kOwnerNode + 1, &c, &l));
  ASSERT_TRUE(l->read_exact(kLoginConnect.size())) << l->buffer();
  ASSERT_TRUE(l->send_all(kOwnerConnected));
  ASSERT_TRUE(c.read_frame());
  ASSERT_TRUE(c.send_all(kSend));
  // The login node's connection closes; the owner gets the whole replay and its CONNECTED is
  // stripped.
  EXPECT_EQ(l->wait_end(), Conn::End::kEof);
  std::optional<Conn> o = owner_.accept();
  ASSERT_TRUE(o);
  std::optional<std::string> got = o->read_exact(kLoginConnect.size() + kSend.size());
  ASSERT_TRUE(got) << o->buffer();
  EXPECT_EQ(*got, kLoginConnect + kSend);
  ASSERT_TRUE(o->send_all(kOwnerConnected + kReceipt));
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
  EXPECT_EQ(counters().login_conn_closed.load(), 1u);
}

TEST_P(UringEngineTest, LoginNodeThatNeverAnswersLeavesTheGatewayToAnswer) {
  options_.connect_timeout_ms = 300;
  FakeOwner silent;
  Conn c;
  std::optional<Conn> l;
  ASSERT_NO_FATAL_FAILURE(start_eager_with_login_node(silent, kOwnerNode + 1, &c, &l));
  std::optional<std::string> connected = c.read_frame(3000ms);
  ASSERT_TRUE(connected) << c.buffer();
  EXPECT_EQ(header_of(*connected, "server")->rfind("sluice/", 0), 0u) << *connected;
  EXPECT_EQ(l->wait_end(), Conn::End::kEof);
  EXPECT_EQ(counters().login_failed.load(), 1u);
  EXPECT_EQ(router_.failed(), std::vector<uint32_t>{kOwnerNode + 1});
  // The session goes on to its owner, which checks the login at the replay.
  ASSERT_TRUE(c.send_all(kSend));
  std::optional<Conn> o = owner_.accept();
  ASSERT_TRUE(o);
  ASSERT_TRUE(o->read_exact(kLoginConnect.size() + kSend.size())) << o->buffer();
  ASSERT_TRUE(o->send_all(kOwnerConnected + kReceipt));
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << c.buffer();
  EXPECT_EQ(*receipt, kReceipt);
}

TEST_P(UringEngineTest, CachedLoginIsAnsweredWithoutAskingANode) {
  config_ = session::SessionConfig::gateway_defaults();
  struct OneLogin final : session::LoginCache {
    std::optional<std::string_view> find(std::string_view vhost,
                                         std::optional<std::string_view> login,
                                         std::optional<std::string_view>, Nanos) override {
      ++finds;
      if (vhost == "/" && !login) return std::string_view("RabbitMQ/3.10.8");
      return std::nullopt;
    }
    void remember(std::string_view, std::optional<std::string_view>,
                  std::optional<std::string_view>, std::string_view, Nanos) override {}
    void forget(std::string_view, std::optional<std::string_view>,
                std::optional<std::string_view>) override {}
    std::atomic<int> finds{0};
  } cache;
  std::vector<WorkerParts> parts{WorkerParts{&router_, &sink_, &hooks_, &cache}};
  auto opened = Engine::open(options_, config_, std::move(parts), nullptr_log());
  ASSERT_TRUE(opened) << opened.error().message;
  engine_ = std::move(*opened);
  engine_->start();
  router_.set_login_node(owner_.addr());
  Conn c = client();
  ASSERT_TRUE(c.send_all(kConnect));
  std::optional<std::string> connected = c.read_frame();
  ASSERT_TRUE(connected) << c.buffer();
  EXPECT_EQ(header_of(*connected, "server"), "RabbitMQ/3.10.8");
  EXPECT_EQ(header_of(*connected, "heart-beat"), "10000,10000");
  ASSERT_TRUE(header_of(*connected, "session"));
  EXPECT_FALSE(owner_.accept(100ms)) << "the node was asked although the login was cached";
  EXPECT_EQ(counters().login_cached.load(), 1u);
  EXPECT_EQ(cache.finds.load(), 1);
  // A node accepted this login before: the session counts as accepted.
  ASSERT_TRUE(c.send_all(frame("DISCONNECT", {{"receipt", "bye"}})));
  std::optional<std::string> receipt = c.read_frame();
  ASSERT_TRUE(receipt) << c.buffer();
  EXPECT_EQ(header_of(*receipt, "receipt-id"), "bye");
}

TEST_P(UringEngineTest, PlacementIsConfirmedOnlyWhenTheOwnerAcceptsTheReplay) {
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  router_.set_placement_pending(true);
  // Refused by the owner: nothing placed.
  Conn c;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c));
  ASSERT_TRUE(c.send_all(kSend));
  std::optional<Conn> o = owner_.accept();
  ASSERT_TRUE(o);
  ASSERT_TRUE(o->read_exact(kReplayedConnect.size() + kSend.size()));
  ASSERT_TRUE(o->send_all(frame("ERROR", {{"message", "Bad CONNECT"}})));
  ASSERT_TRUE(c.read_frame());
  EXPECT_EQ(c.wait_end(), Conn::End::kEof);
  EXPECT_TRUE(router_.confirmed().empty());
  // Accepted: placed.
  Conn c2;
  ASSERT_NO_FATAL_FAILURE(connect_client(&c2));
  ASSERT_TRUE(c2.send_all(kSend));
  std::optional<Conn> o2 = owner_.accept();
  ASSERT_TRUE(o2);
  ASSERT_TRUE(o2->read_exact(kReplayedConnect.size() + kSend.size()));
  ASSERT_TRUE(o2->send_all(kOwnerConnected));
  ASSERT_TRUE(wait_until(kWait, [&] { return router_.confirmed().size() == 1; }));
  EXPECT_EQ(counters().placements_confirmed.load(), 1u);
}

TEST_P(UringEngineTest, PlacementsOverTheSourcesRateAreNotRecorded) {
  options_.placements_per_source_per_minute = 1;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  router_.set_placement_pending(true);
  for (int i = 0; i < 2; ++i) {
    Conn c;
    ASSERT_NO_FATAL_FAILURE(connect_client(&c));
    ASSERT_TRUE(c.send_all(kSend));
    std::optional<Conn> o = owner_.accept();
    ASSERT_TRUE(o);
    ASSERT_TRUE(o->read_exact(kReplayedConnect.size() + kSend.size()));
    ASSERT_TRUE(o->send_all(kOwnerConnected + kReceipt));
    // The session itself goes on either way.
    std::optional<std::string> receipt = c.read_frame();
    ASSERT_TRUE(receipt) << c.buffer();
  }
  EXPECT_EQ(router_.confirmed().size(), 1u);
  EXPECT_EQ(counters().placements_confirmed.load(), 1u);
  EXPECT_EQ(counters().placements_rate_limited.load(), 1u);
}

// Heart-beats the gateway keeps while it speaks for the session: 300 ms both ways.
const std::string kBeatingConnect =
    frame("CONNECT", {{"accept-version", "1.2"}, {"host", "/"}, {"heart-beat", "300,300"}});

TEST_P(UringEngineTest, OwnerHeartBeatsOtherThanToldAreReportedToTheRouter) {
  config_.heartbeat_min_ms = 100;
  config_.heartbeat_max_ms = session::SessionConfig::kHeartBeatMaxMs;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_direct(owner_.addr());
  Conn c = client();
  ASSERT_TRUE(c.send_all(kBeatingConnect + kSend));
  std::optional<Conn> o = owner_.accept();
  ASSERT_TRUE(o) << "the gateway did not connect to the owner";
  std::optional<std::string> connect = o->read_frame();
  ASSERT_TRUE(connect) << o->buffer();
  EXPECT_NE(header_of(*connect, "heart-beat"), "0,0") << *connect;
  // The client was told it gets heart-beats; this owner sends none: the client may give up
  // on it, which is reported, and the session goes on.
  ASSERT_TRUE(o->send_all(kOwnerConnected));
  ASSERT_TRUE(wait_until(kWait, [&] { return !router_.mismatches().empty(); }));
  EXPECT_EQ(router_.mismatches(),
            std::vector<session::HeartBeatCheck>{session::HeartBeatCheck::kOwnerSlower});
  EXPECT_TRUE(wait_until(kWait, [&] { return counters().splicing.load() == 1; }));
}

TEST_P(UringEngineTest, PreludeSendsHeartBeatsAndClosesAClientThatSendsNone) {
  config_.heartbeat_min_ms = 100;
  config_.heartbeat_max_ms = session::SessionConfig::kHeartBeatMaxMs;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  Conn c = client();
  ASSERT_TRUE(c.send_all(kBeatingConnect));
  std::optional<std::string> connected = c.read_frame();
  ASSERT_TRUE(connected) << c.buffer();
  EXPECT_EQ(header_of(*connected, "heart-beat"), "300,300");
  // The client beats for a second (reading meanwhile): the session stays, and the gateway's
  // beats arrive, nothing else.
  for (int i = 0; i < 5; ++i) {
    (void)c.quiet_for(200ms);
    ASSERT_TRUE(c.send_all("\n"));
  }
  EXPECT_GE(std::count(c.buffer().begin(), c.buffer().end(), '\n'), 2) << c.buffer();
  EXPECT_EQ(c.buffer().find_first_not_of('\n'), std::string::npos) << c.buffer();
  EXPECT_GE(counters().heartbeats_sent.load(), 2u);
  EXPECT_EQ(active(), 1u);
  // Then it stops: closed within twice its interval (and a scan).
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_EQ(c.wait_end(3000ms), Conn::End::kEof) << c.buffer();
  const auto after = std::chrono::steady_clock::now() - stopped;
  EXPECT_LT(after, 1500ms);
  EXPECT_NE(c.buffer().find("message:heart-beat timeout"), std::string::npos) << c.buffer();
  EXPECT_EQ(counters().prelude_end[size_t(session::PreludeEnd::kHeartBeatTimeout)].load(), 1u);
}

TEST_P(UringEngineTest, SpillSessionClosesAClientThatStopsItsHeartBeats) {
  config_.heartbeat_min_ms = 100;
  config_.heartbeat_max_ms = session::SessionConfig::kHeartBeatMaxMs;
  ASSERT_NO_FATAL_FAILURE(start_engine());
  router_.set_spill();
  Conn c = client();
  ASSERT_TRUE(c.send_all(kBeatingConnect + kSend));
  std::optional<std::string> connected = c.read_frame();
  ASSERT_TRUE(connected) << c.buffer();
  ASSERT_TRUE(wait_until(kWait, [&] { return counters().spilling.load() == 1; }));
  ASSERT_EQ(c.wait_end(3000ms), Conn::End::kEof) << c.buffer();
  EXPECT_NE(c.buffer().find("message:heart-beat timeout"), std::string::npos) << c.buffer();
  EXPECT_EQ(counters().spill_end[size_t(session::SpillEnd::kHeartBeatTimeout)].load(), 1u);
  EXPECT_GE(counters().heartbeats_sent.load(), 1u);
}

}  // namespace
INSTANTIATE_TEST_SUITE_P(SpliceModes, UringEngineTest,
                         ::testing::Values(Mode{EngineOptions::SpliceMode::kInline, false},
                                           Mode{EngineOptions::SpliceMode::kRing, false},
                                           Mode{EngineOptions::SpliceMode::kInline, true}),
                         [](const ::testing::TestParamInfo<Mode>& i) {
                           if (i.param.park) return "inline_parked";
                           return i.param.splice == EngineOptions::SpliceMode::kInline ? "inline"
                                                                                       : "io_uring";
                         });

}  // namespace sluice::uring
