// Torn-write and corruption test: a small two-segment log (a sealed segment and the last one);
// for every byte offset of their records, truncate the file there, and separately flip the
// byte there. Recovery must never crash, must keep every intact earlier message, must drop the
// rest of the damaged segment only, and must report what it dropped.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "queue/format.h"
#include "queue/recovery.h"
#include "tests/unit/queue_test_util.h"

namespace sluice::queue {
namespace {

namespace fs = std::filesystem;
using test::open_log;
using test::read_all;
using test::TempDir;

struct Rec {
  uint64_t start, end;
  RecordType type;
  uint64_t seq;
};

std::vector<uint8_t> slurp(const std::string& path) {
  std::vector<uint8_t> b(fs::file_size(path));
  const int fd = ::open(path.c_str(), O_RDONLY);
  EXPECT_EQ(::pread(fd, b.data(), b.size(), 0), ssize_t(b.size()));
  ::close(fd);
  return b;
}

std::vector<Rec> walk(const std::vector<uint8_t>& b) {
  std::vector<Rec> out;
  size_t pos = kSegmentHeaderBytes;
  for (;;) {
    RecordHeader h;
    if (decode_record(std::span<const uint8_t>(b).subspan(pos), &h) != RecordCheck::kOk) break;
    out.push_back({pos, pos + align_record(h.length), h.type, h.seq});
    pos += align_record(h.length);
    if (h.type == RecordType::kSeal) break;
  }
  return out;
}

std::string body_for(uint64_t i) {
  return std::string(40, char('A' + i % 26)) + std::to_string(i);
}

class SpillTorn : public ::testing::Test {
 protected:
  void SetUp() override {
    opt_.dir = pristine_ + "/spill";
    opt_.segment_bytes = 2048;
    opt_.record_bytes_max = 128;
    opt_.batch_bytes_max = 4096;
    opt_.max_bytes = 1 << 20;
    opt_.producer_ring_depth = 64;
    opt_.producer_arena_bytes = 4096;
    RecoveryReport rep;
    auto log = open_log(opt_, &rep);
    ASSERT_TRUE(log);
    log->start();
    for (uint64_t i = 0; i < 24; ++i) {
      const Completion c = test::append_wait(log->producer(0), i, "/", "torn",
                                             "i:" + std::to_string(i) + "\n", body_for(i));
      ASSERT_EQ(c.status, AppendStatus::kDurable);
      body_of_seq_[c.seq] = body_for(i);
    }
    log.reset();
    for (const auto& e : fs::directory_iterator(opt_.dir))
      if (e.path().extension() == ".seg") segs_.push_back(e.path().filename().string());
    std::sort(segs_.begin(), segs_.end());
    ASSERT_EQ(segs_.size(), 2u) << "the pristine log should be one sealed and one last segment";
    for (const std::string& s : segs_) {
      bytes_.push_back(slurp(opt_.dir + "/" + s));
      recs_.push_back(walk(bytes_.back()));
    }
    ASSERT_EQ(recs_[0].back().type, RecordType::kSeal);
    ASSERT_GE(recs_[1].size(), 3u);
  }

