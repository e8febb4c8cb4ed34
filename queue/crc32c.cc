// CRC32C over ISA-L's crc32_iscsi, which takes and returns the CRC register without the
// inversions before and after, and a length that is an int.
#include "queue/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <climits>

namespace sluice::queue {

uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L only reads it
  uint32_t reg = ~crc;
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, INT_MAX);
    reg = crc32_iscsi(p, int(chunk), reg);
    p += chunk;
    n -= chunk;
  }
  return ~reg;
}

}  // namespace sluice::queue
