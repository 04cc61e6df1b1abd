// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), as used by iSCSI, ext4,
// LevelDB and TensorFlow's checkpoint files. crc32c("123456789") == 0xE3069283.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run time) and a
// table-driven slicing-by-8 routine otherwise; both give identical results. Pure functions,
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace actorflow {

// Returns the CRC-32C of `crc`'s message followed by data[0, n). Start with crc = 0:
// crc32c_extend(crc32c_extend(0, a, na), b, nb) == crc32c of a followed by b.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

// Returns the CRC-32C of data[0, n).
inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// TensorFlow's masked CRC (TFRecord and event files): rotated right by 15 bits plus 0xa282ead8,
// so that a CRC of data that itself holds CRCs does not degenerate.
inline uint32_t crc32c_masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

namespace detail {
// The portable table-driven routine (exposed so tests can check it against the hardware path).
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
// True when crc32c_extend() uses the SSE4.2 instruction on this CPU.
bool crc32c_uses_hardware();
}  // namespace detail

}  // namespace actorflow
