// Tests of the spill users file (parsing, errors, editing), SpillAuth (credentials, cache, ACL,
// modes) and `sluicectl user` run as a process.
#include "gateway/spill_auth.h"
#include "tests/unit/result_util.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace sluice::gateway {
namespace {

using session::AuthAnswer;
using session::QueueKey;

// Hashing costs a few ms; each passcode is hashed once per process (std::map: references stay).
const std::string& hash_of(const std::string& passcode) {
  static std::map<std::string, std::string> made;
  auto it = made.find(passcode);
  if (it != made.end()) return it->second;
  Result<std::string> h = hash_passcode(passcode);
  EXPECT_TRUE(h.has_value()) << h.error().message;
  return made.emplace(passcode, h.value_or("")).first->second;
}

std::shared_ptr<const UsersFile> must_parse(const std::string& text) {
  UsersFile::LoadResult r = UsersFile::parse(text, "users");
  if (!r) {
    ADD_FAILURE() << "refused: " << r.error().message << "\n" << text;
    return nullptr;
  }
  return *r;
}

std::string must_fail(const std::string& text) {
  UsersFile::LoadResult r = UsersFile::parse(text, "users");
  if (!r) return r.error().message;
  ADD_FAILURE() << "accepted:\n" << text;
  return {};
}

std::string edited(const Result<std::string>& r) {
  if (!r) {
    ADD_FAILURE() << "edit refused: " << r.error().message;
    return {};
  }
  return *r;
}

std::string edit_error(const Result<std::string>& r) {
  if (!r) return r.error().message;
  ADD_FAILURE() << "edit accepted:\n" << *r;
  return {};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/spill_auth_test.XXXXXX";
    char* p = ::mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    path_ = p != nullptr ? p : "/tmp";
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string alice_and_bob() {
  return "# spill users\n"
         "user alice " +
         hash_of("alice-pw") +
         "\n"
         "\n"
         "allow alice / orders\n"
         "allow alice / logs.*\n"
         "allow alice staging *\n"
         "  # indented comment\n"
         "user bob " +
         hash_of("bob-pw") +
         "\n"
         "allow bob * audit\n"
         "user carol " +
         hash_of("carol-pw") + "\n";
}

TEST(SpillAuthHash, UsesTheDocumentedParameters) {
  const std::string& h = hash_of("alice-pw");
  EXPECT_EQ(h.rfind("$argon2id$v=19$m=8192,t=2,p=1$", 0), 0u) << h;
  EXPECT_EQ(error_of(check_hash(h)), "");
  EXPECT_EQ(kHashMemLimitBytes, 8u << 20);
  EXPECT_EQ(kHashOpsLimit, 2u);
}

TEST(UsersFile, ParsesUsersAndTheirRules) {
  auto f = must_parse(alice_and_bob());
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->users().size(), 3u);
  EXPECT_EQ(f->users()[0].name, "alice");
  EXPECT_EQ(f->users()[1].name, "bob");
  EXPECT_EQ(f->users()[2].name, "carol");
  const UserEntry* alice = f->find("alice");
  ASSERT_NE(alice, nullptr);
  ASSERT_EQ(alice->allows.size(), 3u);
  EXPECT_EQ(alice->allows[1].vhost, "/");
  EXPECT_EQ(alice->allows[1].queue, "logs.*");
  EXPECT_TRUE(f->find("carol")->allows.empty());
  EXPECT_EQ(f->find("dave"), nullptr);
  EXPECT_EQ(f->find(""), nullptr);
}

TEST(UsersFile, AcceptsTabsCrlfAllowBeforeUserAndEmptyText) {
  auto f = must_parse("allow a.b@c-d_e / q\r\n\tuser\ta.b@c-d_e  " + hash_of("x") + "\r\n");
  ASSERT_NE(f, nullptr);
  ASSERT_NE(f->find("a.b@c-d_e"), nullptr);
  EXPECT_EQ(f->find("a.b@c-d_e")->allows.size(), 1u);
  auto empty = must_parse("");
  ASSERT_NE(empty, nullptr);
  EXPECT_TRUE(empty->users().empty());
  EXPECT_NE(must_parse("# only a comment\n\n   \n"), nullptr);
}

TEST(UsersFile, ErrorsNameFileLineAndWhatIsWrong) {
  const std::string h = hash_of("x");
  struct Case {
    std::string text;
    std::string starts;    // "users:LINE: "
    std::string contains;  // what is wrong
  };
  const std::vector<Case> cases = {
      {"# c\nfrobnicate a b\n", "users:2: ", "unknown keyword \"frobnicate\""},
      {"user a\n", "users:1: ", "`user` takes a name and a hash"},
      {"user a " + h + " extra\n", "users:1: ", "found 3 tokens"},
      {"user a " + h + "\nallow a /\n", "users:2: ", "`allow` takes a user, a vhost and a queue"},
      {"user a " + h + "\nallow a / q r\n", "users:2: ", "found 4 tokens"},
      {"user a:b " + h + "\n", "users:1: ", "user name \"a:b\" must be 1 to 255 characters"},
      {"user " + std::string(256, 'a') + " " + h + "\n", "users:1: ", "must be 1 to 255"},
      {"user a plaintext\n", "users:1: ", "must be an argon2id string"},
      {"user a $argon2i$v=19$m=8192,t=2,p=1$c2FsdHNhbHRzYWx0c2FsdA$aGFzaGhhc2hoYXNoaGFzaA\n",
       "users:1: ", "must be an argon2id string"},
      {"user a $argon2id$v=19$m=8192,t=2,p=1$!!!$!!!\n", "users:1: ", "does not decode"},
      {"user a $argon2id$v=19$m=262144,t=4,p=1$c2FsdHNhbHRzYWx0c2FsdA$aGFzaGhhc2hoYXNoaGFzaA\n",
       "users:1: ", "would stall a worker"},
      {"user a $argon2id$v=19$m=8192,t=2,p=4$c2FsdHNhbHRzYWx0c2FsdA$aGFzaGhhc2hoYXNoaGFzaA\n",
       "users:1: ", "p=1"},
      {"\nuser a " + h + "\n\nuser a " + h + "\n",
       "users:4: ", "duplicate user \"a\" (first on line 2)"},
      {"user a " + h + "\n# c\nallow b / q\n", "users:3: ", "allow for unknown user \"b\""},
      {"user a " + h + "\nallow a / ord*ers\n", "users:2: ", "'*' only at its end"},
      {"user a " + h + "\nallow a v* q\n", "users:2: ", "VHOST \"v*\" must be a name or '*'"},
      {"user a " + h + "\nallow a / q\x01\n", "users:2: ", "control characters"},
  };
  for (const Case& c : cases) {
    const std::string e = must_fail(c.text);
    EXPECT_EQ(e.rfind(c.starts, 0), 0u) << e << "\n" << c.text;
    EXPECT_NE(e.find(c.contains), std::string::npos) << e << "\n" << c.text;
  }
}

TEST(UsersFile, LoadNamesAMissingFile) {
  UsersFile::LoadResult r = UsersFile::load("/nonexistent/spill-users");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message.rfind("/nonexistent/spill-users: cannot open", 0), 0u);
}

