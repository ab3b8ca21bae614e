// Where the decode kernels ask for weights ahead of the line they read: one token's (and
// eight streams') weights come from DRAM once per step, and the kernels consume them faster
// than the hardware prefetchers fetch them. The distances and the cache they fill, per
// level and weight format, each with the measurement that set it. Used by the matmul
// kernels of every SIMD level (matmul_simd.h, matmul_avx2.cpp, matmul_avx512.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/types.h"

namespace pagoda::matmul_detail {

// How far ahead of the line being read the decode kernels ask for weights, on every
// level: prefetch_ahead (below, where the 2 KiB was measured) and prefetch_row_ahead.
constexpr int64_t kDecodePrefetchAhead = 2048;

// Which cache the decode prefetches fill: L1 (prefetcht0) where they were measured first,
// on the Intel Xeon; L2 (prefetcht2) on AMD. On a Zen 4, two threads, alternating runs of
// one binary, prefetcht0 held every decode kernel to ~29-31 GB/s (F16 12.7-13.7 tok/s on a
// 1.1B model) while a plain read loop streamed 60 GB/s and llama.cpp's F16 decode 41-50:
// each prefetch into L1 holds one of the core's few L1 miss buffers for a whole DRAM
// round trip. Into L2 (whose miss buffers are several times as many) F16 decode read
// 16.3-20.2 tok/s, Q4_0 49.6-52.8 against 42.9-50.5. Not measured on Intel, so it keeps
// L1; PAGODA_PREFETCH=l1|l2 overrides it (decode_prefetch_l2, matmul.cpp). The K-quants
// prefetch 6 KiB ahead into L2, part by part (prefetch_unit_part).
bool decode_prefetch_l2();
inline const bool kDecodePrefetchL2 = decode_prefetch_l2();

// One decode prefetch of the weights at p, into the cache kDecodePrefetchL2 says.
inline __attribute__((always_inline)) void prefetch_weights(const void* p) {
  if (kDecodePrefetchL2) __builtin_prefetch(p, 0, 1);
  else __builtin_prefetch(p, 0, 3);
}

// The float kernels' decode prefetch (one or two tokens: the rows stream from DRAM) for
// byte `off` of row i of an RM-row micro-tile: kDecodePrefetchAhead bytes ahead, and once
// that passes the row's end, on into row i + RM (the next micro-tile's row i), the next
// bytes this row's stream of reads reaches. Row i + 1 starts right after row i but is
// read at the same time: prefetching into it left the first 2 KiB of three rows in four
// (3/8 of a 2048-column F16 row) to the hardware prefetcher.
// Measured (Xeon, 2 threads, tg32, alternating binaries, 6 rounds, AVX-512): F16 decode
// 77-88% -> 85-97% of the probed roofline, BF16 (3 rounds) 85-94% -> 93-107%; 4 KiB ahead
// instead of 2 gained nothing. The packed kernels' G = 2 row groups lose 2 KiB of an 18 KiB
// Q4_0 group the same way; skipping there measured no gain, so they are as they were.
template <int RM>
inline void prefetch_row_ahead(const uint8_t* row, int64_t off, int64_t row_bytes) {
  int64_t ahead = off + kDecodePrefetchAhead;
  if (ahead >= row_bytes) ahead += (RM - 1) * row_bytes;
  prefetch_weights(row + ahead);
}

// Decode streams every weight byte from DRAM once, and the packed kernels consume it
// faster than the hardware prefetchers fetch it: on the Intel Xeon of 2026-12-01 (one
// thread, 5632 x 2048 matvec, weights cold) Q4_0 read 8-9 GB/s and Q4_K 7-8 GB/s where
// the same kernels ran at 20-25 GB/s from cache and a plain read at 16 GB/s. Asking for
// the lines kDecodePrefetchAhead bytes ahead of the one being unpacked raised them to
// 10-12 / 11-12 GB/s (1,024 ahead: +10-20%; 2,048: +20-50%; 4,096: no better). Only the
// first token micro-tile of a tile prefetches: later ones find the tile's weights in L1/L2.
// Into L2 (AMD) the 32-wide formats ask 1.5 KiB ahead for one token, 6 KiB for more: Zen 4,
// MatvecPaired with one row group per decode micro-kernel, one thread, Q4_0 at 1 / 1.25 /
// 1.5 / 2 / 3 / 4 KiB: 0.94 / 0.94 / 0.94 / 0.85-0.87 / 0.60 / 0.63 of the probe (Q8_0
// 0.87-0.91 up to 3 KiB); two threads, four alternating rounds, 1.5 against 2 KiB: Q4_0
// 34.6-39.2 against 34.0-36.9 GB/s, Q8_0 the same within 1%. A micro-tile of several tokens
// spends several times the arithmetic on each line, so its demand loads run ahead of the
// arithmetic less and the prefetches must cover more of the ~2 KiB a thread needs in flight
// (bandwidth x latency): eight tokens (matmul_bench Matmul8, 5632 x 2048, cold, two
// threads) at 1.5 / 3 / 4.5 / 6 / 9 KiB ahead: Q4_0 402-408 / 481-541 / 478-529 / 560-567 /
// 519-530 Gop/s, Q8_0 294-301 / 359-435 / 456-487 / 446-502 / 418-450 (from cache: 527, 597).
// Measured again on 2026-12-06 with both choices in one process, each matvec pass beside
// its own probe pass, alternating per pass (24 pairs; one thread, and two in the slow and
// the fast memory phase), for one token: Q4_0 reads more with no software prefetch at all
// (one thread 0.83-0.89 -> 0.88-0.93 of the probe on 2048 x 4096 - 5632, the long rows,
// 0.95 -> 0.96-0.98 on 5632 x 2048; two threads at ~62 GB/s 0.74 -> 0.78 on 2048 x 5632,
// at ~36 within 1%), Q8_0 (544-byte units against Q4_0's 288) with 3 KiB: one thread
// 0.72-0.77 -> 0.75-0.81, two threads at ~36 GB/s 0.89-0.91 -> 0.94-0.96, at ~61 0.72 ->
// 0.75; 2.25-2.5 KiB gained a little less, 4 KiB nothing, 6 KiB lost 10%.
// The other 32-wide formats keep 1.5 KiB (not measured again).
// AVX2's groups are 8 rows (a Q4_0 unit 144 bytes, half AVX-512's) and it reads one group at
// a time since 2026-12-06 (packed_tile, matmul_simd.h); there the same Zen 4 under
// PAGODA_ISA=avx2 (matmul_bench, both choices alternating per pass beside a probe pass, two
// threads) read Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / MXFP4 best with 6 KiB ahead: against
// 1.5 KiB, 0.59-0.88 -> 0.89-0.97 of a ~34 GB/s probe, Q4_0 on 2048 x 5632 32 -> 41 GB/s at
// ~60; none ahead was as good on 2048-column rows and 5-10% worse on 5632. Q8_0 reads best
// with none (0.95-0.97 of the probe; 6 KiB 0-10% less, 3 KiB 10-30% less).
template <class V, GgmlType T>
constexpr int64_t block32_prefetch_ahead_l2() {
  if constexpr (V::L == 8) return T == GgmlType::Q8_0 ? 0 : 6144;
  return T == GgmlType::Q4_0 ? 0 : T == GgmlType::Q8_0 ? 3072 : 1536;
}
constexpr int64_t kBlock32PrefetchAheadL2Tokens = 6144;
template <class V, GgmlType T>
inline __attribute__((always_inline)) void prefetch_ahead(const uint8_t* p, size_t bytes, bool one_token) {
  const int64_t ahead = !kDecodePrefetchL2 ? kDecodePrefetchAhead
                        : one_token        ? block32_prefetch_ahead_l2<V, T>()
                                           : kBlock32PrefetchAheadL2Tokens;
  if (ahead == 0) return;  // one token, into L2: the hardware prefetcher alone
  for (size_t off = 0; off < bytes; off += 64) prefetch_weights(p + ahead + off);
}

// The K-quants' (and IQ4_XS's) decode prefetch, called at the start of each of the unit's
// eight 32-column parts j. Into L1 (Intel, kDecodePrefetchL2 off): the whole unit
// kDecodePrefetchAhead ahead at part 0, as measured there. Into L2 (AMD): part j's
// eighth of the unit, kKQuantPrefetchAheadL2 ahead, so the requests go out at the rate
// the unit is read. Zen 4, cold 5632 x 2048 matvec beside a probe pass each (matmul_bench
// MatvecPaired), one thread, fraction of the probe for Q4_K / Q6_K:
//   whole unit at part 0, 4 KiB ahead (the choice before):   0.65 / 0.58
//   an eighth per part, ahead by 1 / 2 / 3 / 4 KiB: 0.87 / 0.40 / 0.57 / 0.63 (Q4_K),
//                                                   0.66 / 0.69 / 0.46 / 0.54 (Q6_K)
//   an eighth per part, ahead by 5 / 6 / 7 / 8 KiB: 0.76 / 0.86 / 0.81 / 0.69 (Q4_K),
//                                                   0.65 / 0.77 / 0.84 / 0.80 (Q6_K)
//   whole unit into L1, 1 / 2 / 4 KiB ahead:          0.84 / 0.84 / 0.78 and 0.52 / 0.51 / 0.46
// Two threads, four alternating rounds: Q4_K 30.0-32.2 -> 33.4-37.4 GB/s, Q6_K 29.6-32.2
// -> 33.2-38.3 (0.86 / 0.81 -> 0.91 / 0.91 of a ~35 GB/s probe, 0.55 / 0.52 -> 0.62 / 0.62
// of a ~55 GB/s one); 1 KiB ahead and L1 at 2 KiB were no better than before there. Why
// the distance matters this unevenly was not found (a prefetch stream meeting the
// hardware streamer's is one guess); 6 KiB is the distance both types did well at.
constexpr int64_t kKQuantPrefetchAheadL2 = 6144;
inline __attribute__((always_inline)) void prefetch_unit_part(const uint8_t* p, size_t unit_bytes, int j) {
  if (kDecodePrefetchL2) {
    const size_t lo = j * unit_bytes / 8, hi = (j + 1) * unit_bytes / 8;
    for (size_t off = lo; off < hi; off += 64) prefetch_weights(p + kKQuantPrefetchAheadL2 + off);
  } else if (j == 0) {
    for (size_t off = 0; off < unit_bytes; off += 64) prefetch_weights(p + kDecodePrefetchAhead + off);
  }
}

}  // namespace pagoda::matmul_detail
