// Helpers shared by the spill log tests: temporary directories, synchronous appends with a
// time bound, and reading a queue's whole backlog back.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "queue/spill_log.h"

namespace sluice::queue::test {

// A fresh directory under `base` (tmpfs by default: the unit tests check logic, not the disk),
// removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& base = "") {
    std::string b = base;
    if (b.empty()) b = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string tmpl = b + "/sluice-spill-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    if (p) path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline SpillOptions small_options(const std::string& dir) {
  SpillOptions o;
  o.dir = dir + "/spill";
  o.segment_bytes = 64 << 10;
  o.max_bytes = 64ull << 20;
  o.record_bytes_max = 8 << 10;
  o.batch_bytes_max = 64 << 10;
  o.producers = 2;
  o.producer_ring_depth = 64;
  o.producer_arena_bytes = 64 << 10;
  return o;
}

inline std::unique_ptr<SpillLog> open_log(const SpillOptions& o, RecoveryReport* report) {
  auto log = SpillLog::open(o, report);
  EXPECT_TRUE(log) << log.error().message;
  return log ? std::move(*log) : nullptr;
}

// Appends one message and waits (at most 10 s) for its completion.
inline Completion append_wait(SpillProducer& p, uint64_t token, std::string_view vhost,
                              std::string_view queue, std::string_view headers,
                              std::string_view body) {
  const AppendResult r = p.append(token, vhost, queue, headers, body);
  EXPECT_EQ(r, AppendResult::kQueued);
  Completion got{token, 0, AppendStatus::kStopping};
  if (r != AppendResult::kQueued) return got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    bool done = false;
    p.poll(
        [&](const Completion& c) {
          got = c;
          done = true;
        },
        1);
    if (done) return got;
    p.wait(100);
  }
  ADD_FAILURE() << "no completion for token " << token << " within 10 s";
  return got;
}

struct ReadBack {
  uint64_t seq;
  std::string headers;
  std::string body;
};

inline std::vector<ReadBack> read_all(const SpillLog& log, std::string_view vhost,
                                      std::string_view queue, uint64_t after = 0) {
  std::vector<ReadBack> out;
  std::vector<RecordLocation> locs(64);
  std::vector<uint8_t> buf;
  for (int rounds = 0; rounds < 1000000; ++rounds) {
    const size_t n = log.locate(vhost, queue, after, locs);
    if (n == 0) break;
    for (size_t i = 0; i < n; ++i) {
      if (buf.size() < locs[i].bytes) buf.resize(locs[i].bytes);
      RecordView v;
      const ReadStatus st = log.read(locs[i], buf, &v);
      EXPECT_EQ(st, ReadStatus::kOk) << "seq " << locs[i].seq;
      if (st != ReadStatus::kOk) return out;
      out.push_back({v.seq, std::string(v.headers), std::string(v.body)});
      after = v.seq;
    }
  }
  return out;
}

}  // namespace sluice::queue::test
