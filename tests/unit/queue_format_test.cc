// Spill log format: CRC32C vectors (against the bitwise definition), segment header and record
// encoding, the validating decoder, and the cursor file.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "queue/crc32c.h"
#include "queue/cursor_file.h"
#include "queue/format.h"

namespace sluice::queue {
namespace {

// The CRC bit by bit, as the polynomial defines it: what the library is checked against.
uint32_t crc32c_bitwise(uint32_t crc, const uint8_t* p, size_t n) {
  constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k)
      crc = (crc & 1) ? (crc >> 1) ^ kPoly : crc >> 1;
  }
  return ~crc;
}

TEST(Crc32c, MatchesKnownVectors) {
  // RFC 3720 (iSCSI) appendix B.4 and the classic check value.
  const char* check = "123456789";
  EXPECT_EQ(crc32c(0, check, 9), 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[size_t(i)] = uint8_t(i);
    dec[size_t(i)] = uint8_t(31 - i);
  }
  EXPECT_EQ(crc32c(0, zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(0, ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(0, inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(0, dec.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(0, nullptr, 0), 0u);
}

TEST(Crc32c, AgreesWithTheBitwiseDefinitionOnEveryLengthAndAlignment) {
  std::mt19937_64 rng(42);
  std::vector<uint8_t> buf(64 * 1024 + 16);
  for (auto& b : buf)
    b = uint8_t(rng());
  for (size_t len : {0, 1, 7, 8, 9, 63, 767, 768, 769, 1024, 4095, 4096, 12287, 12288, 12289, 13056,
                     40000, 65536})
    for (size_t off = 0; off < 8; ++off)
      ASSERT_EQ(crc32c(0, buf.data() + off, len), crc32c_bitwise(0, buf.data() + off, len))
          << "len " << len << " off " << off;
  // Incremental use gives the same value as one pass.
  const uint32_t whole = crc32c(0, buf.data(), 50000);
  EXPECT_EQ(crc32c(crc32c(0, buf.data(), 12345), buf.data() + 12345, 50000 - 12345), whole);
  for (int i = 0; i < 200; ++i) {
    const size_t len = size_t(rng() % 30000), off = size_t(rng() % 16);
    ASSERT_EQ(crc32c(7, buf.data() + off, len), crc32c_bitwise(7, buf.data() + off, len));
  }
}

TEST(SpillFormat, SegmentHeaderRoundTripsAndRejectsDamage) {
  SegmentHeader h;
  h.segment = 0x1234;
  h.first_seq = 99;
  h.created_unix_ns = 1700000000000000000ull;
  h.segment_bytes = 64 << 20;
  uint8_t b[kSegmentHeaderBytes];
  encode_segment_header(h, b);
  EXPECT_EQ(std::memcmp(b, "SLUICESG", 8), 0);
  SegmentHeader d;
  ASSERT_EQ(decode_segment_header(b, &d), HeaderCheck::kOk);
  EXPECT_EQ(d.segment, h.segment);
  EXPECT_EQ(d.first_seq, 99u);
  EXPECT_EQ(d.segment_bytes, h.segment_bytes);
  for (size_t i = 0; i < kSegmentHeaderBytes; ++i) {
    uint8_t c[kSegmentHeaderBytes];
    std::memcpy(c, b, sizeof c);
    c[i] ^= 0x10;
    EXPECT_NE(decode_segment_header(c, &d), HeaderCheck::kOk) << "byte " << i;
  }
  EXPECT_EQ(decode_segment_header(std::span<const uint8_t>(b, 10), &d), HeaderCheck::kBadSize);
}

std::vector<uint8_t> message(uint64_t seq, std::string_view headers, std::string_view body) {
  std::vector<uint8_t> r(message_record_bytes(headers.size(), body.size()) + 16, 0);
  RecordHeader h;
  h.length = uint32_t(kRecordHeaderBytes + headers.size() + body.size());
  h.type = RecordType::kMessage;
  h.queue_id = 3;
  h.seq = seq;
  h.append_unix_ns = 5;
  h.a_len = uint32_t(headers.size());
  h.b_len = uint32_t(body.size());
  encode_record_header(h, r.data());
  std::memcpy(r.data() + kRecordHeaderBytes, headers.data(), headers.size());
  std::memcpy(r.data() + kRecordHeaderBytes + headers.size(), body.data(), body.size());
  seal_record(r.data(), h.length);
  return r;
}

TEST(SpillFormat, RecordRoundTripsAlignedAndEveryFlippedByteIsCaught) {
  auto r = message(77, "content-type:text/plain\n", "hello");
  const size_t footprint = message_record_bytes(24, 5);
  EXPECT_EQ(footprint % kRecordAlign, 0u);
  RecordHeader h;
  ASSERT_EQ(decode_record(r, &h), RecordCheck::kOk);
  EXPECT_EQ(h.seq, 77u);
  EXPECT_EQ(h.queue_id, 3u);
  EXPECT_EQ(h.a_len, 24u);
  EXPECT_EQ(h.b_len, 5u);
  EXPECT_EQ(align_record(h.length), footprint);
  for (size_t i = 0; i < footprint; ++i)
    for (uint8_t bit : {0x01, 0x80}) {
      auto c = r;
      c[i] ^= bit;
      EXPECT_NE(decode_record(c, &h), RecordCheck::kOk) << "byte " << i;
    }
  // Cut short anywhere: never kOk.
  for (size_t n = 1; n < footprint; ++n)
    EXPECT_NE(decode_record(std::span<const uint8_t>(r.data(), n), &h), RecordCheck::kOk);
  std::vector<uint8_t> zeros(64, 0);
  EXPECT_EQ(decode_record(zeros, &h), RecordCheck::kZero);
}

TEST(SpillCursorFile, RoundTripsAndRejectsAnyDamage) {
  CursorSnapshot s;
  s.seq_high = 1000;
  s.entries.push_back({"/", "orders", 17});
  s.entries.push_back({"vh", std::string("q\nwith\0odd", 10), 900});
  const std::string bytes = encode_cursors(s);
  Result<CursorSnapshot> decoded = decode_cursors(bytes);
  ASSERT_TRUE(decoded) << decoded.error().message;
  const CursorSnapshot& d = *decoded;
  EXPECT_EQ(d.seq_high, 1000u);
  ASSERT_EQ(d.entries.size(), 2u);
  EXPECT_EQ(d.entries[1].queue, std::string("q\nwith\0odd", 10));
  EXPECT_EQ(d.entries[1].delivered_seq, 900u);
  for (size_t i = 0; i < bytes.size() - 4; ++i) {  // the last 4 bytes are padding
    std::string c = bytes;
    c[i] = char(c[i] ^ 0x04);
    EXPECT_FALSE(decode_cursors(c)) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_FALSE(decode_cursors(bytes.substr(0, n)));
}

}  // namespace
}  // namespace sluice::queue
