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
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "control/admin_api.h"
#include "control/admin_server.h"
#include "control/config.h"
#include "control/control.h"
#include "control/log.h"
#include "control/router.h"
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
using sluice::failure;
using sluice::Result;

// Exit codes: 0 clean stop, 1 could not start, 2 bad config or command line.
constexpr int kExitStartFailed = 1;
constexpr int kExitBadConfig = 2;

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "sluiced: %s\n", message.c_str());
  return code;
}

// Loads and checks a config with its passcode files; error text names file, line and key.
Result<std::pair<GatewayConfig, Secrets>> load(const std::string& path) {
  Result<GatewayConfig> c = load_config(path);
  if (!c) return failure(c.error().to_string());
  Result<Secrets> s = read_secrets(*c);
  if (!s) return failure(path + ": " + s.error().message);
  return std::make_pair(std::move(*c), std::move(*s));
}

// Creates a directory the daemon needs (and its parents) when missing.
Result<> ensure_dir(const std::string& dir, const char* key) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return failure(std::string(key) + ": cannot create directory " + dir + ": " + ec.message());
  }
  return {};
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
  if (!loaded) return fail(kExitBadConfig, loaded.error().message);
  const GatewayConfig& c = loaded->first;
  // The state file too: a damaged one would stop the start.
  OwnershipTable table(c.nodes.size());
  auto state = load_ownership(table, c.nodes, c.state_dir + "/ownership");
  if (!state) {
    return fail(kExitBadConfig, "state file " + state.error().file + ": " + state.error().message);
  }
  std::printf("sluiced: %s is valid: %zu nodes, %zu pins, %zu recorded queues\n", path.c_str(),
              c.nodes.size(), c.pins.size(), table.size());
  return 0;
}

// Why the start stopped: the exit code and the message fail() prints.
struct StartError {
  int code;
  std::string message;
};

// Creates the state directory and the admin socket's directory.
Result<> ensure_dirs(const GatewayConfig& config) {
  if (Result<> r = ensure_dir(config.state_dir, "gateway.state_dir"); !r) return r;
  const std::string socket_dir = std::filesystem::path(config.admin_socket).parent_path();
  if (socket_dir.empty()) return {};
  return ensure_dir(socket_dir, "admin.socket");
}

// What sluiced runs, made by run()'s steps in the order of the members below. Members are
// destroyed in the reverse order, on a failed start as on a clean stop: the signal set and the
// admin server first, then the engines, their workers' parts, the spill log, control and the
// io_context.
class Daemon {
 public:
  Daemon(const std::string& path, GatewayConfig config, Secrets secrets)
      : path_(path), config_(std::move(config)), secrets_(std::move(secrets)) {}

  // Control with its state file, then the spill log (its recovery too).
  std::optional<StartError> open_control();
  // The node directory, the users file and one part of each kind per io_uring worker.
  std::optional<StartError> open_workers();
  // The io_uring engine and, in DPDK mode, the DPDK engine in front of it.
  std::optional<StartError> open_engines();
  void set_live_hook();
  std::optional<StartError> open_admin();
  void start();
  // Serves until SIGTERM or SIGINT; SIGHUP reloads.
  void run_until_signal();
  void stop();

 private:
  Result<> apply_live(const Control::LiveSettings& l);
  Result<> reload();
  // reload's step once the config loaded: the users file read again, then control's reload.
  Result<> reload_loaded(GatewayConfig next, Secrets secrets);
  void wait_for_signal();
  void on_signal(const boost::system::error_code& ec, int signo);
  void log_started();

