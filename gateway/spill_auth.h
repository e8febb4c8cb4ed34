// Authentication and per-queue ACL of spill sessions: the users file, its editor (sluicectl user)
// and SpillAuth, the SpillHooks each worker gives its spill sessions.
//
// The users file (gateway/README.md "Spill users file"), one entry per line, tokens separated by
// spaces or tabs; a line whose first non-blank byte is '#' and a blank line are ignored:
//
//   user NAME HASH          HASH: a libsodium crypto_pwhash_str argon2id string ($argon2id$...)
//   allow NAME VHOST QUEUE  VHOST: exact, or '*' for any; QUEUE: exact, a prefix ending in '*',
//                           or '*' for any
//
// NAME is [A-Za-z0-9._@-]{1,255}. A user without an `allow` line may log in but may send to no
// queue (default deny). For a destination outside the owned prefixes (default route) QUEUE is
// matched against the whole destination. `allow` lines may come before or after their `user`
// line. An unknown keyword, a wrong token count, a bad name or hash, a duplicate user, an
// `allow` for a user the file does not define are errors "PATH:LINE: what is wrong".
//
// Hashes written by `sluicectl user add` are argon2id with kHashOpsLimit passes over
// kHashMemLimitBytes. One verify costs milliseconds (~5.8 ms at t=2/8 MiB measured on the
// 2-core development machine, libsodium 1.0.18); with a LoginVerifier it
// runs on that thread (login_verifier.h), without one on the caller's. The memory cost is
// lower than libsodium's INTERACTIVE 64 MiB so that the one verifier thread keeps up with
// reconnect storms: a stolen users file is cheaper to attack offline (8 MiB per guess instead
// of 64), the price of ~170 checks a second instead of ~14. Successful verifications are
// cached (SpillAuth::kCacheEntries) so reconnects cost a keyed BLAKE2b only. Hashes with a
// higher cost than kHashCostMaxKib are refused when the file is read, so that no line of it
// can hold the verifier for long.
#pragma once

#include <sodium.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "dataplane/session/spill_session.h"
#include "dataplane/uring/engine.h"
#include "gateway/login_verifier.h"

namespace sluice::gateway {

// argon2id parameters of the hashes sluicectl writes (see the top of this file).
inline constexpr unsigned long long kHashOpsLimit = crypto_pwhash_OPSLIMIT_INTERACTIVE;  // 2
inline constexpr size_t kHashMemLimitBytes = size_t(8) << 20;                            // 8 MiB
// Largest cost a hash in the file may have: memory (KiB) x passes; 4x the default (~25 ms here).
inline constexpr uint64_t kHashCostMaxKib = 4 * (kHashMemLimitBytes >> 10) * kHashOpsLimit;

// Limits of the users file.
inline constexpr size_t kUsersFileBytesMax = size_t(16) << 20;
inline constexpr size_t kUsersMax = 100'000;
inline constexpr size_t kAllowRulesPerUserMax = 1024;  // authorize() walks them all
inline constexpr size_t kUserNameBytesMax = 255;

// One `allow` line. `queue` "*" is any queue; "x*" any queue starting with "x"; vhost "*" any.
struct AllowRule {
  std::string vhost;
  std::string queue;
};
bool allow_matches(const AllowRule& rule, const session::QueueKey& key);

struct UserEntry {
  std::string name;
  std::string hash;  // crypto_pwhash_str output; never a passcode
  std::vector<AllowRule> allows;
};

// The users file, read and checked; immutable, shared by every worker's SpillAuth.
class UsersFile {
 public:
  // The error is "PATH:LINE: what is wrong" (or "PATH: ..." for a file that cannot be read).
  using LoadResult = Result<std::shared_ptr<const UsersFile>>;
  static LoadResult load(const std::string& path);
  static LoadResult parse(std::string_view text, const std::string& path_for_messages);

  // Sorted by name.
  std::span<const UserEntry> users() const { return users_; }
  // nullptr when there is no such user. Does not allocate.
  const UserEntry* find(std::string_view name) const;

