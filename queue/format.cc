// Encoding and checking of segment headers and records (layout in queue/README.md).
#include "queue/format.h"

#include "queue/crc32c.h"

namespace sluice::queue {
namespace {

template <typename T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The record CRC covers the length field and everything after the CRC field up to the aligned
// end, padding included, so that any flipped byte of the record's footprint is detected.
uint32_t record_crc(const uint8_t* rec, size_t aligned) {
  uint32_t c = crc32c(0, rec, 4);
  return crc32c(c, rec + 8, aligned - 8);
}

}  // namespace

void encode_segment_header(const SegmentHeader& h, std::span<uint8_t, kSegmentHeaderBytes> out) {
  uint8_t* p = out.data();
  std::memset(p, 0, kSegmentHeaderBytes);
  put<uint64_t>(p + 0, kSegmentMagic);
  put<uint32_t>(p + 8, h.version);
  put<uint32_t>(p + 12, uint32_t(kSegmentHeaderBytes));
  put<uint64_t>(p + 16, h.segment);
  put<uint64_t>(p + 24, h.first_seq);
  put<uint64_t>(p + 32, h.created_unix_ns);
  put<uint64_t>(p + 40, h.segment_bytes);
  put<uint32_t>(p + 60, crc32c(0, p, 60));
}

HeaderCheck decode_segment_header(std::span<const uint8_t> in, SegmentHeader* out) {
  if (in.size() < kSegmentHeaderBytes) return HeaderCheck::kBadSize;
  const uint8_t* p = in.data();
  if (get<uint64_t>(p) != kSegmentMagic) return HeaderCheck::kBadMagic;
  if (get<uint32_t>(p + 60) != crc32c(0, p, 60)) return HeaderCheck::kBadCrc;
  if (get<uint32_t>(p + 8) != kFormatVersion) return HeaderCheck::kBadVersion;
  if (get<uint32_t>(p + 12) != kSegmentHeaderBytes) return HeaderCheck::kBadSize;
  out->version = get<uint32_t>(p + 8);
  out->segment = get<uint64_t>(p + 16);
  out->first_seq = get<uint64_t>(p + 24);
  out->created_unix_ns = get<uint64_t>(p + 32);
  out->segment_bytes = get<uint64_t>(p + 40);
  return HeaderCheck::kOk;
}

std::string_view header_check_name(HeaderCheck c) {
  switch (c) {
    case HeaderCheck::kOk:
      return "ok";
    case HeaderCheck::kBadMagic:
      return "bad magic";
    case HeaderCheck::kBadVersion:
      return "unsupported format version";
    case HeaderCheck::kBadCrc:
      return "header CRC mismatch";
    case HeaderCheck::kBadSize:
      return "short or malformed header";
  }
  return "?";
}

void encode_record_header(const RecordHeader& h, uint8_t* out) {
  put<uint32_t>(out + 0, h.length);
  put<uint32_t>(out + 4, 0);
  out[8] = uint8_t(h.type);
  out[9] = 0;   // flags
  out[10] = 0;  // reserved
  out[11] = 0;
  put<uint32_t>(out + 12, h.queue_id);
  put<uint64_t>(out + 16, h.seq);
  put<uint64_t>(out + 24, h.append_unix_ns);
  put<uint32_t>(out + 32, h.a_len);
  put<uint32_t>(out + 36, h.b_len);
}

size_t seal_record(uint8_t* rec, uint32_t length) {
  const size_t aligned = align_record(length);
  std::memset(rec + length, 0, aligned - length);
  put<uint32_t>(rec + 4, record_crc(rec, aligned));
  return aligned;
}

RecordCheck decode_record(std::span<const uint8_t> in, RecordHeader* out) {
  if (in.size() < kRecordHeaderBytes) {
    for (uint8_t b : in)
      if (b != 0) return RecordCheck::kTruncated;
    return RecordCheck::kZero;
  }
  const uint8_t* p = in.data();
  const uint32_t length = get<uint32_t>(p);
  if (length == 0) {
    for (size_t i = 0; i < kRecordHeaderBytes; ++i)
      if (p[i] != 0) return RecordCheck::kBadLength;
    return RecordCheck::kZero;
  }
  if (length < kRecordHeaderBytes || length > kRecordBytesLimit) return RecordCheck::kBadLength;
  const uint32_t a_len = get<uint32_t>(p + 32);
  const uint32_t b_len = get<uint32_t>(p + 36);
  if (uint64_t(kRecordHeaderBytes) + a_len + b_len != length) return RecordCheck::kBadLength;
  const size_t aligned = align_record(length);
  if (aligned > in.size()) return RecordCheck::kTruncated;
  const uint8_t type = p[8];
  if (type < 1 || type > 3 || p[9] != 0 || p[10] != 0 || p[11] != 0) return RecordCheck::kBadType;
  if (get<uint32_t>(p + 4) != record_crc(p, aligned)) return RecordCheck::kBadCrc;
  out->length = length;
  out->crc = get<uint32_t>(p + 4);
  out->type = RecordType(type);
  out->queue_id = get<uint32_t>(p + 12);
  out->seq = get<uint64_t>(p + 16);
  out->append_unix_ns = get<uint64_t>(p + 24);
  out->a_len = a_len;
  out->b_len = b_len;
  return RecordCheck::kOk;
}

std::string_view record_check_name(RecordCheck c) {
  switch (c) {
    case RecordCheck::kOk:
      return "ok";
    case RecordCheck::kZero:
      return "unwritten space";
    case RecordCheck::kTruncated:
      return "record runs past the end of the file";
    case RecordCheck::kBadLength:
      return "impossible length";
    case RecordCheck::kBadType:
      return "unknown record type or reserved bits set";
    case RecordCheck::kBadCrc:
      return "CRC mismatch";
  }
  return "?";
}

}  // namespace sluice::queue
