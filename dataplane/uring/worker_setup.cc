// A worker's set-up and tear-down: limits shared out, the ring (created disabled, enabled by the
// worker's thread), provided receive buffers, session memory sized at start, the listener; the
// thread started and stopped.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dataplane/uring/worker.h"

namespace sluice::uring::detail {
namespace {

uint32_t share(uint32_t total, uint32_t workers) {
  return (total + workers - 1) / workers;
}

}  // namespace

Worker::Worker(uint32_t index, const EngineOptions& options, const session::SessionConfig& config,
               WorkerParts parts, LogFn log, std::shared_ptr<std::atomic<uint32_t>> global_sessions,
               std::shared_ptr<const LiveLimitCells> live)
    : index_(index),
      options_(options),
      config_(config),
      parts_(parts),
      log_(std::move(log)),
      global_sessions_(std::move(global_sessions)),
      live_(std::move(live)),
      placement_budget_(options.placements_per_source_per_minute == 0
                            ? 0
                            : share_of(options.placements_per_source_per_minute)) {}

Worker::~Worker() {
  if (thread_.joinable()) {
    request_stop(0);
    thread_.join();
  }
  for (Session& s : sessions_) {
    if (s.cfd >= 0) close(s.cfd);
    if (s.ofd >= 0) close(s.ofd);
    for (Dir& d : s.dir)
      PipePool::close(d.pipe);
  }
  if (ring_ok_) {
    if (buf_ring_ != nullptr) io_uring_unregister_buf_ring(&ring_, 0);
    io_uring_queue_exit(&ring_);
  }
  if (buf_ring_ != nullptr) munmap(buf_ring_, buf_ring_bytes_);
}

void Worker::open_parking(uint32_t sessions) {
  uint32_t above = options_.park_sessions_above;
  const char* why = nullptr;
  rlimit fds{};
  getrlimit(RLIMIT_NOFILE, &fds);
  const uint64_t fd_limit = fds.rlim_cur == RLIM_INFINITY ? UINT32_MAX : fds.rlim_cur;
  if (above == EngineOptions::kParkAuto)
    above = uint32_t(std::min<uint64_t>(fd_limit / 4, UINT32_MAX));
  if (above == EngineOptions::kParkNever || above >= options_.sessions_max) return;  // never needed
  if (options_.splice != EngineOptions::SpliceMode::kInline) {
    why = "gateway.splice = \"io_uring\" keeps the descriptors in its splices";
  } else if (options_.sqpoll) {
    why = "with gateway.sqpoll the kernel's poller submits, after a parked descriptor is closed";
  }
  // Both sockets of a parked session take a pair of slots; a table may not be larger than the
  // open-file limit.
  const uint32_t pairs = uint32_t(std::min<uint64_t>(sessions, fd_limit / 2));
  if (why == nullptr) why = parking_.open(ring_, pairs, above);
  if (why != nullptr && index_ == 0) {
    log_(LogLevel::kWarn, "parking_unavailable",
         {{{"reason", why}, {"park_sessions_above", std::to_string(above)}}});
  }
}

Result<uint16_t> Worker::open(uint16_t port) {
  const uint32_t workers = options_.workers;
  const uint32_t sessions = options_.sessions_max;  // any worker may hold them all
  prelude_max_ = std::min(share(options_.prelude_sessions_max, workers), sessions);
  spill_max_ = std::min(share(options_.spill_sessions_max, workers), sessions);
  pipes_.configure(options_.pipe_bytes, options_.pipe_bytes_max,
                   share(options_.grown_pipes_max, workers), &counters_.grown_pipes);

  if (auto r = open_ring(); !r) return tl::unexpected(r.error());
  if (auto r = open_recv_buffers(); !r) return tl::unexpected(r.error());
  open_parking(sessions);
  if (auto r = open_session_memory(sessions); !r) return tl::unexpected(r.error());
  wake_fd_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_.valid()) return failure(std::string("eventfd: ") + std::strerror(errno));
  return open_listener(port);
}

// The ring, created disabled: the worker's thread enables it and so becomes its single issuer.
Result<> Worker::open_ring() {
  io_uring_params p{};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL |
            IORING_SETUP_R_DISABLED;
  p.cq_entries = options_.ring_entries * 4;
  p.flags |= IORING_SETUP_CQSIZE;
  if (options_.sqpoll) {
    // SQPOLL and DEFER_TASKRUN do not combine: the poller thread submits.
    p.flags &= ~IORING_SETUP_DEFER_TASKRUN;
    p.flags |= IORING_SETUP_SQPOLL;
    p.sq_thread_idle = 1000;
  }
  const int r = io_uring_queue_init_params(options_.ring_entries, &ring_, &p);
  if (r < 0) return failure(std::string("io_uring_queue_init: ") + std::strerror(-r));
  ring_ok_ = true;
  return {};
}

