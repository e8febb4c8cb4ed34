// CRC32C (Castagnoli) of spill-log records, segment headers and cursor files: Intel's ISA-L
// (crc32_iscsi, which picks its fastest code for the CPU at load time: PCLMULQDQ folding, or
// the crc32 instruction, or a table).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::queue {

// Extends `crc` (0 to start) over `n` bytes. Same convention as iSCSI / ext4 metadata:
// crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace sluice::queue
