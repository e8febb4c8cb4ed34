// sluicectl user add/remove/list: the spill users file, edited through gateway/spill_auth.h.
#include "tools/sluicectl/user_commands.h"

#include <sodium.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <variant>

#include "gateway/spill_auth.h"
#include "tools/sluicectl/table.h"

namespace sluice::sluicectl {
namespace {

using gateway::AllowRule;
using gateway::UserEntry;

// Clears a passcode from memory when it goes out of scope.
struct Passcode {
  std::string text;
  ~Passcode() { sodium_memzero(text.data(), text.size()); }
};

// The first line of `f` (without "\n" or "\r\n"), at most kPasscodeBytesMax bytes, into *out.
Result<> read_first_line(std::FILE* f, const std::string& what, Passcode* out) {
  int c = 0;
  while ((c = std::fgetc(f)) != EOF && c != '\n') {
    if (out->text.size() == kPasscodeBytesMax) {
      return failure("the passcode in " + what + " is longer than " +
                     std::to_string(kPasscodeBytesMax) + " bytes");
    }
    out->text.push_back(char(c));
  }
  if (std::ferror(f)) return failure("cannot read " + what + ": " + std::strerror(errno));
  if (!out->text.empty() && out->text.back() == '\r') out->text.pop_back();
  return {};
}

// From the file, else from stdin (echo off when it is a terminal).
Result<> read_passcode(const UserAddOptions& a, Passcode* out) {
  Result<> read;
  if (!a.password_file.empty()) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(a.password_file.c_str(), "re"),
                                                      &std::fclose);
    if (!f) return failure("cannot open " + a.password_file + ": " + std::strerror(errno));
    read = read_first_line(f.get(), a.password_file, out);
  } else {
    termios saved{};
    const bool tty = ::isatty(STDIN_FILENO) == 1 && ::tcgetattr(STDIN_FILENO, &saved) == 0;
    if (tty) {
      std::fprintf(stderr, "passcode for %s: ", a.name.c_str());
      termios quiet = saved;
      quiet.c_lflag &= ~tcflag_t(ECHO);
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
    }
    read = read_first_line(stdin, "stdin", out);
    if (tty) {
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
      std::fprintf(stderr, "\n");
    }
  }
  if (read && out->text.empty()) {
    return failure("the passcode is empty (first line of " +
                   (a.password_file.empty() ? std::string("stdin") : a.password_file) +
                   "); an empty passcode is refused");
  }
  return read;
}

}  // namespace

int user_add(const UserAddOptions& a) {
  UserEntry entry;
  entry.name = a.name;
  if (Result<> r = gateway::check_user_name(a.name); !r) {
    return fail(kExitUsage, r.error().message);
  }
  for (const std::string& s : a.allows) {
    const size_t colon = s.find(':');
    if (colon == std::string::npos) {
      return fail(kExitUsage,
                  "--allow " + s + ": expected VHOST:QUEUE (e.g. /:orders or '*:logs.*')");
    }
    AllowRule r{s.substr(0, colon), s.substr(colon + 1)};
    if (Result<> checked = gateway::check_allow(r.vhost, r.queue); !checked) {
      return fail(kExitUsage, "--allow " + s + ": " + checked.error().message);
    }
    entry.allows.push_back(std::move(r));
  }
  Passcode passcode;
  if (Result<> r = read_passcode(a, &passcode); !r) return fail(kExitUsage, r.error().message);
  Result<std::string> hash = gateway::hash_passcode(passcode.text);
  if (!hash) return fail(kExitDaemonError, hash.error().message);
  entry.hash = std::move(*hash);
  if (Result<> r = gateway::add_user_to_file(a.users_file, entry, a.replace); !r) {
    return fail(kExitDaemonError, r.error().message);
  }
  return kExitOk;
}

int user_remove(const std::string& users_file, const std::string& name) {
  if (Result<> r = gateway::remove_user_from_file(users_file, name); !r) {
    return fail(kExitDaemonError, r.error().message);
  }
  return kExitOk;
}

int user_list(const Options& o, const std::string& users_file) {
  gateway::UsersFile::LoadResult r = gateway::UsersFile::load(users_file);
  if (!r) return fail(kExitDaemonError, r.error().message);
  const auto& file = *r;
  if (o.json) {
    nlohmann::ordered_json users = nlohmann::ordered_json::array();
    for (const UserEntry& u : file->users()) {
      nlohmann::ordered_json allow = nlohmann::ordered_json::array();
      for (const AllowRule& a : u.allows)
        allow.push_back({{"vhost", a.vhost}, {"queue", a.queue}});
      users.push_back({{"name", u.name}, {"allow", std::move(allow)}});
    }
    const std::string text = nlohmann::ordered_json{{"users", std::move(users)}}.dump(2) + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitOk;
  }
  // One row per rule; a user without rules gets one row of "-" (it may spill to no queue).
  Table t({"USER", "VHOST", "QUEUE"});
  for (const UserEntry& u : file->users()) {
    if (u.allows.empty()) t.add({printable(u.name)});
    for (const AllowRule& a : u.allows)
      t.add({printable(u.name), printable(a.vhost), printable(a.queue)});
  }
  const std::string text = t.render();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return kExitOk;
}

}  // namespace sluice::sluicectl
