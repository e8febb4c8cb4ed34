// Recovery of a spill directory at open: scan every segment, verify every record, repair the
// last segment's torn tail (seal it at its last good record), keep damaged segments aside, and
// hand back the messages found together with a report of everything that was not recovered.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "queue/segment_scan.h"
#include "queue/spill_types.h"

namespace sluice::queue {

inline constexpr const char* kQuarantineDir = "quarantine";

struct RecoveredSegment {
  uint64_t number = 0;
  std::string path;
  int fd = -1;  // O_RDWR, owned by the caller after recover_dir()
  uint64_t file_bytes = 0;
  uint64_t first_seq = 0;
  ScannedMessages messages;
  std::vector<uint32_t> queue_of_define;  // ScannedMessage::define -> index in queue_names
};

struct RecoveredLog {
  std::vector<RecoveredSegment> segments;  // by number, bad-header segments left out
  std::vector<std::pair<std::string, std::string>> queue_names;  // (vhost, queue)
  uint64_t seq_max = 0;      // highest sequence number seen (messages and segment headers)
  uint64_t segment_max = 0;  // highest segment number seen, quarantine included
};

std::string segment_file_name(uint64_t number);  // 16 hex digits + ".seg"

// Scans options.dir. An error only when the directory or a segment cannot be read at all.
Result<> recover_dir(const SpillOptions& options, RecoveredLog* out, RecoveryReport* report);

}  // namespace sluice::queue
