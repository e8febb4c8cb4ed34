// sluiced: the gateway daemon. Loads the config, starts control (health, ownership, feeds), the
// spill log and its drainer, the workers and the admin API, and runs until SIGTERM; SIGHUP
// reloads the config (DESIGN 5, 6, 9).
#include <signal.h>
#include <sys/resource.h>
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
#include "dataplane/uring/engine.h"
#include "gateway/engine_admin.h"
#ifdef SLUICE_HAVE_DPDK
#include "gateway/dpdk_engine.h"
#endif
#include "gateway/engine_parts.h"
#include "gateway/login_cache.h"
#include "gateway/spill_auth.h"
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

// Each session holds up to six descriptors (client, owner, two pipes) and each spill segment
// one (two while it is written); raise the soft and, as root, the hard limit so that
// sessions_max and a full spill log fit. Before the spill log's recovery opens its segments,
// and again when spill.max_bytes is raised while running (never lowered).
void raise_fd_limit(uint64_t sessions_max, uint64_t spill_max_bytes, uint64_t segment_bytes) {
  const uint64_t segments = segment_bytes > 0 ? spill_max_bytes / segment_bytes + 2 : 0;
  const rlim_t want = rlim_t(sessions_max) * 6 + rlim_t(segments) + 4096;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= want) return;
  rlimit next{want, std::max(want, r.rlim_max)};
  if (setrlimit(RLIMIT_NOFILE, &next) != 0) {
    next = rlimit{r.rlim_max, r.rlim_max};
    setrlimit(RLIMIT_NOFILE, &next);
    log_event(LogLevel::kWarn, "fd_limit",
              {{"wanted", std::to_string(want)}, {"got", std::to_string(r.rlim_max)}});
  }
}

sluice::uring::EngineOptions engine_options(const GatewayConfig& c) {
  sluice::uring::EngineOptions o;
  o.listen_host = c.listen.host;
  o.listen_port = c.listen.port;
  if (c.engine == EngineKind::kDpdk) {
    // The DPDK engine owns listen's address; this engine serves its spill sessions.
    o.listen_host = c.dpdk.spill_listen->host;
    o.listen_port = c.dpdk.spill_listen->port;
    o.listen_freebind = true;
    o.spill_only = true;
  }
  o.workers = c.workers;
  o.sessions_max = c.sessions_max;
  o.sessions_per_source_max = c.sessions_per_source_max;
  o.prelude_sessions_max = c.prelude_sessions_max;
  o.spill_sessions_max = c.spill_sessions_max;
  o.connect_timeout_ms = c.connect_timeout_ms;
  o.placements_per_source_per_minute = c.placements_per_source_per_minute;
  o.pipe_bytes = c.pipe_bytes;
  o.pipe_bytes_max = c.pipe_bytes_max;
  o.grown_pipes_max = c.grown_pipes_max;
  if (c.park_sessions_above) o.park_sessions_above = *c.park_sessions_above;
  o.sqpoll = c.sqpoll;
  o.splice = c.splice_inline ? sluice::uring::EngineOptions::SpliceMode::kInline
                             : sluice::uring::EngineOptions::SpliceMode::kRing;
  return o;
}

