// sluicectl: the operators' command line client of sluiced's admin API (status, nodes, queues,
// pins, settings, metrics, reload). A thin client: every command is one API call.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "tools/sluicectl/commands.h"
#include "tools/sluicectl/user_commands.h"

namespace {

using namespace sluice::sluicectl;

constexpr const char* kDefaultSocket = "/run/sluice/admin.sock";
constexpr const char* kSocketEnv = "SLUICE_ADMIN_SOCKET";
constexpr uint32_t kTimeoutMsMax = 3'600'000;

constexpr const char* kFooter =
    "Output is a table or \"key: value\" lines; --json prints the API's JSON (metrics --json:\n"
    "{\"name{labels}\": value} per sample, NaN and infinities as strings).\n"
    "The socket is --socket, else $SLUICE_ADMIN_SOCKET, else /run/sluice/admin.sock.\n"
    "\n"
    "Exit codes:\n"
    "  0  done\n"
    "  1  sluiced answered with an error (unknown node, bad value, queue not pinned, ...),\n"
    "     or the output could not be written\n"
    "  2  usage error (unknown command or option, missing argument)\n"
    "  3  sluiced could not be reached or did not answer in time (is it running? right socket?)";

// "HOST:PORT" or "[V6]:PORT"; empty host or port 0 is an error.
sluice::Result<std::pair<std::string, uint16_t>> parse_host_port(const std::string& s) {
  const std::string expect = "expected HOST:PORT (e.g. 127.0.0.1:8161), not \"" + s + "\"";
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return sluice::failure(expect);
  std::string host = s.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return sluice::failure(expect);
    host = host.substr(1, host.size() - 2);
  }
  const std::string_view port_text = std::string_view(s).substr(colon + 1);
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535) {
    return sluice::failure(expect + ": the port must be 1 to 65535");
  }
  return std::make_pair(std::move(host), uint16_t(port));
}

// The deepest command the user named ("queue" in `sluicectl queue pin`) and its full name.
std::pair<const CLI::App*, std::string> named_command(const CLI::App& app) {
  std::string path = app.get_name();
  const CLI::App* at = &app;
  for (int depth = 0; depth < 8 && !at->get_subcommands().empty(); ++depth) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  return {at, path};
}

// One line for a command line CLI11 refused. CLI11 reports a word that is not a command as "A
// subcommand is required"; say which word and what the commands are instead.
std::string usage_error(const CLI::App& app, const CLI::ParseError& e) {
  auto [at, path] = named_command(app);
  const std::string hint = " (run '" + path + " --help' for usage)";
  const std::vector<std::string> left = app.remaining(true);
  const bool no_command = at->get_require_subcommand_min() > 0 && at->get_subcommands().empty();
  if (dynamic_cast<const CLI::RequiredError*>(&e) == nullptr || !no_command) {
    return e.what() + hint;
  }
  std::string commands;
  for (const CLI::App* c : at->get_subcommands([](const CLI::App*) { return true; }))
    commands += (commands.empty() ? "" : ", ") + c->get_name();
  if (left.empty()) return "'" + path + "' needs a command: " + commands + hint;
  return "unknown command \"" + left.front() + "\" for '" + path + "'; commands are: " + commands +
         hint;
}

// Where sluiced is: --tcp, else --socket, else $SLUICE_ADMIN_SOCKET, else the default path.
sluice::control::AdminEndpoint endpoint(const std::string& tcp, const std::string& socket_path) {
  sluice::control::AdminEndpoint e;
  if (!tcp.empty()) {
    auto [host, port] = *parse_host_port(tcp);  // the --tcp check parsed it
    e.host = host;
    e.port = port;
  } else if (!socket_path.empty()) {
    e.unix_path = socket_path;
  } else if (const char* env = std::getenv(kSocketEnv); env != nullptr && *env != '\0') {
    e.unix_path = env;
  } else {
    e.unix_path = kDefaultSocket;
  }
  return e;
}