TEST(UsersFile, AclMatchesExactPrefixAnyAndVhost) {
  const AllowRule exact{"/", "orders"}, prefix{"/", "logs.*"}, any{"staging", "*"},
      any_vhost{"*", "audit"};
  EXPECT_TRUE(allow_matches(exact, QueueKey{"/", "orders", false}));
  EXPECT_FALSE(allow_matches(exact, QueueKey{"/", "orders2", false}));
  EXPECT_FALSE(allow_matches(exact, QueueKey{"/", "order", false}));
  EXPECT_FALSE(allow_matches(exact, QueueKey{"other", "orders", false}));
  EXPECT_TRUE(allow_matches(prefix, QueueKey{"/", "logs.", false}));
  EXPECT_TRUE(allow_matches(prefix, QueueKey{"/", "logs.app", false}));
  EXPECT_FALSE(allow_matches(prefix, QueueKey{"/", "logs", false}));
  EXPECT_FALSE(allow_matches(prefix, QueueKey{"/", "xlogs.app", false}));
  EXPECT_TRUE(allow_matches(any, QueueKey{"staging", "anything", false}));
  EXPECT_FALSE(allow_matches(any, QueueKey{"/", "anything", false}));
  EXPECT_TRUE(allow_matches(any_vhost, QueueKey{"/", "audit", false}));
  EXPECT_TRUE(allow_matches(any_vhost, QueueKey{"prod", "audit", false}));
  EXPECT_FALSE(allow_matches(any_vhost, QueueKey{"prod", "audit2", false}));
  // Default route: the queue is the whole destination, matched the same way.
  const AllowRule topic{"/", "/topic/*"};
  EXPECT_TRUE(allow_matches(topic, QueueKey{"/", "/topic/news", true}));
  EXPECT_FALSE(allow_matches(topic, QueueKey{"/", "/queue/news", true}));
}

