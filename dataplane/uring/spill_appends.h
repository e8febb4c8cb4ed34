// The spill log appends of one worker's spill sessions while they are in flight. The sink
// answers in append order, so a FIFO maps each answer back to its session (slot and generation,
// so that a session gone meanwhile is known) and to the session's own token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/assert.h"
#include "dataplane/session/spill_record.h"
#include "dataplane/session/spill_session.h"
#include "dataplane/uring/engine.h"

namespace sluice::uring {

class SpillAppends {
 public:
  struct Ref {
    uint64_t token = 0;  // the worker's token given to the sink
    uint32_t slot = 0;
    uint32_t gen = 0;
    uint64_t session_token = 0;
  };
  enum class Outcome : uint8_t {
    kQueued,
    kBusy,      // in_flight_max here, or the sink: nothing appended, try again later
    kTooLarge,  // the SEND's headers, re-encoded, exceed the scratch
    kRefused,   // the sink refused it for good: *why says why
  };

  // in_flight_max appends at a time; headers re-encoded into header_scratch_bytes; the sink's
  // answers taken done_batch at a time. Before the first append: nothing allocates later.
  void init(size_t in_flight_max, size_t header_scratch_bytes, size_t done_batch) {
    SLUICE_ASSERT(in_flight_max > 0 && header_scratch_bytes > 0 && done_batch > 0);
    refs_.resize(in_flight_max);
    scratch_ = std::make_unique<char[]>(header_scratch_bytes);
    scratch_bytes_ = header_scratch_bytes;
    done_.resize(done_batch);
  }

  // Appends a session's SEND (ev.kind kAppend): its headers as STOMP 1.2, then the body.
  Outcome append(SpillSink& sink, const session::SpillEvent& ev, uint32_t slot, uint32_t gen,
                 std::string_view* why) {
    SLUICE_ASSERT(ev.kind == session::SpillEvent::Kind::kAppend && ev.frame != nullptr);
    if (count_ == refs_.size()) return Outcome::kBusy;
    auto headers =
        session::spill_record_headers(*ev.frame, std::span<char>(scratch_.get(), scratch_bytes_));
    if (!headers) return Outcome::kTooLarge;
    const uint64_t token = next_token_ + 1;
    switch (sink.append(token, ev.key.vhost, ev.key.queue, *headers, ev.frame->body(), why)) {
      case SpillSink::Result::kQueued:
        next_token_ = token;
        refs_[(head_ + count_) % refs_.size()] = Ref{token, slot, gen, ev.token};
        ++count_;
        return Outcome::kQueued;
      case SpillSink::Result::kBusy:
        return Outcome::kBusy;
      case SpillSink::Result::kRefused:
        return Outcome::kRefused;
    }
    return Outcome::kRefused;
  }

  // Takes the sink's answers, in append order: on_done(const Ref&, const SpillSink::Done&) for
  // each. True when there was any.
  template <class F>
  bool poll(SpillSink& sink, F&& on_done) {
    bool any = false;
    while (true) {
      const size_t n = sink.poll(std::span<SpillSink::Done>(done_));
      if (n == 0) break;
      any = true;
      for (size_t i = 0; i < n; ++i) {
        SLUICE_ASSERT(count_ > 0);
        const Ref r = refs_[head_];
        SLUICE_ASSERT(r.token == done_[i].token);  // the sink answers in append order
        head_ = (head_ + 1) % refs_.size();
        --count_;
        on_done(r, done_[i]);
      }
      if (n < done_.size()) break;
    }
    return any;
  }

  size_t in_flight() const { return count_; }

 private:
  std::vector<Ref> refs_;  // a ring: count_ from head_
  size_t head_ = 0;
  size_t count_ = 0;
  uint64_t next_token_ = 0;
  std::vector<SpillSink::Done> done_;
  std::unique_ptr<char[]> scratch_;
  size_t scratch_bytes_ = 0;
};

}  // namespace sluice::uring
