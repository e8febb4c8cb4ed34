// The order, loss and duplicate checker: every message is one (producer, queue) stream's
// sequence number; the checker hands them out, records receipts and deliveries, and at the end
// says what was lost, duplicated or delivered out of order. Sans I/O, single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace sluice::load {

struct CheckTotals {
  uint64_t sent = 0;
  uint64_t acknowledged = 0;  // receipted (every sent message when receipts are off)
  uint64_t received = 0;      // first deliveries (duplicates not included)
  uint64_t duplicated = 0;    // deliveries of a message already received
  uint64_t out_of_order = 0;  // a message older than one the same consumer had from its producer
  uint64_t lost = 0;          // sent and never received
  uint64_t lost_acknowledged = 0;  // of those, acknowledged: the broker's promise was broken
};

class Checker {
 public:
  // Sequence numbers tracked per run (two bits each): bounds the checker's memory at
  // 2 * kTrackedMessagesMax / 8 bytes. Producers stop when it is reached.
  static constexpr uint64_t kTrackedMessagesMax = uint64_t(1) << 30;

  Checker(uint32_t queues, uint32_t producers);

  // The next sequence number of the stream, or ~0 when the run's tracking limit is reached.
  uint64_t next_seq(uint32_t producer, uint32_t queue);
  void on_acknowledged(uint32_t producer, uint32_t queue, uint64_t seq);

  enum class Verdict : uint8_t { kInOrder, kDuplicate, kOutOfOrder, kUnknown };
  // A delivery to `consumer` (any id unique per subscription) from `queue`. kUnknown: no such
  // producer or queue, or a sequence number never sent (counted in unknown()).
  Verdict on_received(uint32_t consumer, uint32_t queue, uint32_t producer, uint64_t seq);

  // Messages sent and not yet received: what consumers still wait for at the end of a run.
  uint64_t outstanding() const { return totals_.sent - totals_.received; }
  uint64_t unknown() const { return unknown_; }
  uint32_t queues() const { return queues_; }
  // Counters so far without the loss scan (lost fields zero): cheap, for progress lines.
  const CheckTotals& counts() const { return totals_; }
  // Totals so far; lost and lost_acknowledged are counted over every stream (a scan).
  CheckTotals totals() const;
  // The same for one queue (sent, acknowledged, received, duplicated, lost).
  CheckTotals queue_totals(uint32_t queue) const;

 private:
  struct Stream {
    uint64_t sent = 0;
    std::vector<uint64_t> acked;     // bit per seq
    std::vector<uint64_t> received;  // bit per seq
    uint64_t acked_count = 0;
    uint64_t received_count = 0;
    uint64_t duplicated = 0;
    uint64_t out_of_order = 0;
  };
  Stream& stream(uint32_t producer, uint32_t queue) {
    return streams_[size_t(producer) * queues_ + queue];
  }
  void lost_of(const Stream& s, CheckTotals* t) const;

  uint32_t queues_;
  uint32_t producers_;
  std::vector<Stream> streams_;
  // Per (consumer, producer): one past the highest seq that consumer had from that producer.
  std::unordered_map<uint64_t, uint64_t> order_;
  CheckTotals totals_;
  uint64_t tracked_ = 0;
  uint64_t unknown_ = 0;
};

}  // namespace sluice::load
