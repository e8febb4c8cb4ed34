// Worker replica lookups over 1M queues against std::unordered_map holding the same keys, with
// uniform and skewed (Zipf) key sequences; the ratios are printed after the run (STYLE:
// benchmarks report a ratio to a reference in the same process).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bench/mean_reporter.h"
#include "control/messages.h"
#include "control/replica.h"

namespace {

namespace sc = sluice::control;

// The replica's lookup time over the map's: the per-frame lookup must cost no more than the
// standard library's hash map would.
constexpr double kRatioTarget = 1.0;

constexpr size_t kKeys = 1'000'000;
constexpr size_t kNodes = 8;
// Lookups per benchmark iteration, taken in turn from a precomputed sequence much longer than
// the batch so that successive iterations do not replay the same keys.
constexpr size_t kBatch = 4096;
constexpr size_t kSequence = size_t(1) << 22;
constexpr double kZipfExponent = 1.1;
constexpr std::string_view kVhost = "/";

struct Data {
  std::vector<sc::NodeSpec> nodes;
  std::vector<std::string> queues;    // the replica's keys (vhost is kVhost)
  std::vector<std::string> map_keys;  // the map's: vhost + '\0' + queue
  std::unique_ptr<sc::Replica> replica;
  // Default hash: std::hash<std::string>, the same function as std::hash<std::string_view>.
  std::unordered_map<std::string, sc::NodeIndex> map;
  std::vector<uint32_t> uniform;
  std::vector<uint32_t> skewed;
};

// Ranks drawn with probability proportional to 1 / rank^s, by inverting the cumulative sum.
std::vector<uint32_t> zipf_ranks(std::mt19937_64& rng, size_t n, size_t count, double s) {
  std::vector<double> cdf(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += 1.0 / std::pow(double(i + 1), s);
    cdf[i] = sum;
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  std::vector<uint32_t> out(count);
  for (uint32_t& r : out) {
    const auto it = std::lower_bound(cdf.begin(), cdf.end(), u(rng));
    r = uint32_t(std::min<size_t>(size_t(it - cdf.begin()), n - 1));
  }
  return out;
}

const Data& data() {
  static const Data d = [] {
    Data x;
    for (size_t i = 0; i < kNodes; ++i) {
      x.nodes.push_back(
          {"rabbit-" + std::to_string(i + 1), "10.0.0." + std::to_string(i + 1), 61613, 100});
    }
    std::mt19937_64 rng(20240601);
    x.queues.reserve(kKeys);
    x.map_keys.reserve(kKeys);
    char name[64];
    for (size_t i = 0; i < kKeys; ++i) {
      // Names like a sharded workload's: "orders.region-17.shard-123456" (distinct by shard).
      std::snprintf(name, sizeof name, "orders.region-%u.shard-%06zu", unsigned(rng() % 64), i);
      x.queues.emplace_back(name);
      std::string key(kVhost);
      key.push_back('\0');
      key += name;
      x.map_keys.push_back(std::move(key));
    }

    x.replica = std::make_unique<sc::Replica>(x.nodes, kKeys);
    x.map.reserve(kKeys);
    for (size_t i = 0; i < kKeys; ++i) {
      const sc::NodeIndex node = sc::NodeIndex(i % kNodes);
      sc::SetOwner m;
      m.node = node;
      m.source = sc::OwnerSource::kLearned;
      if (m.key.assign(kVhost, x.queues[i]) != sc::KeyFit::kFits || !x.replica->apply(m)) {
        std::fprintf(stderr, "replica_bench: key %zu was refused\n", i);
        std::abort();
      }
      x.map.emplace(x.map_keys[i], node);
    }

    // Both sides must give the same answers for their times to be compared.
    for (size_t i = 0; i < kKeys; ++i) {
      const sc::Route r = x.replica->lookup(kVhost, x.queues[i]);
      if (!r.known || r.owner != x.map.at(x.map_keys[i])) {
        std::fprintf(stderr, "replica_bench: the replica and the map disagree on key %zu\n", i);
        std::abort();
      }
    }

    std::uniform_int_distribution<uint32_t> pick(0, uint32_t(kKeys - 1));
    x.uniform.resize(kSequence);
    for (uint32_t& k : x.uniform)
      k = pick(rng);
    // The popular keys are scattered over the key set, not the first ones inserted (which the
    // map's nodes would hold close together in memory).
    std::vector<uint32_t> key_of_rank(kKeys);
    std::iota(key_of_rank.begin(), key_of_rank.end(), 0u);
    std::shuffle(key_of_rank.begin(), key_of_rank.end(), rng);
    x.skewed = zipf_ranks(rng, kKeys, kSequence, kZipfExponent);
    for (uint32_t& k : x.skewed)
      k = key_of_rank[k];
    return x;
  }();
  return d;
}

enum class Keys { kRandom, kSkewed };

// The first call builds the data, before its timing loop starts.
const std::vector<uint32_t>& sequence_of(Keys keys) {
  return keys == Keys::kRandom ? data().uniform : data().skewed;
}

void replica_lookup(benchmark::State& state, Keys keys) {
  const Data& d = data();
  const std::vector<uint32_t>* sequence = &sequence_of(keys);
  size_t at = 0;
  for (auto _ : state) {
    uint64_t sum = 0;
    for (size_t i = 0; i < kBatch; ++i) {
      const sc::Route r = d.replica->lookup(kVhost, d.queues[(*sequence)[at + i]]);
      sum += r.owner;
    }
    benchmark::DoNotOptimize(sum);
    at = (at + kBatch) % kSequence;
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(kBatch));
}

// The dataplane's way: a burst of kBurst keys per call (DESIGN: bursts of 32 packets).
constexpr size_t kBurst = 32;
static_assert(kBatch % kBurst == 0 && kBurst <= sc::Replica::kBurstMax);

void replica_burst_lookup(benchmark::State& state, Keys keys) {
  const Data& d = data();
  const std::vector<uint32_t>* sequence = &sequence_of(keys);
  size_t at = 0;
  sc::Replica::KeyRef burst[kBurst];
  sc::Route routes[kBurst];
  for (auto _ : state) {
    uint64_t sum = 0;
    for (size_t i = 0; i < kBatch; i += kBurst) {
      for (size_t j = 0; j < kBurst; ++j)
        burst[j] = {kVhost, d.queues[(*sequence)[at + i + j]]};
      d.replica->lookup_burst(burst, routes);
      for (const sc::Route& r : routes)
        sum += r.owner;
    }
    benchmark::DoNotOptimize(sum);
    at = (at + kBatch) % kSequence;
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(kBatch));
}

void map_lookup(benchmark::State& state, Keys keys) {
  const Data& d = data();
  const std::vector<uint32_t>* sequence = &sequence_of(keys);
  size_t at = 0;
  for (auto _ : state) {
    uint64_t sum = 0;
    for (size_t i = 0; i < kBatch; ++i) {
      const auto it = d.map.find(d.map_keys[(*sequence)[at + i]]);
      sum += it == d.map.end() ? sc::kNoNode : it->second;
    }
    benchmark::DoNotOptimize(sum);
    at = (at + kBatch) % kSequence;
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(kBatch));
}

}  // namespace

int main(int argc, char** argv) {
  struct Case {
    const char* name;
    Keys keys;
  };
  const Case cases[] = {{"random", Keys::kRandom}, {"skewed", Keys::kSkewed}};
  for (const Case& c : cases) {
    const std::string name(c.name);
    benchmark::RegisterBenchmark(("replica_" + name).c_str(), replica_lookup, c.keys);
    benchmark::RegisterBenchmark(("unordered_map_" + name).c_str(), map_lookup, c.keys);
    benchmark::RegisterBenchmark(("replica_burst_" + name).c_str(), replica_burst_lookup, c.keys);
  }
  // Lookups over a million keys wait on memory, whose speed on a shared host drifts by tens of
  // percent within a minute: unless told otherwise, run each benchmark five times, interleaved at
  // random with the others, and compare the means, so that drift reaches both sides of a ratio.
  std::vector<char*> args(argv, argv + argc);
  auto given = [&](std::string_view flag) {
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]).substr(0, flag.size()) == flag) return true;
    }
    return false;
  };
  static char repetitions[] = "--benchmark_repetitions=5";
  static char interleave[] = "--benchmark_enable_random_interleaving=true";
  static char aggregates[] = "--benchmark_report_aggregates_only=true";
  static char min_time[] = "--benchmark_min_time=0.2";
  if (!given("--benchmark_repetitions")) {
    args.push_back(repetitions);
    if (!given("--benchmark_enable_random_interleaving")) args.push_back(interleave);
    if (!given("--benchmark_report_aggregates_only")) args.push_back(aggregates);
    if (!given("--benchmark_min_time")) args.push_back(min_time);
  }
  int args_count = int(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 1;
  sluice::bench::MeanReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  std::fflush(stdout);
  // One lookup per call, as the target is set; then bursts, as the dataplane calls it.
  for (const char* kind : {"replica", "replica_burst"}) {
    for (const Case& c : cases) {
      const double replica =
          reporter.ns_per_iteration(std::string(kind) + "_" + c.name) / double(kBatch);
      const double map =
          reporter.ns_per_iteration("unordered_map_" + std::string(c.name)) / double(kBatch);
      if (replica < 0 || map < 0) {
        std::printf("ratio %s/unordered_map %s = not measured (filtered out or failed)\n", kind,
                    c.name);
        continue;
      }
      const double r = replica / map;
      std::printf(
          "ratio %s/unordered_map %s = %.2f (target <= %.1f; %.1f ns vs %.1f ns per lookup)%s\n",
          kind, c.name, r, kRatioTarget, replica, map, r <= kRatioTarget ? "" : " ABOVE TARGET");
    }
  }
  return 0;
}