TEST(SpillAuth, AuthorizesOnlyWhatTheUsersRulesAllow) {
  SpillAuth auth(must_parse(alice_and_bob()), false);
  EXPECT_EQ(auth.mode(), SpillAuthMode::kUsersFile);
  EXPECT_TRUE(auth.authorize("alice", QueueKey{"/", "orders", false}));
  EXPECT_TRUE(auth.authorize("alice", QueueKey{"/", "logs.web", false}));
  EXPECT_TRUE(auth.authorize("alice", QueueKey{"staging", "x", false}));
  EXPECT_FALSE(auth.authorize("alice", QueueKey{"/", "audit", false}));
  EXPECT_TRUE(auth.authorize("bob", QueueKey{"any", "audit", false}));
  EXPECT_FALSE(auth.authorize("bob", QueueKey{"/", "orders", false}));
  // No allow line: default deny.
  EXPECT_FALSE(auth.authorize("carol", QueueKey{"/", "orders", false}));
  EXPECT_FALSE(auth.authorize("nobody", QueueKey{"/", "orders", false}));
  EXPECT_EQ(auth.stats().denied, 4u);
}

TEST(SpillAuth, AuthenticatesTheRightPasscodeOnly) {
  SpillAuth auth(must_parse(alice_and_bob()), false);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.authenticate("alice", "bob-pw", 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw ", 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("alice", "", 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("alice", std::nullopt, 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate(std::nullopt, "alice-pw", 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate(std::nullopt, std::nullopt, 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("bob", "bob-pw", 0), AuthAnswer::kAccepted);
  // A user without rules may log in.
  EXPECT_EQ(auth.authenticate("carol", "carol-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.stats().refused, 6u);
}

TEST(SpillAuth, UnknownUserIsRefusedAfterAVerification) {
  SpillAuth auth(must_parse(alice_and_bob()), false);
  EXPECT_EQ(auth.authenticate("dave", "alice-pw", 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("", "x", 0), AuthAnswer::kRefused);
  // The decoy verification: an unknown login takes as long as a wrong passcode.
  EXPECT_EQ(auth.stats().verifications, 2u);
  EXPECT_EQ(auth.stats().refused, 2u);
}

TEST(SpillAuth, CacheHitSkipsVerificationButStillRejectsAWrongPasscode) {
  SpillAuth auth(must_parse(alice_and_bob()), false);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.stats().verifications, 1u);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.stats().verifications, 1u);
  EXPECT_EQ(auth.stats().cache_hits, 1u);
  EXPECT_EQ(auth.authenticate("alice", "alice-pX", 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("alice", "wrong", 0), AuthAnswer::kRefused);
  // Another user with alice's (cached) passcode is not let in by her cache entry.
  EXPECT_EQ(auth.authenticate("bob", "alice-pw", 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.stats().verifications, 4u);
  EXPECT_EQ(auth.stats().cache_hits, 1u);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.stats().cache_hits, 2u);
  // A reloaded file empties the cache: alice's old passcode is checked against her new hash.
  auth.reset(must_parse("user alice " + hash_of("new-pw") + "\n"), false);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("alice", "new-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.stats().cache_hits, 2u);
}

// Workers follow a UsersSource: a file set there (a reload) applies at their next check, login
// cache emptied, rules at once.
TEST(SpillAuth, FollowsTheUsersFileSetInItsSource) {
  auto source = std::make_shared<UsersSource>(must_parse(alice_and_bob()));
  SpillAuth a(source, false);
  SpillAuth b(source, false);  // a second worker
  EXPECT_EQ(a.authenticate("alice", "alice-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(a.authenticate("alice", "alice-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(a.stats().cache_hits, 1u);
  EXPECT_TRUE(b.authorize("alice", QueueKey{"/", "orders", false}));
  EXPECT_EQ(a.authenticate("dave", "dave-pw", 0), AuthAnswer::kRefused);
  const uint64_t before = source->generation();
  // dave added with a rule, alice's passcode changed and her orders rule gone.
  source->set(must_parse("user alice " + hash_of("new-pw") + "\nallow alice / logs.*\nuser dave " +
                         hash_of("dave-pw") + "\nallow dave / orders\n"));
  EXPECT_EQ(source->generation(), before + 1);
  EXPECT_EQ(a.authenticate("alice", "alice-pw", 0), AuthAnswer::kRefused)
      << "the cached login survived the reload";
  EXPECT_EQ(a.authenticate("alice", "new-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(a.authenticate("dave", "dave-pw", 0), AuthAnswer::kAccepted);
  EXPECT_FALSE(b.authorize("alice", QueueKey{"/", "orders", false}));
  EXPECT_TRUE(b.authorize("alice", QueueKey{"/", "logs.web", false}));
  EXPECT_TRUE(b.authorize("dave", QueueKey{"/", "orders", false}));
  EXPECT_EQ(b.authenticate("bob", "bob-pw", 0), AuthAnswer::kRefused);
}

// The answers a SpillAuth checking on a LoginVerifier gets, waiting on its notify fd until
// `n` came or 10 s passed.
std::vector<uring::LoginAnswers::Answer> answers(SpillAuth& auth, size_t n) {
  std::vector<uring::LoginAnswers::Answer> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    pollfd p{auth.notify_fd(), POLLIN, 0};
    if (::poll(&p, 1, 100) == 1) {
      uint64_t v = 0;
      EXPECT_EQ(read(auth.notify_fd(), &v, sizeof v), ssize_t(sizeof v));
    }
    std::array<uring::LoginAnswers::Answer, 8> buf;
    const size_t k = auth.poll(buf);
    got.insert(got.end(), buf.begin(), buf.begin() + ptrdiff_t(k));
  }
  return got;
}

std::shared_ptr<LoginVerifier> must_start_verifier() {
  auto v = LoginVerifier::start();
  EXPECT_TRUE(v) << error_of(v);
  return v ? *v : nullptr;
}

TEST(SpillAuth, OnAVerifierCacheMissesAreAnsweredLaterAndThenCached) {
  auto verifier = must_start_verifier();
  ASSERT_TRUE(verifier);
  SpillAuth auth(must_parse(alice_and_bob()), false);
  ASSERT_EQ(error_of(auth.check_on(verifier)), "");
  ASSERT_GE(auth.notify_fd(), 0);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 11), AuthAnswer::kPending);
  EXPECT_EQ(auth.authenticate("alice", "bob-pw", 12), AuthAnswer::kPending);
  EXPECT_EQ(auth.authenticate("dave", "alice-pw", 13), AuthAnswer::kPending);  // the decoy
  EXPECT_EQ(auth.checks_waiting(), 3u);
  // What needs no check is answered at once, as without a verifier.
  EXPECT_EQ(auth.authenticate("alice", std::nullopt, 14), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("alice", std::string(kPasscodeBytesMax + 1, 'x'), 15),
            AuthAnswer::kRefused);
  std::vector<uring::LoginAnswers::Answer> got = answers(auth, 3);
  ASSERT_EQ(got.size(), 3u);
  std::map<uint64_t, bool> by_ticket;
  for (const auto& a : got)
    by_ticket[a.ticket] = a.accepted;
  EXPECT_EQ(by_ticket, (std::map<uint64_t, bool>{{11, true}, {12, false}, {13, false}}));
  EXPECT_EQ(auth.checks_waiting(), 0u);
  EXPECT_EQ(verifier->checks_run(), 3u);
  // The accepted login is in the cache now: answered at once, no check run.
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 16), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.stats().cache_hits, 1u);
  EXPECT_EQ(auth.stats().refused, 4u);
  EXPECT_EQ(verifier->checks_run(), 3u);
}

TEST(SpillAuth, OnAVerifierAnAnswerFromBeforeAReloadIsRefused) {
  auto verifier = must_start_verifier();
  ASSERT_TRUE(verifier);
  auto source = std::make_shared<UsersSource>(must_parse(alice_and_bob()));
  SpillAuth auth(source, false);
  ASSERT_EQ(error_of(auth.check_on(verifier)), "");
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 1), AuthAnswer::kPending);
  // The reload is taken up at the next check, before the answer is read.
  source->set(must_parse("user alice " + hash_of("new-pw") + "\n"));
  EXPECT_EQ(auth.authenticate("bob", "bob-pw", 2), AuthAnswer::kPending);  // bob is gone: decoy
  std::vector<uring::LoginAnswers::Answer> got = answers(auth, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_FALSE(got[0].accepted) << "checked against the users file before the reload";
  EXPECT_FALSE(got[1].accepted);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 3), AuthAnswer::kPending);
  EXPECT_EQ(auth.authenticate("alice", "new-pw", 4), AuthAnswer::kPending);
  got = answers(auth, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].ticket, 3u);
  EXPECT_FALSE(got[0].accepted);
  EXPECT_EQ(got[1].ticket, 4u);
  EXPECT_TRUE(got[1].accepted);
}

