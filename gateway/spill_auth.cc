// The users file (reading, checking, editing) and SpillAuth, the spill sessions' credentials and
// ACL; format and hash parameters at the top of spill_auth.h.
#include "gateway/spill_auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <unordered_map>

#include "base/assert.h"
#include "base/fd.h"

namespace sluice::gateway {
namespace {

constexpr std::string_view kArgon2idPrefix = "$argon2id$";
constexpr std::string_view kNewFileHeader =
    "# Sluice spill session users: `user NAME HASH` and `allow NAME VHOST QUEUE` lines\n"
    "# (gateway/README.md \"Spill users file\"). Edit with `sluicectl user add/remove`.\n";

void init_sodium() {
  // Thread-safe; 1 when already initialised, -1 only when no entropy source can be opened.
  SLUICE_ASSERT(sodium_init() >= 0);
}

// The key of the passcode digests in the caches: random, per process, never leaves memory.
const std::array<unsigned char, crypto_generichash_KEYBYTES>& digest_key() {
  static const std::array<unsigned char, crypto_generichash_KEYBYTES> key = [] {
    init_sodium();
    std::array<unsigned char, crypto_generichash_KEYBYTES> k;
    randombytes_buf(k.data(), k.size());
    return k;
  }();
  return key;
}

// Verified against when the login is unknown, so that an unknown login costs as much as a wrong
// passcode and the answer's time does not tell which logins exist.
const std::string& decoy_hash() {
  static const std::string hash = [] {
    std::array<unsigned char, 16> random;
    randombytes_buf(random.data(), random.size());
    Result<std::string> h =
        hash_passcode(std::string_view(reinterpret_cast<const char*>(random.data()), 16));
    SLUICE_ASSERT(h.has_value());
    return *h;
  }();
  return hash;
}

// Text from a file or the user, safe in a one-line message: quoted, control and non-ASCII bytes
// as \xNN, long text cut.
std::string quoted(std::string_view s) {
  constexpr size_t kShownMax = 80;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kShownMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
  if (s.size() > kShownMax) out += "...";
  return out + "\"";
}

bool has_control_or_space(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c <= 0x20 || c == 0x7f;
  });
}

// Lines without their '\n' (and without a '\r' before it); a last line without '\n' counts.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return lines;
}

// Tokens separated by spaces and tabs; none for a blank or comment line.
std::vector<std::string_view> tokens_of(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t'))
      ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t')
      ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  if (!out.empty() && out.front().front() == '#') out.clear();
  return out;
}

// "$argon2id$v=19$m=M,t=T,p=P$..." -> M, T, P; false when the string does not have that shape.
bool argon2id_params(std::string_view h, uint64_t* m, uint64_t* t, uint64_t* p) {
  if (!h.starts_with(kArgon2idPrefix)) return false;
  h.remove_prefix(kArgon2idPrefix.size());
  auto number = [&h](std::string_view label, char end, uint64_t* out) {
    if (!h.starts_with(label)) return false;
    h.remove_prefix(label.size());
    auto [ptr, ec] = std::from_chars(h.data(), h.data() + h.size(), *out);
    if (ec != std::errc() || ptr == h.data() || ptr == h.data() + h.size() || *ptr != end) {
      return false;
    }
    h.remove_prefix(size_t(ptr - h.data()) + 1);
    return true;
  };
  uint64_t version = 0;
  return number("v=", '$', &version) && version == 19 && number("m=", ',', m) &&
         number("t=", ',', t) && number("p=", '$', p);
}

tl::unexpected<Error> error_at(const std::string& path, size_t line, const std::string& what) {
  return failure(path + ":" + std::to_string(line) + ": " + what);
}

// The file's text; a missing file is empty when missing_is_empty.
Result<std::string> read_all(const std::string& path, bool missing_is_empty) {
  std::string text;
  const base::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT && missing_is_empty) return text;
    return failure("cannot open " + path + ": " + std::strerror(errno));
  }
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failure("cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (text.size() > kUsersFileBytesMax) {
      return failure(path + " is larger than " + std::to_string(kUsersFileBytesMax >> 20) + " MiB");
    }
  }
  return text;
}

}  // namespace