  // Restores the pristine log into the work directory, applies `damage` to segment `si`,
  // recovers, and checks the outcome against the record `r` the damage falls in.
  void check(size_t si, uint64_t x, bool truncate) {
    std::error_code ec;
    fs::remove_all(work_.path() + "/spill", ec);
    fs::copy(opt_.dir, work_.path() + "/spill", fs::copy_options::recursive);
    SpillOptions o = opt_;
    o.dir = work_.path() + "/spill";
    const std::string path = o.dir + "/" + segs_[si];
    if (truncate) {
      ASSERT_EQ(::truncate(path.c_str(), off_t(x)), 0);
    } else {
      const int fd = ::open(path.c_str(), O_RDWR);
      uint8_t b = uint8_t(bytes_[si][x] ^ 0xFF);
      ASSERT_EQ(::pwrite(fd, &b, 1, off_t(x)), 1);
      ::close(fd);
    }
    // What must survive: everything of the other segment; of this one, the messages that end
    // before the record the damage falls in (all of them when the damage hits the header).
    std::set<uint64_t> expect;
    uint64_t damaged_start = 0;
    bool header = x < kSegmentHeaderBytes;
    for (size_t k = 0; k < recs_.size(); ++k)
      for (const Rec& r : recs_[k]) {
        if (k == si && !header && r.start <= x && x < r.end) damaged_start = r.start;
        if (r.type != RecordType::kMessage) continue;
        if (k != si || (!header && r.end <= x)) expect.insert(r.seq);
      }
    const bool last = si + 1 == segs_.size();
    // A cut exactly between two records of the last segment is indistinguishable from a
    // crash before the later ones were written: nothing to report.
    const bool clean_cut = truncate && last && !header && damaged_start == x;
    for (int round = 0; round < 2; ++round) {
      RecoveryReport rep;
      auto log = open_log(o, &rep);
      ASSERT_TRUE(log) << "segment " << si << " offset " << x;
      std::set<uint64_t> got;
      for (const auto& rb : read_all(*log, "/", "torn")) {
        ASSERT_EQ(rb.body, body_of_seq_.at(rb.seq));
        got.insert(rb.seq);
      }
      ASSERT_EQ(got, expect) << (truncate ? "truncate" : "corrupt") << " segment " << si
                             << " offset " << x << " round " << round;
      if (round == 1) break;  // the second pass checks the repair is stable
      bool reported = false;
      for (const RecoveryIssue& i : rep.issues) {
        if (i.segment != si + 1) continue;
        if (header || i.offset == damaged_start) reported = true;
      }
      if (!clean_cut)
        ASSERT_TRUE(reported) << (truncate ? "truncate" : "corrupt") << " segment " << si
                              << " offset " << x << ": " << rep.issues.size() << " issues";
      else
        ASSERT_TRUE(rep.issues.empty());
    }
  }

  TempDir base_;
  TempDir work_;
  std::string pristine_ = base_.path();
  SpillOptions opt_;
  std::vector<std::string> segs_;
  std::vector<std::vector<uint8_t>> bytes_;
  std::vector<std::vector<Rec>> recs_;
  std::map<uint64_t, std::string> body_of_seq_;
};

TEST_F(SpillTorn, TruncationAtEveryOffsetOfTheLastSegmentKeepsEarlierRecords) {
  for (uint64_t x = 0; x < recs_[1].back().end; ++x)
    ASSERT_NO_FATAL_FAILURE(check(1, x, true));
}

TEST_F(SpillTorn, CorruptionAtEveryOffsetOfTheLastSegmentKeepsEarlierRecords) {
  for (uint64_t x = 0; x < recs_[1].back().end; ++x)
    ASSERT_NO_FATAL_FAILURE(check(1, x, false));
}

// The sealed segment: its first records, the last message and the seal, every byte.
std::vector<uint64_t> sealed_offsets(const std::vector<Rec>& r) {
  std::vector<uint64_t> xs;
  for (uint64_t x = 0; x < r[4].end; ++x)
    xs.push_back(x);
  for (uint64_t x = r[r.size() - 2].start; x < r.back().end; ++x)
    xs.push_back(x);
  return xs;
}

TEST_F(SpillTorn, TruncationAtEveryOffsetOfASealedSegmentIsReportedAndKeepsThePrefix) {
  for (uint64_t x : sealed_offsets(recs_[0]))
    ASSERT_NO_FATAL_FAILURE(check(0, x, true));
}

TEST_F(SpillTorn, CorruptionAtEveryOffsetOfASealedSegmentIsReportedAndKeepsThePrefix) {
  for (uint64_t x : sealed_offsets(recs_[0]))
    ASSERT_NO_FATAL_FAILURE(check(0, x, false));
}

TEST_F(SpillTorn, DamagedSealedSegmentIsKeptAsideForInspection) {
  check(0, recs_[0][2].start + 45, false);
  const std::string q = work_.path() + "/spill/" + kQuarantineDir + "/" + segs_[0] + ".bad";
  EXPECT_TRUE(fs::exists(q)) << q;
  RecoveryReport rep;
  SpillOptions o = opt_;
  o.dir = work_.path() + "/spill";
  auto log = open_log(o, &rep);
  ASSERT_TRUE(log);
  ASSERT_FALSE(rep.issues.empty());
  const RecoveryIssue& i = rep.issues.front();
  EXPECT_EQ(i.segment, 1u);
  EXPECT_EQ(i.offset, recs_[0][2].start);
  EXPECT_EQ(i.quarantined_as, q);
  EXPECT_FALSE(i.torn_tail);
  // Messages after the damaged one are counted among what was not recovered.
  // Records: define, message 0 (kept), message 1 (damaged), the rest, the seal.
  EXPECT_EQ(i.records, recs_[0].size() - 4);
  EXPECT_GT(i.bytes, 0u);
}

}  // namespace
}  // namespace sluice::queue