// At most LoginInbox::kDepth checks wait for one worker; past that a login is refused as
// busy at once, and a SpillAuth that goes with checks still waiting takes them with it.
TEST(SpillAuth, OnAVerifierChecksPastTheBoundAreBusy) {
  auto verifier = must_start_verifier();
  ASSERT_TRUE(verifier);
  {
    SpillAuth auth(must_parse(alice_and_bob()), false);
    ASSERT_EQ(error_of(auth.check_on(verifier)), "");
    for (size_t i = 0; i < LoginInbox::kDepth; ++i)
      ASSERT_EQ(auth.authenticate("alice", "wrong-" + std::to_string(i), i), AuthAnswer::kPending);
    EXPECT_EQ(auth.authenticate("alice", "alice-pw", 99), AuthAnswer::kBusy);
    EXPECT_EQ(auth.stats().busy, 1u);
    EXPECT_EQ(auth.checks_waiting(), LoginInbox::kDepth);
  }
  EXPECT_EQ(verifier->waiting(), 0u) << "the checks of a SpillAuth that went stayed queued";
  SpillAuth other(must_parse(alice_and_bob()), false);
  ASSERT_EQ(error_of(other.check_on(verifier)), "");
  EXPECT_EQ(other.authenticate("bob", "bob-pw", 7), AuthAnswer::kPending);
  std::vector<uring::LoginAnswers::Answer> got = answers(other, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].accepted);
}