bool allow_matches(const AllowRule& rule, const session::QueueKey& key) {
  if (rule.vhost != "*" && rule.vhost != key.vhost) return false;
  std::string_view q = rule.queue;
  if (!q.empty() && q.back() == '*') {
    q.remove_suffix(1);
    return key.queue.starts_with(q);
  }
  return key.queue == q;
}

Result<> check_user_name(std::string_view name) {
  const bool chars_ok = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '@' || c == '-';
  });
  if (name.empty() || name.size() > kUserNameBytesMax || !chars_ok) {
    return failure("user name " + quoted(name) +
                   " must be 1 to 255 characters from A-Z a-z 0-9 . _ @ -");
  }
  return {};
}

Result<> check_hash(std::string_view hash) {
  const std::string what =
      "the hash of a user must be an argon2id string as `sluicectl user add` "
      "writes it ($argon2id$v=19$m=...,t=...,p=1$SALT$HASH)";
  uint64_t m = 0, t = 0, p = 0;
  if (hash.size() >= crypto_pwhash_STRBYTES || !argon2id_params(hash, &m, &t, &p)) {
    return failure(what + ", not " + quoted(hash));
  }
  if (p != 1)
    return failure("the hash's parallelism must be p=1 (libsodium), not p=" + std::to_string(p));
  if (m == 0 || t == 0 || m > kHashCostMaxKib || t > kHashCostMaxKib || m * t > kHashCostMaxKib) {
    return failure(
        "the hash costs m=" + std::to_string(m) + " KiB x t=" + std::to_string(t) + ", more than " +
        std::to_string(kHashCostMaxKib) +
        " KiB-passes: verifying it would stall a worker; make it again with `sluicectl user "
        "add`");
  }
  std::array<char, crypto_pwhash_STRBYTES> z{};
  std::copy(hash.begin(), hash.end(), z.begin());
  init_sodium();
  // -1: the salt or the hash part does not decode.
  if (crypto_pwhash_str_needs_rehash(z.data(), kHashOpsLimit, kHashMemLimitBytes) == -1) {
    return failure(what + "; this one does not decode");
  }
  return {};
}

Result<> check_allow(std::string_view vhost, std::string_view queue) {
  if (vhost.empty() || vhost.size() > session::kVhostBytesMax || has_control_or_space(vhost)) {
    return failure("VHOST " + quoted(vhost) +
                   " must be 1 to 255 bytes without spaces or control characters, or '*'");
  }
  if (vhost != "*" && vhost.find('*') != std::string_view::npos) {
    return failure("VHOST " + quoted(vhost) + " must be a name or '*' for any vhost");
  }
  if (queue.empty() || queue.size() > session::kDestinationBytesMax ||
      has_control_or_space(queue)) {
    return failure("QUEUE " + quoted(queue) +
                   " must be 1 to 1024 bytes without spaces or control characters");
  }
  if (queue.find('*') < queue.size() - 1) {
    return failure("QUEUE " + quoted(queue) +
                   " may have '*' only at its end (a prefix), or be '*' for any queue");
  }
  return {};
}

Result<std::string> hash_passcode(std::string_view passcode) {
  init_sodium();
  std::array<char, crypto_pwhash_STRBYTES> out{};
  if (crypto_pwhash_str_alg(out.data(), passcode.data(), passcode.size(), kHashOpsLimit,
                            kHashMemLimitBytes, crypto_pwhash_ALG_ARGON2ID13) != 0) {
    return failure("cannot hash the passcode: out of memory (argon2id takes " +
                   std::to_string(kHashMemLimitBytes >> 20) + " MiB)");
  }
  return std::string(out.data());
}

UsersFile::LoadResult UsersFile::load(const std::string& path) {
  Result<std::string> text = read_all(path, false);
  if (!text) return failure(path + ": " + text.error().message);
  return parse(*text, path);
}

