#include "gateway/login_verifier.h"

#include <sys/eventfd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

#include "base/assert.h"

namespace sluice::gateway {

Result<std::unique_ptr<LoginInbox>> LoginInbox::open() {
  base::Fd fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd.valid()) return failure(std::string("eventfd: ") + std::strerror(errno));
  return std::unique_ptr<LoginInbox>(new LoginInbox(std::move(fd)));
}

size_t LoginInbox::take(std::span<VerifiedLogin> out) {
  size_t i = 0;
  ring_.pop_some([&](const VerifiedLogin& v) { out[i++] = v; }, out.size());
  return i;
}

void LoginInbox::put(const VerifiedLogin& answer) {
  const bool queued = ring_.try_push(answer);
  SLUICE_ASSERT(queued);  // the asker keeps at most kDepth checks waiting
  const uint64_t one = 1;
  // EAGAIN only when the counter is at its maximum: the worker has a wake-up waiting anyway.
  (void)!write(fd_.get(), &one, sizeof one);
}

LoginVerifier::LoginVerifier() : queue_(std::make_unique<std::array<Check, kQueueMax>>()) {}

Result<std::shared_ptr<LoginVerifier>> LoginVerifier::start() {
  std::shared_ptr<LoginVerifier> v(new LoginVerifier());
  try {
    v->thread_ = std::thread([p = v.get()] { p->run(); });
  } catch (const std::system_error& e) {
    return failure(std::string("the spill login thread: ") + e.what());
  }
  return v;
}

LoginVerifier::~LoginVerifier() {
  {
    base::MutexLock l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  sodium_memzero(queue_->data(), sizeof(*queue_));
}

bool LoginVerifier::submit(const Check& check) {
  SLUICE_ASSERT(check.inbox != nullptr && check.passcode_len <= check.passcode.size());
  SLUICE_ASSERT(check.hash.back() == '\0');
  {
    base::MutexLock l(mu_);
    if (count_ == kQueueMax || stop_) return false;
    (*queue_)[(head_ + count_) % kQueueMax] = check;
    ++count_;
  }
  cv_.notify_one();
  return true;
}

void LoginVerifier::forget(const LoginInbox* inbox) {
  base::MutexLock l(mu_);
  // Keeps the other inboxes' checks in order, closing the gaps.
  size_t kept = 0;
  for (size_t i = 0; i < count_; ++i) {
    Check& c = (*queue_)[(head_ + i) % kQueueMax];
    if (c.inbox == inbox) {
      sodium_memzero(c.passcode.data(), c.passcode.size());
      continue;
    }
    if (kept != i) (*queue_)[(head_ + kept) % kQueueMax] = c;
    ++kept;
  }
  count_ = kept;
  while (running_ == inbox)
    idle_cv_.wait(mu_);
}

size_t LoginVerifier::waiting() const {
  base::MutexLock l(mu_);
  return count_;
}

void LoginVerifier::run() {
  Check c;
  for (;;) {
    {
      base::MutexLock l(mu_);
      while (count_ == 0 && !stop_)
        cv_.wait(mu_);
      if (stop_) break;
      Check& head = (*queue_)[head_];
      c = head;
      sodium_memzero(head.passcode.data(), head.passcode.size());
      head_ = (head_ + 1) % kQueueMax;
      --count_;
      running_ = c.inbox;
    }
    c.answer.accepted =
        crypto_pwhash_str_verify(c.hash.data(), c.passcode.data(), c.passcode_len) == 0;
    sodium_memzero(c.passcode.data(), c.passcode.size());
    checks_run_.fetch_add(1, std::memory_order_release);
    c.inbox->put(c.answer);
    {
      base::MutexLock l(mu_);
      running_ = nullptr;
    }
    idle_cv_.notify_all();
  }
  sodium_memzero(c.passcode.data(), c.passcode.size());
}

}  // namespace sluice::gateway
