// Segment scanning: sequential reads in large chunks, one CRC pass per record, and a bounded
// resynchronisation pass after damage so the report can say what was lost.
#include "queue/segment_scan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace sluice::queue {
namespace {

// The read window (kScanWindowBytes): large enough that syscalls vanish against the copy and
// CRC, small enough to stay in cache. A record larger than it is damage: the writer never makes
// one (record_bytes_max is at most half of it).
constexpr size_t kWindowBytes = kScanWindowBytes;
// After damage, resynchronisation stops at the first all-zero block of this size (unwritten
// preallocated space), so a damaged 64 MiB segment is not searched to its end for nothing.
constexpr size_t kZeroBlockBytes = 4096;

// The file's bytes for the scan: a window of kWindowBytes filled with pread, small enough to
// stay in cache for the CRC pass. pread rather than a mapping of the file: the copy out of the
// page cache costs less than reading the file's pages through a mapping (the recovery figures
// are in bench/RESULTS.md, "Spill log").
class Reader {
 public:
  Reader(int fd, uint64_t size, ByteWindow& buf) : fd_(fd), size_(size), buf_(buf) {}
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Makes bytes [from, min(to, size)) available, dropping what lies before `from`.
  // Precondition: to - from <= kWindowBytes. False on an I/O error.
  bool ensure(uint64_t from, uint64_t to) {
    to = std::min(to, size_);
    if (to <= base_ + have_) return true;
    buf_.reserve(kWindowBytes);
    if (to - base_ > buf_.size()) {  // slide: keep [from, base_ + have_)
      const uint64_t keep = base_ + have_ - from;
      std::memmove(buf_.data(), buf_.data() + (from - base_), size_t(keep));
      base_ = from;
      have_ = keep;
    }
    while (base_ + have_ < to) {
      const uint64_t at = base_ + have_;
      const size_t want = size_t(std::min<uint64_t>(buf_.size() - have_, size_ - at));
      const ssize_t r = ::pread(fd_, buf_.data() + have_, want, off_t(at));
      if (r < 0) {
        if (errno == EINTR) continue;
        error_ = std::string("read: ") + std::strerror(errno);
        return false;
      }
      if (r == 0) {  // shrank under us: treat what we have as the file
        size_ = at;
        break;
      }
      have_ += uint64_t(r);
    }
    return true;
  }
  uint64_t size() const { return size_; }
  // What the read that failed said (after ensure returned false).
  const std::string& error() const { return error_; }
  // Bytes available from `pos` (which must be inside the window).
  const uint8_t* at(uint64_t pos) const { return buf_.data() + (pos - base_); }
  uint64_t avail(uint64_t pos) const { return base_ + have_ - pos; }

 private:
  int fd_;
  uint64_t size_;
  uint64_t base_ = 0;
  uint64_t have_ = 0;
  ByteWindow& buf_;
  std::string error_;
};

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

// Reads and checks the segment header. False on an I/O error; an unusable header is marked
// kBadHeader in `out`, and then no record is read.
bool scan_header(Reader& rd, ScannedSegment* out) {
  if (!rd.ensure(0, kSegmentHeaderBytes)) return false;
  out->header_check =
      decode_segment_header(std::span<const uint8_t>(rd.at(0), size_t(rd.avail(0))), &out->header);
  if (out->header_check != HeaderCheck::kOk) {
    out->end = SegmentEnd::kBadHeader;
    out->damage = std::string(header_check_name(out->header_check));
    out->damaged_bytes = out->file_bytes;
  }
  return true;
}

// Brings the record at `pos` into the window, all of it when its length fits there, and checks
// it. False only on an I/O error.
inline bool read_record(Reader& rd, uint64_t pos, RecordHeader* h, RecordCheck* check) {
  if (!rd.ensure(pos, pos + kRecordHeaderBytes)) return false;
  uint32_t length = 0;
  if (rd.avail(pos) >= 4) std::memcpy(&length, rd.at(pos), 4);
  // A length the window cannot hold is damage (it is far above any record this log writes).
  if (length >= kRecordHeaderBytes && align_record(length) <= kWindowBytes &&
      !rd.ensure(pos, pos + align_record(length)))
    return false;
  *check = decode_record(std::span<const uint8_t>(rd.at(pos), size_t(rd.avail(pos))), h);
  return true;
}

// What the records of one segment have established so far, as they are read in order: the
// queue dictionary, the highest sequence number, and the messages (in `out`).
struct RecordScan {
  ScannedSegment& out;
  std::unordered_map<uint32_t, uint32_t> ids;  // queue_id -> index in defines
  uint64_t last_seq = 0;

