// The io_uring socket engine (DESIGN sections 3 and 4): one thread per worker, each with its own
// ring, its own SO_REUSEPORT listener and its own sessions. A session speaks the prelude through
// the session core, is routed by the worker's Router, and is then either spliced to the owner
// through two pipes (IORING_OP_SPLICE, zero copy) or served as a spill session whose SENDs go to
// the worker's SpillSink. The engine includes neither control/ nor queue/: the gateway adapts
// them to the session core's Router and LoginCache (dataplane/session/route.h) and to the
// SpillSink below.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "dataplane/session/config.h"
#include "dataplane/session/prelude.h"
#include "dataplane/session/queue_key.h"
#include "dataplane/session/route.h"
#include "dataplane/session/spill_session.h"

namespace sluice::uring {

using session::Nanos;

struct EngineOptions {
  static constexpr uint32_t kPipeBytes = 64u << 10;
  static constexpr uint32_t kPipeBytesMax = 1u << 20;  // the kernel's default pipe-max-size
  static constexpr uint32_t kGrownPipesMax = 32;
  static constexpr uint32_t kRecvBufferBytes = 16u << 10;
  static constexpr uint32_t kRecvBuffers = 256;
  static constexpr uint32_t kGreetingBytesMax = 16u << 10;
  static constexpr uint32_t kSpillSessionsMax = 256;
  static constexpr uint32_t kRingEntries = 4096;
  static constexpr uint32_t kStopGraceMs = 10'000;

  std::string listen_host = "0.0.0.0";  // IPv4
  uint16_t listen_port = 61613;         // 0: any (the first worker's port is used by all)
  // IP_FREEBIND: bind before the address exists (with the DPDK engine the spill listener's
  // address lives on the TAP interface that engine creates).
  bool listen_freebind = false;
  // Every session is a spill session, without asking the router: with the DPDK engine this
  // engine is its spill listener, and the lcore has already decided (the owner is down, the
  // queue has a backlog, or the owner did not answer); routing again here could disagree.
  bool spill_only = false;
  uint32_t workers = 1;
  // Limits of the whole engine; each worker takes its share (rounded up) of the per-source and
  // per-state limits, and sessions_max is enforced across workers exactly.
  uint32_t sessions_max = 10'000;
  uint32_t sessions_per_source_max = 1'000;
  uint32_t prelude_sessions_max = 10'000;
  uint32_t spill_sessions_max = kSpillSessionsMax;
  uint32_t connect_timeout_ms = 2'000;
  // New queues one client address may have placed per minute, across the engine (each worker
  // takes its share, rounded up); 0: no limit. Over it the session still reaches the queue's
  // node, but nothing is recorded (counted).
  uint32_t placements_per_source_per_minute = 600;
  // Capacity of each splice pipe (F_SETPIPE_SZ). Pages are taken only while bytes are in it.
  uint32_t pipe_bytes = kPipeBytes;
  // A stream that fills its pipe (SpliceMode::kInline) gets it grown to pipe_bytes_max, for at
  // most grown_pipes_max pipes of the engine at a time (each worker takes its share, rounded
  // up; 0 or pipe_bytes_max == pipe_bytes: never). Fewer, larger splices per byte; the kernel
  // counts a pipe's capacity against fs.pipe-user-pages-soft for an unprivileged user.
  uint32_t pipe_bytes_max = kPipeBytesMax;
  uint32_t grown_pipes_max = kGrownPipesMax;
  // Provided receive buffers (prelude and spill sessions only; spliced bytes never land here).
  uint32_t recv_buffer_bytes = kRecvBufferBytes;
  uint32_t recv_buffers = kRecvBuffers;             // per worker, a power of two
  uint32_t greeting_bytes_max = kGreetingBytesMax;  // the owner's first frame
  uint32_t ring_entries = kRingEntries;
  bool sqpoll = false;  // IORING_SETUP_SQPOLL: a kernel thread polls the submission queue
  // How spliced bytes move once io_uring's poll says a socket is ready:
  // kInline: splice(2) socket -> pipe -> socket, non-blocking, on the worker's thread;
  // kRing: IORING_OP_SPLICE, which the kernel always runs on an io-wq thread (a thread switch
  // per splice). Both are zero copy; bench/RESULTS.md has the measured difference.
  enum class SpliceMode : uint8_t { kInline, kRing };
  SpliceMode splice = SpliceMode::kInline;
  // Parking (kInline only): above this many sessions in the engine, a spliced session whose
  // two directions are both idle moves its two sockets into the worker ring's fixed-file table
  // and closes their descriptors, so that the descriptor limit (RLIMIT_NOFILE) does not bound
  // how many idle sessions the gateway holds. Readiness on either socket gets the descriptors
  // back (IORING_OP_FIXED_FD_INSTALL, kernel 6.8) before bytes move. kParkAuto: a quarter of
  // the open-file limit at start (each unparked session holds two descriptors, four more
  // while bytes pass); 0: every idle spliced session; kParkNever: none.
  static constexpr uint32_t kParkAuto = UINT32_MAX - 1;
  static constexpr uint32_t kParkNever = UINT32_MAX;
  uint32_t park_sessions_above = kParkAuto;
  session::SpillLimits spill_limits;

