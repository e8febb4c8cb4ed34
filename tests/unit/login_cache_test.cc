// The login cache: a hit only for the same (vhost, login, passcode) within its lifetime,
// forgotten on a refusal, nothing when its lifetime is 0.
#include "gateway/login_cache.h"

#include <gtest/gtest.h>

namespace sluice::gateway {
namespace {

constexpr session::Nanos kMs = session::kNanosPerMilli;

TEST(LoginCacheTest, AcceptedLoginIsFoundUntilItExpires) {
  LoginCache c(1000);
  EXPECT_EQ(c.find("/", "alice", "pw", 0), std::nullopt);
  c.remember("/", "alice", "pw", "RabbitMQ/3.10.8", 0);
  EXPECT_EQ(c.find("/", "alice", "pw", 999 * kMs), "RabbitMQ/3.10.8");
  EXPECT_EQ(c.find("/", "alice", "pw", 1000 * kMs), std::nullopt);
  EXPECT_EQ(c.hits(), 1u);
}

TEST(LoginCacheTest, AnyOtherVhostLoginOrPasscodeMisses) {
  LoginCache c(60000);
  c.remember("/", "alice", "pw", "s", 0);
  EXPECT_EQ(c.find("/", "alice", "pw2", 1), std::nullopt);
  EXPECT_EQ(c.find("/", "alic", "pw", 1), std::nullopt);
  EXPECT_EQ(c.find("vh", "alice", "pw", 1), std::nullopt);
  // The parts are length-framed: moving bytes between them changes the digest.
  EXPECT_EQ(c.find("/", "alicep", "w", 1), std::nullopt);
  // An absent passcode is not an empty one.
  c.remember("/", "bob", std::nullopt, "s", 0);
  EXPECT_EQ(c.find("/", "bob", "", 1), std::nullopt);
  EXPECT_EQ(c.find("/", "bob", std::nullopt, 1), "s");
}

TEST(LoginCacheTest, RefusalForgetsTheEntry) {
  LoginCache c(60000);
  c.remember("/", "alice", "pw", "s", 0);
  c.forget("/", "alice", "other");  // another passcode: the entry stays
  EXPECT_EQ(c.find("/", "alice", "pw", 1), "s");
  c.forget("/", "alice", "pw");
  EXPECT_EQ(c.find("/", "alice", "pw", 1), std::nullopt);
}

TEST(LoginCacheTest, ZeroLifetimeCachesNothing) {
  LoginCache c(0);
  c.remember("/", "alice", "pw", "s", 0);
  EXPECT_EQ(c.find("/", "alice", "pw", 0), std::nullopt);
}

TEST(LoginCacheTest, ServerHeaderTooLongForAnEntryIsNotCached) {
  LoginCache c(60000);
  c.remember("/", "alice", "pw", std::string(LoginCache::kServerBytesMax + 1, 's'), 0);
  EXPECT_EQ(c.find("/", "alice", "pw", 1), std::nullopt);
}

}  // namespace
}  // namespace sluice::gateway
