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
#include <variant>
#include <vector>

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
std::variant<std::pair<std::string, uint16_t>, std::string> parse_host_port(const std::string& s) {
  const std::string expect = "expected HOST:PORT (e.g. 127.0.0.1:8161), not \"" + s + "\"";
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return expect;
  std::string host = s.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return expect;
    host = host.substr(1, host.size() - 2);
  }
  const std::string_view port_text = std::string_view(s).substr(colon + 1);
  unsigned port = 0;
  auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || p != port_text.data() + port_text.size() || port == 0 || port > 65535) {
    return expect + ": the port must be 1 to 65535";
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
    auto [host, port] = std::get<0>(parse_host_port(tcp));  // the --tcp check parsed it
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

int run_command_line(int argc, char** argv) {
  CLI::App app{"sluicectl: the command line client of sluiced's admin API", "sluicectl"};
  app.footer(kFooter);
  app.require_subcommand(1);
  // Global options may also follow the command: `sluicectl nodes --json`.
  app.fallthrough();

  Options options;
  std::string socket_path;
  std::string tcp;
  CLI::Option* socket_opt = app.add_option(
      "--socket", socket_path, "the admin API's Unix socket (sluiced's [admin] socket)");
  app.add_option("--tcp", tcp, "use the admin API on loopback TCP instead: HOST:PORT")
      ->excludes(socket_opt)
      ->check(CLI::Validator(
          [](std::string& s) {
            auto r = parse_host_port(s);
            auto* e = std::get_if<std::string>(&r);
            return e == nullptr ? std::string() : *e;
          },
          "HOST:PORT"));
  app.add_flag("--json", options.json, "print the API's JSON (pretty) instead of tables");
  app.add_option("--timeout-ms", options.timeout_ms, "time one call may take, connect included")
      ->check(CLI::Range(uint32_t(1), kTimeoutMsMax))
      ->capture_default_str();

  // Each command sets what runs once the whole command line parsed.
  std::function<int()> run;

  app.add_subcommand("status", "gateway summary: nodes up, queues by source, feed, log level")
      ->callback([&] { run = [&] { return status(options); }; });
  app.add_subcommand("nodes", "broker nodes: address, weight, admin and health state, probes")
      ->callback([&] { run = [&] { return nodes(options); }; });

  CLI::App* node = app.add_subcommand("node", "change a node's admin state");
  node->require_subcommand(1);
  std::string node_name;
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
    sub->add_option("NAME", node_name, "node name ([[nodes]] name)")->required();
    sub->callback([&, s = state] { run = [&, s] { return node_admin(options, node_name, s); }; });
  }

  QueuesQuery query;
  CLI::App* queues_cmd =
      app.add_subcommand("queues", "queues in the ownership table and their owner");
  queues_cmd->add_option("--vhost", query.vhost, "only this virtual host");
  queues_cmd->add_option("--source", query.source, "only queues whose owner comes from this source")
      ->check(CLI::IsMember({"pinned", "learned", "placed"}));
  queues_cmd->add_option("--limit", query.limit, "show at most N queues")
      ->check(CLI::Range(uint32_t(1), std::numeric_limits<uint32_t>::max()));
  queues_cmd->callback([&] { run = [&] { return queues(options, query); }; });

  CLI::App* queue = app.add_subcommand("queue", "show, pin or unpin one queue");
  queue->require_subcommand(1);
  std::string vhost, queue_name, pin_node;
  CLI::App* show = queue->add_subcommand("show", "the queue's owner and each source's node");
  show->add_option("VHOST", vhost, "virtual host, e.g. /")->required();
  show->add_option("QUEUE", queue_name, "queue name")->required();
  show->callback([&] { run = [&] { return queue_show(options, vhost, queue_name); }; });
  CLI::App* pin = queue->add_subcommand("pin", "send the queue to NODE whatever placement says");
  pin->add_option("VHOST", vhost, "virtual host, e.g. /")->required();
  pin->add_option("QUEUE", queue_name, "queue name")->required();
  pin->add_option("NODE", pin_node, "node name")->required();
  pin->callback([&] { run = [&] { return queue_pin(options, vhost, queue_name, pin_node); }; });
  CLI::App* unpin = queue->add_subcommand("unpin", "remove the queue's pin");
  unpin->add_option("VHOST", vhost, "virtual host, e.g. /")->required();
  unpin->add_option("QUEUE", queue_name, "queue name")->required();
  unpin->callback([&] { run = [&] { return queue_unpin(options, vhost, queue_name); }; });

  std::string key, value;
  CLI::App* set = app.add_subcommand("set", "change a run-time setting (see `sluicectl get`)");
  set->add_option("KEY", key, "setting, e.g. log_level or health.interval_ms")->required();
  set->add_option("VALUE", value, "new value")->required();
  set->callback([&] { run = [&] { return set_setting(options, key, value); }; });
  CLI::App* get = app.add_subcommand("get", "one run-time setting, or all of them");
  CLI::Option* get_key = get->add_option("KEY", key, "setting; every setting when left out");
  get->callback([&] {
    run = [&, get_key] {
      return get_setting(options, get_key->count() > 0 ? std::optional(key) : std::nullopt);
    };
  });

  CLI::App* spill_cmd = app.add_subcommand(
      "spill", "spill log backlog per queue: messages, bytes, age, owner, state");
  spill_cmd->require_subcommand(0, 1);
  std::string spill_vhost = "/";
  bool purge_yes = false;
  CLI::App* drain =
      spill_cmd->add_subcommand("drain", "try to deliver the queue's backlog now (no backoff)");
  drain->add_option("QUEUE", queue_name, "queue name")->required();
  drain->add_option("--vhost", spill_vhost, "virtual host")->capture_default_str();
  drain->callback([&] { run = [&] { return spill_drain(options, spill_vhost, queue_name); }; });
  CLI::App* purge = spill_cmd->add_subcommand(
      "purge", "drop the queue's spilled messages for good (needs --yes; logged)");
  purge->add_option("QUEUE", queue_name, "queue name")->required();
  purge->add_option("--vhost", spill_vhost, "virtual host")->capture_default_str();
  purge->add_flag("--yes", purge_yes, "yes, drop them");
  purge->callback([&] {
    run = [&] {
      if (!purge_yes) {
        return fail(kExitUsage, "spill purge drops the queue's messages for good: add --yes");
      }
      return spill_purge(options, spill_vhost, queue_name);
    };
  });
  spill_cmd->callback([&] {
    if (spill_cmd->get_subcommands().empty()) run = [&] { return spill(options); };
  });

  uint32_t sessions_limit = 0;
  CLI::App* sessions_cmd = app.add_subcommand(
      "sessions", "the dataplane's sessions: worker, client, queue, owner, state, bytes, age");
  sessions_cmd->add_option("--limit", sessions_limit, "show at most N sessions (default 1000)")
      ->check(CLI::Range(uint32_t(1), std::numeric_limits<uint32_t>::max()));
  sessions_cmd->callback([&] { run = [&] { return sessions(options, sessions_limit); }; });

  // The spill sessions' users file, edited here without sluiced (gateway/README.md "Spill users
  // file"); only --json of the global options applies.
  CLI::App* user_cmd = app.add_subcommand(
      "user", "spill session users: add, remove, list (edits the users file; no sluiced needed)");
  user_cmd->require_subcommand(1);
  UserAddOptions user_add_opts;
  std::string user_name, users_file;
  CLI::App* user_add_cmd = user_cmd->add_subcommand(
      "add", "add a user; passcode from --password-file, else the first line of stdin");
  user_add_cmd->add_option("NAME", user_add_opts.name, "1 to 255 of A-Z a-z 0-9 . _ @ -")
      ->required();
  user_add_cmd
      ->add_option("--users-file", user_add_opts.users_file,
                   "the users file ([spill] users_file); created when missing")
      ->required();
  user_add_cmd->add_option("--password-file", user_add_opts.password_file,
                           "file whose first line is the passcode");
  user_add_cmd
      ->add_option("--allow", user_add_opts.allows,
                   "VHOST:QUEUE the user may spill to; VHOST or QUEUE '*' for any, QUEUE 'x*' a "
                   "prefix; repeat for more")
      ->allow_extra_args(false);
  user_add_cmd->add_flag("--replace", user_add_opts.replace,
                         "change an existing user: new passcode, and new rules given --allow");
  user_add_cmd->callback([&] { run = [&] { return user_add(user_add_opts); }; });
  CLI::App* user_remove_cmd =
      user_cmd->add_subcommand("remove", "remove a user and its allow rules");
  user_remove_cmd->add_option("NAME", user_name, "user name")->required();
  user_remove_cmd->add_option("--users-file", users_file, "the users file")->required();
  user_remove_cmd->callback([&] { run = [&] { return user_remove(users_file, user_name); }; });
  CLI::App* user_list_cmd =
      user_cmd->add_subcommand("list", "users and their allow rules (never the hashes)");
  user_list_cmd->add_option("--users-file", users_file, "the users file")->required();
  user_list_cmd->callback([&] { run = [&] { return user_list(options, users_file); }; });

  app.add_subcommand("metrics", "Prometheus metrics, as sluiced exposes them on GET /metrics")
      ->callback([&] { run = [&] { return metrics(options); }; });
  app.add_subcommand("reload", "re-read sluiced's config file, as SIGHUP does")->callback([&] {
    run = [&] { return reload(options); };
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help prints and succeeds
    return fail(kExitUsage, usage_error(app, e));
  }
  if (!run) return fail(kExitUsage, "no command given (run 'sluicectl --help' for usage)");

  options.endpoint = endpoint(tcp, socket_path);
  const int code = run();
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
