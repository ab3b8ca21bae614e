// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) — the checksum of a disk-tier
// block record (disk_tier.h). Pure functions, any thread.
//
// Why CRC-32C and not SHA-256 or a 64-bit hash: the record is already named by its
// SHA-256 block hash; the checksum only has to catch torn writes and flipped bits, and
// the SSE4.2 crc32 instruction runs it at ~8 GB/s on one core (SHA-256 with SHA-NI
// ~1.5 GB/s would cap the restore at that), with no new dependency.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagoda {

// crc32c(data, n, crc) continues a running checksum: crc32c(b, crc32c(a)) equals the
// checksum of a followed by b. Start with 0. Uses SSE4.2 where the CPU has it.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The table-driven reference (tests compare the fast path with it).
uint32_t crc32c_scalar(const void* data, size_t n, uint32_t crc = 0);

}  // namespace pagoda
