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

// The first line of `f` (without "\n" or "\r\n"), at most kPasscodeBytesMax bytes; empty text in
// `error` when it worked.
void read_first_line(std::FILE* f, const std::string& what, Passcode* out, std::string* error) {
  int c = 0;
  while ((c = std::fgetc(f)) != EOF && c != '\n') {
    if (out->text.size() == kPasscodeBytesMax) {
      *error = "the passcode in " + what + " is longer than " + std::to_string(kPasscodeBytesMax) +
               " bytes";
      return;
    }
    out->text.push_back(char(c));
  }
  if (std::ferror(f)) {
    *error = "cannot read " + what + ": " + std::strerror(errno);
    return;
  }
  if (!out->text.empty() && out->text.back() == '\r') out->text.pop_back();
}

// From the file, else from stdin (echo off when it is a terminal).
std::string read_passcode(const UserAddOptions& a, Passcode* out) {
  std::string error;
  if (!a.password_file.empty()) {
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(a.password_file.c_str(), "re"),
                                                      &std::fclose);
    if (!f) return "cannot open " + a.password_file + ": " + std::strerror(errno);
    read_first_line(f.get(), a.password_file, out, &error);
  } else {
    termios saved{};
    const bool tty = ::isatty(STDIN_FILENO) == 1 && ::tcgetattr(STDIN_FILENO, &saved) == 0;
    if (tty) {
      std::fprintf(stderr, "passcode for %s: ", a.name.c_str());
      termios quiet = saved;
      quiet.c_lflag &= ~tcflag_t(ECHO);
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
    }
    read_first_line(stdin, "stdin", out, &error);
    if (tty) {
      ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
      std::fprintf(stderr, "\n");
    }
  }
  if (error.empty() && out->text.empty()) {
    return "the passcode is empty (first line of " +
           (a.password_file.empty() ? std::string("stdin") : a.password_file) +
           "); an empty passcode is refused";
  }
  return error;
}

}  // namespace

int user_add(const UserAddOptions& a) {
  UserEntry entry;
  entry.name = a.name;
  if (std::string e = gateway::check_user_name(a.name); !e.empty()) return fail(kExitUsage, e);
  for (const std::string& s : a.allows) {
    const size_t colon = s.find(':');
    if (colon == std::string::npos) {
      return fail(kExitUsage,
                  "--allow " + s + ": expected VHOST:QUEUE (e.g. /:orders or '*:logs.*')");
    }
    AllowRule r{s.substr(0, colon), s.substr(colon + 1)};
    if (std::string e = gateway::check_allow(r.vhost, r.queue); !e.empty()) {
      return fail(kExitUsage, "--allow " + s + ": " + e);
    }
    entry.allows.push_back(std::move(r));
  }
  Passcode passcode;
  if (std::string e = read_passcode(a, &passcode); !e.empty()) return fail(kExitUsage, e);
  std::optional<std::string> hash = gateway::hash_passcode(passcode.text);
  if (!hash) return fail(kExitDaemonError, "cannot hash the passcode: out of memory");
  entry.hash = std::move(*hash);
  if (std::string e = gateway::add_user_to_file(a.users_file, entry, a.replace); !e.empty()) {
    return fail(kExitDaemonError, e);
  }
  return kExitOk;
}

int user_remove(const std::string& users_file, const std::string& name) {
  if (std::string e = gateway::remove_user_from_file(users_file, name); !e.empty()) {
    return fail(kExitDaemonError, e);
  }
  return kExitOk;
}

int user_list(const Options& o, const std::string& users_file) {
  gateway::UsersFile::LoadResult r = gateway::UsersFile::load(users_file);
  if (auto* e = std::get_if<std::string>(&r)) return fail(kExitDaemonError, *e);
  const auto& file = std::get<std::shared_ptr<const gateway::UsersFile>>(r);
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