UsersFile::LoadResult UsersFile::parse(std::string_view text, const std::string& path) {
  if (text.size() > kUsersFileBytesMax) {
    return failure(path + ": the users file is larger than " +
                   std::to_string(kUsersFileBytesMax >> 20) + " MiB");
  }
  struct PendingAllow {
    std::string_view name;
    AllowRule rule;
    size_t line;
  };
  auto file = std::shared_ptr<UsersFile>(new UsersFile());
  std::unordered_map<std::string_view, size_t> user_line;
  std::vector<PendingAllow> allows;
  const std::vector<std::string_view> lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const size_t n = i + 1;
    const std::vector<std::string_view> tok = tokens_of(lines[i]);
    if (tok.empty()) continue;
    if (tok[0] == "user") {
      if (tok.size() != 3) {
        return error_at(path, n,
                        "`user` takes a name and a hash (user NAME HASH), found " +
                            std::to_string(tok.size() - 1) + " tokens after it");
      }
      if (Result<> r = check_user_name(tok[1]); !r) return error_at(path, n, r.error().message);
      if (Result<> r = check_hash(tok[2]); !r) {
        return error_at(path, n, "user " + quoted(tok[1]) + ": " + r.error().message);
      }
      if (auto [it, fresh] = user_line.emplace(tok[1], n); !fresh) {
        return error_at(path, n,
                        "duplicate user " + quoted(tok[1]) + " (first on line " +
                            std::to_string(it->second) + ")");
      }
      if (user_line.size() > kUsersMax) {
        return error_at(path, n, "more than " + std::to_string(kUsersMax) + " users");
      }
      file->users_.push_back(UserEntry{std::string(tok[1]), std::string(tok[2]), {}});
    } else if (tok[0] == "allow") {
      if (tok.size() != 4) {
        return error_at(path, n,
                        "`allow` takes a user, a vhost and a queue (allow NAME VHOST QUEUE), "
                        "found " +
                            std::to_string(tok.size() - 1) + " tokens after it");
      }
      if (Result<> r = check_user_name(tok[1]); !r) return error_at(path, n, r.error().message);
      if (Result<> r = check_allow(tok[2], tok[3]); !r) {
        return error_at(path, n, r.error().message);
      }
      allows.push_back(
          PendingAllow{tok[1], AllowRule{std::string(tok[2]), std::string(tok[3])}, n});
    } else {
      return error_at(path, n,
                      "unknown keyword " + quoted(tok[0]) +
                          ": a line is `user NAME HASH`, `allow NAME VHOST QUEUE`, a # comment "
                          "or blank");
    }
  }
  std::sort(file->users_.begin(), file->users_.end(),
            [](const UserEntry& a, const UserEntry& b) { return a.name < b.name; });
  for (PendingAllow& a : allows) {
    const UserEntry* found = file->find(a.name);
    if (found == nullptr) {
      return error_at(path, a.line,
                      "allow for unknown user " + quoted(a.name) + " (no `user " +
                          std::string(a.name) + " HASH` line in the file)");
    }
    UserEntry* u = &file->users_[size_t(found - file->users_.data())];
    if (u->allows.size() == kAllowRulesPerUserMax) {
      return error_at(path, a.line,
                      "user " + quoted(a.name) + " has more than " +
                          std::to_string(kAllowRulesPerUserMax) + " allow lines");
    }
    u->allows.push_back(std::move(a.rule));
  }
  return std::shared_ptr<const UsersFile>(std::move(file));
}

const UserEntry* UsersFile::find(std::string_view name) const {
  auto it = std::lower_bound(users_.begin(), users_.end(), name,
                             [](const UserEntry& u, std::string_view n) { return u.name < n; });
  return it != users_.end() && it->name == name ? &*it : nullptr;
}

// --- Editing -------------------------------------------------------------------------------

