// The log-linear histogram: bucket geometry, recording, merging and percentiles.
#include "tools/sluice-load/histogram.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace sluice::load {

uint32_t Histogram::bucket_of(uint64_t value) {
  // Values below kSubBuckets get one bucket each (exact); above, the top kSubBucketBits bits
  // below the leading one pick the linear bucket inside the value's power-of-two range.
  if (value < kSubBuckets) return uint32_t(value);
  const uint32_t msb = 63u - uint32_t(std::countl_zero(value));
  const uint32_t shift = msb - kSubBucketBits + 1;
  const uint32_t sub = uint32_t(value >> shift) - kSubBuckets / 2;
  return shift * (kSubBuckets / 2) + kSubBuckets / 2 + sub;
}

uint64_t Histogram::bucket_upper(uint32_t bucket) {
  if (bucket < kSubBuckets) return bucket;
  const uint32_t shift = (bucket - kSubBuckets / 2) / (kSubBuckets / 2);
  const uint64_t sub = (bucket - kSubBuckets / 2) % (kSubBuckets / 2) + kSubBuckets / 2;
  return ((sub + 1) << shift) - 1;
}

void Histogram::record(uint64_t value) {
  if (value > kValueMax) {
    value = kValueMax;
    ++clamped_;
  }
  ++counts_[bucket_of(value)];
  ++count_;
  sum_ += value;
  min_ = std::min(min_, value);
  max_ = std::max(max_, value);
}

void Histogram::merge(const Histogram& other) {
  for (uint32_t i = 0; i < kBucketCount; ++i)
    counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  clamped_ += other.clamped_;
}

uint64_t Histogram::percentile(double percentile) const {
  if (count_ == 0) return 0;
  percentile = std::clamp(percentile, 0.0, 100.0);
  // The rank (1-based) of the value asked for: ceil(p% of count), at least the first.
  uint64_t rank = uint64_t(std::ceil(percentile / 100.0 * double(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (uint32_t i = 0; i < kBucketCount; ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::min(bucket_upper(i), max_);
  }
  return max_;
}

}  // namespace sluice::load