 private:
  std::vector<UserEntry> users_;
};

// Checks used by the parser and by sluicectl; each error says what is wrong.
Result<> check_user_name(std::string_view name);
Result<> check_hash(std::string_view hash);
Result<> check_allow(std::string_view vhost, std::string_view queue);

// An argon2id hash of `passcode` with kHashOpsLimit and kHashMemLimitBytes; an error when
// libsodium cannot allocate the memory.
Result<std::string> hash_passcode(std::string_view passcode);

// Editing the users file for `sluicectl user`. The text is checked before and after the edit;
// comments and every other line are kept as they are. Each returns the new text.
// Adds `entry` at the end. A user already there is an error unless `replace`: then its `user`
// line is rewritten in place, and its `allow` lines are replaced by entry.allows when that is
// non-empty (kept otherwise, so that a passcode change keeps the ACL).
Result<std::string> add_user_to_text(std::string_view text, const std::string& path,
                                     const UserEntry& entry, bool replace);
// Removes the user's `user` line and all its `allow` lines; an unknown user is an error.
Result<std::string> remove_user_from_text(std::string_view text, const std::string& path,
                                          std::string_view name);
// The same on the file: read (a missing file is empty for add), edit, then written atomically
// (a temp file in the same directory, fsync, rename, fsync of the directory) with mode 0600.
Result<> add_user_to_file(const std::string& path, const UserEntry& entry, bool replace);
Result<> remove_user_from_file(const std::string& path, std::string_view name);

enum class SpillAuthMode : uint8_t {
  kUsersFile,  // credentials and ACL from the users file
  kAnonymous,  // no users file and spill.allow_anonymous: everyone, every queue
  kRefuseAll,  // no users file: every spill session is refused
};

struct SpillAuthStats {
  uint64_t verifications = 0;  // argon2id verifications run or queued (the slow path)
  uint64_t cache_hits = 0;     // logins accepted from the cache
  uint64_t refused = 0;        // authenticate() refused, at once or after a check
  uint64_t busy = 0;           // authenticate() answered kBusy: too many checks waiting
  uint64_t denied = 0;         // authorize() answered false
};

// The users file as it is now, shared by every worker's SpillAuth: a reload (SIGHUP) puts the
// file it read again here, from the control thread, and each SpillAuth takes it up at its next
// authenticate() or authorize() (one atomic load each).
class UsersSource {
 public:
  explicit UsersSource(std::shared_ptr<const UsersFile> users) : users_(std::move(users)) {}
  void set(std::shared_ptr<const UsersFile> users) {
    std::lock_guard<std::mutex> l(mu_);
    users_ = std::move(users);
    generation_.fetch_add(1, std::memory_order_release);
  }
  std::shared_ptr<const UsersFile> get() const {
    std::lock_guard<std::mutex> l(mu_);
    return users_;
  }
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const UsersFile> users_;
  std::atomic<uint64_t> generation_{0};
};

// The SpillHooks of one worker thread: one instance per worker, all sharing one UsersFile. Not
// thread-safe. authenticate() answers from the cache, or refuses, at once; the argon2id check
// of a cache miss (and the decoy check of an unknown user, so that both take as long) runs on
// the LoginVerifier when there is one (kPending: the answer comes through poll()), else on the
// calling thread. Neither allocates, except inside libsodium's argon2id verification.
class SpillAuth final : public session::SpillHooks, public uring::LoginAnswers {
 public:
  static constexpr size_t kCacheEntries = 256;

  // `users` set: kUsersFile (allow_anonymous is then ignored; the config refuses both). Else
  // kAnonymous when allow_anonymous, kRefuseAll otherwise.
  SpillAuth(std::shared_ptr<const UsersFile> users, bool allow_anonymous);
  // The same, following `source`: a file set there replaces this one (and empties the login
  // cache) before the next check, so an edited users file applies after a reload without
  // dropping sessions. Logins already accepted stay; the ACL is checked against the new file
  // at every SEND.
  SpillAuth(std::shared_ptr<UsersSource> source, bool allow_anonymous);
  ~SpillAuth() override;
  SpillAuth(const SpillAuth&) = delete;
  SpillAuth& operator=(const SpillAuth&) = delete;

  // From now on, cache misses are checked on `verifier`; an error when the inbox for its
  // answers cannot be made. Before the first authenticate().
  Result<> check_on(std::shared_ptr<LoginVerifier> verifier);

  session::AuthAnswer authenticate(std::optional<std::string_view> login,
                                   std::optional<std::string_view> passcode,
                                   uint64_t ticket) override;
  bool authorize(std::string_view login, const session::QueueKey& key) override;

  // uring::LoginAnswers: the verifier's answers; accepted ones enter the cache. A login checked
  // against a users file that has been reloaded since is refused.
  size_t poll(std::span<Answer> out) override;
  int notify_fd() const override { return inbox_ ? inbox_->notify_fd() : -1; }

  // A reloaded users file (same mode rules); empties the cache. On the worker thread.
  void reset(std::shared_ptr<const UsersFile> users, bool allow_anonymous);

  SpillAuthMode mode() const { return mode_; }
  // From any thread (the metrics are read on the control thread).
  SpillAuthStats stats() const;
  size_t checks_waiting() const { return waiting_; }

 private:
  using Digest = std::array<unsigned char, crypto_generichash_BYTES>;
  // A successful login: the user (index in the file) and a keyed BLAKE2b of the passcode.
  struct CacheEntry {
    uint32_t user = 0;
    bool used = false;
    Digest digest{};
  };

  static constexpr uint32_t kNoUser = UINT32_MAX;  // a decoy check: refused whatever it says

  void follow_source();  // takes up a file set in source_ since the last check
  session::AuthAnswer check_later(uint32_t user, std::string_view hash, std::string_view passcode,
                                  const Digest& digest, uint64_t ticket);
  void remember(uint32_t user, const Digest& digest);

  std::shared_ptr<const UsersFile> users_;
  std::shared_ptr<UsersSource> source_;
  uint64_t source_generation_ = 0;
  bool allow_anonymous_ = false;
  SpillAuthMode mode_ = SpillAuthMode::kRefuseAll;
  // SpillAuthStats as the worker counts them; read from other threads.
  struct Counters {
    std::atomic<uint64_t> verifications{0};
    std::atomic<uint64_t> cache_hits{0};
    std::atomic<uint64_t> refused{0};
    std::atomic<uint64_t> busy{0};
    std::atomic<uint64_t> denied{0};
  };
  static void bump(std::atomic<uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }
  Counters counters_;
  std::array<CacheEntry, kCacheEntries> cache_{};
  uint64_t generation_ = 0;  // of users_; answers for an older one are not cached
  std::shared_ptr<LoginVerifier> verifier_;
  std::unique_ptr<LoginInbox> inbox_;
  std::unique_ptr<LoginVerifier::Check> check_;  // built here, copied by submit()
  size_t waiting_ = 0;                           // checks sent, not yet answered
};

}  // namespace sluice::gateway
