// The argon2id checks of spill logins, on a thread of their own. A check costs milliseconds
// (spill_auth.h); on a worker's thread it would stall every other session of that worker for
// as long. Each worker's SpillAuth answers what its cache can at once and sends the rest here;
// the answers come back through that worker's LoginInbox, whose eventfd the worker's ring
// watches.
//
// Bounded: at most kQueueMax checks wait (all workers together), and at most LoginInbox::kDepth
// for one worker; past that a login is refused as busy, not queued. A client that keeps sending
// wrong passcodes thus costs at most one thread's worth of CPU and never delays the sessions
// already in progress.
#pragma once

#include <sodium.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>

#include "base/fd.h"
#include "base/mutex.h"
#include "base/result.h"
#include "queue/spsc_ring.h"

namespace sluice::gateway {

// Longest passcode a spill login may carry (sluicectl refuses to hash longer ones).
inline constexpr size_t kPasscodeBytesMax = 4096;

// The answer to one check, and what the asker needs to cache it.
struct VerifiedLogin {
  uint64_t ticket = 0;      // the session's, as SpillHooks::authenticate() was given it
  bool accepted = false;    // set by the verifier
  uint32_t user = 0;        // the user's index in the users file the asker had
  uint64_t generation = 0;  // the asker's users-file generation at the time
  std::array<unsigned char, crypto_generichash_BYTES> digest{};  // keyed BLAKE2b of the passcode
};

// One worker's answers: put by the verifier's thread, taken on the worker's.
class LoginInbox {
 public:
  static constexpr size_t kDepth = 64;  // checks one worker may have waiting

  static Result<std::unique_ptr<LoginInbox>> open();

  int notify_fd() const { return fd_.get(); }
  // Worker's thread: the answers that came, oldest first.
  size_t take(std::span<VerifiedLogin> out);
  // Verifier's thread. Never full: the asker keeps at most kDepth checks waiting.
  void put(const VerifiedLogin& answer);

 private:
  explicit LoginInbox(base::Fd fd) : fd_(std::move(fd)) {}

  queue::SpscRing<VerifiedLogin, kDepth> ring_;
  base::Fd fd_;  // eventfd, written after each put
};

class LoginVerifier {
 public:
  static constexpr size_t kQueueMax = 64;  // checks waiting, all workers together

  struct Check {
    LoginInbox* inbox = nullptr;
    VerifiedLogin answer;                             // all but `accepted`
    std::array<char, crypto_pwhash_STRBYTES> hash{};  // NUL-terminated crypto_pwhash_str
    size_t passcode_len = 0;
    std::array<char, kPasscodeBytesMax> passcode{};
  };

  // Starts the thread; an error when it cannot be started.
  static Result<std::shared_ptr<LoginVerifier>> start();
  // Stops the thread; checks still waiting are dropped (their sessions are gone by then).
  ~LoginVerifier();
  LoginVerifier(const LoginVerifier&) = delete;
  LoginVerifier& operator=(const LoginVerifier&) = delete;

  // Queues `check` (copied, then its passcode wiped by the verifier); false when kQueueMax
  // checks wait already. Any thread.
  bool submit(const Check& check) SLUICE_EXCLUDES(mu_);
  // Drops the waiting checks of `inbox` and waits for the one running for it, if any: after
  // this, the verifier no longer touches `inbox`. Any thread but the verifier's.
  void forget(const LoginInbox* inbox) SLUICE_EXCLUDES(mu_);

  // Checks finished; counted before the answer is put, so an asker that has its answer sees it.
  uint64_t checks_run() const { return checks_run_.load(std::memory_order_acquire); }
  size_t waiting() const SLUICE_EXCLUDES(mu_);  // checks queued, not yet started

 private:
  LoginVerifier();
  void run() SLUICE_EXCLUDES(mu_);

  mutable base::Mutex mu_;
  std::condition_variable_any cv_;       // a check came, or stop
  std::condition_variable_any idle_cv_;  // a check finished
  // A ring of kQueueMax checks (about 4 KiB each, so on the heap).
  std::unique_ptr<std::array<Check, kQueueMax>> queue_ SLUICE_GUARDED_BY(mu_);
  size_t head_ SLUICE_GUARDED_BY(mu_) = 0;
  size_t count_ SLUICE_GUARDED_BY(mu_) = 0;
  const LoginInbox* running_ SLUICE_GUARDED_BY(mu_) = nullptr;
  bool stop_ SLUICE_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> checks_run_{0};
  std::thread thread_;
};

}  // namespace sluice::gateway
