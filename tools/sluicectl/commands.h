// sluicectl's commands: each makes one admin API call and prints the answer as a table, as
// "key: value" lines or as pretty JSON (--json). Errors go to stderr as one "sluicectl: ..."
// line, and each command returns the process's exit code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "control/admin_client.h"

namespace sluice::sluicectl {

// Exit codes; `sluicectl --help` lists them.
inline constexpr int kExitOk = 0;
inline constexpr int kExitDaemonError = 1;  // sluiced answered with an error
inline constexpr int kExitUsage = 2;        // the command line is wrong
inline constexpr int kExitUnreachable = 3;  // sluiced could not be reached or did not answer

struct Options {
  control::AdminEndpoint endpoint;
  bool json = false;
  uint32_t timeout_ms = 5000;
};

struct QueuesQuery {
  std::string vhost;   // empty: every vhost
  std::string source;  // empty: any; else "pinned", "learned" or "placed"
  uint32_t limit = 0;  // 0: as many as the API answers
};

int status(const Options& o);
int nodes(const Options& o);
int node_admin(const Options& o, const std::string& node, const std::string& state);
int queues(const Options& o, const QueuesQuery& query);
int queue_show(const Options& o, const std::string& vhost, const std::string& queue);
int queue_pin(const Options& o, const std::string& vhost, const std::string& queue,
              const std::string& node);
int queue_unpin(const Options& o, const std::string& vhost, const std::string& queue);
int set_setting(const Options& o, const std::string& key, const std::string& value);
// nullopt: every setting.
int get_setting(const Options& o, const std::optional<std::string>& key);
int metrics(const Options& o);
// The spill log: backlog per queue; retry a queue's drain now; drop a queue's backlog.
int spill(const Options& o);
int spill_drain(const Options& o, const std::string& vhost, const std::string& queue);
int spill_purge(const Options& o, const std::string& vhost, const std::string& queue);
// The dataplane's sessions: worker, client, queue, owner, state, bytes, age. limit 0: the API's
// default.
int sessions(const Options& o, uint32_t limit);
int reload(const Options& o);

// Prints "sluicectl: <message>" to stderr as one line (line breaks become spaces, other control
// bytes \xNN); returns code.
int fail(int code, std::string_view message);

}  // namespace sluice::sluicectl
