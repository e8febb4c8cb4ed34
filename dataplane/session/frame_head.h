// Private to the session core: the one-pass scan of a whole frame head (command line and
// headers) from 64-byte block bitmasks, and the pieces the incremental parser shares with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dataplane/session/parser.h"
#include "dataplane/session/stomp.h"

namespace sluice::session::detail {

inline constexpr size_t kCommandLineBytesMax = Parser::kCommandLineBytesMax;

// content-length: 1 to 10 decimal digits, nothing else.
bool parse_content_length(std::string_view s, int64_t* out);

#if defined(__SSE2__)
// Masks of one 64-byte block: bit k describes byte k.
struct HeadBlock {
  uint64_t term;   // LF or NUL
  uint64_t colon;  // ':'
  uint64_t odd;    // CR or backslash
  uint64_t nul;    // NUL (a terminator too, but never a line end)
};
using HeadBlockFn = HeadBlock (*)(const char*);
// The widest variant this CPU runs, chosen when the program loads.
extern const HeadBlockFn g_head_block;

struct FrameHead {
  Command command;
  size_t first_line;  // start of the first header line
  size_t body_start;
  uint32_t count;
  int64_t length;  // content-length, or -1
  // False: the slots are not filled. The head is plain (lines end in a bare LF, no CR, backslash
  // or NUL, every line holds a ':' after a non-empty name); index_plain_head() fills them.
  bool indexed;
  // Filled by scan_frame() only: the index of the frame's NUL when the whole frame is in the
  // buffer and within every limit, else kNoFrameEnd (the body is still arriving, or the
  // incremental path has an error to give).
  size_t nul;
};
inline constexpr size_t kNoFrameEnd = ~size_t{0};

// The head of a frame starting at buf[0], when it lies in whole 64-byte blocks of buf and holds
// nothing unusual (no escape, no CR but at line ends, within every limit). Fills *out, and the
// slots unless the head is plain. False decides nothing: the incremental path parses the frame
// and gives every error. The widest variant this CPU runs, chosen when the program loads.
using ScanFrameHeadFn = bool (*)(std::string_view buf, const FrameLimits& limits, HeaderSlot* slots,
                                 FrameHead* out);
extern const ScanFrameHeadFn g_scan_frame_head;
inline bool scan_frame_head(std::string_view buf, const FrameLimits& limits, HeaderSlot* slots,
                            FrameHead* out) {
  return g_scan_frame_head(buf, limits, slots, out);
}
// The same over the frame's real bytes (never a padded copy), and the end of the frame too, in
// the same call: out->nul. The body's NUL is looked for first in the masks the head scan
// already made, then with memchr from the next block.
extern const ScanFrameHeadFn g_scan_frame;
// out->nul of scan_frame() for a head scan_frame_head() took from a padded copy of buf: the body
// is looked for in buf itself.
size_t frame_end(std::string_view buf, const FrameLimits& limits, const FrameHead& head);
inline bool scan_frame(std::string_view buf, const FrameLimits& limits, HeaderSlot* slots,
                       FrameHead* out) {
  return g_scan_frame(buf, limits, slots, out);
}
#endif

}  // namespace sluice::session::detail
