// sluice-load's order, loss and duplicate checker.
#include <gtest/gtest.h>

#include "tools/sluice-load/checker.h"

namespace sluice::load {
namespace {

using V = Checker::Verdict;

void send(Checker& c, uint32_t producer, uint32_t queue, int n, bool ack = true) {
  for (int i = 0; i < n; ++i) {
    const uint64_t seq = c.next_seq(producer, queue);
    if (ack) c.on_acknowledged(producer, queue, seq);
  }
}

TEST(LoadChecker, InOrderDeliveryIsClean) {
  Checker c(1, 1);
  send(c, 0, 0, 100);
  for (uint64_t s = 0; s < 100; ++s)
    EXPECT_EQ(c.on_received(0, 0, 0, s), V::kInOrder);
  const CheckTotals t = c.totals();
  EXPECT_EQ(t.sent, 100u);
  EXPECT_EQ(t.acknowledged, 100u);
  EXPECT_EQ(t.received, 100u);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_EQ(t.duplicated, 0u);
  EXPECT_EQ(t.out_of_order, 0u);
  EXPECT_EQ(c.outstanding(), 0u);
}

TEST(LoadChecker, SequenceNumbersArePerProducerAndQueue) {
  Checker c(2, 2);
  EXPECT_EQ(c.next_seq(0, 0), 0u);
  EXPECT_EQ(c.next_seq(0, 0), 1u);
  EXPECT_EQ(c.next_seq(0, 1), 0u);
  EXPECT_EQ(c.next_seq(1, 0), 0u);
}

TEST(LoadChecker, AMissingMessageIsLostNotOutOfOrder) {
  Checker c(1, 1);
  send(c, 0, 0, 10);
  for (uint64_t s = 0; s < 10; ++s)
    if (s != 4) {
      EXPECT_EQ(c.on_received(0, 0, 0, s), V::kInOrder);
    }
  const CheckTotals t = c.totals();
  EXPECT_EQ(t.lost, 1u);
  EXPECT_EQ(t.lost_acknowledged, 1u);
  EXPECT_EQ(t.out_of_order, 0u);
  EXPECT_EQ(c.outstanding(), 1u);
}

TEST(LoadChecker, LossOfAnUnacknowledgedMessageIsNotLossOfAnAcknowledgedOne) {
  Checker c(1, 1);
  send(c, 0, 0, 3);
  send(c, 0, 0, 1, /*ack=*/false);
  for (uint64_t s = 0; s < 3; ++s)
    c.on_received(0, 0, 0, s);
  const CheckTotals t = c.totals();
  EXPECT_EQ(t.lost, 1u);
  EXPECT_EQ(t.lost_acknowledged, 0u);
  EXPECT_EQ(t.acknowledged, 3u);
}

TEST(LoadChecker, ASecondDeliveryIsADuplicate) {
  Checker c(1, 1);
  send(c, 0, 0, 3);
  EXPECT_EQ(c.on_received(0, 0, 0, 0), V::kInOrder);
  EXPECT_EQ(c.on_received(0, 0, 0, 1), V::kInOrder);
  EXPECT_EQ(c.on_received(0, 0, 0, 1), V::kDuplicate);
  EXPECT_EQ(c.on_received(1, 0, 0, 0), V::kDuplicate);  // another consumer: still a duplicate
  EXPECT_EQ(c.on_received(0, 0, 0, 2), V::kInOrder);
  const CheckTotals t = c.totals();
  EXPECT_EQ(t.duplicated, 2u);
  EXPECT_EQ(t.received, 3u);
  EXPECT_EQ(t.lost, 0u);
}

TEST(LoadChecker, AnOlderMessageAfterANewerOneIsOutOfOrder) {
  Checker c(1, 1);
  send(c, 0, 0, 4);
  EXPECT_EQ(c.on_received(0, 0, 0, 0), V::kInOrder);
  EXPECT_EQ(c.on_received(0, 0, 0, 2), V::kInOrder);  // a gap so far
  EXPECT_EQ(c.on_received(0, 0, 0, 1), V::kOutOfOrder);
  EXPECT_EQ(c.on_received(0, 0, 0, 3), V::kInOrder);
  const CheckTotals t = c.totals();
  EXPECT_EQ(t.out_of_order, 1u);
  EXPECT_EQ(t.lost, 0u);
  EXPECT_EQ(t.received, 4u);
}

TEST(LoadChecker, CompetingConsumersEachKeepTheirOwnOrder) {
  // Two consumers of one queue split one producer's stream: each sees an increasing subset,
  // whatever the interleaving between them.
  Checker c(1, 1);
  send(c, 0, 0, 6);
  EXPECT_EQ(c.on_received(1, 0, 0, 1), V::kInOrder);
  EXPECT_EQ(c.on_received(1, 0, 0, 3), V::kInOrder);
  EXPECT_EQ(c.on_received(0, 0, 0, 0), V::kInOrder);
  EXPECT_EQ(c.on_received(0, 0, 0, 2), V::kInOrder);
  EXPECT_EQ(c.on_received(1, 0, 0, 5), V::kInOrder);
  EXPECT_EQ(c.on_received(0, 0, 0, 4), V::kInOrder);
  EXPECT_EQ(c.totals().out_of_order, 0u);
  EXPECT_EQ(c.totals().lost, 0u);
}

TEST(LoadChecker, ManyProducersAndQueuesAreCheckedSeparately) {
  Checker c(3, 4);
  for (uint32_t p = 0; p < 4; ++p)
    for (uint32_t q = 0; q < 3; ++q)
      send(c, p, q, 100);
  // Interleave producers; within each (producer, queue) stream keep order, except: queue 1
  // loses producer 2's seq 50, queue 2 gets producer 3's seq 10 twice.
  for (uint64_t s = 0; s < 100; ++s)
    for (uint32_t p = 0; p < 4; ++p)
      for (uint32_t q = 0; q < 3; ++q) {
        if (q == 1 && p == 2 && s == 50) continue;
        EXPECT_EQ(c.on_received(q, q, p, s), V::kInOrder);
        if (q == 2 && p == 3 && s == 10) {
          EXPECT_EQ(c.on_received(q, q, p, s), V::kDuplicate);
        }
      }
  const CheckTotals t = c.totals();
  EXPECT_EQ(t.sent, 1200u);
  EXPECT_EQ(t.lost, 1u);
  EXPECT_EQ(t.duplicated, 1u);
  EXPECT_EQ(t.out_of_order, 0u);
  EXPECT_EQ(c.queue_totals(0).lost, 0u);
  EXPECT_EQ(c.queue_totals(1).lost, 1u);
  EXPECT_EQ(c.queue_totals(2).duplicated, 1u);
  EXPECT_EQ(c.queue_totals(1).sent, 400u);
  EXPECT_EQ(c.queue_totals(1).received, 399u);
}

TEST(LoadChecker, StrangersAreUnknownNotCounted) {
  Checker c(1, 1);
  send(c, 0, 0, 1);
  EXPECT_EQ(c.on_received(0, 0, 5, 0), V::kUnknown);  // no such producer
  EXPECT_EQ(c.on_received(0, 3, 0, 0), V::kUnknown);  // no such queue
  EXPECT_EQ(c.on_received(0, 0, 0, 9), V::kUnknown);  // never sent
  EXPECT_EQ(c.unknown(), 3u);
  EXPECT_EQ(c.totals().received, 0u);
}

TEST(LoadChecker, LossIsFoundAcrossBitmapWordBoundaries) {
  Checker c(1, 1);
  send(c, 0, 0, 130);
  for (uint64_t s = 0; s < 130; ++s)
    if (s != 63 && s != 64 && s != 129) c.on_received(0, 0, 0, s);
  EXPECT_EQ(c.totals().lost, 3u);
}

}  // namespace
}  // namespace sluice::load
