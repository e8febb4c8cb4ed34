// Recovery: the directory walk and the repair decisions (see queue/README.md, "Recovery").
#include "queue/recovery.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "queue/segment_file.h"

namespace sluice::queue {
namespace {

// Segments scanned at once at recovery: mostly waiting for reads, so more than the cores.
constexpr size_t kScanThreads = 4;

bool parse_segment_name(const char* name, const char* suffix, uint64_t* number) {
  const size_t n = std::strlen(name), s = std::strlen(suffix);
  if (n != 16 + s || std::strcmp(name + 16, suffix) != 0) return false;
  uint64_t v = 0;
  for (int i = 0; i < 16; ++i) {
    const char c = name[i];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = v * 16 + uint64_t(d);
  }
  *number = v;
  return true;
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Closes the last segment at its last good record: a seal, then the file cut just after it so
// the preallocated rest is given back. New appends always go to a fresh segment.
Result<> seal_in_place(int fd, uint64_t offset, uint64_t count, uint64_t last_seq) {
  uint8_t rec[kSealRecordBytes];
  RecordHeader h;
  h.length = uint32_t(kSealRecordBytes);
  h.type = RecordType::kSeal;
  h.seq = last_seq;
  h.a_len = kSealPayloadBytes;
  encode_record_header(h, rec);
  std::memcpy(rec + kRecordHeaderBytes, &count, 8);
  seal_record(rec, uint32_t(kSealRecordBytes));
  if (::pwrite(fd, rec, sizeof rec, off_t(offset)) != ssize_t(sizeof rec))
    return failure(errno_text("cannot write the seal"));
  if (::ftruncate(fd, off_t(offset + sizeof rec)) != 0)
    return failure(errno_text("cannot truncate"));
  if (::fsync(fd) != 0) return failure(errno_text("cannot sync"));
  return {};
}

// Whether a scan found nothing at all after a good header: a segment prepared ahead of time and
// never written to (or one whose records were lost, when older than a segment with data).
bool holds_no_records(const ScannedSegment& s) {
  return s.end != SegmentEnd::kBadHeader && s.messages.empty() && s.defines.empty() &&
         s.end_offset == kSegmentHeaderBytes &&
         (s.end == SegmentEnd::kZero || s.end == SegmentEnd::kEof);
}

// One segment file of the directory: open, and what its scan found.
struct FoundSegment {
  uint64_t number;
  std::string name, path;
  int fd;
  ScannedSegment s;
};

// The state shared by the steps of one directory's recovery, in the order recover_dir takes
// them: list the segment files, open them, scan them all, find the last one holding data, then
// settle each segment in turn (remove, quarantine, seal, report) and hand over what it holds.
struct DirRecovery {
  DirRecovery(const SpillOptions& o, RecoveredLog& l, RecoveryReport& r)
      : options(o),
        out(l),
        report(r),
        qdir(o.dir + "/" + kQuarantineDir),
        // A file larger than a segment can be is damage; allow for segments made with a larger
        // segment_bytes before a configuration change.
        file_max(std::max<uint64_t>(o.segment_bytes, 1ull << 32)) {}

  Result<> list_segments();
  Result<> open_segments();
  Result<> scan_segments();
  void find_last();
  void settle(size_t i);

  void close_all();
  void quarantine(const FoundSegment& f, bool move, RecoveryIssue* issue);
  void quarantine_bad_header(FoundSegment& f, bool after_last);
  void repair_last(FoundSegment& f);
  void report_unsealed(FoundSegment& f);
  void hand_over(FoundSegment& f);

  const SpillOptions& options;
  RecoveredLog& out;
  RecoveryReport& report;
  const std::string qdir;
  const uint64_t file_max;
  std::vector<uint64_t> numbers;  // segment files in options.dir, ascending
  std::vector<FoundSegment> found;
  std::map<std::pair<std::string, std::string>, uint32_t> names;  // -> index in queue_names
  // The newest segment with data (found.size() if none), and the last segment: that one, or
  // else the newest with a good header (found.size() if none).
  size_t last_data = 0;
  size_t last = 0;
};

// Lists the segment numbers in the directory, and the highest number also among quarantined
// files, so a new segment never reuses a quarantined one's name.
Result<> DirRecovery::list_segments() {
  for (const std::string& d : {options.dir, qdir}) {
    DIR* dir = ::opendir(d.c_str());
    if (!dir) {
      if (d == qdir && errno == ENOENT) continue;
      return failure(errno_text(("cannot read directory " + d).c_str()));
    }
    while (dirent* e = ::readdir(dir)) {
      uint64_t n;
      const bool main = d == options.dir;
      if (parse_segment_name(e->d_name, ".seg", &n) ||
          (!main && std::strlen(e->d_name) > 20 &&
           parse_segment_name(std::string(e->d_name, 20).c_str(), ".seg", &n))) {
        out.segment_max = std::max(out.segment_max, n);
        if (main) numbers.push_back(n);
      }
    }
    ::closedir(dir);
  }
  std::sort(numbers.begin(), numbers.end());
  return {};
}

void DirRecovery::close_all() {
  for (FoundSegment& g : found)
    ::close(g.fd);
}

Result<> DirRecovery::open_segments() {
  found.reserve(numbers.size());
  for (uint64_t number : numbers) {
    FoundSegment f{number, segment_file_name(number), {}, -1, {}};
    f.path = options.dir + "/" + f.name;
    f.fd = ::open(f.path.c_str(), O_RDWR | O_CLOEXEC);
    if (f.fd < 0) {
      std::string e = errno_text(("cannot open " + f.path).c_str());
      close_all();
      return failure(std::move(e));
    }
    wait_for_writers(f.fd);  // a crashed writer's last write may still be landing
    found.push_back(std::move(f));
  }
  return {};
}

// Scans everything before any decision, so that the last segment holding data is known
// (segments prepared ahead of time may follow it, empty or half-created).
Result<> DirRecovery::scan_segments() {
  // Segments are independent (each defines its own queue ids), so they are scanned by a few
  // threads at once: one thread's CRC pass overlaps another's reads.
  std::vector<std::string> errors(found.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    ByteWindow wbuf;
    for (size_t i; (i = next.fetch_add(1)) < found.size();)
      if (Result<> r = scan_segment(found[i].fd, file_max, wbuf, &found[i].s); !r) {
        errors[i] = r.error().message.empty() ? "scan failed" : std::move(r.error().message);
      }
  };
  const size_t nthreads = std::min<size_t>(kScanThreads, found.size());
  std::vector<std::thread> threads;
  for (size_t t = 1; t < nthreads; ++t)
    threads.emplace_back(worker);
  worker();
  for (auto& t : threads)
    t.join();
  for (size_t i = 0; i < found.size(); ++i) {
    if (!errors[i].empty()) {
      std::string e = found[i].path + ": " + errors[i];
      close_all();
      return failure(std::move(e));
    }
    FoundSegment& f = found[i];
    ++report.segments;
    report.bytes_scanned += f.s.end_offset;
    if (f.s.end != SegmentEnd::kBadHeader && f.s.header.segment != f.number) {
      f.s.end = SegmentEnd::kBadHeader;
      f.s.damage = "header names segment " + std::to_string(f.s.header.segment);
      f.s.damaged_bytes = f.s.file_bytes;
    }
  }
  return {};
}

void DirRecovery::find_last() {
  last_data = found.size();
  for (size_t i = found.size(); i-- > 0;)
    if (found[i].s.end != SegmentEnd::kBadHeader && !holds_no_records(found[i].s)) {
      last_data = i;
      break;
    }
  last = last_data;
  if (last == found.size())
    for (size_t i = found.size(); i-- > 0;)
      if (found[i].s.end != SegmentEnd::kBadHeader) {
        last = i;
        break;
      }
}

void DirRecovery::settle(size_t i) {
  FoundSegment& f = found[i];
  const ScannedSegment& s = f.s;
  if (s.end == SegmentEnd::kBadHeader) {
    quarantine_bad_header(f, last == found.size() || i > last);
    return;
  }
  out.seq_max = std::max(out.seq_max, s.header.first_seq > 0 ? s.header.first_seq - 1 : 0);
  if (i != last && holds_no_records(s) && (last_data == found.size() || i > last_data)) {
    // Newer than any data: prepared ahead of time, or made active, and never written to.
    // (An empty-looking segment before a data segment lost its records: reported below.)
    ::close(f.fd);
    ::unlink(f.path.c_str());
    return;
  }
  if (!s.messages.empty()) out.seq_max = std::max(out.seq_max, s.messages.back().seq);
  if (i == last) {
    repair_last(f);
  } else if (s.end != SegmentEnd::kSeal) {
    report_unsealed(f);
  }
  hand_over(f);
}

void DirRecovery::quarantine(const FoundSegment& f, bool move, RecoveryIssue* issue) {
  ::mkdir(qdir.c_str(), 0750);
  const std::string target = qdir + "/" + f.name + ".bad";
  // A damaged sealed segment stays in place (its intact prefix is still served); a hard link
  // keeps the original bytes for inspection without copying or needing free space.
  const int r =
      move ? ::rename(f.path.c_str(), target.c_str()) : ::link(f.path.c_str(), target.c_str());
  if (r == 0 || (!move && errno == EEXIST)) {
    issue->quarantined_as = target;
  } else {
    issue->reason += "; could not keep a copy in " + qdir + " (" + std::strerror(errno) + ")";
  }
}

void DirRecovery::quarantine_bad_header(FoundSegment& f, bool after_last) {
  // After the last data segment this is a segment that was being created (expected after a
  // crash); before it, damage. Either way its bytes are kept aside and reported.
  const ScannedSegment& s = f.s;
  RecoveryIssue issue{f.path, f.number, 0, s.file_bytes, 0, s.damage, after_last, {}};
  ::close(f.fd);
  quarantine(f, true, &issue);
  report.issues.push_back(std::move(issue));
}

// The last segment's torn tail is expected after a crash: it is reported, and the segment is
// sealed at its last good record.
void DirRecovery::repair_last(FoundSegment& f) {
  const ScannedSegment& s = f.s;
  if (s.end == SegmentEnd::kDamaged)
    report.issues.push_back({f.path,
                             f.number,
                             s.end_offset,
                             s.damaged_bytes,
                             s.damaged_records,
                             "torn tail of the last segment: " + s.damage,
                             true,
                             {}});
  if (s.end == SegmentEnd::kSeal) return;
  const Result<> sealed = seal_in_place(f.fd, s.end_offset, s.messages.size(),
                                        s.messages.empty() ? 0 : s.messages.back().seq);
  if (!sealed)
    report.issues.push_back({f.path,
                             f.number,
                             s.end_offset,
                             0,
                             0,
                             "cannot seal the last segment (" + sealed.error().message +
                                 "); it will be reported as unsealed at the next start",
                             false,
                             {}});
}

// An earlier segment that does not end with its seal: damage, reported and kept aside; its
// intact prefix is still recovered.
void DirRecovery::report_unsealed(FoundSegment& f) {
  const ScannedSegment& s = f.s;
  std::string why = s.end == SegmentEnd::kDamaged
                        ? "damaged record in a sealed segment: " + s.damage
                        : "segment ends without a seal (" + std::string(segment_end_name(s.end)) +
                              "): records may be missing after offset " +
                              std::to_string(s.end_offset);
  RecoveryIssue issue{
      f.path, f.number, s.end_offset, s.damaged_bytes, s.damaged_records, std::move(why),
      false,  {}};
  quarantine(f, false, &issue);
  report.issues.push_back(std::move(issue));
}

// Moves the segment's descriptor and messages into `out`, its queue ids mapped to the
// directory-wide queue names.
void DirRecovery::hand_over(FoundSegment& f) {
  ScannedSegment& s = f.s;
  RecoveredSegment seg;
  seg.number = f.number;
  seg.path = f.path;
  seg.fd = f.fd;
  struct stat st;
  seg.file_bytes = ::fstat(f.fd, &st) == 0 ? uint64_t(st.st_size) : s.file_bytes;
  seg.first_seq = s.header.first_seq;
  seg.queue_of_define.reserve(s.defines.size());
  for (ScannedDefine& d : s.defines) {
    auto [it, fresh] = names.try_emplace({d.vhost, d.queue}, uint32_t(out.queue_names.size()));
    if (fresh) out.queue_names.emplace_back(std::move(d.vhost), std::move(d.queue));
    seg.queue_of_define.push_back(it->second);
  }
  seg.messages = std::move(s.messages);
  out.segments.push_back(std::move(seg));
}

}  // namespace

std::string segment_file_name(uint64_t number) {
  char b[32];
  std::snprintf(b, sizeof b, "%016llx.seg", static_cast<unsigned long long>(number));
  return b;
}

Result<> recover_dir(const SpillOptions& options, RecoveredLog* out, RecoveryReport* report) {
  const auto t0 = std::chrono::steady_clock::now();
  *out = RecoveredLog{};
  DirRecovery r(options, *out, *report);
  for (auto step :
       {&DirRecovery::list_segments, &DirRecovery::open_segments, &DirRecovery::scan_segments}) {
    if (auto done = (r.*step)(); !done) return done;
  }
  r.find_last();
  for (size_t i = 0; i < r.found.size(); ++i)
    r.settle(i);
  report->duration_ns = uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  return {};
}

}  // namespace sluice::queue
