// sluiced: the gateway daemon. Loads the config, starts control (health, ownership, feeds), the
// spill log and its drainer, the workers and the admin API, and runs until SIGTERM; SIGHUP
// reloads the config (DESIGN 5, 6, 9).
#include <signal.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "control/admin_api.h"
#include "control/admin_server.h"
#include "control/config.h"
#include "control/control.h"
#include "control/log.h"
#include "control/replica_worker.h"
#include "gateway/spill_service.h"

namespace {

using namespace sluice::control;

// Exit codes: 0 clean stop, 1 could not start, 2 bad config or command line.
constexpr int kExitStartFailed = 1;
constexpr int kExitBadConfig = 2;

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "sluiced: %s\n", message.c_str());
  return code;
}

// Loads and checks a config with its passcode files; error text names file, line and key.
std::variant<std::pair<GatewayConfig, Secrets>, std::string> load(const std::string& path) {
  ConfigResult r = load_config(path);
  if (auto* e = std::get_if<ConfigError>(&r)) return e->to_string();
  GatewayConfig c = std::move(std::get<GatewayConfig>(r));
  auto s = read_secrets(c);
  if (auto* e = std::get_if<std::string>(&s)) return path + ": " + *e;
  return std::make_pair(std::move(c), std::move(std::get<Secrets>(s)));
}

// Creates a directory the daemon needs (and its parents) when missing.
std::optional<std::string> ensure_dir(const std::string& dir, const char* key) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return std::string(key) + ": cannot create directory " + dir + ": " + ec.message();
  return std::nullopt;
}

int check_config(const std::string& path) {
  auto loaded = load(path);
  if (auto* e = std::get_if<std::string>(&loaded)) return fail(kExitBadConfig, *e);
  const GatewayConfig& c = std::get<0>(loaded).first;
  // The state file too: a damaged one would stop the start.
  OwnershipTable table(c.nodes.size());
  auto state = load_ownership(table, c.nodes, c.state_dir + "/ownership");
  if (auto* e = std::get_if<StateFileError>(&state)) {
    return fail(kExitBadConfig, "state file " + e->file + ": " + e->message);
  }
  std::printf("sluiced: %s is valid: %zu nodes, %zu pins, %zu recorded queues\n", path.c_str(),
              c.nodes.size(), c.pins.size(), table.size());
  return 0;
}

int run(const std::string& path) {
  auto loaded = load(path);
  if (auto* e = std::get_if<std::string>(&loaded)) return fail(kExitBadConfig, *e);
  auto [config, secrets] = std::move(std::get<0>(loaded));
  if (auto e = ensure_dir(config.state_dir, "gateway.state_dir")) {
    return fail(kExitStartFailed, *e);
  }
  const std::string socket_dir = std::filesystem::path(config.admin_socket).parent_path();
  if (!socket_dir.empty()) {
    if (auto e = ensure_dir(socket_dir, "admin.socket")) return fail(kExitStartFailed, *e);
  }

  boost::asio::io_context io(1);
  Control control(io, config, secrets);
  if (auto e = control.load_state()) return fail(kExitStartFailed, *e);

  // Recovery runs here, before anything takes traffic; a log that cannot be used stops the start.
  if (auto e = ensure_dir(config.spill_dir(), "spill.dir")) return fail(kExitStartFailed, *e);
  std::string spill_error;
  std::unique_ptr<sluice::gateway::SpillService> spill =
      sluice::gateway::SpillService::open(config, secrets, control, io, &spill_error);
  if (!spill) return fail(kExitStartFailed, spill_error);

  std::vector<std::unique_ptr<ReplicaWorker>> workers;
  for (uint32_t i = 0; i < config.workers; ++i)
    workers.push_back(std::make_unique<ReplicaWorker>(control.attach_worker()));

  auto reload = [&]() -> std::optional<std::string> {
    sd_notify(0, "RELOADING=1");
    auto next = load(path);
    std::optional<std::string> error;
    if (auto* e = std::get_if<std::string>(&next)) {
      error = *e + " (the running config stays)";
      control.reload_failed(*error);
    } else {
      auto [c, s] = std::move(std::get<0>(next));
      std::vector<std::string> restart_keys;
      error = control.reload(std::move(c), std::move(s), &restart_keys);
      if (error) {
        control.reload_failed(*error);
      } else {
        spill->set_nodes(control.config().nodes);
      }
    }
    sd_notify(0, "READY=1");
    return error;
  };
  AdminApi api(control, reload);
  api.set_spill(spill.get());
  AdminServer admin(io, [&api](const AdminRequest& r) { return api.handle(r); });
  if (auto e = admin.listen_unix(config.admin_socket)) {
    return fail(kExitStartFailed, "admin.socket: " + *e);
  }
  if (config.admin_tcp) {
    if (auto e = admin.listen_tcp(config.admin_tcp->host, config.admin_tcp->port)) {
      return fail(kExitStartFailed, "admin.tcp: " + *e);
    }
  }
  control.start();
  spill->start();

  boost::asio::signal_set signals(io, SIGTERM, SIGINT, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int signo) {
        if (ec) return;
        if (signo == SIGHUP) {
          log_event(LogLevel::kInfo, "signal", {{"signal", "SIGHUP"}, {"action", "reload"}});
          (void)reload();
          signals.async_wait(on_signal);
          return;
        }
        log_event(LogLevel::kInfo, "signal",
                  {{"signal", signo == SIGTERM ? "SIGTERM" : "SIGINT"}, {"action", "stop"}});
        sd_notify(0, "STOPPING=1");
        admin.close();
        control.stop();
        io.stop();
      };
  signals.async_wait(on_signal);

  std::string where = config.admin_socket;
  if (config.admin_tcp) {
    where += " and " + config.admin_tcp->host + ":" + std::to_string(admin.tcp_port());
  }
  log_event(LogLevel::kInfo, "sluiced_started",
            {{"version", SLUICE_VERSION},
             {"config", path},
             {"admin", where},
             {"workers", std::to_string(config.workers)}});
  sd_notify(0, "READY=1\nSTATUS=running");
  io.run();
  for (auto& w : workers)
    w->stop();
  spill->stop();
  log_event(LogLevel::kInfo, "sluiced_stopped", {});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluiced: the Sluice STOMP gateway daemon"};
  std::string config_path = "/etc/sluice/sluice.toml";
  bool check = false;
  bool version = false;
  app.add_option("--config,-c", config_path, "configuration file (TOML)")->capture_default_str();
  app.add_flag("--check-config", check, "check the configuration and the state file, then exit");
  app.add_flag("--version", version, "print the version and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : kExitBadConfig;
  }
  if (version) {
    std::printf("sluiced %s\n", SLUICE_VERSION);
    return 0;
  }
  // A client that goes away mid-answer must not kill the daemon.
  signal(SIGPIPE, SIG_IGN);
  if (check) return check_config(config_path);
  return run(config_path);
}
