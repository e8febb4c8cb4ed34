// The order, loss and duplicate checker's bookkeeping.
#include "tools/sluice-load/checker.h"

#include <bit>

namespace sluice::load {

namespace {
bool test_bit(const std::vector<uint64_t>& v, uint64_t i) {
  return i / 64 < v.size() && (v[i / 64] >> (i % 64)) & 1u;
}
void set_bit(std::vector<uint64_t>& v, uint64_t i) {
  if (i / 64 >= v.size()) v.resize(i / 64 + 1, 0);
  v[i / 64] |= uint64_t(1) << (i % 64);
}
}  // namespace

Checker::Checker(uint32_t queues, uint32_t producers)
    : queues_(queues), producers_(producers), streams_(size_t(queues) * producers) {}

uint64_t Checker::next_seq(uint32_t producer, uint32_t queue) {
  if (tracked_ >= kTrackedMessagesMax) return ~uint64_t(0);
  ++tracked_;
  ++totals_.sent;
  return stream(producer, queue).sent++;
}

void Checker::on_acknowledged(uint32_t producer, uint32_t queue, uint64_t seq) {
  if (producer >= producers_ || queue >= queues_) return;
  Stream& s = stream(producer, queue);
  if (seq >= s.sent || test_bit(s.acked, seq)) return;
  set_bit(s.acked, seq);
  ++s.acked_count;
  ++totals_.acknowledged;
}

Checker::Verdict Checker::on_received(uint32_t consumer, uint32_t queue, uint32_t producer,
                                      uint64_t seq) {
  if (producer >= producers_ || queue >= queues_ || seq >= stream(producer, queue).sent) {
    ++unknown_;
    return Verdict::kUnknown;
  }
  Stream& s = stream(producer, queue);
  if (test_bit(s.received, seq)) {
    ++s.duplicated;
    ++totals_.duplicated;
    return Verdict::kDuplicate;
  }
  set_bit(s.received, seq);
  ++s.received_count;
  ++totals_.received;
  // Order is a per-consumer property: competing consumers of one queue each see the queue's
  // order, but the interleaving between them is up to the broker and the network.
  uint64_t& next = order_[(uint64_t(consumer) << 32) | producer];
  if (seq < next) {
    ++s.out_of_order;
    ++totals_.out_of_order;
    return Verdict::kOutOfOrder;
  }
  next = seq + 1;
  return Verdict::kInOrder;
}

void Checker::lost_of(const Stream& s, CheckTotals* t) const {
  const uint64_t words = (s.sent + 63) / 64;
  for (uint64_t w = 0; w < words; ++w) {
    const uint64_t valid =
        (w + 1) * 64 <= s.sent ? ~uint64_t(0) : (uint64_t(1) << (s.sent % 64)) - 1;
    const uint64_t got = w < s.received.size() ? s.received[w] : 0;
    const uint64_t acked = w < s.acked.size() ? s.acked[w] : 0;
    const uint64_t missing = ~got & valid;
    t->lost += uint64_t(std::popcount(missing));
    t->lost_acknowledged += uint64_t(std::popcount(missing & acked));
  }
}

CheckTotals Checker::totals() const {
  CheckTotals t = totals_;
  t.lost = t.lost_acknowledged = 0;
  for (const Stream& s : streams_)
    lost_of(s, &t);
  return t;
}

CheckTotals Checker::queue_totals(uint32_t queue) const {
  CheckTotals t;
  if (queue >= queues_) return t;
  for (uint32_t p = 0; p < producers_; ++p) {
    const Stream& s = streams_[size_t(p) * queues_ + queue];
    t.sent += s.sent;
    t.acknowledged += s.acked_count;
    t.received += s.received_count;
    t.duplicated += s.duplicated;
    t.out_of_order += s.out_of_order;
    lost_of(s, &t);
  }
  return t;
}

}  // namespace sluice::load