  // An error naming the first wrong setting, if one is.
  Result<> validate() const;
};

// The limits an operator can change while the engine runs (`sluicectl set limits.*`, or a
// reload). sessions_max and prelude_sessions_max also size each worker's memory at start, so
// they can be lowered, and raised again, up to their values at start, not beyond.
struct LiveLimits {
  uint32_t sessions_max = 0;
  uint32_t sessions_per_source_max = 0;
  uint32_t prelude_sessions_max = 0;
  uint32_t connect_timeout_ms = 0;
  bool operator==(const LiveLimits&) const = default;
};

namespace detail {
// The live limits as the workers read them: one relaxed load at each use, so a change applies
// from the next session (accept, connect) on; sessions already open keep what they have.
struct LiveLimitCells {
  std::atomic<uint32_t> sessions_max{0};
  std::atomic<uint32_t> sessions_per_source_max{0};
  std::atomic<uint32_t> prelude_sessions_max{0};
  std::atomic<uint32_t> connect_timeout_ms{0};
};
}  // namespace detail

// The worker's end of the spill log. Called on the worker's thread only.
class SpillSink {
 public:
  enum class Result : uint8_t { kQueued, kBusy, kRefused };
  struct Done {
    uint64_t token = 0;
    bool durable = false;
    std::string_view message;  // why not, for the client's ERROR
  };
  virtual ~SpillSink() = default;
  // kQueued: exactly one Done for `token` follows, in append order. kBusy: nothing queued, try
  // again after a completion. kRefused: never (too large, bad name); *why says so.
  virtual Result append(uint64_t token, std::string_view vhost, std::string_view queue,
                        std::string_view headers, std::string_view body, std::string_view* why) = 0;
  virtual size_t poll(std::span<Done> out) = 0;
  virtual uint64_t in_flight() const = 0;
  // As SpillProducer: true when notify_fd() will become readable after the next completion.
  // The worker calls it before every wait while appends are in flight; a sink may leave
  // publishing its appends to the log's thread until then (SpillProducer::set_batched_wake).
  virtual bool arm_notify() = 0;
  virtual int notify_fd() const = 0;
};

// The answers to the spill logins SpillHooks::authenticate() left kPending (checked on another
// thread). Called on the worker's thread only.
class LoginAnswers {
 public:
  struct Answer {
    uint64_t ticket = 0;  // as authenticate() was given it
    bool accepted = false;
  };
  virtual ~LoginAnswers() = default;
  // Answers that came since the last poll, in the order they came.
  virtual size_t poll(std::span<Answer> out) = 0;
  // An eventfd: readable after an answer came.
  virtual int notify_fd() const = 0;
};

// The pieces one worker runs with; they outlive the engine.
struct WorkerParts {
  session::Router* router = nullptr;
  SpillSink* spill = nullptr;             // null: spill sessions are refused
  session::SpillHooks* hooks = nullptr;   // credentials and ACL for spill sessions
  session::LoginCache* logins = nullptr;  // null: every eager login check asks a node
  LoginAnswers* login_answers = nullptr;  // required when `hooks` may answer kPending
};

enum class LogLevel : uint8_t { kDebug, kInfo, kWarn, kError };
using LogField = std::pair<std::string_view, std::string_view>;
using LogFn = std::function<void(LogLevel, std::string_view event, std::span<const LogField>)>;

// One session as `sluicectl sessions` shows it.
struct SessionView {
  uint32_t worker = 0;
  uint64_t id = 0;
  std::string client;
  std::string vhost;
  std::string queue;
  std::string owner;
  std::string state;
  bool parked = false;  // spliced and idle, its descriptors held by the ring (parking)
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  int64_t age_ms = 0;
};

// Counters of one worker: written by the worker only (relaxed), read from any thread.
struct WorkerCounters {
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> refused_sessions_max{0};
  std::atomic<uint64_t> refused_per_source{0};
  std::atomic<uint64_t> refused_prelude_max{0};
  std::atomic<uint64_t> refused_spill_max{0};
  std::atomic<uint64_t> refused_route{0};
  std::atomic<uint64_t> refused_stopping{0};
  std::atomic<uint64_t> prelude_end[session::kPreludeEndCount] = {};  // by session::PreludeEnd
  std::atomic<uint64_t> spill_end[session::kSpillEndCount] = {};      // by session::SpillEnd
  // Login checks (login_check eager): CONNECTs a node answered, by outcome; answered from the
  // login cache; answered by the gateway because no node could check them.
  std::atomic<uint64_t> login_accepted{0};
  std::atomic<uint64_t> login_refused{0};
  std::atomic<uint64_t> login_failed{0};  // the node could not be reached or did not answer
  std::atomic<uint64_t> login_cached{0};
  std::atomic<uint64_t> login_unchecked{0};
  // The login check's connection: kept as the owner's (its node owned the first destination),
  // or closed (another owner, spill, or the node closed it while the prelude went on).
  std::atomic<uint64_t> login_conn_kept{0};
  std::atomic<uint64_t> login_conn_closed{0};
  // Owners whose heart-beat answer differs from what the client was told: refused (the owner
  // would drop the client) or let through (counted, logged).
  std::atomic<uint64_t> heartbeat_mismatch_refused{0};
  std::atomic<uint64_t> heartbeat_mismatch_allowed{0};
  std::atomic<uint64_t> heartbeats_sent{0};  // EOLs the gateway sent while it spoke for a session
  std::atomic<uint64_t> placements_confirmed{0};     // placements recorded after a node's CONNECTED
  std::atomic<uint64_t> placements_rate_limited{0};  // not recorded: over the per-source rate
  std::atomic<uint64_t> spliced{0};                  // sessions that reached splice
  std::atomic<uint64_t> spilled{0};                  // sessions that became spill sessions
  std::atomic<uint64_t> connect_failed{0};
  std::atomic<uint64_t> owner_error{0};     // the owner answered the replay with ERROR
  std::atomic<uint64_t> owner_protocol{0};  // ... with something that is not CONNECTED
  std::atomic<uint64_t> owner_timeout{0};   // ... not within connect_timeout_ms
  std::atomic<uint64_t> resets{0};          // spliced sessions ended by a reset or error
  std::atomic<uint64_t> bytes_in{0};        // client -> owner, spliced
  std::atomic<uint64_t> bytes_out{0};       // owner -> client, spliced
  std::atomic<uint64_t> pipes_grown{0};     // pipes grown to pipe_bytes_max for a stream
  std::atomic<uint64_t> grown_pipes{0};     // grown pipes the worker holds (in use or pooled)
  std::atomic<uint64_t> parks{0};           // idle spliced sessions parked (see EngineOptions)
  std::atomic<uint64_t> unparks{0};         // ... that got their descriptors back
  std::atomic<uint64_t> unpark_failed{0};   // ... that could not (closed: EMFILE and the like)
  std::atomic<uint64_t> parked{0};          // sessions parked now
  std::atomic<uint64_t> appends{0};
  std::atomic<uint64_t> appends_busy{0};
  std::atomic<uint64_t> active{0};
  std::atomic<uint64_t> prelude{0};
  std::atomic<uint64_t> splicing{0};
  std::atomic<uint64_t> spilling{0};
  std::atomic<uint64_t> closed{0};
  // Header tables made for the prelude and greeting parsers: one each per prelude slot the
  // first time the slot is used, kept with it (so not one per session).
  std::atomic<uint64_t> header_tables{0};
};

namespace detail {
class Worker;
}

class Engine {
 public:
  // Opens every worker's listener and ring; the error says what failed when a setting is
  // wrong, the address cannot be bound or io_uring is unavailable.
  static Result<std::unique_ptr<Engine>> open(const EngineOptions& options,
                                              const session::SessionConfig& session,
                                              std::vector<WorkerParts> parts, const LogFn& log);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void start();
  // Stops accepting; sessions in prelude get ERROR, spill sessions answer what is pending and
  // end, spliced sessions get up to `grace_ms` to finish. Returns when every worker has ended.
  void stop(uint32_t grace_ms = EngineOptions::kStopGraceMs);