// What the command line gave: the global options, each command's arguments, and the command to
// run. The commands' callbacks refer to it, so it stays where it is until the command ran.
struct Invocation {
  Options options;
  std::string socket_path;
  std::string tcp;
  // Each command sets what runs once the whole command line parsed.
  std::function<int()> run;
  std::string node_name;
  QueuesQuery query;
  std::string vhost, queue_name, pin_node;
  std::string key, value;
  std::string spill_vhost = "/";
  bool purge_yes = false;
  uint32_t sessions_limit = 0;
  UserAddOptions user_add_opts;
  std::string user_name, users_file;
};

void add_global_options(CLI::App& app, Invocation& in) {
  CLI::Option* socket_opt = app.add_option(
      "--socket", in.socket_path, "the admin API's Unix socket (sluiced's [admin] socket)");
  app.add_option("--tcp", in.tcp, "use the admin API on loopback TCP instead: HOST:PORT")
      ->excludes(socket_opt)
      ->check(CLI::Validator(
          [](std::string& s) {
            auto r = parse_host_port(s);
            return r ? std::string() : r.error().message;
          },
          "HOST:PORT"));
  app.add_flag("--json", in.options.json, "print the API's JSON (pretty) instead of tables");
  app.add_option("--timeout-ms", in.options.timeout_ms, "time one call may take, connect included")
      ->check(CLI::Range(uint32_t(1), kTimeoutMsMax))
      ->capture_default_str();
}

void add_node_command(CLI::App& app, Invocation& in) {
  CLI::App* node = app.add_subcommand("node", "change a node's admin state");
  node->require_subcommand(1);
  struct StateCommand {
    const char* state;
    const char* what;
  };
  static constexpr StateCommand kStates[] = {
      {"drain", "new sessions go to the next node in the queue's order"},
      {"up", "the node takes sessions again"},
      {"maintenance", "the node counts as down, whatever its health"},
  };
  for (const auto& [state, what] : kStates) {
    CLI::App* sub = node->add_subcommand(state, what);
    sub->add_option("NAME", in.node_name, "node name ([[nodes]] name)")->required();
    sub->callback([&in, s = state] {
      in.run = [&in, s] { return node_admin(in.options, in.node_name, s); };
    });
  }
}

void add_queues_command(CLI::App& app, Invocation& in) {
  CLI::App* queues_cmd =
      app.add_subcommand("queues", "queues in the ownership table and their owner");
  queues_cmd->add_option("--vhost", in.query.vhost, "only this virtual host");
  queues_cmd
      ->add_option("--source", in.query.source, "only queues whose owner comes from this source")
      ->check(CLI::IsMember({"pinned", "learned", "placed"}));
  queues_cmd->add_option("--limit", in.query.limit, "show at most N queues")
      ->check(CLI::Range(uint32_t(1), std::numeric_limits<uint32_t>::max()));
  queues_cmd->callback([&in] { in.run = [&in] { return queues(in.options, in.query); }; });
}

void add_queue_command(CLI::App& app, Invocation& in) {
  CLI::App* queue = app.add_subcommand("queue", "show, pin or unpin one queue");
  queue->require_subcommand(1);
  CLI::App* show = queue->add_subcommand("show", "the queue's owner and each source's node");
  show->add_option("VHOST", in.vhost, "virtual host, e.g. /")->required();
  show->add_option("QUEUE", in.queue_name, "queue name")->required();
  show->callback(
      [&in] { in.run = [&in] { return queue_show(in.options, in.vhost, in.queue_name); }; });
  CLI::App* pin = queue->add_subcommand("pin", "send the queue to NODE whatever placement says");
  pin->add_option("VHOST", in.vhost, "virtual host, e.g. /")->required();
  pin->add_option("QUEUE", in.queue_name, "queue name")->required();
  pin->add_option("NODE", in.pin_node, "node name")->required();
  pin->callback([&in] {
    in.run = [&in] { return queue_pin(in.options, in.vhost, in.queue_name, in.pin_node); };
  });
  CLI::App* unpin = queue->add_subcommand("unpin", "remove the queue's pin");
  unpin->add_option("VHOST", in.vhost, "virtual host, e.g. /")->required();
  unpin->add_option("QUEUE", in.queue_name, "queue name")->required();
  unpin->callback(
      [&in] { in.run = [&in] { return queue_unpin(in.options, in.vhost, in.queue_name); }; });
}

