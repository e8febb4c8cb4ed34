// Reads one segment file and checks every record in it: the building block of recovery, kept
// free of policy (what to do about damage is recovery.cc's business).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "queue/format.h"
#include "queue/huge_pages.h"

namespace sluice::queue {

// How the data of a segment ends.
enum class SegmentEnd : uint8_t {
  kSeal,       // a seal record whose message count matches: complete and closed
  kEof,        // end of file exactly at a record boundary, no seal
  kZero,       // unwritten (all-zero) space at a record boundary, no seal
  kDamaged,    // a record that fails its checks (see damage)
  kBadHeader,  // the segment header itself is unusable; no record was read
};
std::string_view segment_end_name(SegmentEnd e);

struct ScannedMessage {
  uint64_t seq = 0;
  uint64_t append_unix_ns = 0;
  uint32_t offset = 0;  // of the record header within the file
  uint32_t bytes = 0;   // aligned footprint
  uint32_t define = 0;  // index into ScannedSegment::defines
};
// A segment's messages: 64 MiB of 1 KiB records is 64 Ki entries, so it lives in huge pages.
using ScannedMessages = std::vector<ScannedMessage, HugePageAllocator<ScannedMessage>>;

struct ScannedDefine {
  uint32_t queue_id = 0;  // as written in this segment
  std::string vhost;
  std::string queue;
};

struct ScannedSegment {
  SegmentHeader header;
  HeaderCheck header_check = HeaderCheck::kOk;
  SegmentEnd end = SegmentEnd::kZero;
  uint64_t file_bytes = 0;
  uint64_t end_offset = 0;  // first byte after the last good record (where a seal sits or goes)
  uint64_t sealed_count = 0;
  std::string damage;  // why the scan stopped early (empty unless kDamaged / kBadHeader)
  // From end_offset on, when damaged: bytes up to the last non-zero data seen, and how many
  // records with a good CRC were found there by resynchronising (these are not recovered).
  uint64_t damaged_bytes = 0;
  uint64_t damaged_records = 0;
  ScannedMessages messages;
  std::vector<ScannedDefine> defines;
};

// Scans the open segment `fd` (at most `file_bytes_max` bytes of it; a bigger file is damage).
// `window` and `out` are reused between calls. An error only for an I/O error; damaged content
// is reported in `out`, never as an error.
Result<> scan_segment(int fd, uint64_t file_bytes_max, ByteWindow& window, ScannedSegment* out);

}  // namespace sluice::queue