  const std::string& path_;
  // The config sluiced started with; control holds the running one.
  const GatewayConfig config_;
  const Secrets secrets_;
  boost::asio::io_context io_{1};
  std::optional<Control> control_;
  std::unique_ptr<sluice::gateway::SpillService> spill_;
  sluice::control::NodeDirectory directory_;
  // Every worker's SpillAuth follows this; a reload reads the users file again into it.
  std::shared_ptr<sluice::gateway::UsersSource> users_source_;
  std::vector<std::unique_ptr<sluice::control::ReplicaRouter>> routers_;
  std::vector<std::unique_ptr<sluice::gateway::ProducerSink>> sinks_;
  std::vector<std::unique_ptr<sluice::gateway::SpillAuth>> auths_;
  std::shared_ptr<sluice::gateway::LoginVerifier> verifier_;  // checks the spill logins
  std::vector<std::unique_ptr<sluice::gateway::LoginCache>> logins_;
  std::vector<sluice::uring::WorkerParts> parts_;
  // The io_uring engine's session settings: its workers keep a reference to them.
  sluice::session::SessionConfig engine_session_;
  std::unique_ptr<sluice::uring::Engine> engine_;
  std::optional<sluice::gateway::EngineAdmin> engine_admin_;
  SessionsAdmin* sessions_admin_ = nullptr;
#ifdef SLUICE_HAVE_DPDK
  std::unique_ptr<sluice::gateway::DpdkEngine> dpdk_;
  std::unique_ptr<sluice::gateway::DpdkAdmin> dpdk_admin_;
#endif
  std::optional<AdminApi> api_;
  std::optional<AdminServer> admin_;
  // Lives until run() returns: while the engines stop, another SIGTERM is caught, not fatal.
  std::optional<boost::asio::signal_set> signals_;
};

std::optional<StartError> Daemon::open_control() {
  control_.emplace(io_, config_, secrets_);
  if (Result<> r = control_->load_state(); !r) {
    return StartError{kExitStartFailed, r.error().message};
  }

  raise_fd_limit(config_.sessions_max, config_.spill.max_bytes, config_.spill.segment_bytes);
  // Recovery runs here, before anything takes traffic; a log that cannot be used stops the start.
  if (Result<> r = ensure_dir(config_.spill_dir(), "spill.dir"); !r) {
    return StartError{kExitStartFailed, r.error().message};
  }
  auto spill = sluice::gateway::SpillService::open(config_, secrets_, *control_, io_);
  if (!spill) return StartError{kExitStartFailed, spill.error().message};
  spill_ = std::move(*spill);
  return std::nullopt;
}

std::optional<StartError> Daemon::open_workers() {
  if (Result<> r = directory_.set(config_.nodes); !r) {
    return StartError{kExitStartFailed, r.error().message};
  }
  std::shared_ptr<const sluice::gateway::UsersFile> users;
  if (!config_.spill.users_file.empty()) {
    auto loaded_users = sluice::gateway::UsersFile::load(config_.spill.users_file);
    if (!loaded_users) {
      return StartError{kExitBadConfig, "spill.users_file: " + loaded_users.error().message};
    }
    users = std::move(*loaded_users);
  }
  users_source_ = std::make_shared<sluice::gateway::UsersSource>(users);
  // One thread checks the spill logins of every worker, so that none stalls a worker.
  auto verifier = sluice::gateway::LoginVerifier::start();
  if (!verifier) return StartError{kExitStartFailed, verifier.error().message};
  verifier_ = *verifier;
  for (uint32_t i = 0; i < config_.workers; ++i) {
    routers_.push_back(std::make_unique<sluice::control::ReplicaRouter>(
        control_->attach_worker(), directory_, "uring" + std::to_string(i)));
    sinks_.push_back(std::make_unique<sluice::gateway::ProducerSink>(spill_->log().producer(i)));
    auths_.push_back(
        std::make_unique<sluice::gateway::SpillAuth>(users_source_, config_.spill.allow_anonymous));
    if (Result<> r = auths_.back()->check_on(*verifier); !r) {
      return StartError{kExitStartFailed, r.error().message};
    }
    logins_.push_back(std::make_unique<sluice::gateway::LoginCache>(config_.login_cache_ms));
    parts_.push_back({routers_.back().get(), sinks_.back().get(), auths_.back().get(),
                      logins_.back().get(), auths_.back().get()});
  }
  return std::nullopt;
}

