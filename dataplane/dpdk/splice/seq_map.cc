// Sequence translation across the gateway's edits of a spliced stream; see seq_map.h.
#include "dataplane/dpdk/splice/seq_map.h"

#include <algorithm>

namespace sluice::dpdk::splice {

bool SeqMap::add(const SeqEdit& e) {
  if (count_ == kEditsMax) return false;
  if (count_ > 0) {
    const SeqEdit& prev = edits_[count_ - 1];
    if (seq_lt(e.seq, prev.seq + prev.removed)) return false;
  }
  edits_[count_++] = e;
  return true;
}

std::optional<SackBlock> SeqMap::to_source(const SackBlock& b) const {
  if (!seq_lt(b.left, b.right)) return std::nullopt;
  // The right edge is exclusive, like an ACK; the left edge rounds up past inserted bytes.
  uint32_t left = b.left - base_;
  uint32_t shift = base_;
  for (uint32_t i = 0; i < count_; ++i) {
    const SeqEdit& e = edits_[i];
    const uint32_t dest_start = e.seq + shift;
    if (seq_lt(b.left, dest_start)) {
      left = b.left - shift;
      break;
    }
    if (seq_lt(b.left, dest_start + e.inserted)) {
      left = e.seq + e.removed;
      break;
    }
    shift += e.inserted - e.removed;
    left = b.left - shift;
  }
  const uint32_t right = to_source(b.right);
  if (!seq_lt(left, right)) return std::nullopt;
  return SackBlock{left, right};
}

void SeqMap::fold(uint32_t dest_ack) {
  uint32_t done = 0;
  while (done < count_) {
    const SeqEdit& e = edits_[done];
    if (!seq_geq(dest_ack, e.seq + base_ + e.inserted)) break;
    base_ += e.inserted - e.removed;
    ++done;
  }
  std::copy(edits_.begin() + done, edits_.begin() + count_, edits_.begin());
  count_ -= done;
}

uint16_t rescale_window(uint16_t field, uint8_t from_shift, uint8_t to_shift) {
  constexpr uint8_t kShiftMax = 14;
  const uint64_t bytes = uint64_t{field} << std::min(from_shift, kShiftMax);
  const uint64_t scaled = bytes >> std::min(to_shift, kShiftMax);
  return static_cast<uint16_t>(std::min<uint64_t>(scaled, 0xFFFF));
}

}  // namespace sluice::dpdk::splice
