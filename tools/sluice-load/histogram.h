// A log-linear latency histogram in the manner of HdrHistogram: fixed memory, constant-time
// record, percentiles within a documented relative error, mergeable across connections.
#pragma once

#include <array>
#include <cstdint>

namespace sluice::load {

class Histogram {
 public:
  // Values below kSubBuckets are exact; each power-of-two range above is split into
  // kSubBuckets / 2 linear buckets, so a value is reported at most kRelativeErrorMax (1/128,
  // 0.78 %) above its true value (the bucket's upper edge).
  static constexpr uint32_t kSubBucketBits = 8;
  static constexpr uint32_t kSubBuckets = 1u << kSubBucketBits;
  // Values up to 2^kRangeBits - 1 (in ns: about 18 minutes); larger values are clamped and
  // counted in clamped().
  static constexpr uint32_t kRangeBits = 40;
  static constexpr uint32_t kBucketCount = (kRangeBits - kSubBucketBits + 2) * (kSubBuckets / 2);
  static constexpr uint64_t kValueMax = (uint64_t(1) << kRangeBits) - 1;
  static constexpr double kRelativeErrorMax = 2.0 / kSubBuckets;

  void record(uint64_t value);
  void merge(const Histogram& other);
  void reset() { *this = Histogram(); }

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  // Exact: the largest value recorded (after clamping).
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? double(sum_) / double(count_) : 0.0; }
  uint64_t clamped() const { return clamped_; }
  // The value at or below which `percentile` (0..100) of the recorded values lie: the upper
  // edge of the bucket holding that rank, never above max().
  uint64_t percentile(double percentile) const;

  // Bucket geometry, public for the tests.
  static uint32_t bucket_of(uint64_t value);
  static uint64_t bucket_upper(uint32_t bucket);

 private:
  std::array<uint64_t, kBucketCount> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = ~uint64_t(0);
  uint64_t max_ = 0;
  uint64_t clamped_ = 0;
};

}  // namespace sluice::load
