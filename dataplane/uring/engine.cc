// The engine: its workers, their shared session count, stop and the sessions view.
#include "dataplane/uring/engine.h"

#include "base/assert.h"

#include "dataplane/uring/worker.h"

namespace sluice::uring {

Result<> EngineOptions::validate() const {
  if (workers == 0 || workers > 256) return failure("workers: must be between 1 and 256");
  if (sessions_max == 0) return failure("limits.sessions_max: must be at least 1");
  if (sessions_per_source_max == 0)
    return failure("limits.sessions_per_source_max: must be at least 1");
  if (prelude_sessions_max == 0) return failure("limits.prelude_sessions_max: must be at least 1");
  if (connect_timeout_ms == 0) return failure("limits.connect_timeout_ms: must be at least 1");
  if (pipe_bytes < 4096 || pipe_bytes > kPipeBytesMax) {
    return failure("limits.pipe_bytes: must be between 4096 and 1048576");
  }
  if (pipe_bytes_max < pipe_bytes || pipe_bytes_max > kPipeBytesMax) {
    return failure("limits.pipe_bytes_max: must be between limits.pipe_bytes and 1048576");
  }
  if (grown_pipes_max > 65536) return failure("limits.grown_pipes_max: must be at most 65536");
  if (recv_buffers == 0 || recv_buffers > 32768 || (recv_buffers & (recv_buffers - 1)) != 0) {
    return failure("recv_buffers: must be a power of two up to 32768");
  }
  if (recv_buffer_bytes < 1024) return failure("recv_buffer_bytes: must be at least 1024");
  if (greeting_bytes_max < 512) return failure("greeting_bytes_max: must be at least 512");
  return {};
}

Result<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options,
                                             const session::SessionConfig& session,
                                             std::vector<WorkerParts> parts, const LogFn& log) {
  if (auto valid = options.validate(); !valid) return tl::unexpected(valid.error());
  if (parts.size() != options.workers) {
    return failure("one set of worker parts per worker is needed");
  }
  std::unique_ptr<Engine> engine(new Engine());
  engine->sessions_ = std::make_shared<std::atomic<uint32_t>>(0);
  engine->at_start_ = LiveLimits{options.sessions_max, options.sessions_per_source_max,
                                 options.prelude_sessions_max, options.connect_timeout_ms};
  engine->live_ = std::make_shared<detail::LiveLimitCells>();
  const bool limits_ok = engine->set_limits(engine->at_start_).has_value();
  SLUICE_ASSERT(limits_ok);  // the start values are validated above
  uint16_t port = options.listen_port;
  for (uint32_t i = 0; i < options.workers; ++i) {
    auto w = std::make_unique<detail::Worker>(i, options, session, parts[i], log, engine->sessions_,
                                              engine->live_);
    Result<uint16_t> bound = w->open(port);
    if (!bound) return tl::unexpected(bound.error());
    port = *bound;  // the other workers share the first one's port (SO_REUSEPORT)
    engine->workers_.push_back(std::move(w));
  }
  engine->port_ = port;
  return engine;
}

Result<> Engine::set_limits(const LiveLimits& l) {
  auto above = [](const char* key, uint32_t v, uint32_t start) {
    return std::string(key) + ": " + std::to_string(v) + " is above " + std::to_string(start) +
           ", the value sluiced started with (the workers' memory is sized at start); restart "
           "to raise it";
  };
  if (l.sessions_max == 0) return failure("limits.sessions_max: must be at least 1");
  if (l.sessions_per_source_max == 0)
    return failure("limits.sessions_per_source_max: must be at least 1");
  if (l.prelude_sessions_max == 0)
    return failure("limits.prelude_sessions_max: must be at least 1");
  if (l.connect_timeout_ms == 0) return failure("limits.connect_timeout_ms: must be at least 1");
  if (l.sessions_max > at_start_.sessions_max) {
    return failure(above("limits.sessions_max", l.sessions_max, at_start_.sessions_max));
  }
  if (l.prelude_sessions_max > at_start_.prelude_sessions_max) {
    return failure(above("limits.prelude_sessions_max", l.prelude_sessions_max,
                         at_start_.prelude_sessions_max));
  }
  live_->sessions_max.store(l.sessions_max, std::memory_order_relaxed);
  live_->sessions_per_source_max.store(l.sessions_per_source_max, std::memory_order_relaxed);
  live_->prelude_sessions_max.store(l.prelude_sessions_max, std::memory_order_relaxed);
  live_->connect_timeout_ms.store(l.connect_timeout_ms, std::memory_order_relaxed);
  return {};
}

LiveLimits Engine::limits() const {
  return LiveLimits{live_->sessions_max.load(std::memory_order_relaxed),
                    live_->sessions_per_source_max.load(std::memory_order_relaxed),
                    live_->prelude_sessions_max.load(std::memory_order_relaxed),
                    live_->connect_timeout_ms.load(std::memory_order_relaxed)};
}

Engine::~Engine() {
  if (started_) stop(0);
}

void Engine::start() {
  for (auto& w : workers_)
    w->start();
  started_ = true;
}

void Engine::stop(uint32_t grace_ms) {
  for (auto& w : workers_)
    w->request_stop(grace_ms);
  for (auto& w : workers_)
    w->join();
  started_ = false;
}

const WorkerCounters& Engine::counters(size_t worker) const {
  return workers_[worker]->counters();
}

std::vector<SessionView> Engine::sessions(size_t limit, size_t* total,
                                          std::vector<uint32_t>* unanswered,
                                          std::chrono::milliseconds wait) {
  // Every worker is asked before any answer is awaited: one deadline for all of them, however
  // many are busy.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<uint64_t> tickets;
  tickets.reserve(workers_.size());
  for (auto& w : workers_)
    tickets.push_back(w->request_snapshot());
  std::vector<SessionView> out;
  *total = 0;
  unanswered->clear();
  for (size_t i = 0; i < workers_.size(); ++i) {
    std::optional<std::vector<SessionView>> v = workers_[i]->collect_snapshot(tickets[i], deadline);
    if (!v) {
      unanswered->push_back(uint32_t(i));
      continue;
    }
    *total += v->size();
    for (auto& s : *v) {
      if (out.size() >= limit) break;
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace sluice::uring