  void damaged(std::string why) {
    out.end = SegmentEnd::kDamaged;
    out.damage = std::move(why);
  }
  // Each takes one verified record; false when the scan ends at it (damage or the seal).
  bool take(const RecordHeader& h, const uint8_t* payload, uint64_t pos);
  bool take_define(const RecordHeader& h, const uint8_t* payload);
  bool take_message(const RecordHeader& h, uint64_t pos);
  bool take_seal(const RecordHeader& h, const uint8_t* payload);
};

inline bool RecordScan::take(const RecordHeader& h, const uint8_t* payload, uint64_t pos) {
  if (h.type == RecordType::kDefineQueue) return take_define(h, payload);
  if (h.type == RecordType::kMessage) return take_message(h, pos);
  return take_seal(h, payload);
}

inline bool RecordScan::take_define(const RecordHeader& h, const uint8_t* payload) {
  std::string vhost(reinterpret_cast<const char*>(payload), h.a_len);
  std::string queue(reinterpret_cast<const char*>(payload) + h.a_len, h.b_len);
  auto [it, fresh] = ids.try_emplace(h.queue_id, uint32_t(out.defines.size()));
  if (fresh) {
    out.defines.push_back({h.queue_id, std::move(vhost), std::move(queue)});
  } else if (out.defines[it->second].vhost != vhost || out.defines[it->second].queue != queue) {
    damaged("queue id " + std::to_string(h.queue_id) + " defined twice with different names");
    return false;
  }
  return true;
}

inline bool RecordScan::take_message(const RecordHeader& h, uint64_t pos) {
  auto it = ids.find(h.queue_id);
  if (it == ids.end()) {
    damaged("message for undefined queue id " + std::to_string(h.queue_id));
    return false;
  }
  if (h.seq <= last_seq || h.seq < out.header.first_seq) {
    damaged("sequence number " + std::to_string(h.seq) + " out of order");
    return false;
  }
  last_seq = h.seq;
  out.messages.push_back(
      {h.seq, h.append_unix_ns, uint32_t(pos), uint32_t(align_record(h.length)), it->second});
  return true;
}

inline bool RecordScan::take_seal(const RecordHeader& h, const uint8_t* payload) {
  uint64_t count = 0;
  if (h.a_len == kSealPayloadBytes) std::memcpy(&count, payload, 8);
  if (h.a_len != kSealPayloadBytes || count != out.messages.size()) {
    damaged("seal counts " + std::to_string(count) + " messages, the segment holds " +
            std::to_string(out.messages.size()));
    return false;
  }
  out.end = SegmentEnd::kSeal;
  out.sealed_count = count;
  return false;
}

// Reads the records after the header until the data ends (seal, end of file, unwritten space)
// or a record fails its checks, and sets out->end and out->end_offset. False on an I/O error.
bool scan_records(Reader& rd, ScannedSegment* out) {
  RecordScan scan{*out, {}, 0};
  uint64_t pos = kSegmentHeaderBytes;
  for (;;) {
    if (pos == rd.size()) {
      out->end = SegmentEnd::kEof;
      break;
    }
    RecordHeader h;
    RecordCheck c;
    if (!read_record(rd, pos, &h, &c)) return false;
    if (c == RecordCheck::kZero) {
      out->end = SegmentEnd::kZero;
      break;
    }
    if (c != RecordCheck::kOk) {
      scan.damaged(std::string(record_check_name(c)));
      break;
    }
    if (!scan.take(h, rd.at(pos) + kRecordHeaderBytes, pos)) break;
    pos += align_record(h.length);
  }
  out->end_offset = pos;
  return true;
}

// After damage at out->end_offset: resynchronises on 8-byte boundaries to count intact records
// beyond it, and finds where the non-zero data ends. Reads the rest of the file through the
// same window. False on an I/O error.
bool measure_damage(Reader& rd, ScannedSegment* out) {
  const uint64_t pos = out->end_offset;
  uint64_t p = pos + kRecordAlign;
  uint64_t last_data = pos;
  for (uint64_t chunk = pos; chunk < rd.size(); chunk += kZeroBlockBytes) {
    const uint64_t end = std::min<uint64_t>(chunk + kZeroBlockBytes, rd.size());
    if (!rd.ensure(chunk, end)) return false;
    for (uint64_t q = chunk; q < end; ++q)
      if (*rd.at(q) != 0) last_data = q + 1;
  }
  while (p + kRecordHeaderBytes <= rd.size()) {
    if (!rd.ensure(p, p + kZeroBlockBytes)) return false;
    if (p % kZeroBlockBytes == 0 &&
        all_zero(rd.at(p), size_t(std::min<uint64_t>(kZeroBlockBytes, rd.avail(p)))))
      break;
    uint32_t length = 0;
    std::memcpy(&length, rd.at(p), 4);
    if (length >= kRecordHeaderBytes && align_record(length) <= kWindowBytes &&
        !rd.ensure(p, p + align_record(length)))
      return false;
    RecordHeader h;
    if (decode_record(std::span<const uint8_t>(rd.at(p), size_t(rd.avail(p))), &h) ==
        RecordCheck::kOk) {
      if (h.type == RecordType::kMessage) ++out->damaged_records;
      p += align_record(h.length);
    } else {
      p += kRecordAlign;
    }
  }
  out->damaged_bytes = last_data > pos ? last_data - pos : 0;
  return true;
}

}  // namespace

std::string_view segment_end_name(SegmentEnd e) {
  switch (e) {
    case SegmentEnd::kSeal:
      return "sealed";
    case SegmentEnd::kEof:
      return "end of file";
    case SegmentEnd::kZero:
      return "unwritten space";
    case SegmentEnd::kDamaged:
      return "damaged";
    case SegmentEnd::kBadHeader:
      return "bad header";
  }
  return "?";
}

Result<> scan_segment(int fd, uint64_t file_bytes_max, ByteWindow& window, ScannedSegment* out) {
  *out = ScannedSegment{};
  struct stat st;
  if (::fstat(fd, &st) != 0) return failure(std::string("stat: ") + std::strerror(errno));
  out->file_bytes = uint64_t(st.st_size);
  if (out->file_bytes > file_bytes_max) {
    out->end = SegmentEnd::kBadHeader;
    out->damage =
        "file larger than the segment size limit (" + std::to_string(file_bytes_max) + " bytes)";
    return {};
  }
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  // The window holds the largest record the format allows in this file, and at least 4 MiB.
  Reader rd(fd, out->file_bytes, window);
  const bool read =
      scan_header(rd, out) &&
      (out->end == SegmentEnd::kBadHeader ||
       (scan_records(rd, out) && (out->end != SegmentEnd::kDamaged || measure_damage(rd, out))));
  if (!read) return failure(rd.error());
  return {};
}

}  // namespace sluice::queue