namespace {

Result<> check_entry(const UserEntry& e) {
  if (Result<> r = check_user_name(e.name); !r) return r;
  if (Result<> r = check_hash(e.hash); !r) return r;
  if (e.allows.size() > kAllowRulesPerUserMax) {
    return failure("at most " + std::to_string(kAllowRulesPerUserMax) + " allow rules per user");
  }
  for (const AllowRule& a : e.allows) {
    if (Result<> r = check_allow(a.vhost, a.queue); !r) return r;
  }
  return {};
}

std::string allow_line(const std::string& name, const AllowRule& r) {
  return "allow " + name + " " + r.vhost + " " + r.queue + "\n";
}

// The file must be valid before an edit, so that the edit cannot hide or worsen a mistake.
UsersFile::LoadResult check_before(std::string_view text, const std::string& path) {
  UsersFile::LoadResult r = UsersFile::parse(text, path);
  if (!r) return failure(r.error().to_string() + " (fix the file before editing it)");
  return r;
}

Result<std::string> checked_after(std::string text, const std::string& path) {
  UsersFile::LoadResult r = UsersFile::parse(text, path);
  if (!r) return failure("the edited file would not be valid: " + r.error().to_string());
  return text;
}

// Temp file in the same directory, 0600, fsync, rename over `path`, fsync of the directory: a
// crash leaves the old file or the new one, never a mix.
Result<> write_atomically(const std::string& path, const std::string& text) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  std::string tmp = path + ".tmp.XXXXXX";
  base::Fd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd.valid())
    return failure("cannot create a temp file next to " + path + ": " + std::strerror(errno));
  auto fail = [&](const std::string& what) {
    const int err = errno;
    fd.reset();
    ::unlink(tmp.c_str());
    return failure(what + " " + tmp + ": " + std::strerror(err));
  };
  if (::fchmod(fd.get(), 0600) != 0) return fail("cannot chmod");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("cannot write");
    done += size_t(n);
  }
  if (::fsync(fd.get()) != 0) return fail("cannot fsync");
  if (fd.close() != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return failure("cannot close " + tmp + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return failure("cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  const base::Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid() || ::fsync(dfd.get()) != 0) {
    return failure("wrote " + path + " but cannot fsync its directory " + dir + ": " +
                   std::strerror(errno));
  }
  return {};
}

// Which user a `user` or `allow` line names; empty for other lines.
std::string_view line_user(std::string_view line, bool* is_allow) {
  const std::vector<std::string_view> tok = tokens_of(line);
  if (tok.size() < 2 || (tok[0] != "user" && tok[0] != "allow")) return {};
  *is_allow = tok[0] == "allow";
  return tok[1];
}

}  // namespace

Result<std::string> add_user_to_text(std::string_view text, const std::string& path,
                                     const UserEntry& entry, bool replace) {
  if (Result<> r = check_entry(entry); !r) return tl::unexpected(std::move(r.error()));
  UsersFile::LoadResult before = check_before(text, path);
  if (!before) return tl::unexpected(std::move(before.error()));
  const bool exists = (*before)->find(entry.name) != nullptr;
  if (exists && !replace) {
    return failure("user " + quoted(entry.name) + " already exists in " + path +
                   " (--replace changes its passcode and, given --allow, its rules)");
  }
  std::string out;
  out.reserve(text.size() + 512);
  std::string allows;
  for (const AllowRule& r : entry.allows)
    allows += allow_line(entry.name, r);
  const std::string user_line = "user " + entry.name + " " + entry.hash + "\n";
  if (!exists) {
    out = text.empty() ? std::string(kNewFileHeader) : std::string(text);
    if (!out.empty() && out.back() != '\n') out += '\n';
    out += user_line + allows;
    return checked_after(std::move(out), path);
  }
  for (std::string_view line : split_lines(text)) {
    bool is_allow = false;
    if (line_user(line, &is_allow) == entry.name) {
      if (!is_allow) {
        out += user_line + allows;
        continue;
      }
      if (!entry.allows.empty()) continue;  // replaced by the new rules
    }
    out.append(line);
    out += '\n';
  }
  return checked_after(std::move(out), path);
}

Result<std::string> remove_user_from_text(std::string_view text, const std::string& path,
                                          std::string_view name) {
  UsersFile::LoadResult before = check_before(text, path);
  if (!before) return tl::unexpected(std::move(before.error()));
  if ((*before)->find(name) == nullptr) return failure("no user " + quoted(name) + " in " + path);
  std::string out;
  out.reserve(text.size());
  for (std::string_view line : split_lines(text)) {
    bool is_allow = false;
    if (line_user(line, &is_allow) == name) continue;
    out.append(line);
    out += '\n';
  }
  return checked_after(std::move(out), path);
}