void log_from_engine(sluice::uring::LogLevel l, std::string_view event,
                     std::span<const sluice::uring::LogField> fields) {
  static constexpr LogLevel kLevels[] = {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn,
                                         LogLevel::kError};
  log_event(kLevels[size_t(l)], event, fields);
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

  raise_fd_limit(config.sessions_max, config.spill.max_bytes, config.spill.segment_bytes);
  // Recovery runs here, before anything takes traffic; a log that cannot be used stops the start.
  if (auto e = ensure_dir(config.spill_dir(), "spill.dir")) return fail(kExitStartFailed, *e);
  std::string spill_error;
  std::unique_ptr<sluice::gateway::SpillService> spill =
      sluice::gateway::SpillService::open(config, secrets, control, io, &spill_error);
  if (!spill) return fail(kExitStartFailed, spill_error);

  // The engine: one router (replica), spill producer and credentials checker per worker.
  sluice::control::NodeDirectory directory;
  if (auto e = directory.set(config.nodes)) return fail(kExitStartFailed, *e);
  std::shared_ptr<const sluice::gateway::UsersFile> users;
  if (!config.spill.users_file.empty()) {
    auto loaded_users = sluice::gateway::UsersFile::load(config.spill.users_file);
    if (auto* e = std::get_if<std::string>(&loaded_users)) {
      return fail(kExitBadConfig, "spill.users_file: " + *e);
    }
    users = std::get<std::shared_ptr<const sluice::gateway::UsersFile>>(loaded_users);
  }
  // Every worker's SpillAuth follows this; a reload reads the users file again into it.
  auto users_source = std::make_shared<sluice::gateway::UsersSource>(users);
  const std::string users_path = config.spill.users_file;
  std::vector<std::unique_ptr<sluice::control::ReplicaRouter>> routers;
  std::vector<std::unique_ptr<sluice::gateway::ProducerSink>> sinks;
  std::vector<std::unique_ptr<sluice::gateway::SpillAuth>> auths;
  std::vector<std::unique_ptr<sluice::gateway::LoginCache>> logins;
  std::vector<sluice::uring::WorkerParts> parts;
  for (uint32_t i = 0; i < config.workers; ++i) {
    routers.push_back(std::make_unique<sluice::control::ReplicaRouter>(
        control.attach_worker(), directory, "uring" + std::to_string(i)));
    sinks.push_back(std::make_unique<sluice::gateway::ProducerSink>(spill->log().producer(i)));
    auths.push_back(
        std::make_unique<sluice::gateway::SpillAuth>(users_source, config.spill.allow_anonymous));
    logins.push_back(std::make_unique<sluice::gateway::LoginCache>(config.login_cache_ms));
    parts.push_back(
        {routers.back().get(), sinks.back().get(), auths.back().get(), logins.back().get()});
  }
  std::string engine_error;
  sluice::session::SessionConfig engine_session = config.session;
  if (config.engine == EngineKind::kDpdk) {
    // The spill listener behind the DPDK engine answers the lcore's replay itself (the lcore
    // strips that CONNECTED); spill sessions keep the spill's own authentication.
    engine_session.login_check = sluice::session::LoginCheck::kDeferred;
  }
  std::unique_ptr<sluice::uring::Engine> engine = sluice::uring::Engine::open(
      engine_options(config), engine_session, parts, log_from_engine, &engine_error);
  if (!engine) return fail(kExitStartFailed, "engine: " + engine_error);
  sluice::gateway::EngineAdmin engine_admin(*engine);
  SessionsAdmin* sessions_admin = &engine_admin;
#ifdef SLUICE_HAVE_DPDK
  std::unique_ptr<sluice::gateway::DpdkEngine> dpdk;
  std::unique_ptr<sluice::gateway::DpdkAdmin> dpdk_admin;
  if (config.engine == EngineKind::kDpdk) {
    std::string dpdk_error;
    dpdk =
        sluice::gateway::DpdkEngine::open(config, control.attach_worker(), directory, &dpdk_error);
    if (!dpdk) return fail(kExitStartFailed, dpdk_error);
    dpdk_admin = std::make_unique<sluice::gateway::DpdkAdmin>(engine_admin, *dpdk,
                                                              uint32_t(engine->worker_count()));
    sessions_admin = dpdk_admin.get();
  }
#else
  if (config.engine == EngineKind::kDpdk) {
    return fail(kExitBadConfig, "gateway.engine = \"dpdk\": this sluiced was built without DPDK");
  }
#endif

  // Live settings set at run time or by a reload: limits.* reach the io_uring engine's workers
  // (in DPDK mode, the spill listener's; the lcore's flow limits are dpdk.*, fixed at start),
  // spill.max_bytes and spill.queue_*_max the spill log and drain.rate_per_second the drainer.
  // Control's ranges keep every value within the narrower types.
  const uint32_t connect_timeout_at_start = config.connect_timeout_ms;
  const bool dpdk_mode = config.engine == EngineKind::kDpdk;
  const uint64_t sessions_max_at_start = config.sessions_max;
  const uint64_t segment_bytes = config.spill.segment_bytes;
  control.set_live_hook([&engine, &spill, connect_timeout_at_start, dpdk_mode,
                         sessions_max_at_start, segment_bytes](
                            const Control::LiveSettings& l) -> std::optional<std::string> {
    if (dpdk_mode && l.connect_timeout_ms != connect_timeout_at_start) {
      return "limits.connect_timeout_ms: the DPDK engine's lcore keeps the value it started "
             "with (" +
             std::to_string(connect_timeout_at_start) + "); restart to change it";
    }
    if (auto e = engine->set_limits({uint32_t(l.sessions_max), uint32_t(l.sessions_per_source_max),
                                     uint32_t(l.prelude_sessions_max),
                                     uint32_t(l.connect_timeout_ms)})) {
      return e;
    }
    if (auto e = spill->set_tuning(l.spill_max_bytes, l.spill_queue_messages_max,
                                   l.spill_queue_bytes_max, uint32_t(l.drain_rate_per_second))) {
      return e;
    }
    // Room for the descriptors of a spill log that may now hold more segments.
    raise_fd_limit(sessions_max_at_start, l.spill_max_bytes, segment_bytes);
    return std::nullopt;
  });

  auto reload = [&]() -> std::optional<std::string> {
    sd_notify(0, "RELOADING=1");
    auto next = load(path);
    std::optional<std::string> error;
    if (auto* e = std::get_if<std::string>(&next)) {
      error = *e + " (the running config stays)";
      control.reload_failed(*error);
    } else {
      // The users file the gateway started with is read again (another path needs a restart:
      // control names spill.users_file among the keys that do); one that does not load refuses
      // the whole reload, as a config file that does not load does.
      std::shared_ptr<const sluice::gateway::UsersFile> reread;
      if (!users_path.empty()) {
        auto reloaded = sluice::gateway::UsersFile::load(users_path);
        if (auto* bad = std::get_if<std::string>(&reloaded)) {
          error = "spill.users_file: " + *bad + " (the running config stays)";
          control.reload_failed(*error);
          sd_notify(0, "READY=1");
          return error;
        }
        reread = std::get<std::shared_ptr<const sluice::gateway::UsersFile>>(reloaded);
      }
      auto [c, s] = std::move(std::get<0>(next));
      std::vector<std::string> restart_keys;
      error = control.reload(std::move(c), std::move(s), &restart_keys);
      if (error) {
        control.reload_failed(*error);
      } else {
        if (reread) {
          log_event(LogLevel::kInfo, "users_file_reloaded",
                    {{"path", users_path}, {"users", std::to_string(reread->users().size())}});
          users_source->set(std::move(reread));
        }
        spill->set_nodes(control.config().nodes);
        if (auto bad = directory.set(control.config().nodes)) {
          log_event(LogLevel::kError, "reload_nodes", {{"error", *bad}});
        }
      }
    }
    sd_notify(0, "READY=1");
    return error;
  };
  AdminApi api(control, reload);
  api.set_spill(spill.get());
  api.set_sessions(sessions_admin);
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
  engine->start();
#ifdef SLUICE_HAVE_DPDK
  if (dpdk) dpdk->start();
#endif

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
             {"listen", config.engine == EngineKind::kDpdk
                            ? config.listen.host + ":" + std::to_string(config.listen.port)
                            : config.listen.host + ":" + std::to_string(engine->port())},
             {"engine", config.engine == EngineKind::kDpdk ? "dpdk" : "uring"},
             {"workers", std::to_string(config.workers)}});
  sd_notify(0, "READY=1\nSTATUS=running");
  io.run();
  // Spliced sessions get the grace period; spill sessions answer what is pending; then the log
  // writes what it holds.
#ifdef SLUICE_HAVE_DPDK
  if (dpdk) dpdk->stop();
#endif
  engine->stop(control.config().stop_grace_ms);
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
