// sluicectl user: edits the spill sessions' users file locally (no sluiced needed); format and
// hash parameters in gateway/spill_auth.h.
#pragma once

#include <string>
#include <vector>

#include "gateway/spill_auth.h"
#include "tools/sluicectl/commands.h"

namespace sluice::sluicectl {

// Longest passcode read from --password-file or stdin: the longest a spill login may carry.
using gateway::kPasscodeBytesMax;

struct UserAddOptions {
  std::string name;
  std::string users_file;
  std::string password_file;        // empty: stdin's first line
  std::vector<std::string> allows;  // "VHOST:QUEUE", split at the first ':'
  bool replace = false;
};

int user_add(const UserAddOptions& a);
int user_remove(const std::string& users_file, const std::string& name);
// Names and their allow rules, never hashes; --json: {"users": [{"name", "allow": [...]}]}.
int user_list(const Options& o, const std::string& users_file);

}  // namespace sluice::sluicectl