TEST(SpillAuth, AnonymousModeLetsEveryoneSpillAnywhere) {
  SpillAuth auth(std::shared_ptr<const UsersFile>(), true);
  EXPECT_EQ(auth.mode(), SpillAuthMode::kAnonymous);
  EXPECT_EQ(auth.authenticate(std::nullopt, std::nullopt, 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.authenticate("anyone", "anything", 0), AuthAnswer::kAccepted);
  EXPECT_TRUE(auth.authorize("", QueueKey{"/", "orders", false}));
  EXPECT_TRUE(auth.authorize("anyone", QueueKey{"v", "/topic/x", true}));
  EXPECT_EQ(auth.stats().verifications, 0u);
}

TEST(SpillAuth, WithoutUsersFileOrAnonymousEverythingIsRefused) {
  SpillAuth auth(std::shared_ptr<const UsersFile>(), false);
  EXPECT_EQ(auth.mode(), SpillAuthMode::kRefuseAll);
  EXPECT_EQ(auth.authenticate(std::nullopt, std::nullopt, 0), AuthAnswer::kRefused);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 0), AuthAnswer::kRefused);
  EXPECT_FALSE(auth.authorize("alice", QueueKey{"/", "orders", false}));
  EXPECT_EQ(auth.stats().refused, 2u);
  EXPECT_EQ(auth.stats().denied, 1u);
}

TEST(SpillAuth, UsersFileWinsOverAllowAnonymous) {
  SpillAuth auth(must_parse(alice_and_bob()), true);
  EXPECT_EQ(auth.mode(), SpillAuthMode::kUsersFile);
  EXPECT_EQ(auth.authenticate(std::nullopt, std::nullopt, 0), AuthAnswer::kRefused);
}

