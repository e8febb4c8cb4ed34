// The delivery cursor file: for each queue, the highest sequence number delivered (or dropped),
// plus the log's sequence high-water mark, written atomically (tmp, fdatasync, rename, fsync
// of the directory) and checked by CRC when read back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace sluice::queue {

struct CursorEntry {
  std::string vhost;
  std::string queue;
  uint64_t delivered_seq = 0;  // every message of the queue with seq <= this is done
};

struct CursorSnapshot {
  uint64_t seq_high = 0;  // no sequence number <= this is ever assigned again
  std::vector<CursorEntry> entries;
};

inline constexpr const char* kCursorFileName = "cursors";

std::string encode_cursors(const CursorSnapshot& s);
// An error when the bytes are not a complete cursor file (bad magic, version, length or CRC).
Result<CursorSnapshot> decode_cursors(const std::string& bytes);

// Writes DIR/cursors atomically.
Result<> write_cursor_file(const std::string& dir, const CursorSnapshot& s);
// Reads DIR/cursors; a missing file is an empty snapshot. The error is the reason the file
// cannot be used (the caller refuses to start: cursors lost means redelivery).
Result<CursorSnapshot> read_cursor_file(const std::string& dir);

}  // namespace sluice::queue
