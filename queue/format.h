// The spill log's on-disk format (queue/README.md is the reference): segment header, record
// header, and the encoders and the validating decoder shared by the writer and recovery.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace sluice::queue {

static_assert(std::endian::native == std::endian::little,
              "the spill format is little-endian and encoded with memcpy");

inline constexpr uint64_t kSegmentMagic = 0x4753454349554C53ull;  // "SLUICESG" on disk
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kSegmentHeaderBytes = 64;
inline constexpr size_t kRecordHeaderBytes = 40;
inline constexpr size_t kRecordAlign = 8;
// Seal payload: message record count of the segment.
inline constexpr size_t kSealPayloadBytes = 8;
inline constexpr size_t kSealRecordBytes = kRecordHeaderBytes + kSealPayloadBytes;
// Largest record the format accepts (header + payload), whatever the options say; a length
// above it is damage, not a big record.
inline constexpr uint32_t kRecordBytesLimit = 1u << 30;
// Recovery reads segments through a window of this size; a record must fit in half of it.
inline constexpr size_t kScanWindowBytes = 8u << 20;
inline constexpr uint32_t kRecordPayloadBytesMax = uint32_t(kScanWindowBytes / 2);

enum class RecordType : uint8_t {
  kMessage = 1,      // a STOMP message: headers block + body
  kDefineQueue = 2,  // queue_id -> (vhost, queue) for the rest of this segment
  kSeal = 3,         // last record of a sealed segment
};

struct SegmentHeader {
  uint32_t version = kFormatVersion;
  uint64_t segment = 0;    // number in the file name
  uint64_t first_seq = 0;  // every message in this segment has seq >= first_seq
  uint64_t created_unix_ns = 0;
  uint64_t segment_bytes = 0;  // size preallocated at creation
};

struct RecordHeader {
  uint32_t length = 0;  // header + payload, before padding
  uint32_t crc = 0;
  RecordType type = RecordType::kMessage;
  uint32_t queue_id = 0;
  uint64_t seq = 0;
  uint64_t append_unix_ns = 0;
  uint32_t a_len = 0;  // message: headers bytes; define: vhost bytes; seal: 8
  uint32_t b_len = 0;  // message: body bytes; define: queue bytes; seal: 0
};

constexpr size_t align_record(size_t n) {
  return (n + kRecordAlign - 1) & ~(kRecordAlign - 1);
}
constexpr size_t message_record_bytes(size_t headers, size_t body) {
  return align_record(kRecordHeaderBytes + headers + body);
}
constexpr size_t define_record_bytes(size_t vhost, size_t queue) {
  return align_record(kRecordHeaderBytes + vhost + queue);
}

void encode_segment_header(const SegmentHeader& h, std::span<uint8_t, kSegmentHeaderBytes> out);
enum class HeaderCheck : uint8_t { kOk, kBadMagic, kBadVersion, kBadCrc, kBadSize };
HeaderCheck decode_segment_header(std::span<const uint8_t> in, SegmentHeader* out);
std::string_view header_check_name(HeaderCheck c);

// Writes the header fields (crc left 0) at `out` (kRecordHeaderBytes bytes). The payload goes
// after it, then zero padding; seal_record() computes the CRC once the payload is in place.
void encode_record_header(const RecordHeader& h, uint8_t* out);
// Zero-pads to the aligned size and stores the CRC; returns the aligned size.
size_t seal_record(uint8_t* rec, uint32_t length);

// Outcome of decoding the bytes at one record position.
enum class RecordCheck : uint8_t {
  kOk,
  kZero,       // an all-zero header: unwritten (preallocated) space, the end of the data
  kTruncated,  // the record runs past the end of the bytes available
  kBadLength,  // length field impossible (below header size, above limit, fields disagree)
  kBadType,    // unknown type or non-zero reserved fields
  kBadCrc,
};
std::string_view record_check_name(RecordCheck c);

// Checks the record at the start of `in` (length, fields, CRC). On kOk fills `out`; the record
// occupies align_record(out->length) bytes of `in`.
RecordCheck decode_record(std::span<const uint8_t> in, RecordHeader* out);

}  // namespace sluice::queue