TEST(UsersEditor, AddAppendsAndKeepsEveryOtherLine) {
  const std::string before =
      "# header comment\n\nuser bob " + hash_of("bob-pw") + "\n# about bob\nallow bob / audit\n";
  UserEntry alice{"alice", hash_of("alice-pw"), {{"/", "orders"}, {"*", "logs.*"}}};
  const std::string after = edited(add_user_to_text(before, "users", alice, false));
  EXPECT_EQ(after, before + "user alice " + hash_of("alice-pw") +
                       "\nallow alice / orders\nallow alice * logs.*\n");
  // An empty file gets a header comment; text without a final newline gets one.
  const std::string fresh = edited(add_user_to_text("", "users", alice, false));
  EXPECT_EQ(fresh.rfind("# ", 0), 0u);
  auto f = must_parse(fresh);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->find("alice")->allows.size(), 2u);
  const std::string no_newline = "# c";
  EXPECT_EQ(edited(add_user_to_text(no_newline, "users", alice, false)).rfind("# c\nuser alice", 0),
            0u);
}

TEST(UsersEditor, AddRefusesADuplicateUnlessReplace) {
  const std::string before = "# top\nuser alice " + hash_of("alice-pw") +
                             "\n# keep me\nallow alice / orders\nuser bob " + hash_of("bob-pw") +
                             "\nallow alice / more\n";
  UserEntry again{"alice", hash_of("new-pw"), {}};
  EXPECT_NE(edit_error(add_user_to_text(before, "users", again, false))
                .find("user \"alice\" already exists in users"),
            std::string::npos);
  // Replace without rules: new hash in place, rules kept.
  const std::string kept = edited(add_user_to_text(before, "users", again, true));
  EXPECT_EQ(kept, "# top\nuser alice " + hash_of("new-pw") +
                      "\n# keep me\nallow alice / orders\nuser bob " + hash_of("bob-pw") +
                      "\nallow alice / more\n");
  // Replace with rules: the old rules go, the new ones follow the user line.
  again.allows = {{"/", "new.*"}};
  const std::string swapped = edited(add_user_to_text(before, "users", again, true));
  EXPECT_EQ(swapped, "# top\nuser alice " + hash_of("new-pw") +
                         "\nallow alice / new.*\n# keep me\nuser bob " + hash_of("bob-pw") + "\n");
  SpillAuth auth(must_parse(swapped), false);
  EXPECT_EQ(auth.authenticate("alice", "new-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.authenticate("alice", "alice-pw", 0), AuthAnswer::kRefused);
}

TEST(UsersEditor, RemoveDropsTheUserAndItsRulesOnly) {
  const std::string before = "# top\nallow alice / early\nuser alice " + hash_of("alice-pw") +
                             "\n# keep me\nallow alice / orders\nuser bob " + hash_of("bob-pw") +
                             "\nallow bob / audit\n";
  EXPECT_EQ(edited(remove_user_from_text(before, "users", "alice")),
            "# top\n# keep me\nuser bob " + hash_of("bob-pw") + "\nallow bob / audit\n");
  EXPECT_EQ(edit_error(remove_user_from_text(before, "users", "carol")),
            "no user \"carol\" in users");
}

TEST(UsersEditor, RefusesBadEntriesAndBrokenFiles) {
  UserEntry bad_name{"a b", hash_of("x"), {}};
  EXPECT_NE(edit_error(add_user_to_text("", "users", bad_name, false)).find("user name"),
            std::string::npos);
  UserEntry bad_hash{"a", "secret", {}};
  EXPECT_NE(edit_error(add_user_to_text("", "users", bad_hash, false)).find("argon2id"),
            std::string::npos);
  UserEntry bad_rule{"a", hash_of("x"), {{"/", "a b"}}};
  EXPECT_NE(edit_error(add_user_to_text("", "users", bad_rule, false)).find("QUEUE"),
            std::string::npos);
  UserEntry ok{"a", hash_of("x"), {}};
  const std::string broken = "user b\n";
  const std::string e = edit_error(add_user_to_text(broken, "users", ok, false));
  EXPECT_EQ(e.rfind("users:1: ", 0), 0u) << e;
  EXPECT_NE(e.find("fix the file"), std::string::npos) << e;
  EXPECT_EQ(edit_error(remove_user_from_text(broken, "users", "b")).rfind("users:1: ", 0), 0u);
}

TEST(UsersEditor, FileIsWrittenWithMode0600AndNoTempLeft) {
  TempDir dir;
  const std::string path = dir.path() + "/users";
  UserEntry alice{"alice", hash_of("alice-pw"), {{"/", "orders"}}};
  ASSERT_EQ(error_of(add_user_to_file(path, alice, false)), "");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  {
    std::ofstream out(path, std::ios::app);
    out << "# added by hand\n";
  }
  UserEntry bob{"bob", hash_of("bob-pw"), {}};
  ASSERT_EQ(error_of(add_user_to_file(path, bob, false)), "");
  EXPECT_NE(error_of(add_user_to_file(path, bob, false)), "");
  ASSERT_EQ(error_of(remove_user_from_file(path, "alice")), "");
  EXPECT_EQ(read_file(path).find("alice"), std::string::npos);
  EXPECT_NE(read_file(path).find("# added by hand\nuser bob "), std::string::npos);
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path()))
    ++entries;
  EXPECT_EQ(entries, 1u);
  EXPECT_NE(error_of(remove_user_from_file(dir.path() + "/missing", "bob")), "");
  UsersFile::LoadResult r = UsersFile::load(path);
  ASSERT_EQ(error_of(r), "");
  EXPECT_NE((*r)->find("bob"), nullptr);
}