std::optional<StartError> Daemon::open_engines() {
  engine_session_ = config_.session;
  if (config_.engine == EngineKind::kDpdk) {
    // The spill listener behind the DPDK engine answers the lcore's replay itself (the lcore
    // strips that CONNECTED); spill sessions keep the spill's own authentication.
    engine_session_.login_check = sluice::session::LoginCheck::kDeferred;
  }
  auto engine = sluice::uring::Engine::open(engine_options(config_), engine_session_, parts_,
                                            log_from_engine);
  if (!engine) return StartError{kExitStartFailed, "engine: " + engine.error().message};
  engine_ = std::move(*engine);
  sluice::gateway::SpillLogins logins;
  for (const auto& a : auths_)
    logins.auths.push_back(a.get());
  logins.verifier = verifier_;
  engine_admin_.emplace(*engine_, std::move(logins));
  sessions_admin_ = &*engine_admin_;
#ifdef SLUICE_HAVE_DPDK
  if (config_.engine == EngineKind::kDpdk) {
    auto dpdk = sluice::gateway::DpdkEngine::open(config_, control_->attach_worker(), directory_);
    if (!dpdk) return StartError{kExitStartFailed, dpdk.error().message};
    dpdk_ = std::move(*dpdk);
    dpdk_admin_ = std::make_unique<sluice::gateway::DpdkAdmin>(*engine_admin_, *dpdk_,
                                                               uint32_t(engine_->worker_count()));
    sessions_admin_ = dpdk_admin_.get();
  }
#else
  if (config_.engine == EngineKind::kDpdk) {
    return StartError{kExitBadConfig,
                      "gateway.engine = \"dpdk\": this sluiced was built without DPDK"};
  }
#endif
  return std::nullopt;
}

// Live settings set at run time or by a reload: limits.* reach the io_uring engine's workers
// (in DPDK mode, the spill listener's; the lcore's flow limits are dpdk.*, fixed at start),
// spill.max_bytes and spill.queue_*_max the spill log and drain.rate_per_second the drainer.
// Control's ranges keep every value within the narrower types.
void Daemon::set_live_hook() {
  control_->set_live_hook([this](const Control::LiveSettings& l) { return apply_live(l); });
}

Result<> Daemon::apply_live(const Control::LiveSettings& l) {
  const uint32_t connect_timeout_at_start = config_.connect_timeout_ms;
  if (config_.engine == EngineKind::kDpdk && l.connect_timeout_ms != connect_timeout_at_start) {
    return failure(
        "limits.connect_timeout_ms: the DPDK engine's lcore keeps the value it started with (" +
        std::to_string(connect_timeout_at_start) + "); restart to change it");
  }
  if (Result<> r =
          engine_->set_limits({uint32_t(l.sessions_max), uint32_t(l.sessions_per_source_max),
                               uint32_t(l.prelude_sessions_max), uint32_t(l.connect_timeout_ms)});
      !r) {
    return r;
  }
  if (Result<> r = spill_->set_tuning(l.spill_max_bytes, l.spill_queue_messages_max,
                                      l.spill_queue_bytes_max, uint32_t(l.drain_rate_per_second));
      !r) {
    return r;
  }
  // Room for the descriptors of a spill log that may now hold more segments.
  raise_fd_limit(config_.sessions_max, l.spill_max_bytes, config_.spill.segment_bytes);
  return {};
}

// Reads the config file again, as SIGHUP and the admin API ask. A config that does not load,
// or that control refuses, leaves the running one.
Result<> Daemon::reload() {
  sd_notify(0, "RELOADING=1");
  auto next = load(path_);
  Result<> r = next ? reload_loaded(std::move(next->first), std::move(next->second))
                    : failure(next.error().message + " (the running config stays)");
  if (!r) control_->reload_failed(r.error().message);
  sd_notify(0, "READY=1");
  return r;
}

Result<> Daemon::reload_loaded(GatewayConfig next, Secrets secrets) {
  // The users file the gateway started with is read again (another path needs a restart:
  // control names spill.users_file among the keys that do); one that does not load refuses
  // the whole reload, as a config file that does not load does.
  const std::string& users_path = config_.spill.users_file;
  std::shared_ptr<const sluice::gateway::UsersFile> reread;
  if (!users_path.empty()) {
    auto reloaded = sluice::gateway::UsersFile::load(users_path);
    if (!reloaded) {
      return failure("spill.users_file: " + reloaded.error().message +
                     " (the running config stays)");
    }
    reread = std::move(*reloaded);
  }
  if (auto restart_keys = control_->reload(std::move(next), std::move(secrets)); !restart_keys) {
    return tl::unexpected(std::move(restart_keys.error()));
  }
  if (reread) {
    log_event(LogLevel::kInfo, "users_file_reloaded",
              {{"path", users_path}, {"users", std::to_string(reread->users().size())}});
    users_source_->set(std::move(reread));
  }
  spill_->set_nodes(control_->config().nodes);
  if (Result<> r = directory_.set(control_->config().nodes); !r) {
    log_event(LogLevel::kError, "reload_nodes", {{"error", r.error().message}});
  }
  return {};
}