Result<> add_user_to_file(const std::string& path, const UserEntry& entry, bool replace) {
  return read_all(path, true)
      .and_then(
          [&](const std::string& text) { return add_user_to_text(text, path, entry, replace); })
      .and_then([&](const std::string& edited) { return write_atomically(path, edited); });
}

Result<> remove_user_from_file(const std::string& path, std::string_view name) {
  return read_all(path, false)
      .and_then([&](const std::string& text) { return remove_user_from_text(text, path, name); })
      .and_then([&](const std::string& edited) { return write_atomically(path, edited); });
}

// --- SpillAuth -----------------------------------------------------------------------------

SpillAuth::SpillAuth(std::shared_ptr<const UsersFile> users, bool allow_anonymous) {
  init_sodium();
  reset(std::move(users), allow_anonymous);
}

SpillAuth::SpillAuth(std::shared_ptr<UsersSource> source, bool allow_anonymous)
    : source_(std::move(source)) {
  init_sodium();
  source_generation_ = source_->generation();
  reset(source_->get(), allow_anonymous);
}

SpillAuth::~SpillAuth() {
  if (verifier_) verifier_->forget(inbox_.get());
  if (check_) sodium_memzero(check_->passcode.data(), check_->passcode.size());
}

Result<> SpillAuth::check_on(std::shared_ptr<LoginVerifier> verifier) {
  SLUICE_ASSERT(verifier && !verifier_);
  Result<std::unique_ptr<LoginInbox>> inbox = LoginInbox::open();
  if (!inbox) return failure("the spill logins' answers: " + inbox.error().message);
  inbox_ = std::move(*inbox);
  check_ = std::make_unique<LoginVerifier::Check>();
  verifier_ = std::move(verifier);
  return {};
}

void SpillAuth::follow_source() {
  if (!source_) return;
  const uint64_t g = source_->generation();
  if (g == source_generation_) return;
  source_generation_ = g;
  reset(source_->get(), allow_anonymous_);
}

void SpillAuth::reset(std::shared_ptr<const UsersFile> users, bool allow_anonymous) {
  allow_anonymous_ = allow_anonymous;
  users_ = std::move(users);
  ++generation_;
  mode_ = users_            ? SpillAuthMode::kUsersFile
          : allow_anonymous ? SpillAuthMode::kAnonymous
                            : SpillAuthMode::kRefuseAll;
  cache_.fill(CacheEntry{});
  if (mode_ == SpillAuthMode::kUsersFile) {
    // Both are made once per process; not on a session's path.
    (void)digest_key();
    (void)decoy_hash();
  }
}

namespace {

// The cache slot of a user's login: its digest mixed with the user's index.
size_t cache_slot(uint32_t user, const std::array<unsigned char, crypto_generichash_BYTES>& d,
                  size_t entries) {
  const uint32_t mix = (uint32_t(d[0]) | uint32_t(d[1]) << 8) ^ (user * 2654435761u);
  return mix % entries;
}

}  // namespace

