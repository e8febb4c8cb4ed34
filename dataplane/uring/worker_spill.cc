// Spill sessions: the owner cannot be reached (or the queue's backlog must drain first), so the
// worker terminates STOMP itself; every SEND goes to the spill log and its RECEIPT goes out only
// once the log says the record is durable (DESIGN sections 3 and 6).
#include <array>
#include <cstring>

#include "base/assert.h"
#include "dataplane/session/builder.h"
#include "dataplane/uring/worker.h"

namespace sluice::uring::detail {

namespace {

constexpr std::string_view kTxnRefused = "transaction refused: owner unavailable";

}  // namespace

void Worker::start_spill(uint32_t slot) {
  Session& s = sessions_[slot];
  s.node = kNone;
  if (parts_.spill == nullptr || parts_.hooks == nullptr) {
    bump(counters_.refused_route);
    close_with_error(slot, "owner unavailable, retry later",
                     "the queue's owner cannot be reached and this gateway has no spill log");
    return;
  }
  if (preludes_.object(s.prelude_slot).prelude->key().default_route) {
    // Only owned queues have a backlog the drainer can deliver.
    bump(counters_.refused_route);
    close_with_error(slot, "owner unavailable, retry later",
                     "the node chosen for this destination cannot be reached");
    return;
  }
  const uint32_t k = spills_.count() > 0 ? spills_.take() : kNone;
  if (k == kNone) {
    bump(counters_.refused_spill_max);
    close_with_error(slot, "owner unavailable, retry later",
                     "the queue's owner cannot be reached and the gateway serves as many "
                     "spill sessions as it may");
    return;
  }
  s.spill_slot = k;
  s.state = State::kSpill;
  bump(counters_.spilled);
  bump(counters_.spilling);
  SpillSlot& ss = spills_.object(k);
  PreludeSlot& ps = preludes_.object(s.prelude_slot);
  const session::QueueKey& key = ps.prelude->key();
  ss.vhost_len = uint32_t(key.vhost.size());
  ss.queue_len = uint32_t(key.queue.size());
  std::memcpy(ss.vhost, key.vhost.data(), ss.vhost_len);
  std::memcpy(ss.queue, key.queue.data(), ss.queue_len);
  ss.held = false;
  ss.dirty = false;
  ss.busy_listed = false;
  ss.refuse_appends = 0;
  ss.in_off = 0;
  ss.in_len = ps.carry_len;
  std::memcpy(ss.in, ps.carry, ps.carry_len);
  const size_t spill_buf =
      session::spill_buffer_bytes(config_, options_.spill_limits.txn_bytes_max);
  ss.spill.emplace(config_, options_.spill_limits, std::span<char>(ss.buf, spill_buf),
                   *parts_.hooks);
  ss.spill->start(*ps.prelude, login_ticket(slot, s.gen));
  release_prelude(slot);
  s.end_requested = false;
  drive_spill(slot);
}

void Worker::on_recv_spill(uint32_t slot, std::string_view bytes) {
  Session& s = sessions_[slot];
  SpillSlot& ss = spills_.object(s.spill_slot);
  SLUICE_ASSERT(ss.in_len == 0);
  std::memcpy(ss.in, bytes.data(), bytes.size());
  ss.in_off = 0;
  ss.in_len = uint32_t(bytes.size());
  drive_spill(slot);
}

void Worker::drive_spill(uint32_t slot) {
  Session& s = sessions_[slot];
  if (s.state != State::kSpill) return;
  SpillSlot& ss = spills_.object(s.spill_slot);
  if (ss.held) {
    if (!act_spill(slot, ss.held_event)) return;
    ss.held = false;
    if (s.state != State::kSpill) return;
  }
  // Bounded: each pass either acts on an event or feeds bytes; the session stops producing
  // events once receipts_pending_max receipts wait.
  for (int guard = 0; guard < 100000; ++guard) {
    session::SpillEvent ev = ss.spill->next();
    if (ev.kind == session::SpillEvent::Kind::kNeedMore) {
      if (ss.in_len > 0) {
        const size_t n = ss.spill->feed(std::string_view(ss.in + ss.in_off, ss.in_len));
        ss.in_off += uint32_t(n);
        ss.in_len -= uint32_t(n);
        if (n > 0) continue;
        return;
      }
      if (!s.closing_after_send()) arm_recv_client(slot);
      return;
    }
    if (ev.kind == session::SpillEvent::Kind::kWaitDurable ||
        ev.kind == session::SpillEvent::Kind::kWaitLogin) {
      return;
    }
    if (!act_spill(slot, ev)) {
      ss.held = true;
      ss.held_event = ev;
      return;
    }
    if (s.state != State::kSpill || s.closing_after_send()) return;
  }
}

// False: the event could not be acted on yet (keep it, retry after a send or a completion).
bool Worker::act_spill(uint32_t slot, const session::SpillEvent& ev) {
  Session& s = sessions_[slot];
  SpillSlot& ss = spills_.object(s.spill_slot);
  switch (ev.kind) {
    case session::SpillEvent::Kind::kReply:
      return queue_out(slot, ev.to_client);
    case session::SpillEvent::Kind::kAppend: {
      if (ss.refuse_appends > 0) {
        --ss.refuse_appends;
        ss.spill->on_append_failed(ev.token, kTxnRefused);
        return true;
      }
      std::string_view why;
      switch (appends_.append(*parts_.spill, ev, slot, s.gen, &why)) {
        case SpillAppends::Outcome::kQueued:
          bump(counters_.appends);
          return true;
        case SpillAppends::Outcome::kBusy:
          note_spill_busy(slot);
          bump(counters_.appends_busy);
          return false;
        case SpillAppends::Outcome::kTooLarge:
          ss.spill->on_append_failed(ev.token, "message headers too large for the spill log");
          return true;
        case SpillAppends::Outcome::kRefused:
          ss.spill->on_append_failed(ev.token, why);
          return true;
      }
      return true;
    }
    case session::SpillEvent::Kind::kBatchBegin:
      // The spill log appends record by record: a refusal (spill full) in the middle of a
      // transaction would leave half of it. Until the log has an atomic batch append, a
      // transaction of more than one SEND is refused whole, before anything is appended.
      if (ev.batch_count > 1) ss.refuse_appends = ev.batch_count;
      return true;
    case session::SpillEvent::Kind::kBatchEnd:
      return true;
    case session::SpillEvent::Kind::kClose:
      bump(counters_.spill_end[size_t(ev.end)]);
      send_then_close(slot, ev.to_client);
      return true;
    default:
      return true;
  }
}

void Worker::note_spill_busy(uint32_t slot) {
  SpillSlot& ss = spills_.object(sessions_[slot].spill_slot);
  if (ss.busy_listed) return;
  ss.busy_listed = true;
  spill_busy_.push_back(slot);
}

void Worker::poll_spill() {
  if (parts_.spill == nullptr) return;
  const bool any =
      appends_.poll(*parts_.spill, [this](const SpillAppends::Ref& r, const SpillSink::Done& d) {
        Session& s = sessions_[r.slot];
        if (s.gen != r.gen || s.state != State::kSpill) return;  // the session has gone
        SpillSlot& ss = spills_.object(s.spill_slot);
        if (d.durable) {
          ss.spill->on_durable(r.session_token);
        } else {
          ss.spill->on_append_failed(r.session_token, d.message);
        }
        if (!ss.dirty) {
          ss.dirty = true;
          spill_dirty_.push_back(r.slot);
        }
      });
  if (!any && spill_busy_.empty()) return;
  // Sessions whose appends completed, then those holding an append the sink was too busy for
  // (retried every loop: at most kWaitMax apart). Each list holds a session at most once.
  std::vector<uint32_t> work;
  work.swap(spill_dirty_);
  work.insert(work.end(), spill_busy_.begin(), spill_busy_.end());
  spill_busy_.clear();
  for (uint32_t slot : work) {
    Session& s = sessions_[slot];
    if (s.state != State::kSpill) continue;
    SpillSlot& ss = spills_.object(s.spill_slot);
    ss.dirty = false;
    ss.busy_listed = false;
    drive_spill(slot);
  }
  work.clear();
  if (spill_dirty_.empty()) spill_dirty_.swap(work);  // keep the capacity
}

// Spill logins checked on another thread: each answer goes to its session, unless the session
// has ended meanwhile (its slot free or taken again: the generation differs).
void Worker::poll_login_answers() {
  std::array<LoginAnswers::Answer, 64> answers;
  for (;;) {
    const size_t n = parts_.login_answers->poll(answers);
    for (size_t i = 0; i < n; ++i) {
      const auto slot = uint32_t(answers[i].ticket >> 32);
      const auto gen = uint32_t(answers[i].ticket);
      SLUICE_ASSERT(slot < sessions_.size());
      Session& s = sessions_[slot];
      if (s.gen != gen || s.state != State::kSpill) continue;
      spills_.object(s.spill_slot).spill->on_login_checked(answers[i].accepted);
      drive_spill(slot);
    }
    if (n < answers.size()) return;
  }
}

}  // namespace sluice::uring::detail
