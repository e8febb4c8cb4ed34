// CRC32C (Castagnoli) for spill-log records: the SSE4.2 instruction when the CPU has it, a
// slicing table otherwise; both give the same value (checked by queue_test).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::queue {

// Extends `crc` (0 to start) over `n` bytes. Same convention as iSCSI / ext4 metadata:
// crc32c(0, "123456789", 9) == 0xE3069283.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);

// The two implementations, exposed so tests can check they agree.
uint32_t crc32c_table(uint32_t crc, const void* data, size_t n);
// Precondition: crc32c_hardware_available().
uint32_t crc32c_hardware(uint32_t crc, const void* data, size_t n);
bool crc32c_hardware_available();

}  // namespace sluice::queue