// --- sluicectl user, run as a process ---------------------------------------------------------

struct Ran {
  int code = -1;
  std::string out;
};

// Runs a shell command line; stdout only (stderr goes to the test's log).
Ran run(const std::string& command) {
  Ran r;
  std::FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(SluicectlUser, AddListRemove) {
  TempDir dir;
  const std::string ctl = SLUICECTL;
  const std::string users = dir.path() + "/users";
  const std::string pw = dir.path() + "/pw";
  { std::ofstream(pw) << "s3cret\nsecond line ignored\n"; }
  EXPECT_EQ(run(ctl + " user add alice --users-file " + users + " --password-file " + pw +
                " --allow /:orders --allow '*:logs.*'")
                .code,
            0);
  EXPECT_EQ(run("printf 'bob-pw\\n' | " + ctl + " user add bob --users-file " + users).code, 0);
  // Duplicate, empty passcode, bad --allow.
  EXPECT_EQ(run("printf 'x\\n' | " + ctl + " user add bob --users-file " + users).code, 1);
  EXPECT_EQ(run("printf '\\n' | " + ctl + " user add carol --users-file " + users).code, 2);
  EXPECT_EQ(
      run("printf 'x\\n' | " + ctl + " user add carol --users-file " + users + " --allow noqueue")
          .code,
      2);
  Ran list = run(ctl + " user list --users-file " + users);
  EXPECT_EQ(list.code, 0);
  EXPECT_NE(list.out.find("USER"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("alice   /       orders"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("logs.*"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("bob"), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find("argon2"), std::string::npos) << list.out;
  Ran json = run(ctl + " user list --json --users-file " + users);
  EXPECT_EQ(json.code, 0);
  EXPECT_NE(json.out.find("\"name\": \"alice\""), std::string::npos) << json.out;
  EXPECT_EQ(json.out.find("argon2"), std::string::npos) << json.out;

  UsersFile::LoadResult r = UsersFile::load(users);
  ASSERT_EQ(error_of(r), "");
  SpillAuth auth(*r, false);
  EXPECT_EQ(auth.authenticate("alice", "s3cret", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.authenticate("bob", "bob-pw", 0), AuthAnswer::kAccepted);
  EXPECT_EQ(auth.authenticate("bob", "x", 0), AuthAnswer::kRefused);
  EXPECT_TRUE(auth.authorize("alice", QueueKey{"prod", "logs.web", false}));
  EXPECT_FALSE(auth.authorize("bob", QueueKey{"/", "orders", false}));

  EXPECT_EQ(run("printf 'new-pw\\n' | " + ctl + " user add bob --replace --users-file " + users +
                " --allow /:orders")
                .code,
            0);
  EXPECT_EQ(run(ctl + " user remove alice --users-file " + users).code, 0);
  EXPECT_EQ(run(ctl + " user remove alice --users-file " + users).code, 1);
  r = UsersFile::load(users);
  ASSERT_EQ(error_of(r), "");
  SpillAuth after(*r, false);
  EXPECT_EQ(after.authenticate("alice", "s3cret", 0), AuthAnswer::kRefused);
  EXPECT_EQ(after.authenticate("bob", "new-pw", 0), AuthAnswer::kAccepted);
  EXPECT_TRUE(after.authorize("bob", QueueKey{"/", "orders", false}));
  EXPECT_NE(read_file(users).find("# Sluice spill session users"), std::string::npos);
}

}  // namespace
}  // namespace sluice::gateway