// set and get: the run-time settings.
void add_setting_commands(CLI::App& app, Invocation& in) {
  CLI::App* set = app.add_subcommand("set", "change a run-time setting (see `sluicectl get`)");
  set->add_option("KEY", in.key, "setting, e.g. log_level or health.interval_ms")->required();
  set->add_option("VALUE", in.value, "new value")->required();
  set->callback([&in] { in.run = [&in] { return set_setting(in.options, in.key, in.value); }; });
  CLI::App* get = app.add_subcommand("get", "one run-time setting, or all of them");
  CLI::Option* get_key = get->add_option("KEY", in.key, "setting; every setting when left out");
  get->callback([&in, get_key] {
    in.run = [&in, get_key] {
      return get_setting(in.options, get_key->count() > 0 ? std::optional(in.key) : std::nullopt);
    };
  });
}

void add_spill_command(CLI::App& app, Invocation& in) {
  CLI::App* spill_cmd = app.add_subcommand(
      "spill", "spill log backlog per queue: messages, bytes, age, owner, state");
  spill_cmd->require_subcommand(0, 1);
  CLI::App* drain =
      spill_cmd->add_subcommand("drain", "try to deliver the queue's backlog now (no backoff)");
  drain->add_option("QUEUE", in.queue_name, "queue name")->required();
  drain->add_option("--vhost", in.spill_vhost, "virtual host")->capture_default_str();
  drain->callback(
      [&in] { in.run = [&in] { return spill_drain(in.options, in.spill_vhost, in.queue_name); }; });
  CLI::App* purge = spill_cmd->add_subcommand(
      "purge", "drop the queue's spilled messages for good (needs --yes; logged)");
  purge->add_option("QUEUE", in.queue_name, "queue name")->required();
  purge->add_option("--vhost", in.spill_vhost, "virtual host")->capture_default_str();
  purge->add_flag("--yes", in.purge_yes, "yes, drop them");
  purge->callback([&in] {
    in.run = [&in] {
      if (!in.purge_yes) {
        return fail(kExitUsage, "spill purge drops the queue's messages for good: add --yes");
      }
      return spill_purge(in.options, in.spill_vhost, in.queue_name);
    };
  });
  spill_cmd->callback([&in, spill_cmd] {
    if (spill_cmd->get_subcommands().empty()) in.run = [&in] { return spill(in.options); };
  });
}

void add_sessions_command(CLI::App& app, Invocation& in) {
  CLI::App* sessions_cmd = app.add_subcommand(
      "sessions", "the dataplane's sessions: worker, client, queue, owner, state, bytes, age");
  sessions_cmd->add_option("--limit", in.sessions_limit, "show at most N sessions (default 1000)")
      ->check(CLI::Range(uint32_t(1), std::numeric_limits<uint32_t>::max()));
  sessions_cmd->callback(
      [&in] { in.run = [&in] { return sessions(in.options, in.sessions_limit); }; });
}