  uint16_t port() const { return port_; }
  size_t worker_count() const { return workers_.size(); }
  const WorkerCounters& counters(size_t worker) const;
  // Sessions of every worker, oldest first per worker, at most `limit`; *total counts all.
  // Waits up to `wait` in all for the workers to answer; *unanswered lists (by index) those
  // that did not, whose sessions are then neither listed nor counted.
  static constexpr std::chrono::milliseconds kSessionsWait{1000};
  std::vector<SessionView> sessions(size_t limit, size_t* total, std::vector<uint32_t>* unanswered,
                                    std::chrono::milliseconds wait = kSessionsWait);
  // Applies new limits (any thread); on an error, which says why, nothing changed.
  // Sessions over a lowered limit are not closed; new ones are refused until below it.
  Result<> set_limits(const LiveLimits& limits);
  LiveLimits limits() const;

 private:
  Engine() = default;
  std::vector<std::unique_ptr<detail::Worker>> workers_;
  std::shared_ptr<std::atomic<uint32_t>> sessions_;  // across workers
  std::shared_ptr<detail::LiveLimitCells> live_;
  LiveLimits at_start_;  // sessions_max and prelude_sessions_max bound the live values
  uint16_t port_ = 0;
  bool started_ = false;
};

}  // namespace sluice::uring