// The admin API on its unix socket and, when configured, on TCP.
std::optional<StartError> Daemon::open_admin() {
  api_.emplace(*control_, [this] { return reload(); });
  api_->set_spill(spill_.get());
  api_->set_sessions(sessions_admin_);
  admin_.emplace(io_, [this](const AdminRequest& r) { return api_->handle(r); });
  if (Result<> r = admin_->listen_unix(config_.admin_socket); !r) {
    return StartError{kExitStartFailed, "admin.socket: " + r.error().message};
  }
  if (config_.admin_tcp) {
    if (Result<> r = admin_->listen_tcp(config_.admin_tcp->host, config_.admin_tcp->port); !r) {
      return StartError{kExitStartFailed, "admin.tcp: " + r.error().message};
    }
  }
  return std::nullopt;
}

void Daemon::start() {
  control_->start();
  spill_->start();
  engine_->start();
#ifdef SLUICE_HAVE_DPDK
  if (dpdk_) dpdk_->start();
#endif
}

void Daemon::run_until_signal() {
  signals_.emplace(io_, SIGTERM, SIGINT, SIGHUP);
  wait_for_signal();
  log_started();
  sd_notify(0, "READY=1\nSTATUS=running");
  io_.run();
}

void Daemon::wait_for_signal() {
  signals_->async_wait(
      [this](const boost::system::error_code& ec, int signo) { on_signal(ec, signo); });
}

void Daemon::on_signal(const boost::system::error_code& ec, int signo) {
  if (ec) return;
  if (signo == SIGHUP) {
    log_event(LogLevel::kInfo, "signal", {{"signal", "SIGHUP"}, {"action", "reload"}});
    static_cast<void>(reload());  // a refused reload is logged and counted by control
    wait_for_signal();
    return;
  }
  log_event(LogLevel::kInfo, "signal",
            {{"signal", signo == SIGTERM ? "SIGTERM" : "SIGINT"}, {"action", "stop"}});
  sd_notify(0, "STOPPING=1");
  admin_->close();
  control_->stop();
  io_.stop();
}

void Daemon::log_started() {
  std::string where = config_.admin_socket;
  if (config_.admin_tcp) {
    where += " and " + config_.admin_tcp->host + ":" + std::to_string(admin_->tcp_port());
  }
  log_event(LogLevel::kInfo, "sluiced_started",
            {{"version", SLUICE_VERSION},
             {"config", path_},
             {"admin", where},
             {"listen", config_.engine == EngineKind::kDpdk
                            ? config_.listen.host + ":" + std::to_string(config_.listen.port)
                            : config_.listen.host + ":" + std::to_string(engine_->port())},
             {"engine", config_.engine == EngineKind::kDpdk ? "dpdk" : "uring"},
             {"workers", std::to_string(config_.workers)}});
}

// Spliced sessions get the grace period; spill sessions answer what is pending; then the log
// writes what it holds.
void Daemon::stop() {
#ifdef SLUICE_HAVE_DPDK
  if (dpdk_) dpdk_->stop();
#endif
  engine_->stop(control_->config().stop_grace_ms);
  spill_->stop();
  log_event(LogLevel::kInfo, "sluiced_stopped", {});
}

int run(const std::string& path) {
  auto loaded = load(path);
  if (!loaded) return fail(kExitBadConfig, loaded.error().message);
  auto [config, secrets] = std::move(*loaded);
  if (Result<> r = ensure_dirs(config); !r) return fail(kExitStartFailed, r.error().message);

  Daemon daemon(path, std::move(config), std::move(secrets));
  if (auto e = daemon.open_control()) return fail(e->code, e->message);
  if (auto e = daemon.open_workers()) return fail(e->code, e->message);
  if (auto e = daemon.open_engines()) return fail(e->code, e->message);
  daemon.set_live_hook();
  if (auto e = daemon.open_admin()) return fail(e->code, e->message);
  daemon.start();
  daemon.run_until_signal();
  daemon.stop();
  return 0;
}

int run_main(int argc, char** argv) {
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

}  // namespace

// What escapes the daemon (an allocation failure, a library's exception) ends it with a line
// naming the cause rather than std::terminate's abort.
int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    return fail(kExitStartFailed, std::string("unexpected error: ") + e.what());
  }
}
