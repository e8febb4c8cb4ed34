// Per-direction sequence arithmetic of a spliced flow: the bytes the gateway injected, removed
// and rewritten between the two legs (DESIGN section 7), SACK edges and window rescaling.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace sluice::dpdk::splice {

// Serial-number comparison of 32-bit sequence numbers (RFC 1982): a < b when b is less than
// 2^31 ahead of a. RFC 1982 leaves values exactly 2^31 apart undefined; here each is "less"
// than the other, so callers keep the numbers they compare within 2^31 (TCP windows: 2^30).
constexpr bool seq_lt(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) < 0;
}
constexpr bool seq_leq(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) <= 0;
}
constexpr bool seq_gt(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) > 0;
}
constexpr bool seq_geq(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) >= 0;
}

// One edit of the byte stream, in the source leg's sequence space: the source bytes
// [seq, seq + removed) are not forwarded and `inserted` bytes of the gateway's take their place
// (before the source byte seq + removed). Injection: removed = 0; removal: inserted = 0;
// rewrite (CONNECT replaced by the bind plan): both.
struct SeqEdit {
  uint32_t seq = 0;
  uint32_t removed = 0;
  uint32_t inserted = 0;
};

struct SackBlock {
  uint32_t left = 0;   // first byte
  uint32_t right = 0;  // one past the last byte

  friend bool operator==(const SackBlock&, const SackBlock&) = default;
};

// Maps one direction of a flow from the sending leg's sequence space (source) to the receiving
// leg's (destination): dest = src + base + the net size of the edits before src. Data segments
// use to_dest(); ACKs and SACK blocks that travel the other way use to_source(). Both assume
// the numbers lie within 2^31 of the edits; fold() retires edits the receiver has acknowledged,
// so a long flow keeps only its base.
class SeqMap {
 public:
  static constexpr uint32_t kEditsMax = 4;  // CONNECTED injected, owner CONNECTED, CONNECT

  // base: dest - src for bytes before any edit (e.g. gateway ISN to the client - owner ISN).
  explicit SeqMap(uint32_t base = 0) : base_(base) {}

  // Edits must come in stream order, not overlapping the previous edit's removed bytes.
  // Returns false (nothing changes) when kEditsMax edits are pending or the order is wrong;
  // the caller counts it and resets the flow.
  bool add(const SeqEdit& e);

  // A data segment's seq. A seq inside removed bytes maps to where the next surviving byte
  // lands; removed() tells the caller to trim the payload. Inline, as to_source() of an ACK:
  // the splice path maps every segment.
  uint32_t to_dest(uint32_t src_seq) const {
    uint32_t shift = base_;  // dest - src so far; unsigned arithmetic wraps like TCP's
    for (uint32_t i = 0; i < count_; ++i) {
      const SeqEdit& e = edits_[i];
      if (seq_lt(src_seq, e.seq)) break;
      if (seq_lt(src_seq, e.seq + e.removed)) return e.seq + shift + e.inserted;
      shift += e.inserted - e.removed;
    }
    return src_seq + shift;
  }
  bool removed(uint32_t src_seq) const {
    for (uint32_t i = 0; i < count_; ++i) {
      const SeqEdit& e = edits_[i];
      if (seq_lt(src_seq, e.seq)) return false;
      if (seq_lt(src_seq, e.seq + e.removed)) return true;
    }
    return false;
  }

  // A cumulative ACK from the receiving leg, in the sender's space. An ACK inside inserted
  // bytes acknowledges the source only up to the edit; once all inserted bytes are
  // acknowledged the removed source bytes count as acknowledged too.
  uint32_t to_source(uint32_t dest_ack) const {
    uint32_t shift = base_;
    for (uint32_t i = 0; i < count_; ++i) {
      const SeqEdit& e = edits_[i];
      const uint32_t dest_start = e.seq + shift;
      if (seq_lt(dest_ack, dest_start)) break;
      if (seq_lt(dest_ack, dest_start + e.inserted)) return e.seq;
      shift += e.inserted - e.removed;
    }
    return dest_ack - shift;
  }

  // A SACK block from the receiving leg, in the sender's space. Edges inside inserted bytes
  // are clamped to the source bytes the block really covers (left to after the edit, right to
  // its start); nullopt when nothing of the block is source data.
  std::optional<SackBlock> to_source(const SackBlock& b) const;

  // Retires every edit the receiver has acknowledged completely (dest_ack at or past its
  // inserted bytes), adding its net size to the base. After that the sender sends nothing
  // before the edit (at most a keepalive at snd_una - 1, which still maps right).
  void fold(uint32_t dest_ack);

  uint32_t base() const { return base_; }
  uint32_t edits() const { return count_; }

 private:
  uint32_t base_;
  std::array<SeqEdit, kEditsMax> edits_{};
  uint32_t count_ = 0;
};

// Window field rescaling between legs whose window scale shifts differ (RFC 7323): the
// receiver's window in bytes, field << from_shift, re-expressed with to_shift, rounded down so
// the sender never gets more than the receiver offered. Capped at 0xFFFF (so at most
// 0xFFFF << to_shift bytes). A small nonzero window may round down to 0; the sender then
// probes, as with any zero window. Shifts above 14 are treated as 14.
uint16_t rescale_window(uint16_t field, uint8_t from_shift, uint8_t to_shift);

}  // namespace sluice::dpdk::splice
