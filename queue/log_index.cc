// LogIndex: the queues, their backlogs and cursors, and the segment map, as the spill thread
// changes them and the read side sees them.
#include "queue/log_index.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "queue/recovery.h"

namespace sluice::queue {

SegmentFile::~SegmentFile() {
  if (fd >= 0) ::close(fd);
  if (direct_fd >= 0) ::close(direct_fd);
}

void log_spill_event(const SpillOptions& opt, LogSeverity s, std::string_view event,
                     std::initializer_list<LogField> fields) {
  if (opt.log) opt.log(s, event, std::span<const LogField>(fields.begin(), fields.size()));
}

void LogIndex::make_key(std::string& key, std::string_view vhost, std::string_view queue) {
  key.clear();
  const uint16_t n = uint16_t(vhost.size());
  key.append(reinterpret_cast<const char*>(&n), 2);
  key.append(vhost);
  key.append(queue);
}

QueueState* LogIndex::find_queue(std::string_view vhost, std::string_view queue) const {
  std::string k;
  make_key(k, vhost, queue);
  auto it = ids_.find(k);
  return it == ids_.end() ? nullptr : queues_[it->second].get();
}

// ---- the read side -------------------------------------------------------------------------

size_t LogIndex::locate(std::string_view vhost, std::string_view queue, uint64_t after_seq,
                        std::span<RecordLocation> out) const {
  base::MutexLock l(mu_);
  const QueueState* q = find_queue(vhost, queue);
  if (!q || out.empty()) return 0;
  size_t n = 0;
  const SegmentState* seg = nullptr;
  for (size_t i = q->backlog.upper_bound(after_seq); i < q->backlog.size() && n < out.size();
       ++i, ++n) {
    const Entry& e = q->backlog[i];
    if (!seg || seg->file->number != e.segment) seg = &segments_.at(e.segment);
    out[n] = RecordLocation{seg->file, e.seq, e.offset, e.bytes};
  }
  return n;
}

bool LogIndex::request_delivered(std::string_view vhost, std::string_view queue, uint64_t seq) {
  base::MutexLock l(mu_);
  QueueState* q = find_queue(vhost, queue);
  if (!q) return false;
  if (seq <= q->delivered_req) return true;
  q->delivered_req = seq;
  if (!q->delivered_dirty) {
    q->delivered_dirty = true;
    make_key(key_, vhost, queue);
    delivered_list_.push_back(ids_.at(key_));
  }
  return true;
}

namespace {
QueueStats stats_of(const QueueState& q) {
  QueueStats st{q.vhost, q.queue, q.backlog.size(), q.backlog_bytes, q.pending, 0, 0, q.cursor};
  if (!q.backlog.empty()) {
    st.oldest_seq = q.backlog.front().seq;
    st.oldest_append_unix_ns = q.backlog.front().append_unix_ns;
  }
  return st;
}
}  // namespace

std::vector<QueueStats> LogIndex::stats() const {
  base::MutexLock l(mu_);
  std::vector<QueueStats> out;
  for (const auto& q : queues_)
    if (q) out.push_back(stats_of(*q));
  return out;
}

std::optional<QueueStats> LogIndex::stats(std::string_view vhost, std::string_view queue) const {
  base::MutexLock l(mu_);
  const QueueState* q = find_queue(vhost, queue);
  if (!q) return std::nullopt;
  return stats_of(*q);
}

bool LogIndex::deliveries_requested() const {
  base::MutexLock l(mu_);
  return !delivered_list_.empty();
}

// ---- recovery ------------------------------------------------------------------------------

void LogIndex::adopt(RecoveredLog& rec, const CursorSnapshot& cursors, RecoveryReport* report) {
  base::MutexLock l(mu_);  // no other thread runs yet; the helpers' annotations ask for it
  std::unordered_map<std::string, uint64_t> cursor_of;
  for (const CursorEntry& c : cursors.entries) {
    make_key(key_, c.vhost, c.queue);
    cursor_of[key_] = c.delivered_seq;
  }
  std::vector<uint32_t> qmap(rec.queue_names.size());
  for (size_t i = 0; i < rec.queue_names.size(); ++i) {
    qmap[i] = queue_index_locked(rec.queue_names[i].first, rec.queue_names[i].second);
    auto it = cursor_of.find(key_);
    if (it != cursor_of.end()) queues_[qmap[i]]->cursor = it->second;
  }
  uint64_t disk = 0;
  for (RecoveredSegment& rs : rec.segments) {
    SegmentState seg;
    seg.file = std::make_shared<SegmentFile>();
    seg.file->number = rs.number;
    seg.file->path = rs.path;
    seg.file->fd = rs.fd;
    seg.messages = rs.messages.size();
    seg.last_seq = rs.messages.empty() ? 0 : rs.messages.back().seq;
    seg.durable_end = seg.write_end = seg.disk_bytes = rs.file_bytes;
    seg.sealed = true;  // recovery sealed the last one; new appends go to a new segment
    disk += rs.file_bytes;
    for (const ScannedMessage& m : rs.messages) {
      QueueState& q = *queues_[qmap[rs.queue_of_define[m.define]]];
      q.last_segment = rs.number;
      if (m.seq <= q.cursor) {
        ++report->messages_delivered;
        continue;
      }
      q.backlog.push_back({m.seq, m.append_unix_ns, rs.number, m.offset, m.bytes});
      q.backlog_bytes += m.bytes;
      ++seg.live;
      ++report->messages;
    }
    segments_.emplace(rs.number, std::move(seg));
  }
  metrics_.disk_bytes.store(disk, std::memory_order_relaxed);
  // The cursor file that says these are delivered is already on disk.
  for (auto it = segments_.begin(); it != segments_.end();) {
    auto next = std::next(it);
    if (it->second.live == 0 && next != segments_.end()) {
      ++report->segments_deleted;
      delete_segment(it);
    }
    it = next;
  }
}

uint64_t LogIndex::count_backlogs(RecoveryReport* report) {
  base::MutexLock l(mu_);
  uint64_t backlog = 0;
  for (uint32_t qi = 0; qi < queues_.size(); ++qi) {
    if (!queues_[qi]) continue;
    backlog += queues_[qi]->backlog.size();
    if (!queues_[qi]->backlog.empty()) ++report->queues;
    note_backlog(qi);
  }
  return backlog;
}

// ---- the spill thread ----------------------------------------------------------------------

uint32_t LogIndex::queue_index(std::string_view vhost, std::string_view queue) {
  base::MutexLock l(mu_);
  return queue_index_locked(vhost, queue);
}

uint32_t LogIndex::queue_index_locked(std::string_view vhost, std::string_view queue) {
  make_key(key_, vhost, queue);
  auto it = ids_.find(key_);
  if (it != ids_.end()) return it->second;
  const uint32_t i = uint32_t(queues_.size());
  auto q = std::make_unique<QueueState>(&chunks_);
  q->vhost = std::string(vhost);
  q->queue = std::string(queue);
  queues_.push_back(std::move(q));
  ids_.emplace(key_, i);
  return i;
}

void LogIndex::add_pending(uint32_t qi, uint64_t bytes) {
  base::MutexLock l(mu_);
  QueueState& q = *queues_[qi];
  ++q.pending;
  q.pending_bytes += bytes;
  note_backlog(qi);
}

void LogIndex::drop_oldest(uint32_t qi) {
  base::MutexLock l(mu_);
  drop_front(*queues_[qi], qi);
}

void LogIndex::note_backlog(uint32_t qi) {
  QueueState& q = *queues_[qi];
  const bool now = q.pending + q.backlog.size() > 0;
  if (now != q.nonempty) {
    q.nonempty = now;
    events_.emplace_back(qi, now);
  }
}

void LogIndex::fire_events() {
  if (events_.empty()) return;
  if (opt_.on_backlog) {
    for (auto [qi, nonempty] : events_) {
      const QueueState& q = writer_queue(qi);  // pruned only when empty and reported, after this
      opt_.on_backlog(BacklogEvent{q.vhost, q.queue, nonempty});
    }
  }
  events_.clear();
}

uint64_t LogIndex::make_durable(uint64_t segment, uint64_t durable_end,
                                std::span<const BatchEntry> entries, bool seals) {
  base::MutexLock l(mu_);
  SegmentState& seg = segments_.at(segment);
  seg.durable_end = durable_end;
  uint64_t n = 0;
  for (const BatchEntry& e : entries) {
    if (e.status != AppendStatus::kDurable) continue;
    QueueState& q = *queues_[e.queue];
    --q.pending;
    q.pending_bytes -= e.bytes;
    q.backlog.push_back({e.seq, e.append_unix_ns, segment, e.offset, e.bytes});
    q.backlog_bytes += e.bytes;
    q.last_segment = segment;
    ++seg.live;
    ++seg.messages;
    ++n;
  }
  if (seals) {
    seg.sealed = true;
    seg.sealing = false;
  }
  return n;
}

uint64_t LogIndex::fail_pending(std::span<BatchEntry> entries, std::span<const uint32_t> defined,
                                AppendStatus st) {
  base::MutexLock l(mu_);
  uint64_t n = 0;
  for (BatchEntry& e : entries) {
    if (e.status != AppendStatus::kDurable) continue;
    e.status = st;
    ++n;
    QueueState& q = *queues_[e.queue];
    --q.pending;
    q.pending_bytes -= e.bytes;
    note_backlog(e.queue);
  }
  for (uint32_t qi : defined)
    queues_[qi]->defined_in = UINT64_MAX;
  return n;
}

std::optional<uint64_t> LogIndex::apply_deliveries() {
  base::MutexLock l(mu_);
  if (delivered_list_.empty()) return std::nullopt;
  uint64_t popped = 0;
  for (uint32_t qi : delivered_list_) {
    QueueState& q = *queues_[qi];
    q.delivered_dirty = false;
    while (!q.backlog.empty() && q.backlog.front().seq <= q.delivered_req) {
      const Entry& e = q.backlog.front();
      --segments_.at(e.segment).live;
      q.backlog_bytes -= e.bytes;
      // Only durable messages move the cursor: one still in flight stays undelivered.
      q.cursor = std::max(q.cursor, e.seq);
      q.backlog.pop_front();
      ++popped;
    }
    note_backlog(qi);
  }
  delivered_list_.clear();
  return popped;
}

void LogIndex::drop_front(QueueState& q, uint32_t qi) {
  const Entry& e = q.backlog.front();
  --segments_.at(e.segment).live;
  q.backlog_bytes -= e.bytes;
  q.cursor = std::max(q.cursor, e.seq);
  q.backlog.pop_front();
  metrics_.dropped.fetch_add(1, std::memory_order_relaxed);
  metrics_.backlog_messages.fetch_sub(1, std::memory_order_relaxed);
  note_backlog(qi);
}

CursorSnapshot LogIndex::snapshot(uint64_t seq_high) const {
  base::MutexLock l(mu_);
  CursorSnapshot s;
  s.seq_high = seq_high;
  for (const auto& q : queues_)
    if (q && q->cursor > 0) s.entries.push_back({q->vhost, q->queue, q->cursor});
  return s;
}

void LogIndex::delete_segment(std::map<uint64_t, SegmentState>::iterator it) {
  // A file that stays (EIO, a changed mode) holds only delivered messages, but once their
  // queues' cursors are pruned a restart would deliver them again: said, for the operator to
  // remove it.
  if (::unlink(it->second.file->path.c_str()) != 0 && errno != ENOENT) {
    log_spill_event(opt_, LogSeverity::kWarn, "spill_segment_unlink_failed",
                    {{"file", it->second.file->path}, {"error", std::strerror(errno)}});
  }
  metrics_.disk_bytes.fetch_sub(it->second.disk_bytes, std::memory_order_relaxed);
  metrics_.segments_deleted.fetch_add(1, std::memory_order_relaxed);
  segments_.erase(it);  // readers holding a location keep the file open
}

void LogIndex::prune_queues(uint64_t active) {
  // A queue with nothing pending and no message left in any segment needs neither its state
  // nor its cursor: nothing on disk could be mistaken for undelivered.
  for (uint32_t qi = 0; qi < queues_.size(); ++qi) {
    QueueState* q = queues_[qi].get();
    if (!q || q->pending || !q->backlog.empty() || q->delivered_dirty || q->nonempty) continue;
    // Segments are deleted out of order (a slow queue keeps an old one alive): every segment
    // that may hold this queue's messages, up to its newest, must be gone.
    if (!segments_.empty() && segments_.begin()->first <= q->last_segment) continue;
    if (q->defined_in == active) continue;
    make_key(key_, q->vhost, q->queue);
    ids_.erase(key_);
    queues_[qi].reset();
  }
}

bool LogIndex::delete_delivered(uint64_t active, uint64_t next_gen, uint64_t persisted_gen) {
  bool deleted = false, waiting = false;
  base::MutexLock l(mu_);
  if (segments_.empty()) return false;
  const uint64_t newest = segments_.rbegin()->first;
  for (auto it = segments_.begin(); it != segments_.end();) {
    auto next = std::next(it);
    SegmentState& s = it->second;
    if (it->first != newest && it->first != active && s.sealed && s.live == 0) {
      if (s.delete_gen == 0) {
        // Deleted only once a cursor file covering its messages is on disk, so a crash
        // never brings back (as undelivered) what the old cursor file does not cover.
        s.delete_gen = next_gen;
        waiting = true;
      } else if (persisted_gen >= s.delete_gen) {
        delete_segment(it);
        deleted = true;
      }
    }
    it = next;
  }
  if (deleted) prune_queues(active);
  return waiting;
}

std::optional<uint64_t> LogIndex::drop_oldest_segment(uint64_t active) {
  base::MutexLock l(mu_);
  auto oldest = segments_.begin();
  if (oldest == segments_.end() || oldest->first == active || !oldest->second.sealed)
    return std::nullopt;
  uint64_t dropped = 0;
  for (uint32_t qi = 0; qi < queues_.size(); ++qi) {
    QueueState* q = queues_[qi].get();
    for (; q && !q->backlog.empty() && q->backlog.front().segment == oldest->first; ++dropped)
      drop_front(*q, qi);
  }
  delete_segment(oldest);
  prune_queues(active);
  return dropped;
}

void LogIndex::add_segment(uint64_t number, SegmentState seg) {
  base::MutexLock l(mu_);
  segments_.emplace(number, std::move(seg));
}

void LogIndex::top_up_chunks() {
  size_t n;
  {
    base::MutexLock l(mu_);
    n = chunks_.missing();
  }
  if (n == 0) return;
  for (size_t i = 0; i < n; ++i)
    fresh_chunks_.push_back(EntryChunks::fresh());
  base::MutexLock l(mu_);
  chunks_.add(fresh_chunks_);
}

}  // namespace sluice::queue