// Provided buffers for the receives of prelude and spill sessions.
Result<> Worker::open_recv_buffers() {
  recv_mask_ = io_uring_buf_ring_mask(options_.recv_buffers);
  buf_ring_bytes_ = sizeof(io_uring_buf) * options_.recv_buffers;
  void* mem =
      mmap(nullptr, buf_ring_bytes_, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (mem == MAP_FAILED) return failure("mmap of the buffer ring failed");
  buf_ring_ = static_cast<io_uring_buf_ring*>(mem);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(buf_ring_);
  reg.ring_entries = options_.recv_buffers;
  reg.bgid = 0;
  const int r = io_uring_register_buf_ring(&ring_, &reg, 0);
  if (r < 0) {
    munmap(buf_ring_, buf_ring_bytes_);
    buf_ring_ = nullptr;
    return failure(std::string("io_uring_register_buf_ring: ") + std::strerror(-r));
  }
  io_uring_buf_ring_init(buf_ring_);
  if (!recv_bufs_.map(size_t(options_.recv_buffers) * options_.recv_buffer_bytes)) {
    return failure("cannot reserve the receive buffers");
  }
  for (uint32_t i = 0; i < options_.recv_buffers; ++i) {
    io_uring_buf_ring_add(buf_ring_, recv_bufs_.at(size_t(i) * options_.recv_buffer_bytes),
                          options_.recv_buffer_bytes, uint16_t(i), recv_mask_, int(i));
  }
  io_uring_buf_ring_advance(buf_ring_, int(options_.recv_buffers));

  return {};
}

// Session memory, sized once at start: the session table, preludes, outs, spill sessions, the
// pools' reservations and the header scratch.
Result<> Worker::open_session_memory(uint32_t sessions) {
  sessions_.resize(sessions);
  free_sessions_.reserve(sessions);
  for (uint32_t i = sessions; i > 0; --i)
    free_sessions_.push_back(i - 1);
  sources_.init(sessions);
  const size_t prelude_bytes = size_t(config_.prelude_bytes_max) + options_.recv_buffer_bytes +
                               options_.greeting_bytes_max + 3 * 4096;
  if (!preludes_.init(prelude_max_, prelude_bytes)) return failure("cannot reserve preludes");
  for (uint32_t i = 0; i < prelude_max_; ++i) {
    PreludeSlot& ps = preludes_.object(i);
    ps.buf = preludes_.bytes(i);
    ps.carry = ps.buf + page_round(config_.prelude_bytes_max);
    ps.greet = ps.carry + page_round(options_.recv_buffer_bytes);
  }
  if (!outs_.init(prelude_max_ + spill_max_, kOutBytes)) return failure("cannot reserve outs");
  const size_t spill_buf =
      session::spill_buffer_bytes(config_, options_.spill_limits.txn_bytes_max);
  if (spill_max_ > 0) {
    if (!spills_.init(spill_max_, page_round(spill_buf) + options_.recv_buffer_bytes)) {
      return failure("cannot reserve spill sessions");
    }
    for (uint32_t i = 0; i < spill_max_; ++i) {
      SpillSlot& ss = spills_.object(i);
      ss.buf = spills_.bytes(i);
      ss.in = ss.buf + page_round(spill_buf);
    }
  }
  appends_.init(kAppendsInFlightMax, config_.frame_limits.frame_bytes_max * 2 + 64, 256);
  connect_timeout_.tv_sec = options_.connect_timeout_ms / 1000;
  connect_timeout_.tv_nsec = long(options_.connect_timeout_ms % 1000) * 1'000'000;
  return {};
}

// The worker's own listener on the shared port (SO_REUSEPORT spreads connections over workers).
Result<uint16_t> Worker::open_listener(uint16_t port) {
  listen_fd_.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listen_fd_.valid()) return failure(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  setsockopt(listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (options_.listen_freebind)
    setsockopt(listen_fd_.get(), IPPROTO_IP, IP_FREEBIND, &one, sizeof one);
  setsockopt(listen_fd_.get(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, options_.listen_host.c_str(), &a.sin_addr) != 1) {
    return failure("listen.host: not an IPv4 address: " + options_.listen_host);
  }
  if (bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return failure("listen: cannot bind " + options_.listen_host + ":" + std::to_string(port) +
                   ": " + std::strerror(errno));
  }
  if (listen(listen_fd_.get(), 4096) != 0)
    return failure(std::string("listen: ") + std::strerror(errno));
  socklen_t len = sizeof a;
  getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

void Worker::start() {
  thread_ = std::thread([this] { run(); });
}

void Worker::request_stop(uint32_t grace_ms) {
  stop_grace_ms_.store(grace_ms, std::memory_order_relaxed);
  stop_requested_.store(true, std::memory_order_release);
  uint64_t one = 1;
  // An eventfd write fails only when its counter is full, and then the worker is woken anyway.
  if (wake_fd_.valid()) (void)!write(wake_fd_.get(), &one, sizeof one);
}

void Worker::join() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace sluice::uring::detail