session::AuthAnswer SpillAuth::authenticate(std::optional<std::string_view> login,
                                            std::optional<std::string_view> passcode,
                                            uint64_t ticket) {
  using session::AuthAnswer;
  follow_source();
  if (mode_ == SpillAuthMode::kAnonymous) return AuthAnswer::kAccepted;
  if (mode_ == SpillAuthMode::kRefuseAll || !login || !passcode || passcode->empty() ||
      passcode->size() > kPasscodeBytesMax) {
    bump(counters_.refused);
    return AuthAnswer::kRefused;
  }
  Digest digest;
  const auto& key = digest_key();
  crypto_generichash(digest.data(), digest.size(),
                     reinterpret_cast<const unsigned char*>(passcode->data()), passcode->size(),
                     key.data(), key.size());
  const UserEntry* user = users_->find(*login);
  if (user == nullptr) {
    // An unknown user costs a verify too, so that the answer's delay does not tell.
    if (verifier_) return check_later(kNoUser, decoy_hash(), *passcode, digest, ticket);
    bump(counters_.verifications);
    const int decoy =
        crypto_pwhash_str_verify(decoy_hash().c_str(), passcode->data(), passcode->size());
    static_cast<void>(decoy);  // refused whatever it says
    bump(counters_.refused);
    return AuthAnswer::kRefused;
  }
  const auto index = uint32_t(user - users_->users().data());
  const CacheEntry& slot = cache_[cache_slot(index, digest, kCacheEntries)];
  if (slot.used && slot.user == index &&
      sodium_memcmp(slot.digest.data(), digest.data(), digest.size()) == 0) {
    bump(counters_.cache_hits);
    return AuthAnswer::kAccepted;
  }
  if (verifier_) return check_later(index, user->hash, *passcode, digest, ticket);
  bump(counters_.verifications);
  if (crypto_pwhash_str_verify(user->hash.c_str(), passcode->data(), passcode->size()) != 0) {
    bump(counters_.refused);
    return AuthAnswer::kRefused;
  }
  remember(index, digest);
  return AuthAnswer::kAccepted;
}

session::AuthAnswer SpillAuth::check_later(uint32_t user, std::string_view hash,
                                           std::string_view passcode, const Digest& digest,
                                           uint64_t ticket) {
  SLUICE_ASSERT(hash.size() < check_->hash.size() && passcode.size() <= check_->passcode.size());
  if (waiting_ == LoginInbox::kDepth) {
    bump(counters_.busy);
    return session::AuthAnswer::kBusy;
  }
  LoginVerifier::Check& c = *check_;
  c.inbox = inbox_.get();
  c.answer = VerifiedLogin{ticket, false, user, generation_, digest};
  std::memcpy(c.hash.data(), hash.data(), hash.size());
  c.hash[hash.size()] = '\0';
  std::memcpy(c.passcode.data(), passcode.data(), passcode.size());
  c.passcode_len = passcode.size();
  const bool queued = verifier_->submit(c);
  sodium_memzero(c.passcode.data(), passcode.size());
  if (!queued) {
    bump(counters_.busy);
    return session::AuthAnswer::kBusy;
  }
  ++waiting_;
  bump(counters_.verifications);
  return session::AuthAnswer::kPending;
}

SpillAuthStats SpillAuth::stats() const {
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return SpillAuthStats{get(counters_.verifications), get(counters_.cache_hits),
                        get(counters_.refused), get(counters_.busy), get(counters_.denied)};
}

void SpillAuth::remember(uint32_t user, const Digest& digest) {
  CacheEntry& slot = cache_[cache_slot(user, digest, kCacheEntries)];
  slot.used = true;
  slot.user = user;
  slot.digest = digest;
}

size_t SpillAuth::poll(std::span<Answer> out) {
  if (!inbox_) return 0;
  std::array<VerifiedLogin, 16> got;
  const size_t n = inbox_->take(std::span(got).first(std::min(got.size(), out.size())));
  SLUICE_ASSERT(n <= waiting_);
  waiting_ -= n;
  for (size_t i = 0; i < n; ++i) {
    const VerifiedLogin& v = got[i];
    // A login checked against a users file that has since been reloaded is refused: the
    // reload may have changed that user's passcode or removed the user.
    const bool accepted = v.accepted && v.user != kNoUser && v.generation == generation_;
    if (accepted) {
      remember(v.user, v.digest);
    } else {
      bump(counters_.refused);
    }
    out[i] = Answer{v.ticket, accepted};
  }
  return n;
}

bool SpillAuth::authorize(std::string_view login, const session::QueueKey& key) {
  follow_source();
  if (mode_ == SpillAuthMode::kAnonymous) return true;
  if (mode_ == SpillAuthMode::kUsersFile) {
    if (const UserEntry* user = users_->find(login)) {
      for (const AllowRule& r : user->allows) {
        if (allow_matches(r, key)) return true;
      }
    }
  }
  bump(counters_.denied);
  return false;
}

}  // namespace sluice::gateway
