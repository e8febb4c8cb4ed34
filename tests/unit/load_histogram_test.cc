// sluice-load's log-linear histogram: bucket geometry, percentiles within the documented
// relative error, merging, max and clamping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tools/sluice-load/histogram.h"

namespace sluice::load {
namespace {

TEST(LoadHistogram, BucketsCoverValuesContiguouslyAndContainTheirValues) {
  uint32_t last = 0;
  for (uint64_t v = 0; v < 1'000'000; ++v) {
    const uint32_t b = Histogram::bucket_of(v);
    ASSERT_TRUE(b == last || b == last + 1) << v;
    ASSERT_GE(Histogram::bucket_upper(b), v) << v;
    if (b > 0) {
      ASSERT_LT(Histogram::bucket_upper(b - 1), v) << v;
    }
    last = b;
  }
  EXPECT_EQ(Histogram::bucket_of(Histogram::kValueMax), Histogram::kBucketCount - 1);
}

TEST(LoadHistogram, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 1; v <= 100; ++v)
    h.record(v);
  EXPECT_EQ(h.percentile(50), 50u);
  EXPECT_EQ(h.percentile(90), 90u);
  EXPECT_EQ(h.percentile(100), 100u);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.max(), 100u);
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
}

TEST(LoadHistogram, PercentilesAreWithinTheRelativeError) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(12.0, 1.5);  // ns: ~160 us median, long tail
  std::vector<uint64_t> values;
  Histogram h;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t v = uint64_t(dist(rng));
    values.push_back(v);
    h.record(v);
  }
  std::sort(values.begin(), values.end());
  for (double p : {1.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99}) {
    const size_t rank = size_t(std::ceil(p / 100.0 * double(values.size())));
    const double exact = double(values[rank - 1]);
    const double got = double(h.percentile(p));
    EXPECT_GE(got, exact) << "p" << p;  // the bucket's upper edge: never below
    EXPECT_LE(got, exact * (1 + Histogram::kRelativeErrorMax)) << "p" << p;
  }
  EXPECT_EQ(h.max(), values.back());
  EXPECT_EQ(h.percentile(100), values.back());
}

TEST(LoadHistogram, MergeEqualsRecordingEverythingInOne) {
  Histogram a, b, all;
  for (uint64_t v = 1; v < 50000; v += 7) {
    (v % 3 ? a : b).record(v * 13);
    all.record(v * 13);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_EQ(a.min(), all.min());
  for (double p : {50.0, 90.0, 99.0, 99.9})
    EXPECT_EQ(a.percentile(p), all.percentile(p));
}

TEST(LoadHistogram, MaxIsExactAndPercentilesNeverExceedIt) {
  Histogram h;
  h.record(1'000'003);
  EXPECT_EQ(h.max(), 1'000'003u);
  EXPECT_EQ(h.percentile(99.9), 1'000'003u);
  EXPECT_EQ(h.percentile(50), 1'000'003u);
}

TEST(LoadHistogram, EmptyReportsZero) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.percentile(99), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.min(), 0u);
}

TEST(LoadHistogram, ValuesOverTheRangeAreClampedAndCounted) {
  Histogram h;
  h.record(Histogram::kValueMax + 12345);
  EXPECT_EQ(h.clamped(), 1u);
  EXPECT_EQ(h.max(), Histogram::kValueMax);
}

}  // namespace
}  // namespace sluice::load
