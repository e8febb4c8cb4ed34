// One worker of the io_uring engine: its ring, listener, sessions and pools. Internal to
// dataplane/uring (engine.h is the module's interface). Everything here runs on the worker's
// thread except request_stop(), request_snapshot() and the counters.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "base/result.h"
#include "dataplane/session/owner_greeting.h"
#include "dataplane/session/placement_budget.h"
#include "dataplane/session/prelude.h"
#include "dataplane/session/spill_session.h"
#include "dataplane/uring/engine.h"
#include "dataplane/uring/parking.h"
#include "dataplane/uring/pipe_pool.h"
#include "dataplane/uring/pool.h"
#include "dataplane/uring/source_table.h"
#include "dataplane/uring/spill_appends.h"

namespace sluice::uring::detail {

inline constexpr uint32_t kNone = UINT32_MAX;
// Bytes a session can queue for the client (CONNECTED, RECEIPTs, ERRORs, and the owner's bytes
// that came with its CONNECTED).
inline constexpr uint32_t kOutBytes = 32u << 10;
// Appends in flight per worker (the spill log's producer ring is 1024 deep by default).
inline constexpr uint32_t kAppendsInFlightMax = 4096;
// How often deadlines, stop grace and spill sessions' owners are checked.
inline constexpr Nanos kScanInterval = 100 * session::kNanosPerMilli;
// The longest the loop sleeps: control's messages are applied at least this often.
inline constexpr Nanos kWaitMax = 20 * session::kNanosPerMilli;
// Nodes asked in turn to check a login when one cannot be reached or does not answer; then the
// gateway answers itself.
inline constexpr uint8_t kLoginAttemptsMax = 3;

// A worker's counters have one writer (the worker) and are read by the metrics thread: a relaxed
// load and store, not a read-modify-write.
inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
inline void drop(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

enum class Op : uint8_t {
  kAccept = 1,
  kWake,
  kSpillNotify,
  kRecvClient,
  kSendClient,
  kConnect,
  kConnectTimeout,
  kSendOwner,
  kRecvOwner,
  // The splice's ops: the tag's side bit is the direction (0 client -> owner, 1 owner ->
  // client).
  kPollIn,
  kSpliceIn,
  kSpliceOut,
  kPollOut,
  kCancel,
  kInstall,      // a parked socket's descriptor back; the side bit: 0 client, 1 owner
  kPollHeld,     // the login check's connection, held while the prelude goes on, is readable
  kLoginNotify,  // WorkerParts::login_answers has answers to spill logins
};

enum class State : uint8_t {
  kFree,
  kPrelude,
  kLogin,  // a node checks the CONNECT's login: connect, send, its first frame
  kConnecting,
  kReplay,
  kGreeting,
  kSpliced,
  kSpill,
  kClosing,
};
std::string_view state_name(State s);

// One direction of a spliced session: 0 client -> owner, 1 owner -> client.
struct Dir {
  Pipe pipe;
  uint32_t in_pipe = 0;
  bool eof = false;
  bool done = false;
  bool bulk = false;          // filled a pipe: takes a grown one from the pool when it can
  bool grow_refused = false;  // the kernel refused to grow its pipe: not asked again
  bool idle = false;          // waits for readable with no pipe held (parking needs both)
};

// What on_send_client does once every queued byte to the client is sent. kClose is final: a
// splice asked for after it is not done (the session is ending).
enum class AfterSend : uint8_t {
  kNothing,
  kSplice,  // the owner's bytes after its CONNECTED went out first; the splice starts now
  kClose,   // an ERROR or a refusal went out; the session closes
};

// The owner's connection while the prelude goes on.
enum class OwnerConn : uint8_t {
  kNoConn,  // none yet, or the login check's was dropped
  kHeld,    // the login check's connection, open (ofd, node) in case its node owns the queue
  kKept,    // that connection is the session's owner: bound on it, no replay of the CONNECT
};

struct Session {
  // An ERROR or a refusal is on its way to the client: nothing new starts.
  bool closing_after_send() const { return after_send == AfterSend::kClose; }
  // The splice waits for the bytes queued to the client (unless the session closes first).
  void splice_when_sent() {
    if (after_send == AfterSend::kNothing) after_send = AfterSend::kSplice;
  }

  uint32_t gen = 0;
  State state = State::kFree;
  AfterSend after_send = AfterSend::kNothing;
  OwnerConn owner_conn = OwnerConn::kNoConn;
  uint16_t inflight = 0;
  // Flags, each independent of the others (a receive and a send may both be in flight).
  bool recv_armed : 1 = false;         // a receive from the client is in flight
  bool sending : 1 = false;            // a send to the client is in flight
  bool reset : 1 = false;              // close with RST (SO_LINGER 0)
  bool end_requested : 1 = false;      // spill: request_end() done
  bool unpark_failed : 1 = false;      // a parked descriptor did not come back: close
  bool linger_reset : 1 = false;       // SO_LINGER {1, 0} set when first parked: a lost socket
                                       // resets
  bool placement_pending : 1 = false;  // confirm the route's placement once the owner accepts
  uint8_t unparking = 0;               // descriptor installs in flight
  uint8_t wake = 0;                    // directions that became readable while parked (bit d)
  uint8_t login_attempts = 0;          // nodes asked to check the login (kLoginAttemptsMax)
  // Sends and receives on the owner's connection carry it in their tags instead of the
  // generation: a login check's abandoned connection cannot be taken for the next one's.
  uint32_t owner_epoch = 0;
  // Heart-beats while the gateway speaks for the session (0: none that way).
  uint32_t hb_to_client_ms = 0;
  uint32_t hb_from_client_ms = 0;
  uint32_t hb_to_owner_ms = 0;  // to the held connection's node
  Nanos last_client_send = 0;
  Nanos last_client_recv = 0;
  Nanos last_owner_send = 0;
  // The client's and the owner's sockets. Plain descriptors, closed by hand where the order
  // matters: finish_close once no operation of the session is in flight, parking only after the
  // ring holds them (every SQE naming the number submitted first).
  int cfd = -1;
  int ofd = -1;
  uint32_t park = kNone;  // parked: the pair of fixed-file slots 2 park (client), 2 park + 1
  uint32_t src_ip = 0;    // network order
  uint16_t src_port = 0;
  uint32_t node = kNone;
  uint32_t prelude_slot = kNone;
  uint32_t out_slot = kNone;
  uint32_t spill_slot = kNone;
  uint32_t out_len = 0;
  uint32_t out_sent = 0;
  uint32_t out_inflight = 0;  // bytes of the send in flight
  uint64_t id = 0;
  Nanos started = 0;
  Nanos owner_deadline = 0;  // replay and the owner's first frame must be done by then
  Dir dir[2];
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  // For `sluicectl sessions`: the key, cut to fit.
  uint8_t vhost_len = 0;
  uint8_t queue_len = 0;
  char key[62] = {};
};

struct PreludeSlot {
  // Lent to the prelude's and the greeting's parsers (declared first: they outlive them): made
  // the first time the slot is used and kept with it, so that a session allocates no header
  // table (hot slots are reused first).
  std::unique_ptr<session::HeaderTable> prelude_headers;
  std::unique_ptr<session::HeaderTable> greeting_headers;
  std::optional<session::Prelude> prelude;
  std::optional<session::OwnerGreeting> greeting;
  char* buf = nullptr;    // prelude_bytes_max
  char* carry = nullptr;  // recv_buffer_bytes: client bytes the prelude buffer could not take
  char* greet = nullptr;  // greeting_bytes_max: the owner's first bytes
  uint32_t carry_len = 0;
  uint32_t greet_len = 0;
  msghdr msg{};
  iovec iov[3]{};
  uint32_t iov_count = 0;
};

struct SpillSlot {
  std::optional<session::SpillSession> spill;
  char* buf = nullptr;  // spill_buffer_bytes
  char* in = nullptr;   // recv_buffer_bytes: received, not yet taken by the session
  uint32_t in_off = 0;
  uint32_t in_len = 0;
  // An event that could not be acted on yet (out buffer full, spill log busy).
  bool held = false;
  session::SpillEvent held_event;
  bool dirty = false;           // listed in spill_dirty_
  bool busy_listed = false;     // listed in spill_busy_
  uint32_t refuse_appends = 0;  // appends of a refused transaction still to come
  uint32_t vhost_len = 0;
  uint32_t queue_len = 0;
  char vhost[session::kVhostBytesMax];        // written before read
  char queue[session::kDestinationBytesMax];  // written before read
};

class Worker {
 public:
  Worker(uint32_t index, const EngineOptions& options, const session::SessionConfig& config,
         WorkerParts parts, LogFn log, std::shared_ptr<std::atomic<uint32_t>> global_sessions,
         std::shared_ptr<const LiveLimitCells> live);
  ~Worker();
  // Creates the ring, the buffers and the listener (port 0: any; returns the port bound).
  Result<uint16_t> open(uint16_t port);
  void start();
  void request_stop(uint32_t grace_ms);
  void join();
  const WorkerCounters& counters() const { return counters_; }
  // From another thread: asks for the worker's sessions; collect_snapshot() takes the answer,
  // so that a caller can ask every worker before it waits for any.
  uint64_t request_snapshot();
  // The answer to request `ticket` (or a later one), waiting until `deadline`; nullopt when the
  // worker has not answered by then.
  std::optional<std::vector<SessionView>> collect_snapshot(
      uint64_t ticket, std::chrono::steady_clock::time_point deadline);

 private:
  void run();
  void loop_once();
  Nanos now() const;

  // Submission helpers: every op takes one inflight count of its session.
  io_uring_sqe* sqe();
  // An op's user_data: the slot (bits 32-63), the generation or the owner's epoch (8-31), the
  // side (7: a splice op's direction, an install's socket) and the op (0-6).
  static uint64_t tag(uint32_t slot, uint32_t gen, Op op, int side = 0);
  static constexpr uint32_t kEpochMask = 0xFFFFFF;
  static constexpr uint64_t kOpMask = 0x7F;
  static uint32_t epoch_of(uint64_t data) { return uint32_t(data >> 8) & kEpochMask; }
  static Op op_of(uint64_t data) { return Op(data & kOpMask); }
  static int side_of(uint64_t data) { return int(data >> 7) & 1; }
  void arm_accept();
  void arm_wake();
  void arm_spill_notify();
  void arm_login_notify();
  void arm_recv_client(uint32_t slot);
  void flush_out(uint32_t slot);
  bool queue_out(uint32_t slot, std::string_view bytes);
  // Sends `bytes` (may be empty) after whatever is queued, then closes.
  void send_then_close(uint32_t slot, std::string_view bytes);
  void on_cqe(const io_uring_cqe* cqe);
  // on_cqe()'s two halves, inlined into it (one completion's path stays one function).
  [[gnu::always_inline]] inline bool on_worker_cqe(Op op, int res, uint32_t flags);
  [[gnu::always_inline]] inline void on_session_cqe(uint32_t slot, Op op, int res, uint32_t flags,
                                                    uint64_t data);
  void recycle(uint16_t bid);

  // worker.cc
  void on_accept(int fd);
  void refuse_at_accept(int fd, std::atomic<uint64_t>& counter, std::string_view message);
  void on_send_client(uint32_t slot, int res);
  void begin_close(uint32_t slot, bool reset);
  void finish_close(uint32_t slot);
  void scan(Nanos now);
  void begin_stop();
  void fill_snapshot();
  void release_prelude(uint32_t slot);
  void release_out(uint32_t slot);
  void release_spill(uint32_t slot);

  // worker_prelude.cc
  void on_recv_client(uint32_t slot, int res, uint32_t flags);
  void feed_prelude(uint32_t slot, std::string_view bytes);
  void drive_prelude(uint32_t slot);
  void resolve(uint32_t slot);
  void connect_owner(uint32_t slot, const session::Route& d, State state);
  static uint64_t session_hash(const Session& s);
  void keep_held(uint32_t slot);
  void log_heart_beat_mismatch(uint32_t slot, const session::GreetingResult& g);
  void on_connect(uint32_t slot, int res);
  void send_replay(uint32_t slot);
  void on_send_owner(uint32_t slot, int res);
  void arm_recv_owner(uint32_t slot);
  void on_recv_owner(uint32_t slot, int res);
  void close_with_error(uint32_t slot, std::string_view message, std::string_view detail);
  // Login check (login_check eager).
  void check_login(uint32_t slot);
  // The gateway's own CONNECTED; `verified`: from the login cache.
  void answer_login(uint32_t slot, std::string_view server, bool verified = false);
  // A login check failed on its node: the next node, or the gateway's own answer; the prelude
  // goes on when answered.
  void retry_login(uint32_t slot);
  void on_login_answer(uint32_t slot, const session::GreetingResult& g);
  // The node did not answer in time: its connection goes and the gateway answers itself.
  void abandon_login(uint32_t slot);
  void arm_poll_held(uint32_t slot);
  void on_poll_held(uint32_t slot, int res);
  void drop_held(uint32_t slot);
  void start_owner_greeting(uint32_t slot);
  void owner_accepted(uint32_t slot);
  // Heart-beats the gateway owes and expects while it speaks for the session (scan).
  void heart_beats(uint32_t slot, Nanos now);
  void log_session_end(uint32_t slot, std::string_view reason, std::string_view message);

  // worker_splice.cc
  void start_splice(uint32_t slot);
  void arm_poll(uint32_t slot, int d, bool out);
  void splice_in(uint32_t slot, int d);
  void splice_out(uint32_t slot, int d);
  void on_splice_in(uint32_t slot, int d, int res);
  void on_splice_out(uint32_t slot, int d, int res);
  void finish_dir(uint32_t slot, int d);
  void pump(uint32_t slot, int d);  // SpliceMode::kInline
  void count_spliced(Session& s, int d, uint64_t n);
  bool take_pipe(Dir& d);  // from pipes_; logged when there is none
  void give_pipe(Dir& d);  // back to pipes_ (pooled when empty, else closed)
  void grow_pipe(Dir& d);  // to pipe_bytes_max, within the worker's share of grown pipes
  // Parking (EngineOptions::park_sessions_above).
  void maybe_park(uint32_t slot);
  void unpark(uint32_t slot);  // submits the installs of both descriptors
  void on_install(uint32_t slot, int side, int res);
  void clear_park(Session& s);  // empties the pair of slots; the ring lets go of the sockets

  // worker_setup.cc: open()'s steps, in order.
  Result<> open_ring();
  Result<> open_recv_buffers();
  void open_parking(uint32_t sessions);
  Result<> open_session_memory(uint32_t sessions);
  Result<uint16_t> open_listener(uint16_t port);

  // worker_spill.cc
  void start_spill(uint32_t slot);
  void on_recv_spill(uint32_t slot, std::string_view bytes);
  void drive_spill(uint32_t slot);
  bool act_spill(uint32_t slot, const session::SpillEvent& ev);
  void poll_spill();
  void note_spill_busy(uint32_t slot);
  void poll_login_answers();
  static uint64_t login_ticket(uint32_t slot, uint32_t gen) { return uint64_t(slot) << 32 | gen; }

  uint32_t index_;
  EngineOptions options_;
  const session::SessionConfig& config_;
  WorkerParts parts_;
  LogFn log_;
  std::shared_ptr<std::atomic<uint32_t>> global_sessions_;
  std::shared_ptr<const LiveLimitCells> live_;  // the engine's live limits (set_limits)
  // This worker's share of an engine-wide limit (rounded up).
  uint32_t share_of(uint32_t total) const {
    return (total + options_.workers - 1) / options_.workers;
  }
  WorkerCounters counters_;

  io_uring ring_{};
  bool ring_ok_ = false;
  base::Fd listen_fd_;
  base::Fd wake_fd_;
  bool accept_armed_ = false;
  Nanos accept_pause_until_ = 0;  // after EMFILE and the like: let the loop breathe
  uint64_t accept_errors_ = 0;
  uint64_t submit_errors_ = 0;  // io_uring_submit_and_wait_timeout() failures
  bool spill_notify_armed_ = false;
  uint64_t wake_value_ = 0;
  uint64_t spill_notify_value_ = 0;
  uint64_t login_notify_value_ = 0;
  __kernel_timespec connect_timeout_{};

  io_uring_buf_ring* buf_ring_ = nullptr;
  size_t buf_ring_bytes_ = 0;
  Region recv_bufs_;
  uint32_t recv_mask_ = 0;
  std::vector<uint32_t> recv_retry_;  // sessions whose receive found no buffer

  PipePool pipes_;
  // Where idle spliced sessions park, above how many sessions in the engine; off when the ring
  // has no fixed-file table.
  ParkingTable parking_;
  std::vector<Session> sessions_;
  std::vector<uint32_t> free_sessions_;
  SlotPool<PreludeSlot> preludes_;
  SlotPool<> outs_;
  SlotPool<SpillSlot> spills_;
  SourceTable sources_;
  session::PlacementBudget placement_budget_;
  uint32_t prelude_max_ = 0;  // preludes this worker has memory for (the live limit is lower)
  uint32_t spill_max_ = 0;
  uint64_t next_id_ = 0;

  // Spill appends in flight, in append order.
  SpillAppends appends_;
  std::vector<uint32_t> spill_dirty_;  // spill sessions with completions to act on
  std::vector<uint32_t> spill_busy_;   // spill sessions holding an append the sink refused

  Nanos next_scan_ = 0;
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint32_t> stop_grace_ms_{0};
  bool stopping_ = false;
  Nanos stop_deadline_ = 0;

  std::mutex snapshot_mutex_;
  std::condition_variable snapshot_cv_;
  std::atomic<uint64_t> snapshot_requested_{0};
  uint64_t snapshot_done_ = 0;  // under snapshot_mutex_
  std::vector<SessionView> snapshot_;

  std::thread thread_;
};

}  // namespace sluice::uring::detail
