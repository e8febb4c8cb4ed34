// Child of the spill crash test: opens (recovers) the log in DIR, then appends from many
// producer threads until killed, writing "D <producer> <index> <seq>" to stdout (one write per
// line, so lines never interleave) as soon as each append is reported durable.
// Usage: spill_crash_child DIR RUN_ID SEED PRODUCERS
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "queue/spill_log.h"

using namespace sluice::queue;

namespace {

// The message a producer sends as its index-th append: the parent rebuilds it to compare.
std::string crash_body(uint64_t producer, uint64_t index) {
  std::mt19937_64 rng(producer * 1000003u + index);
  std::string b(size_t(rng() % 3000), '\0');
  for (char& c : b)
    c = char('a' + rng() % 26);
  return b;
}

// A hard bound: the parent kills much earlier; this only stops an orphan.
constexpr int kMaxRunSeconds = 30;

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s DIR RUN_ID SEED PRODUCERS\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t run = std::strtoull(argv[2], nullptr, 10);
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  const uint32_t producers = uint32_t(std::strtoul(argv[4], nullptr, 10));
  SpillOptions o;
  o.dir = dir;
  o.segment_bytes = 256 << 10;  // small, so runs cross segment boundaries
  o.max_bytes = 1ull << 30;
  o.record_bytes_max = 16 << 10;
  o.batch_bytes_max = 64 << 10;
  o.producers = producers;
  o.producer_ring_depth = 32;
  o.producer_arena_bytes = 64 << 10;
  RecoveryReport rep;
  auto opened = SpillLog::open(o, &rep);
  if (!opened) {
    std::fprintf(stderr, "open: %s\n", opened.error().message.c_str());
    return 1;
  }
  std::unique_ptr<SpillLog> log = std::move(*opened);
  log->start();
  // Tells the parent the log is open and recovered: its kill clock starts here, so a slow start
  // (a sanitizer build, a busy machine) does not eat the window in which appends happen.
  [[maybe_unused]] ssize_t ready = ::write(1, "R\n", 2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kMaxRunSeconds);
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < producers; ++t)
    threads.emplace_back([&, t] {
      SpillProducer& p = log->producer(t);
      const uint64_t id = run * 100 + t;
      const std::string queue = "q" + std::to_string(t % 4);
      const std::string vhost = t % 2 ? "vh" : "/";
      std::mt19937_64 rng(seed * 7919 + t);
      std::vector<std::string> headers;
      uint64_t next = 0;
      while (std::chrono::steady_clock::now() < deadline) {
        for (int burst = int(rng() % 8) + 1; burst > 0; --burst) {
          const std::string h = "p:" + std::to_string(id) + "\ni:" + std::to_string(next) + "\n";
          if (p.append(next, vhost, queue, h, crash_body(id, next)) != AppendResult::kQueued) break;
          ++next;
        }
        p.poll(
            [&](const Completion& c) {
              if (c.status != AppendStatus::kDurable) return;
              char line[96];
              const int n = std::snprintf(
                  line, sizeof line, "D %llu %llu %llu\n", static_cast<unsigned long long>(id),
                  static_cast<unsigned long long>(c.token), static_cast<unsigned long long>(c.seq));
              [[maybe_unused]] ssize_t r = ::write(1, line, size_t(n));
            },
            64);
        p.wait(20);
      }
    });
  for (auto& th : threads)
    th.join();
  log->stop();
  return 0;
}
