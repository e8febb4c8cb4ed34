// The session core allocates only when a Parser, Prelude or SpillSession is constructed, never
// per byte or per frame: global operator new is counted while sessions run.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "dataplane/session/session.h"
#include "tests/unit/stomp_frames.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// GCC cannot see that these new/delete replacements pair malloc with free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  return operator new(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}

namespace sluice::session {
namespace {

using testing::frame;

class AcceptAll : public SpillHooks {
 public:
  AuthAnswer authenticate(std::optional<std::string_view>, std::optional<std::string_view>,
                          uint64_t) override {
    return AuthAnswer::kAccepted;
  }
  bool authorize(std::string_view, const QueueKey&) override { return true; }
};

TEST(NoAllocationTest, PreludeAndSpillSessionDoNotAllocateWhileRunning) {
  SessionConfig config;
  SpillLimits limits;
  AcceptAll hooks;
  std::vector<char> prelude_buf(config.prelude_bytes_max);
  std::vector<char> spill_buf(spill_buffer_bytes(config, limits.txn_bytes_max));
  std::string connect = frame("CONNECT", {{"accept-version", "1.1,1.2"}, {"host", "vh"}});
  std::string traffic = frame("BEGIN", {{"transaction", "t"}}) + "\n";
  for (int i = 0; i < 200; ++i) {
    std::string dest = "/queue/q\\c" + std::to_string(i % 7);
    std::string id = std::to_string(i);
    std::string body(64, 'x');
    traffic += i % 3
                   ? frame("SEND",
                           {{"destination", dest}, {"receipt", id}, {"content-length", "64"}}, body)
                   : frame("SEND",
                           {{"destination", dest},
                            {"receipt", id},
                            {"transaction", "t"},
                            {"content-length", "64"}},
                           body);
  }
  traffic += frame("COMMIT", {{"transaction", "t"}, {"receipt", "c"}});

  // Constructing is where memory is taken; nothing after that may allocate.
  Prelude prelude(config, prelude_buf, 0);
  SpillSession spill(config, limits, spill_buf, hooks);
  OwnerGreeting greeting(config.frame_limits, Version::k1_2);
  std::string owner = frame("CONNECTED", {{"version", "1.2"}});

  const std::string opening = connect + traffic.substr(0, 100);

  const long before = g_allocations.load();
  size_t fed = prelude.feed(opening, 1);
  ASSERT_EQ(fed, connect.size() + 100);
  PreludeEvent e = prelude.next();
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kReply);
  e = prelude.next();
  ASSERT_EQ(e.kind, PreludeEvent::Kind::kBind);
  ASSERT_EQ(greeting.on_bytes(owner).kind, GreetingResult::Kind::kStrip);
  spill.start(prelude, 1);
  size_t off = 100;
  uint64_t appended = 0;
  for (int round = 0; round < 100000 && off <= traffic.size(); ++round) {
    size_t n = std::min<size_t>(97, traffic.size() - off);  // odd chunks split frames anywhere
    spill.feed(std::string_view(traffic).substr(off, n));
    off += n;
    for (SpillEvent s = spill.next(); s.kind != SpillEvent::Kind::kNeedMore; s = spill.next()) {
      if (s.kind == SpillEvent::Kind::kAppend) appended = s.token;
      if (s.kind == SpillEvent::Kind::kWaitDurable) spill.on_durable(appended);
      ASSERT_NE(s.kind, SpillEvent::Kind::kClose);
    }
    if (n == 0) break;
  }
  const long after = g_allocations.load();
  EXPECT_EQ(appended, 200u);
  EXPECT_EQ(after - before, 0) << "the session core allocated while running";
}

// With the header tables lent (as the DPDK engine lends one per session slot), making a
// Prelude and an OwnerGreeting per session allocates nothing at all.
TEST(NoAllocationTest, PreludeAndGreetingWithLentTablesDoNotAllocate) {
  SessionConfig config;
  std::vector<char> prelude_buf(config.prelude_bytes_max);
  HeaderTable prelude_headers(config.frame_limits.header_count_max);
  HeaderTable greeting_headers(config.frame_limits.header_count_max);
  const std::string connect = frame("CONNECT", {{"accept-version", "1.2"}, {"host", "vh"}});
  const std::string send = frame("SEND", {{"destination", "/queue/q"}}, "hi");
  const std::string opening = connect + send;
  const std::string owner = frame("CONNECTED", {{"version", "1.2"}});

  const long before = g_allocations.load();
  for (int session = 0; session < 3; ++session) {
    std::optional<Prelude> prelude;
    prelude.emplace(config, prelude_buf, 0, prelude_headers);
    ASSERT_EQ(prelude->feed(opening, 1), opening.size());
    ASSERT_EQ(prelude->next().kind, PreludeEvent::Kind::kReply);
    ASSERT_EQ(prelude->next().kind, PreludeEvent::Kind::kBind);
    std::optional<OwnerGreeting> greeting;
    greeting.emplace(config.frame_limits, prelude->version(), greeting_headers);
    ASSERT_EQ(greeting->on_bytes(owner).kind, GreetingResult::Kind::kStrip);
  }
  EXPECT_EQ(g_allocations.load(), before);
}

}  // namespace
}  // namespace sluice::session
