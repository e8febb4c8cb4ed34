// Unit tests of the DPDK splicer's pure building blocks: SYN cookies and sequence mapping.
#include <cstdint>
#include <optional>
#include <random>

#include <gtest/gtest.h>

#include "dataplane/dpdk/splice/seq_map.h"
#include "dataplane/dpdk/splice/syn_cookie.h"

namespace sluice::dpdk::splice {
namespace {

constexpr std::array<uint8_t, SynCookies::kKeyBytes> kKey = {
    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};

constexpr FlowKey kFlow{0x0a000001, 0x0a0000fe, 40000, 61613};

FlowKey random_flow(std::mt19937& rng) {
  return FlowKey{static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                 static_cast<uint16_t>(rng()), static_cast<uint16_t>(rng())};
}

TEST(SynCookie, RoundTripsEveryMssWindowScaleAndFlag) {
  const SynCookies cookies(kKey);
  uint32_t isn = 0x12345678;
  for (uint16_t mss : SynCookies::kMssTable) {
    for (int ws = -1; ws <= SynCookies::kWindowScaleMax; ++ws) {
      for (int flags = 0; flags < 4; ++flags) {
        SynOptions o;
        o.mss = mss;
        if (ws >= 0) o.window_scale = static_cast<uint8_t>(ws);
        o.sack_permitted = flags & 1;
        o.timestamps = flags & 2;
        isn = isn * 1664525u + 1013904223u;
        const uint32_t slot = isn >> 3;
        const uint32_t c = cookies.make(kFlow, isn, o, slot);
        const std::optional<SynOptions> got = cookies.check(kFlow, isn, c, slot);
        ASSERT_TRUE(got.has_value()) << "mss " << mss << " ws " << ws << " flags " << flags;
        EXPECT_EQ(*got, o);
      }
    }
  }
}

TEST(SynCookie, MssRoundsDownToTable) {
  const SynCookies cookies(kKey);
  const auto mss_of = [&](uint16_t client_mss) {
    SynOptions o;
    o.mss = client_mss;
    return cookies.check(kFlow, 7, cookies.make(kFlow, 7, o, 100), 100)->mss;
  };
  EXPECT_EQ(mss_of(1459), 1440);
  EXPECT_EQ(mss_of(1460), 1460);
  EXPECT_EQ(mss_of(9000), 8960);
  EXPECT_EQ(mss_of(65535), 8960);
  EXPECT_EQ(mss_of(536), 536);
  EXPECT_EQ(mss_of(100), 536);  // below the table: 536, as Linux does
}

TEST(SynCookie, WindowScaleAbove14IsClamped) {
  const SynCookies cookies(kKey);
  SynOptions o;
  o.window_scale = 200;
  const auto got = cookies.check(kFlow, 9, cookies.make(kFlow, 9, o, 5), 5);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->window_scale, std::optional<uint8_t>(14));
}

TEST(SynCookie, AcceptsPreviousSlotRejectsOlderAndFuture) {
  const SynCookies cookies(kKey);
  SynOptions o;
  o.window_scale = 7;
  o.sack_permitted = true;
  // Includes the counter's own wraparound and the 5-bit slot field's.
  for (uint32_t slot : {0u, 1u, 31u, 32u, 1000u, 0xFFFFFFFFu}) {
    const uint32_t c = cookies.make(kFlow, 42, o, slot);
    EXPECT_TRUE(cookies.check(kFlow, 42, c, slot).has_value()) << slot;
    EXPECT_TRUE(cookies.check(kFlow, 42, c, slot + 1).has_value()) << slot;
    EXPECT_FALSE(cookies.check(kFlow, 42, c, slot + 2).has_value()) << slot;
    EXPECT_FALSE(cookies.check(kFlow, 42, c, slot + 32).has_value()) << slot;
    EXPECT_FALSE(cookies.check(kFlow, 42, c, slot + 33).has_value()) << slot;
    EXPECT_FALSE(cookies.check(kFlow, 42, c, slot - 1).has_value()) << slot;
  }
}

TEST(SynCookie, DifferentKeyRejects) {
  const SynCookies cookies(kKey);
  std::array<uint8_t, SynCookies::kKeyBytes> other = kKey;
  other[3] ^= 1;
  const SynCookies cookies2(other);
  const uint32_t c = cookies.make(kFlow, 1, SynOptions{}, 10);
  EXPECT_TRUE(cookies.check(kFlow, 1, c, 10).has_value());
  EXPECT_FALSE(cookies2.check(kFlow, 1, c, 10).has_value());
}

TEST(SynCookie, EveryFlippedBitOfCookieOrTupleIsRejected) {
  const SynCookies cookies(kKey);
  std::mt19937 rng(20261130);
  uint32_t false_accepts = 0;
  constexpr int kTries = 100000;
  for (int t = 0; t < kTries; ++t) {
    const FlowKey k = random_flow(rng);
    const uint32_t isn = rng();
    const uint32_t slot = rng();
    SynOptions o;
    o.mss = SynCookies::kMssTable[rng() % 8];
    if (rng() % 16 != 15) o.window_scale = static_cast<uint8_t>(rng() % 15);
    o.sack_permitted = rng() & 1;
    o.timestamps = rng() & 1;
    const uint32_t c = cookies.make(k, isn, o, slot);
    ASSERT_TRUE(cookies.check(k, isn, c, slot).has_value());
    // One bit of the 128 bits of cookie, ISN, addresses and ports (the slot counter comes from
    // the gateway's clock, not the packet).
    const uint32_t bit = rng() % 128;
    FlowKey k2 = k;
    uint32_t isn2 = isn;
    uint32_t c2 = c;
    if (bit < 32) {
      c2 ^= 1u << bit;
    } else if (bit < 64) {
      isn2 ^= 1u << (bit - 32);
    } else if (bit < 96) {
      k2.saddr ^= 1u << (bit - 64);
    } else if (bit < 112) {
      k2.sport ^= static_cast<uint16_t>(1u << (bit - 96));
    } else {
      k2.dport ^= static_cast<uint16_t>(1u << (bit - 112));
    }
    if (cookies.check(k2, isn2, c2, slot).has_value()) ++false_accepts;
  }
  EXPECT_EQ(false_accepts, 0u);
}

TEST(SynCookie, EverySingleCookieBitFlipIsRejected) {
  const SynCookies cookies(kKey);
  SynOptions o;
  o.mss = 1460;
  o.window_scale = 9;
  o.timestamps = true;
  for (uint32_t slot = 0; slot < 64; ++slot) {
    const uint32_t c = cookies.make(kFlow, 0xdeadbeef, o, slot);
    for (uint32_t bit = 0; bit < 32; ++bit) {
      EXPECT_FALSE(cookies.check(kFlow, 0xdeadbeef, c ^ (1u << bit), slot).has_value())
          << "slot " << slot << " bit " << bit;
    }
  }
}

TEST(SynCookie, RandomCookiesAreRejected) {
  const SynCookies cookies(kKey);
  std::mt19937 rng(7);
  uint32_t accepts = 0;
  for (int t = 0; t < 100000; ++t) {
    if (cookies.check(random_flow(rng), rng(), rng(), rng()).has_value()) ++accepts;
  }
  EXPECT_EQ(accepts, 0u);  // about 2^-22 each: 0.02 expected
}

TEST(SeqArith, ComparesAcrossWraparound) {
  EXPECT_TRUE(seq_lt(0xFFFFFFF0u, 0x10u));
  EXPECT_FALSE(seq_lt(0x10u, 0xFFFFFFF0u));
  EXPECT_TRUE(seq_gt(0x10u, 0xFFFFFFF0u));
  EXPECT_TRUE(seq_leq(5u, 5u));
  EXPECT_FALSE(seq_lt(5u, 5u));
  EXPECT_TRUE(seq_geq(0u, 0xFFFFFFFFu));
  EXPECT_TRUE(seq_lt(1u, 0x80000000u));
}

// Owner -> client: the gateway injected its CONNECTED (40 bytes) and removed the owner's
// (55 bytes), both at the owner ISN + 1, which sits just below 2^32.
TEST(SeqMap, TranslatesAcrossWraparoundWithInsertAndRemove) {
  const uint32_t owner_isn = 0xFFFFFFF0u;
  const uint32_t client_side_isn = 0x7FFFFFF8u;  // the cookie
  SeqMap m(client_side_isn - owner_isn);
  ASSERT_TRUE(m.add(SeqEdit{owner_isn + 1, 55, 40}));
  // Owner data after its CONNECTED: wraps past 2^32 in the owner's space.
  const uint32_t first = owner_isn + 1 + 55;  // 0x27
  EXPECT_EQ(m.to_dest(first), client_side_isn + 1 + 40);
  EXPECT_EQ(m.to_dest(first + 1000), client_side_isn + 1 + 40 + 1000);
  EXPECT_EQ(m.to_dest(owner_isn), client_side_isn);  // the SYN's own seq
  // Inside the removed bytes: where the next surviving byte lands.
  EXPECT_TRUE(m.removed(owner_isn + 1));
  EXPECT_TRUE(m.removed(owner_isn + 55));
  EXPECT_FALSE(m.removed(first));
  EXPECT_FALSE(m.removed(owner_isn));
  EXPECT_EQ(m.to_dest(owner_isn + 10), client_side_isn + 1 + 40);
}

TEST(SeqMap, TranslatesNearTopOfSpaceWithSeveralEdits) {
  // Client -> owner, client ISN near 2^32: a CONNECT of 100 bytes rewritten to 130 bytes, then
  // 7 client bytes removed and 3 injected further on, all across the wrap.
  const uint32_t isn = 0xFFFFFF00u;
  SeqMap m(0);
  ASSERT_TRUE(m.add(SeqEdit{isn + 1, 100, 130}));
  ASSERT_TRUE(m.add(SeqEdit{isn + 1 + 300, 7, 0}));
  ASSERT_TRUE(m.add(SeqEdit{isn + 1 + 500, 0, 3}));
  EXPECT_EQ(m.to_dest(isn + 1 + 100), isn + 1 + 130);
  EXPECT_EQ(m.to_dest(isn + 1 + 299), isn + 1 + 329);
  EXPECT_EQ(m.to_dest(isn + 1 + 307), isn + 1 + 330);
  EXPECT_EQ(m.to_dest(isn + 1 + 303), isn + 1 + 330);  // removed: next surviving byte
  EXPECT_EQ(m.to_dest(isn + 1 + 499), isn + 1 + 522);
  EXPECT_EQ(m.to_dest(isn + 1 + 500), isn + 1 + 526);  // after the 3 injected bytes
  EXPECT_EQ(m.to_dest(isn + 1 + 100000), isn + 1 + 100026);
}

TEST(SeqMap, RejectsEditsOutOfOrderOrOverTheLimit) {
  SeqMap m(0);
  ASSERT_TRUE(m.add(SeqEdit{100, 10, 0}));
  EXPECT_FALSE(m.add(SeqEdit{105, 0, 1}));  // inside the removed bytes
  EXPECT_FALSE(m.add(SeqEdit{50, 0, 1}));
  EXPECT_TRUE(m.add(SeqEdit{110, 0, 1}));
  EXPECT_TRUE(m.add(SeqEdit{200, 0, 1}));
  EXPECT_TRUE(m.add(SeqEdit{300, 0, 1}));
  EXPECT_FALSE(m.add(SeqEdit{400, 0, 1}));
  EXPECT_EQ(m.edits(), SeqMap::kEditsMax);
}

TEST(SeqMap, AckTranslationInvertsSeqForSurvivingBytes) {
  const uint32_t isn = 0xFFFFFC00u;
  SeqMap m(0x80000123u);
  ASSERT_TRUE(m.add(SeqEdit{isn + 1, 55, 40}));
  ASSERT_TRUE(m.add(SeqEdit{isn + 1000, 0, 17}));
  ASSERT_TRUE(m.add(SeqEdit{isn + 2000, 300, 0}));
  ASSERT_TRUE(m.add(SeqEdit{isn + 3000, 10, 10}));
  for (uint32_t off = 0; off < 5000; ++off) {
    const uint32_t s = isn + off;
    if (m.removed(s)) continue;
    EXPECT_EQ(m.to_source(m.to_dest(s)), s) << off;
  }
}

TEST(SeqMap, AckInsideInsertedBytesAcksUpToTheEdit) {
  SeqMap m(1000);
  ASSERT_TRUE(m.add(SeqEdit{100, 20, 30}));
  // dest: [1100, 1130) is inserted; source 100..119 removed; source 120 -> dest 1130.
  EXPECT_EQ(m.to_source(1099), 99u);
  EXPECT_EQ(m.to_source(1100), 100u);
  EXPECT_EQ(m.to_source(1129), 100u);
  EXPECT_EQ(m.to_source(1130), 120u);  // all inserted acked: removed bytes count as acked
  EXPECT_EQ(m.to_source(1131), 121u);
  // A pure removal: the ACK at the edit covers the removed bytes at once.
  SeqMap r(0);
  ASSERT_TRUE(r.add(SeqEdit{100, 20, 0}));
  EXPECT_EQ(r.to_source(100), 120u);
  EXPECT_EQ(r.to_source(99), 99u);
}

TEST(SeqMap, SackBlocksShiftAndClamp) {
  SeqMap m(1000);
  ASSERT_TRUE(m.add(SeqEdit{100, 20, 30}));
  // Entirely after the edit: shifted by base and the net edit size.
  EXPECT_EQ(m.to_source(SackBlock{1200, 1300}), (SackBlock{190, 290}));
  // Entirely before: shifted by the base only.
  EXPECT_EQ(m.to_source(SackBlock{1050, 1090}), (SackBlock{50, 90}));
  // Left edge inside inserted bytes: clamped past the edit.
  EXPECT_EQ(m.to_source(SackBlock{1110, 1200}), (SackBlock{120, 190}));
  // Right edge inside inserted bytes: clamped to the edit's start.
  EXPECT_EQ(m.to_source(SackBlock{1050, 1110}), (SackBlock{50, 100}));
  // Spanning the edit: covers the removed source bytes too.
  EXPECT_EQ(m.to_source(SackBlock{1090, 1140}), (SackBlock{90, 130}));
  // Only inserted bytes: nothing of the source.
  EXPECT_EQ(m.to_source(SackBlock{1105, 1125}), std::nullopt);
  EXPECT_EQ(m.to_source(SackBlock{1300, 1300}), std::nullopt);
}

TEST(SeqMap, SackBlocksAcrossWraparound) {
  SeqMap m(0x10u);
  ASSERT_TRUE(m.add(SeqEdit{0xFFFFFFF0u, 0, 0x20}));
  // dest: inserted [0, 0x20); source 0xFFFFFFF0 -> dest 0x20.
  EXPECT_EQ(m.to_source(SackBlock{0x20, 0x40}), (SackBlock{0xFFFFFFF0u, 0x10u}));
  EXPECT_EQ(m.to_source(SackBlock{0xFFFFFFF0u, 0x10}), (SackBlock{0xFFFFFFE0u, 0xFFFFFFF0u}));
}

TEST(SeqMap, FoldKeepsTranslationAndRetiresAckedEdits) {
  const uint32_t isn = 0xFFFFFF80u;
  SeqMap m(500);
  ASSERT_TRUE(m.add(SeqEdit{isn + 1, 55, 40}));
  ASSERT_TRUE(m.add(SeqEdit{isn + 400, 0, 9}));
  SeqMap folded = m;
  // An ACK inside the first edit's inserted bytes retires nothing.
  folded.fold(isn + 1 + 500 + 20);  // dest_start of the edit + 20
  EXPECT_EQ(folded.edits(), 2u);
  folded.fold(m.to_dest(isn + 56));
  EXPECT_EQ(folded.edits(), 1u);
  EXPECT_EQ(folded.base(), 500u - 15u);
  for (uint32_t off = 56; off < 1000; ++off) {
    EXPECT_EQ(folded.to_dest(isn + off), m.to_dest(isn + off)) << off;
    EXPECT_EQ(folded.to_source(m.to_dest(isn + off)), isn + off) << off;
  }
  folded.fold(m.to_dest(isn + 400));
  EXPECT_EQ(folded.edits(), 0u);
  // Far beyond 2^31 of the edits, only the base remains and still maps right.
  const uint32_t far = isn + 0xC0000000u;
  EXPECT_EQ(folded.to_dest(far), far + 500 - 15 + 9);
  EXPECT_EQ(folded.to_source(folded.to_dest(far)), far);
}

TEST(WindowRescale, ScalesBetweenShifts) {
  EXPECT_EQ(rescale_window(1000, 7, 7), 1000);
  EXPECT_EQ(rescale_window(1000, 7, 5), 4000);  // 128000 bytes at 32-byte units
  EXPECT_EQ(rescale_window(1000, 5, 7), 250);   // 32000 bytes at 128-byte units
  EXPECT_EQ(rescale_window(1001, 5, 7), 250);   // rounds down: never more than offered
  EXPECT_EQ(rescale_window(65535, 0, 0), 65535);
}

TEST(WindowRescale, CapsAndRoundsSmallWindowsToZero) {
  EXPECT_EQ(rescale_window(40000, 7, 0), 65535);  // 5 MB window into an unscaled leg
  EXPECT_EQ(rescale_window(65535, 14, 0), 65535);
  EXPECT_EQ(rescale_window(3, 0, 7), 0);  // 3 bytes in 128-byte units
  EXPECT_EQ(rescale_window(0, 3, 1), 0);
  EXPECT_EQ(rescale_window(1, 20, 14), 1);  // shifts above 14 are 14
}

}  // namespace
}  // namespace sluice::dpdk::splice