// The spill sessions' users file, edited here without sluiced (gateway/README.md "Spill users
// file"); only --json of the global options applies.
void add_user_command(CLI::App& app, Invocation& in) {
  CLI::App* user_cmd = app.add_subcommand(
      "user", "spill session users: add, remove, list (edits the users file; no sluiced needed)");
  user_cmd->require_subcommand(1);
  UserAddOptions& add = in.user_add_opts;
  CLI::App* user_add_cmd = user_cmd->add_subcommand(
      "add", "add a user; passcode from --password-file, else the first line of stdin");
  user_add_cmd->add_option("NAME", add.name, "1 to 255 of A-Z a-z 0-9 . _ @ -")->required();
  user_add_cmd
      ->add_option("--users-file", add.users_file,
                   "the users file ([spill] users_file); created when missing")
      ->required();
  user_add_cmd->add_option("--password-file", add.password_file,
                           "file whose first line is the passcode");
  user_add_cmd
      ->add_option("--allow", add.allows,
                   "VHOST:QUEUE the user may spill to; VHOST or QUEUE '*' for any, QUEUE 'x*' a "
                   "prefix; repeat for more")
      ->allow_extra_args(false);
  user_add_cmd->add_flag("--replace", add.replace,
                         "change an existing user: new passcode, and new rules given --allow");
  user_add_cmd->callback([&in] { in.run = [&in] { return user_add(in.user_add_opts); }; });
  CLI::App* user_remove_cmd =
      user_cmd->add_subcommand("remove", "remove a user and its allow rules");
  user_remove_cmd->add_option("NAME", in.user_name, "user name")->required();
  user_remove_cmd->add_option("--users-file", in.users_file, "the users file")->required();
  user_remove_cmd->callback(
      [&in] { in.run = [&in] { return user_remove(in.users_file, in.user_name); }; });
  CLI::App* user_list_cmd =
      user_cmd->add_subcommand("list", "users and their allow rules (never the hashes)");
  user_list_cmd->add_option("--users-file", in.users_file, "the users file")->required();
  user_list_cmd->callback(
      [&in] { in.run = [&in] { return user_list(in.options, in.users_file); }; });
}

// Every command, in the order --help lists them.
void add_commands(CLI::App& app, Invocation& in) {
  app.add_subcommand("status", "gateway summary: nodes up, queues by source, feed, log level")
      ->callback([&in] { in.run = [&in] { return status(in.options); }; });
  app.add_subcommand("nodes", "broker nodes: address, weight, admin and health state, probes")
      ->callback([&in] { in.run = [&in] { return nodes(in.options); }; });
  add_node_command(app, in);
  add_queues_command(app, in);
  add_queue_command(app, in);
  add_setting_commands(app, in);
  add_spill_command(app, in);
  add_sessions_command(app, in);
  add_user_command(app, in);
  app.add_subcommand("metrics", "Prometheus metrics, as sluiced exposes them on GET /metrics")
      ->callback([&in] { in.run = [&in] { return metrics(in.options); }; });
  app.add_subcommand("reload", "re-read sluiced's config file, as SIGHUP does")->callback([&in] {
    in.run = [&in] { return reload(in.options); };
  });
}

int run_command_line(int argc, char** argv) {
  CLI::App app{"sluicectl: the command line client of sluiced's admin API", "sluicectl"};
  app.footer(kFooter);
  app.require_subcommand(1);
  // Global options may also follow the command: `sluicectl nodes --json`.
  app.fallthrough();

  Invocation in;
  add_global_options(app, in);
  add_commands(app, in);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help prints and succeeds
    return fail(kExitUsage, usage_error(app, e));
  }
  if (!in.run) return fail(kExitUsage, "no command given (run 'sluicectl --help' for usage)");

  in.options.endpoint = endpoint(in.tcp, in.socket_path);
  const int code = in.run();
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    return fail(kExitDaemonError, std::string("cannot write the output: ") + std::strerror(errno));
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // Exceptions are not expected past parsing (answers are read without throwing); should one
  // come, it is still one line and a failure, not an abort.
  try {
    return run_command_line(argc, argv);
  } catch (const std::exception& e) {
    return fail(kExitDaemonError, std::string("unexpected error: ") + e.what());
  }
}
