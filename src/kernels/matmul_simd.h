// The packed-weight micro-kernels, written once over a vector abstraction V
// and instantiated by matmul_avx2.cpp (V = 8 int32 lanes, maddubs) and
// matmul_avx512.cpp (V = 16 lanes, vpdpbusd). Private to those two files; every
// name here is a template on V, so the two instantiations never collide.
//
// A micro-kernel computes G row groups (V::L rows each) x N tokens over all
// columns: per 32-column chunk it unpacks 8 "step" vectors (4 codes of each
// row) per group and feeds each to N dot4 instructions whose activation
// operand is the 4 matching bytes of one token broadcast to every lane (one
// broadcast serves the G groups). Unpacking is paid once per N tokens; with
// N = 8 on AVX-512 a Q4_0 chunk is 64 vpdpbusd, 12 unpack ops and 24 float
// ops (convert + scale + accumulate per token). The K-quants use G = 1.
//
// V must provide (I: int vector of L int32, F: float vector of L floats):
//   L, kMaxN (tokens per K-quant micro-kernel), kGroups and kBlock32N (G and
//   N of the 32-wide formats' micro-kernel; one token runs G = 1), bcast4(x4) (4 int8 to every
//   lane), load(p), zero(), set1(i), and_(a,b), or_and(a,b,c) = a | (b & c),
//   srli16<n>(a), slli16<n>(a), q8_prep(codes) (the packed Q8_0 codes: q + 128
//   for AVX-512, q for AVX2, see q8_codes_signed; kQ8Offset says what to
//   subtract per activation sum), and either
//   (kPairSums = false) dot4(acc, w_u8, xb) / dot4_q8(acc, w_q8, xb): acc +=
//   sum of 4 w*x per lane, xb = bcast4 of 4 int8; or (kPairSums = true)
//   mul16(w, xb) / mul16_q8(w, xb): int16 pair sums, add16, widen (pair sums
//   -> int32 lane sums); then mullo, add, load_u8_i32(p), load_s8_i32(p),
//   load_f16(p), cvt(I), fmadd(a,b,c), mul(a,b), set1f(f), fzero(),
//   store(y, F, n_valid); pack16(lo, hi) (int16 pairs: low half of lo, high half
//   from hi) and dot16(acc, a, b) (acc += sum of the two int16 products per lane);
//   for the codebook formats bcast16(p) (16 bytes to every
//   128-bit lane), lut16(table, idx) (byte shuffle: table[idx] per byte, idx < 16)
//   and load_e8m0_half(p) (L E8M0 bytes -> 2^(e-128) as floats, exact).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul_impl.h"
#include "kernels/static_for.h"
#include "tensor/types.h"

namespace pagoda::matmul_detail {

// Whether the codes fed to the dot instructions are Q8_0-style bytes (q + 128 for
// AVX-512, signed q for AVX2) rather than small unsigned codes.
constexpr bool signed_codes(GgmlType t) { return t == GgmlType::Q8_0 || is_codebook(t); }

// A codebook's 16 levels as the bytes the dot instructions take: level + Offset
// (V::kQ8Offset: 128 makes them u8 for vpdpbusd, 0 keeps them signed for AVX2's
// sign trick), looked up per index with one byte shuffle.
template <GgmlType T, int Offset>
struct CodebookBytes {
  static constexpr std::array<uint8_t, 16> make() {
    std::array<uint8_t, 16> b{};
    for (int k = 0; k < 16; ++k)
      b[k] = static_cast<uint8_t>((T == GgmlType::MXFP4 ? kMxfp4Values[k] : kIq4nlValues[k]) + Offset);
    return b;
  }
  alignas(16) static constexpr std::array<uint8_t, 16> bytes = make();
};
template <class V, GgmlType T>
inline typename V::I codebook_table() {
  return V::bcast16(CodebookBytes<T, V::kQ8Offset>::bytes.data());
}

// Calls step(s, w) for the 8 steps of the 32-column chunk at cp, w the codes
// of columns 4s..4s+3 of every lane's row as bytes.
template <class V, GgmlType T, class Step>
inline __attribute__((always_inline)) void chunk_steps(const uint8_t* cp, Step&& step) {
  using I = typename V::I;
  constexpr int VB = 4 * V::L;
  const I m0f = V::set1(0x0F0F0F0F);
  if constexpr (T == GgmlType::Q8_0) {
    static_for<0, 8>([&](auto s) { step(s, V::q8_prep(V::load(cp + s * VB))); });
  } else if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1 || T == GgmlType::Q4_K) {
    static_for<0, 4>([&](auto s) {
      const I v = V::load(cp + s * VB);
      step(s, V::and_(v, m0f));
      step(std::integral_constant<int, s + 4>{}, V::and_(V::template srli16<4>(v), m0f));
    });
  } else if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1 || T == GgmlType::Q5_K) {
    const I hv = V::load(cp + unit_layout(T).high * VB);
    const I m10 = V::set1(0x10101010);
    // Bit s of each byte -> bit 4.
    auto high = [&](auto s) {
      if constexpr (s <= 4) return V::template slli16<4 - s>(hv);
      else return V::template srli16<s - 4>(hv);
    };
    static_for<0, 4>([&](auto s) {
      const I v = V::load(cp + s * VB);
      step(s, V::or_and(V::and_(v, m0f), high(s), m10));
      constexpr int s4 = s + 4;
      step(std::integral_constant<int, s4>{},
           V::or_and(V::and_(V::template srli16<4>(v), m0f), high(std::integral_constant<int, s4>{}), m10));
    });
  } else if constexpr (T == GgmlType::Q2_K || T == GgmlType::Q3_K) {
    const I m03 = V::set1(0x03030303);
    const I l0 = V::load(cp), l1 = V::load(cp + VB);
    [[maybe_unused]] I hv;
    if constexpr (T == GgmlType::Q3_K) hv = V::load(cp + unit_layout(T).high * VB);
    static_for<0, 8>([&](auto s) {
      // Bits 2(s&3)..+1 of vector s/4 -> bits 0..1; Q3_K: bit s of hv -> bit 2.
      I c = V::and_(V::template srli16<2 * (s & 3)>(s < 4 ? l0 : l1), m03);
      if constexpr (T == GgmlType::Q3_K) {
        I h;
        if constexpr (s <= 2) h = V::template slli16<2 - s>(hv);
        else h = V::template srli16<s - 2>(hv);
        c = V::or_and(c, h, V::set1(0x04040404));
      }
      step(s, c);
    });
  } else if constexpr (is_codebook(T)) {
    const I tbl = codebook_table<V, T>();
    static_for<0, 4>([&](auto s) {
      const I v = V::load(cp + s * VB);
      step(s, V::lut16(tbl, V::and_(v, m0f)));
      step(std::integral_constant<int, s + 4>{}, V::lut16(tbl, V::and_(V::template srli16<4>(v), m0f)));
    });
  } else if constexpr (T == GgmlType::Q6_K) {
    const I h0 = V::load(cp + unit_layout(T).high * VB), h1 = V::load(cp + (unit_layout(T).high + 1) * VB);
    const I m30 = V::set1(0x30303030);
    // Bits 2p..2p+1 of each byte -> bits 4..5.
    auto high = [&](auto s) {
      constexpr int p = s & 3;
      const I h = s < 4 ? h0 : h1;
      if constexpr (p < 3) return V::template slli16<4 - 2 * p>(h);
      else return V::template srli16<2>(h);
    };
    static_for<0, 4>([&](auto s) {
      const I v = V::load(cp + s * VB);
      step(s, V::or_and(V::and_(v, m0f), high(s), m30));
      constexpr int s4 = s + 4;
      step(std::integral_constant<int, s4>{},
           V::or_and(V::and_(V::template srli16<4>(v), m0f), high(std::integral_constant<int, s4>{}), m30));
    });
  }
}

// Calls into one int16 pair-sum accumulator that cannot overflow (AVX2:
// pmaddubsw pair sums are <= 2 x max_code x 127, and int16 holds 32767):
// Q4 codes < 16 -> 3810 per step, 8 steps; Q5 < 32 -> 7874, 4 steps;
// Q6 < 64 -> 16002, 2 steps; Q8 (|q| x sign) -> 32512, 1 step; Q2_K / Q3_K
// codes < 4 / < 8 -> 762 / 1778, 4 steps (a 16-column sub-block); MXFP4 levels
// |v| <= 12 -> 3048, 8 steps; IQ4 levels |v| <= 127 -> 32258, 1 step.
constexpr int pair_steps(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q4_K: case GgmlType::MXFP4: return 8;
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q5_K: return 4;
    case GgmlType::Q2_K: case GgmlType::Q3_K: return 4;
    case GgmlType::Q6_K: return 2;
    default: return 1;
  }
}

// The order chunk_steps visits step s in: Q8_0, Q2_K and Q3_K in order; nibble
// formats by pairs (0, 4, 1, 5, 2, 6, 3, 7).
constexpr int call_index(GgmlType t, int s) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q2_K || t == GgmlType::Q3_K ? s : s < 4 ? 2 * s : 2 * (s - 4) + 1;
}

// acc32 += the products of one step for one token. C: the index of this call
// among the calls into acc32 since it was zeroed. AVX-512: one vpdpbusd.
// AVX2: pmaddubsw into the int16 pair sums p16, widened into acc32 with one
// pmaddwd every pair_steps(T) calls (8 for Q4: 9 multiplies per 32 columns
// instead of 16).
// xb: the 4 activation bytes of this step broadcast to every lane (V::bcast4),
// shared by every row group of a G-group kernel.
template <class V, GgmlType T, int C>
inline __attribute__((always_inline)) void step_acc(typename V::I& acc32, typename V::I& p16,
                                                    typename V::I w, typename V::I xb) {
  if constexpr (!V::kPairSums) {
    if constexpr (signed_codes(T)) acc32 = V::dot4_q8(acc32, w, xb);
    else acc32 = V::dot4(acc32, w, xb);
  } else {
    constexpr int K = pair_steps(T);
    const typename V::I prod = signed_codes(T) ? V::mul16_q8(w, xb) : V::mul16(w, xb);
    if constexpr (C % K == 0) p16 = prod;
    else p16 = V::add16(p16, prod);
    if constexpr (C % K == K - 1) {
      if constexpr (C == K - 1) acc32 = V::widen(p16);  // first flush: acc32 was zero
      else acc32 = V::add(acc32, V::widen(p16));
    }
  }
}

// step_acc with the step's 4 activation bytes x4: on levels with V::dot4_x4 (AVX-512,
// where dot4_q8 is dot4) the broadcast is the multiply's memory operand, where GCC 12 kept
// a vpbroadcastd of its own per multiply; elsewhere V::bcast4, then step_acc.
// For steps whose broadcast feeds one multiply (one row group); see block32_kernel.
template <class V, GgmlType T, int C>
inline __attribute__((always_inline)) void step_acc_x4(typename V::I& acc32, typename V::I& p16,
                                                       typename V::I w, const int8_t* x4) {
  if constexpr (!V::kPairSums && requires { V::dot4_x4(acc32, w, x4); })
    acc32 = V::dot4_x4(acc32, w, x4);
  else
    step_acc<V, T, C>(acc32, p16, w, V::bcast4(x4));
}

constexpr bool is_block32(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q5_0 || t == GgmlType::Q4_1 ||
         t == GgmlType::Q5_1 || t == GgmlType::IQ4_NL || t == GgmlType::MXFP4;
}

// The codes of step s (columns 4s..4s+3 of the 32-column chunk at cp) of every
// lane's row, as bytes: the same vectors chunk_steps produces, one at a time,
// so a G-group kernel can hold step s of G groups at once. The repeated loads
// (nibble vector s & 3 for s and s + 4, the high-bit vectors) are the same
// addresses with no store between, and the compiler merges them.
// tbl: codebook_table<V, T>() for the codebook formats (unused otherwise).
template <class V, GgmlType T, int s>
inline __attribute__((always_inline)) typename V::I step_codes(const uint8_t* cp, typename V::I tbl) {
  using I = typename V::I;
  constexpr int VB = 4 * V::L;
  if constexpr (T == GgmlType::Q8_0) {
    return V::q8_prep(V::load(cp + s * VB));
  } else {
    const I m0f = V::set1(0x0F0F0F0F);
    const I v = V::load(cp + (s & 3) * VB);
    const I lo = s < 4 ? V::and_(v, m0f) : V::and_(V::template srli16<4>(v), m0f);
    if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1) {
      return lo;
    } else if constexpr (is_codebook(T)) {
      return V::lut16(tbl, lo);
    } else {  // Q5: bit s of each byte of the high-bit vector -> bit 4
      const I hv = V::load(cp + unit_layout(T).high * VB);
      I h;
      if constexpr (s <= 4) h = V::template slli16<4 - s>(hv);
      else h = V::template srli16<s - 4>(hv);
      return V::or_and(lo, h, V::set1(0x10101010));
    }
  }
}

// The step visited at call i (the inverse of call_index): nibble formats by
// pairs (0, 4, 1, 5, ...) so the two halves of one loaded vector are used
// back to back.
constexpr int step_of_call(GgmlType t, int i) { return t == GgmlType::Q8_0 ? i : i % 2 == 0 ? i / 2 : 4 + i / 2; }

// Where a block32 micro-kernel gets its step vectors (see unpack_codes()).
enum class Codes {
  Packed,          // unpacked from the packed nibbles in registers
  PackedAndStore,  // the same, and stored to up[g] for later token micro-tiles
  Unpacked         // loaded from up[g]
};

// The 32-wide formats: G row groups (gp[g], n_valid[g] real rows starting at
// row0[g]) x tokens [t0, t0 + N). Per step, each activation broadcast feeds
// G multiplies: on Zen 3 a vpbroadcastd from memory costs a vector-pipe uop
// like an add (measured: 8 broadcasts take ~5 cycles, 8 adds ~3), and with
// G = 1 the 8 broadcasts per token and chunk were a third of the kernel's
// uops. The arithmetic per output element is the same for every G and N (and C).
// up[g]: group g's step-vector scratch, written (PackedAndStore) or read (Unpacked).
// Units [u0, u1) of each group, gp[g] pointing at unit u0 (consecutive up to u1: one
// column chunk of the layout, PackedAddr); past the first chunk (u0 > 0) the sums carry on
// from y's (a float stored and loaded back is the same float, so a token's result does not
// depend on where the chunks fall).
template <class V, GgmlType T, int G, int N, Codes C = Codes::Packed>
void block32_kernel(const uint8_t* const* gp, uint8_t* const* up, const QuantizedActs& a, int64_t t0, float* y,
                    int64_t n_rows, const int64_t* row0, const int* n_valid, bool prefetch, int64_t u0, int64_t u1) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int L = V::L;
  constexpr size_t VB = 4 * L;
  const size_t unit_bytes = packed_unit_bytes(T, L);
  const int64_t n_cols = a.n_cols;
  // Per block: sum_k d (c_k - offset) dx q_k = d (dx dot(c, q) + (-offset) (dx sum q)),
  // or with a min m: d dx dot(c, q) + m (dx sum q). Without a min the inner
  // FMA takes the token's -offset * dx * sum q (exact: offset is a power of
  // two), shared by the G groups, and the outer one scales by d: 2 float ops
  // per (group, token) after the convert instead of 3 (d * dx, then one FMA
  // per term): +3-5% AVX2 Q4_0 prefill on Zen 3 (181 -> 186-190 GOP/s, one
  // thread, 256 x 2048 x 64 tokens, best of 300). Folding the offset into the
  // integer pair sums instead needs per-token sums split by pair parity from
  // the quantizer and a broadcast per (token, block): rejected as no cheaper.
  constexpr bool has_min = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;
  constexpr int offset = signed_codes(T) ? V::kQ8Offset : T == GgmlType::Q4_0 ? 8 : 16;
  [[maybe_unused]] I tbl = V::izero();
  if constexpr (is_codebook(T)) tbl = codebook_table<V, T>();
  constexpr UnitLayout lay = unit_layout(T);
  constexpr size_t scale_off = lay.chunk_vectors * VB + lay.d * L;
  const int64_t nb = n_cols / 32;
  const int8_t* xq[N];
  const float* dx[N];
  const float* dsx[N];
  for (int t = 0; t < N; ++t) {
    xq[t] = a.q + (t0 + t) * n_cols;
    dx[t] = a.d + (t0 + t) * nb;
    dsx[t] = a.dsum32 + (t0 + t) * nb;
  }
  F accf[G][N];
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < N; ++t) {
      const float* yp = y + (t0 + t) * n_rows + row0[g];
      accf[g][t] = u0 == 0 ? V::fzero() : n_valid[g] == L ? V::load(yp) : V::load_partial(yp, n_valid[g]);
    }
  for (int64_t u = u0; u < u1; ++u) {
    const uint8_t* p[G];
    for (int g = 0; g < G; ++g) p[g] = gp[g] + (u - u0) * unit_bytes;
    if constexpr (C != Codes::Unpacked)
      if (prefetch)
        for (int g = 0; g < G; ++g) prefetch_ahead<V, T>(p[g], unit_bytes, N == 1);
    I acc[G][N], p16[G][N];
    for (int g = 0; g < G; ++g)
      for (int t = 0; t < N; ++t) acc[g][t] = V::izero();
    static_for<0, 8>([&](auto i) {
      constexpr int s = step_of_call(T, i);
      I w[G];
      for (int g = 0; g < G; ++g) {
        if constexpr (C == Codes::Unpacked) {
          w[g] = V::load(up[g] + (u * 8 + s) * VB);
        } else {
          w[g] = step_codes<V, T, s>(p[g], tbl);
          if constexpr (C == Codes::PackedAndStore) V::store_i(up[g] + (u * 8 + s) * VB, w[g]);
        }
      }
      // One row group: each activation broadcast feeds one multiply, so it is the
      // multiply's memory operand ({1to16}) instead of a vpbroadcastd of its own. Zen 4,
      // alternating on one binary: matmul_bench Matmul8 Q4_0 / Q8_0, one thread,
      // 295-302 -> 310-325 / 273-275 -> 287-296 Gop/s; bench-engine --streams 8 (Q4_0,
      // -p 64 -n 256) faster in 7 of 8 rounds, median +4.5%. Row groups of 2+ share one
      // broadcast register (prefill A/B within noise either way).
      if constexpr (G == 1) {
        for (int t = 0; t < N; ++t) step_acc_x4<V, T, i>(acc[0][t], p16[0][t], w[0], xq[t] + u * 32 + 4 * s);
        return;
      }
      for (int t = 0; t < N; ++t) {
        const I xb = V::bcast4(xq[t] + u * 32 + 4 * s);
        for (int g = 0; g < G; ++g) step_acc<V, T, i>(acc[g][t], p16[g][t], w[g], xb);
      }
    });
    F dw[G];
    for (int g = 0; g < G; ++g) {
      if constexpr (T == GgmlType::MXFP4) dw[g] = V::load_e8m0_half(p[g] + scale_off);
      else dw[g] = V::load_f16(p[g] + scale_off);
    }
    if constexpr (has_min) {
      F mw[G];
      for (int g = 0; g < G; ++g) mw[g] = V::load_f16(p[g] + scale_off + (lay.m - lay.d) * L);
      for (int t = 0; t < N; ++t) {
        const F dxt = V::set1f(dx[t][u]), dsxt = V::set1f(dsx[t][u]);
        for (int g = 0; g < G; ++g) {
          accf[g][t] = V::fmadd(V::cvt(acc[g][t]), V::mul(dw[g], dxt), accf[g][t]);
          accf[g][t] = V::fmadd(mw[g], dsxt, accf[g][t]);
        }
      }
    } else {
      for (int t = 0; t < N; ++t) {
        const F dxt = V::set1f(dx[t][u]);
        // Q4_0's -8 * dx * sum q comes precomputed from the quantizer: a broadcast
        // load instead of a multiply and a register broadcast per token and 32
        // columns (pp512 147 -> 154 tok/s when it was first precomputed per tile).
        F offt = V::fzero();
        if constexpr (T == GgmlType::Q4_0) offt = V::set1f(a.neg8_dsum32[(t0 + t) * nb + u]);
        else if constexpr (offset != 0) offt = V::set1f(static_cast<float>(-offset) * dsx[t][u]);
        for (int g = 0; g < G; ++g) {
          // offset 0 (AVX2 Q8_0): d * dx is ready before the integer sums, so
          // one FMA follows the convert (3-5% faster Q8_0 decode than
          // (acc * dx) * d, measured).
          if constexpr (offset != 0)
            accf[g][t] = V::fmadd(V::fmadd(V::cvt(acc[g][t]), dxt, offt), dw[g], accf[g][t]);
          else
            accf[g][t] = V::fmadd(V::cvt(acc[g][t]), V::mul(dw[g], dxt), accf[g][t]);
        }
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < N; ++t) V::store(y + (t0 + t) * n_rows + row0[g], accf[g][t], n_valid[g]);
}

// The K-quants: row group at gp (n_units units) x tokens [t0, t0 + N): y[t][row0 + r] for r < n_valid.
template <class V, GgmlType T, int N>
void group_kernel(const uint8_t* gp, const QuantizedActs& a, int64_t t0, float* y, int64_t n_rows,
                  int64_t row0, int n_valid, bool prefetch) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int L = V::L;
  constexpr size_t VB = 4 * L;
  const size_t unit_bytes = packed_unit_bytes(T, L);
  const int64_t n_cols = a.n_cols;
  const int8_t* xq[N];
  for (int t = 0; t < N; ++t) xq[t] = a.q + (t0 + t) * n_cols;
  F accf[N];
  for (int t = 0; t < N; ++t) accf[t] = V::fzero();
  // The unit's parts where unit_layout(T) (matmul_impl.h) puts them: chunks of chunk
  // bytes, then the scale area sp with d at 0 and m, sc, mn at their lane offsets.
  constexpr UnitLayout lay = unit_layout(T);
  constexpr size_t chunk = lay.chunk_vectors * VB;
  static_assert(lay.d == 0, "the kernels read d at the scale area's start");

  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    const int64_t nsb = n_cols / 256;
    for (int64_t u = 0; u < nsb; ++u) {
      const uint8_t* p = gp + u * unit_bytes;
      const uint8_t* sp = p + lay.chunks * chunk;
      // isum = sum_j sc_j x dot_j and imin = sum_j m_j x sum32_j, exact integers (so every
      // level gets the same ones). AVX2: the int16 pair sums go through one pmaddwd with
      // the scale in both halves, instead of a widening pmaddwd and a 32-bit multiply.
      // The mins: one 16-bit dot per two sub-blocks (m as int16 pairs against the
      // tokens' sum32_pairs) after the super-block, instead of a multiply per sub-block.
      // Measured (Xeon, one core, 512 x 2048 x 2048 Q4_K, 4 alternating rounds): AVX2
      // 70-76 -> 88-104 Gop/s, AVX-512 152-161 -> 170-193; decode unchanged.
      I isum[N];
      for (int t = 0; t < N; ++t) isum[t] = V::izero();
      for (int j = 0; j < 8; ++j) {
        if (prefetch) prefetch_unit_part(p, unit_bytes, j);
        const I sc = V::load_u8_i32(sp + lay.sc * L + j * L);
        if constexpr (V::kPairSums) {
          const I scp = V::pack16(sc, sc);
          I p16[N];
          chunk_steps<V, T>(p + j * chunk, [&](auto s, I w) {
            constexpr int C = call_index(T, s), K = pair_steps(T);
            for (int t = 0; t < N; ++t) {
              const I prod = V::mul16(w, V::bcast4(xq[t] + u * 256 + j * 32 + 4 * s));
              if constexpr (C % K == 0) p16[t] = prod;
              else p16[t] = V::add16(p16[t], prod);
              if constexpr (C % K == K - 1) isum[t] = V::dot16(isum[t], p16[t], scp);
            }
          });
        } else {
          I dot[N], p16[N];
          for (int t = 0; t < N; ++t) dot[t] = V::izero();
          chunk_steps<V, T>(p + j * chunk, [&](auto s, I w) {
            for (int t = 0; t < N; ++t)
              step_acc_x4<V, T, call_index(T, s)>(dot[t], p16[t], w, xq[t] + u * 256 + j * 32 + 4 * s);
          });
          for (int t = 0; t < N; ++t) isum[t] = V::add(isum[t], V::mullo(dot[t], sc));
        }
      }
      I mp[4];
      for (int i = 0; i < 4; ++i)
        mp[i] = V::pack16(V::load_u8_i32(sp + lay.mn * L + 2 * i * L), V::load_u8_i32(sp + lay.mn * L + (2 * i + 1) * L));
      const F dd = V::load_f16(sp), dm = V::load_f16(sp + lay.m * L);
      for (int t = 0; t < N; ++t) {
        const int32_t* s32p = a.sum32_pairs + (t0 + t) * (n_cols / 64) + u * 4;
        I imin = V::dot16(V::izero(), mp[0], V::set1(s32p[0]));
        for (int i = 1; i < 4; ++i) imin = V::dot16(imin, mp[i], V::set1(s32p[i]));
        const F dxt = V::set1f(a.d[(t0 + t) * nsb + u]);
        accf[t] = V::fmadd(V::cvt(isum[t]), V::mul(dd, dxt), accf[t]);
        accf[t] = V::fnmadd(V::cvt(imin), V::mul(dm, dxt), accf[t]);
      }
    }
  } else if constexpr (T == GgmlType::Q2_K || T == GgmlType::Q3_K) {
    // 16-column sub-blocks, two per 32-column chunk (steps 0-3 and 4-7), as Q6_K.
    // Q2_K: d sc c - dmin m per sub-block, the min term from the activation sums;
    // Q3_K: d sc (c - 4), the -4 taken as -4 x sum_i sc_i x (sum of sub-block i's
    // activations). The two sub-blocks' integer dots (|dot| <= 16 x 7 x 127, int16)
    // and scales go into int16 pairs, so one 16-bit dot (vpdpwssd; AVX2 pmaddwd + add)
    // applies both scales, and one more the mins (or Q3_K's offsets) against the
    // activations' 16-sums as pairs: 3-4 uops per token and chunk where two 32-bit
    // multiplies per term took 8-10 (measured: docs/performance.md, matmul per weight type).
    const int64_t nsb = n_cols / 256;
    const I m0f = V::set1(0x0F);
    for (int64_t u = 0; u < nsb; ++u) {
      const uint8_t* p = gp + u * unit_bytes;
      const uint8_t* sp = p + lay.chunks * chunk;
      I isum[N], iaux[N];  // iaux: Q2_K sum m_i s16_i; Q3_K sum sc_i s16_i
      for (int t = 0; t < N; ++t) isum[t] = iaux[t] = V::izero();
      for (int j = 0; j < 8; ++j) {
        if (prefetch) prefetch_unit_part(p, unit_bytes, j);
        I dot0[N], dot1[N], p0[N], p1[N];
        for (int t = 0; t < N; ++t) dot0[t] = dot1[t] = V::izero();
        chunk_steps<V, T>(p + j * chunk, [&](auto s, I w) {
          for (int t = 0; t < N; ++t) {
            const int8_t* x4 = xq[t] + u * 256 + j * 32 + 4 * s;
            if constexpr (s < 4) step_acc_x4<V, T, s>(dot0[t], p0[t], w, x4);
            else step_acc_x4<V, T, s - 4>(dot1[t], p1[t], w, x4);
          }
        });
        I sc01, aux01;  // per lane: (sub-block 2j, 2j+1) scales, and mins (Q2_K) or scales
        if constexpr (T == GgmlType::Q2_K) {
          const I sm0 = V::load_u8_i32(sp + lay.sc * L + (2 * j) * L), sm1 = V::load_u8_i32(sp + lay.sc * L + (2 * j + 1) * L);
          sc01 = V::pack16(V::and_(sm0, m0f), V::and_(sm1, m0f));
          aux01 = V::pack16(V::template srli16<4>(sm0), V::template srli16<4>(sm1));  // lanes < 256: no spill
        } else {
          sc01 = V::pack16(V::load_s8_i32(sp + lay.sc * L + (2 * j) * L), V::load_s8_i32(sp + lay.sc * L + (2 * j + 1) * L));
          aux01 = sc01;
        }
        for (int t = 0; t < N; ++t) {
          isum[t] = V::dot16(isum[t], V::pack16(dot0[t], dot1[t]), sc01);
          iaux[t] = V::dot16(iaux[t], aux01, V::set1(a.sum16_pairs[(t0 + t) * (n_cols / 32) + u * 8 + j]));
        }
      }
      const F dd = V::load_f16(sp);
      [[maybe_unused]] F dm = V::fzero();
      if constexpr (T == GgmlType::Q2_K) dm = V::load_f16(sp + lay.m * L);
      for (int t = 0; t < N; ++t) {
        const F dxt = V::set1f(a.d[(t0 + t) * nsb + u]);
        if constexpr (T == GgmlType::Q2_K) {
          accf[t] = V::fmadd(V::cvt(isum[t]), V::mul(dd, dxt), accf[t]);
          accf[t] = V::fnmadd(V::cvt(iaux[t]), V::mul(dm, dxt), accf[t]);
        } else {
          const I q3 = V::add(isum[t], V::mullo(iaux[t], V::set1(-4)));
          accf[t] = V::fmadd(V::cvt(q3), V::mul(dd, dxt), accf[t]);
        }
      }
    }
  } else if constexpr (T == GgmlType::IQ4_XS) {
    // Per 32-column sub-block j: the table levels' dot (AVX-512: levels + 128, so
    // minus 128 x the activation sum) times the signed 6-bit scale.
    const int64_t nsb = n_cols / 256;
    for (int64_t u = 0; u < nsb; ++u) {
      const uint8_t* p = gp + u * unit_bytes;
      const uint8_t* sp = p + lay.chunks * chunk;
      I isum[N];
      for (int t = 0; t < N; ++t) isum[t] = V::izero();
      for (int j = 0; j < 8; ++j) {
        if (prefetch) prefetch_unit_part(p, unit_bytes, j);
        I dot[N], p16[N];
        for (int t = 0; t < N; ++t) dot[t] = V::izero();
        chunk_steps<V, T>(p + j * chunk, [&](auto s, I w) {
          for (int t = 0; t < N; ++t)
            step_acc_x4<V, T, call_index(T, s)>(dot[t], p16[t], w, xq[t] + u * 256 + j * 32 + 4 * s);
        });
        const I sc = V::load_s8_i32(sp + lay.sc * L + j * L);
        for (int t = 0; t < N; ++t) {
          I dj = dot[t];
          if constexpr (V::kQ8Offset != 0)
            dj = V::add(dj, V::set1(-V::kQ8Offset * a.sum32[(t0 + t) * (n_cols / 32) + u * 8 + j]));
          isum[t] = V::add(isum[t], V::mullo(dj, sc));
        }
      }
      const F dd = V::load_f16(sp);
      for (int t = 0; t < N; ++t)
        accf[t] = V::fmadd(V::cvt(isum[t]), V::mul(dd, V::set1f(a.d[(t0 + t) * nsb + u])), accf[t]);
    }
  } else if constexpr (T == GgmlType::Q6_K) {
    const int64_t nsb = n_cols / 256;
    for (int64_t u = 0; u < nsb; ++u) {
      const uint8_t* p = gp + u * unit_bytes;
      const uint8_t* sp = p + lay.chunks * chunk;
      I isum[N];
      for (int t = 0; t < N; ++t) isum[t] = V::izero();
      for (int j = 0; j < 8; ++j) {
        if (prefetch) prefetch_unit_part(p, unit_bytes, j);
        // Two 16-column sub-blocks (steps 0-3 and 4-7), each with its own scale;
        // the -32 offset is folded in as -32 x (sum of the 16 activations).
        I dot0[N], dot1[N], p0[N], p1[N];
        for (int t = 0; t < N; ++t) dot0[t] = dot1[t] = V::izero();
        chunk_steps<V, T>(p + j * chunk, [&](auto s, I w) {
          for (int t = 0; t < N; ++t) {
            const int8_t* x4 = xq[t] + u * 256 + j * 32 + 4 * s;
            if constexpr (s < 4) step_acc_x4<V, T, s>(dot0[t], p0[t], w, x4);
            else step_acc_x4<V, T, s - 4>(dot1[t], p1[t], w, x4);
          }
        });
        const I sc0 = V::load_s8_i32(sp + lay.sc * L + (2 * j) * L);
        const I sc1 = V::load_s8_i32(sp + lay.sc * L + (2 * j + 1) * L);
        for (int t = 0; t < N; ++t) {
          const int32_t* s16 = a.sum16 + (t0 + t) * (n_cols / 16) + u * 16 + 2 * j;
          const I d0 = V::add(dot0[t], V::set1(-32 * s16[0]));
          const I d1 = V::add(dot1[t], V::set1(-32 * s16[1]));
          isum[t] = V::add(isum[t], V::add(V::mullo(d0, sc0), V::mullo(d1, sc1)));
        }
      }
      const F dd = V::load_f16(sp);
      for (int t = 0; t < N; ++t)
        accf[t] = V::fmadd(V::cvt(isum[t]), V::mul(dd, V::set1f(a.d[(t0 + t) * nsb + u])), accf[t]);
    }
  }
  for (int t = 0; t < N; ++t) V::store(y + (t0 + t) * n_rows + row0, accf[t], n_valid);
}

// Whether a tile of a 32-wide nibble format keeps its step vectors: the first token
// micro-tile unpacks the nibbles as usual and also stores the vectors (8 per group and
// 32 columns, in per-thread scratch: 64 KiB for 32 rows x 2048 columns); the tile's
// other micro-tiles load them instead of unpacking again. Without VNNI the kernel is
// bound by vector-ALU issue, and this takes the 24 unpack ops per 32 columns (of ~200)
// off all but one micro-tile. Storing during the first pass, rather than in a separate
// pass before it, keeps the weights' first read from memory overlapped with compute (a
// separate unpack pass measured 0.99x on 2 threads). Measured (A/B in one process,
// Q4_0): 1.04x on one thread, 1.00-1.04x on two at 512 tokens; pp512 of the Q4_0
// TinyLlama 145 -> 152 tok/s median of 6 alternating runs.
// AVX-512 (no pair sums) issues fewer ops per step, and there only Q5_0 / Q5_1 (whose
// high bits cost 3 more ops a step) gain: matmul_bench Matmul512, Zen 4, two threads,
// two rounds, Gop/s: Q5_0 541-615 -> 576-648, Q5_1 533-588 -> 543-609; one thread Q4_0
// 338-341 -> 327-336, Q4_1 (two threads) 573-635 -> 545-600, IQ4_NL within noise.
template <class V, GgmlType T>
constexpr bool unpack_codes() {
  if constexpr (!V::kPairSums) return T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
  return is_block32(T) && T != GgmlType::Q8_0;
}

// Runs a tile: token micro-tiles of V::kBlock32N or V::kMaxN (then 4, 2, 1 for the rest), each
// over all row groups of the tile, so the micro-tile's activations stay in L1
// while the tile's weights come from L2.
template <class V, GgmlType T>
void packed_tile(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  constexpr int L = V::L;
  const int64_t n_units = w.n_cols() / unit_cols(T);
  const size_t group_bytes = n_units * packed_unit_bytes(T, L);
  const int64_t g0 = tile.row_begin / L, g1 = (tile.row_end + L - 1) / L;
  auto valid = [&](int64_t g) { return static_cast<int>(std::min<int64_t>(L, w.n_rows() - g * L)); };
  // A tile of exactly 8 tokens (eight decoding streams): one pass of 1 group x 8 tokens, so
  // the weights streaming from memory feed all eight tokens while they arrive, where two
  // 2-group x 4-token passes read them from memory for the first four (at one stream's
  // bandwidth-bound speed) and then computed the other four from L2: memory time and
  // compute time added up instead of overlapping. AVX2 too, though its 16 registers spill
  // part of the 8 tokens' sums: Zen 4 under PAGODA_ISA=avx2, matmul_bench Matmul8 (two
  // threads, two rounds alternating binaries) Q4_0 335-393 -> 388-424 Gop/s, Q8_0 210-233
  // -> 242-249, IQ4_NL 203-228 -> 236-243, Q4_1 246 -> 359; bench-engine --streams 8 -p 64
  // -n 128 (Q4_0), three rounds: 136 / 133 / 145 -> 147 / 155 / 162 tok/s.
  constexpr bool kOnePass8 = is_block32(T);
  const bool one_pass8 = kOnePass8 && tile.tok_end - tile.tok_begin == 8;
  // Step-vector scratch (unpack_codes): none, being written, or written.
  Codes codes = Codes::Packed;
  uint8_t* scratch = nullptr;
  const size_t scratch_group_bytes = static_cast<size_t>(n_units) * 8 * 4 * L;
  if constexpr (unpack_codes<V, T>()) {
    if (!one_pass8 && tile.tok_end - tile.tok_begin >= 2 * V::kBlock32N) {
      thread_local std::vector<uint8_t> buf;
      const size_t need = static_cast<size_t>(g1 - g0) * scratch_group_bytes;
      if (buf.size() < need) buf.resize(need);
      scratch = buf.data();
      codes = Codes::PackedAndStore;
    }
  }
  // The 32-wide formats run the tile column chunk by column chunk (PackedAddr): every
  // micro-tile's pass over units [u0, u1), then the next chunk's, carrying the sums on in y.
  const PackedAddr addr = packed_addr(w);
  int64_t u0 = 0, u1 = n_units;
  // Unit u0 of group g0 and the step to the next group's: a tile's rows are one row tile of
  // the layout (tile_rows_quant rows, matmul.cpp's tiles).
  const uint8_t* chunk_base = nullptr;
  size_t group_stride = 0;
  auto run = [&]<int N, int GB = V::kGroups>(int64_t t0) {
    // The first micro-tile of the tile's chunk reads its weights from memory (see prefetch_ahead).
    const bool prefetch = t0 == tile.tok_begin;
    int64_t g = g0;
    if constexpr (is_block32(T)) {
      auto groups = [&]<int G>() {
        const uint8_t* gp[G];
        uint8_t* up[G];
        int64_t row0[G];
        int n_valid[G];
        for (int i = 0; i < G; ++i) {
          gp[i] = chunk_base + (g + i - g0) * group_stride;
          up[i] = scratch ? scratch + (g + i - g0) * scratch_group_bytes : nullptr;
          row0[i] = (g + i) * L;
          n_valid[i] = valid(g + i);
        }
        if constexpr (unpack_codes<V, T>()) {
          if (codes == Codes::PackedAndStore)
            return block32_kernel<V, T, G, N, Codes::PackedAndStore>(gp, up, a, t0, y, w.n_rows(), row0, n_valid,
                                                                      prefetch, u0, u1);
          if (codes == Codes::Unpacked)
            return block32_kernel<V, T, G, N, Codes::Unpacked>(gp, up, a, t0, y, w.n_rows(), row0, n_valid, false,
                                                                u0, u1);
        }
        block32_kernel<V, T, G, N>(gp, up, a, t0, y, w.n_rows(), row0, n_valid, prefetch, u0, u1);
      };
      for (; g + GB <= g1; g += GB) groups.template operator()<GB>();
      for (; g < g1; ++g) groups.template operator()<1>();
    } else {
      for (; g < g1; ++g) group_kernel<V, T, N>(w.packed() + g * group_bytes, a, t0, y, w.n_rows(), g * L, valid(g), prefetch);
    }
  };
  auto tokens = [&] {
    if constexpr (kOnePass8) {
      if (one_pass8) return run.template operator()<8, 1>(tile.tok_begin);
    }
    constexpr int kN = is_block32(T) ? V::kBlock32N : V::kMaxN;
    int64_t t = tile.tok_begin;
    for (; t + kN <= tile.tok_end; t += kN) {
      run.template operator()<kN>(t);
      if (codes == Codes::PackedAndStore) codes = Codes::Unpacked;  // every group's vectors are stored
    }
    if constexpr (kN > 4)
      for (; t + 4 <= tile.tok_end; t += 4) run.template operator()<4>(t);
    for (; t + 2 <= tile.tok_end; t += 2) run.template operator()<2>(t);
    // One token at a time (decode, or a tile's last odd token): one row group per
    // micro-kernel on every level, so the weights stream from DRAM as one stream, where two
    // groups read side by side are two streams 18 KiB apart (Q4_0) whose lines the
    // prefetches and the core's miss buffers serve worse. AVX-512, Zen 4, cold 5632 x 2048
    // matvec, each run beside a probe pass (matmul_bench MatvecPaired), alternating: one
    // thread Q4_0 20.0 / 19.8 -> 28.1 / 27.4 GB/s (63% -> 88% of the probe); two threads
    // Q4_0 88-90% -> 93%, Q8_0 90-92% -> 96% while the probe read ~35 GB/s, and Q4_0 57% ->
    // 60-61%, Q8_0 65-66% -> 75-76% (40 -> 47 GB/s) while it read ~55-62; from cache 0-5%
    // slower (Q4_0 60 -> 57 GB/s, one thread). AVX2, the same Zen 4 under PAGODA_ISA=avx2
    // (two threads, both choices alternating per matvec pass beside a probe pass, with no
    // prefetch or block32_prefetch_ahead_l2's 6 KiB): Q4_0 5632 x 2048 46-48 GB/s against
    // 24 with two (0.77-0.98 against 0.39-0.67 of the probe), Q8_0 0.82-0.97 against
    // 0.53-0.82 (an earlier "0-10% less with one" was measured 1.5 KiB ahead, which one
    // group reads worst).
    for (; t < tile.tok_end; ++t) run.template operator()<1, 1>(t);
  };
  if constexpr (!is_block32(T)) return tokens();
  for (; u0 < n_units; u0 = u1) {
    u1 = addr.chunk_end(u0);
    chunk_base = addr.unit(g0, u0);
    group_stride = addr.group_stride(u0);
    if (scratch) codes = Codes::PackedAndStore;  // this chunk's step vectors are not stored yet
    tokens();
  }
}

// The table entries of V's level: one packed kernel per weight type with a packed layout.
template <class V>
void register_packed_kernels(KernelTable& t) {
  auto set = [&]<GgmlType T>() { t.matmul[static_cast<size_t>(T)].quant = packed_tile<V, T>; };
  set.template operator()<GgmlType::Q8_0>();
  set.template operator()<GgmlType::Q4_0>();
  set.template operator()<GgmlType::Q4_1>();
  set.template operator()<GgmlType::Q5_0>();
  set.template operator()<GgmlType::Q5_1>();
  set.template operator()<GgmlType::Q4_K>();
  set.template operator()<GgmlType::Q5_K>();
  set.template operator()<GgmlType::Q6_K>();
  set.template operator()<GgmlType::Q2_K>();
  set.template operator()<GgmlType::Q3_K>();
  set.template operator()<GgmlType::IQ4_NL>();
  set.template operator()<GgmlType::IQ4_XS>();
  set.template operator()<GgmlType::MXFP4>();
}

template <class V>
void packed_dispatch(const WeightMatrix& w, const QuantizedActs& a, const Tile& tile, float* y) {
  switch (w.type()) {
    case GgmlType::Q8_0: return packed_tile<V, GgmlType::Q8_0>(w, a, tile, y);
    case GgmlType::Q4_0: return packed_tile<V, GgmlType::Q4_0>(w, a, tile, y);
    case GgmlType::Q4_1: return packed_tile<V, GgmlType::Q4_1>(w, a, tile, y);
    case GgmlType::Q5_0: return packed_tile<V, GgmlType::Q5_0>(w, a, tile, y);
    case GgmlType::Q5_1: return packed_tile<V, GgmlType::Q5_1>(w, a, tile, y);
    case GgmlType::Q4_K: return packed_tile<V, GgmlType::Q4_K>(w, a, tile, y);
    case GgmlType::Q5_K: return packed_tile<V, GgmlType::Q5_K>(w, a, tile, y);
    case GgmlType::Q6_K: return packed_tile<V, GgmlType::Q6_K>(w, a, tile, y);
    case GgmlType::Q2_K: return packed_tile<V, GgmlType::Q2_K>(w, a, tile, y);
    case GgmlType::Q3_K: return packed_tile<V, GgmlType::Q3_K>(w, a, tile, y);
    case GgmlType::IQ4_NL: return packed_tile<V, GgmlType::IQ4_NL>(w, a, tile, y);
    case GgmlType::IQ4_XS: return packed_tile<V, GgmlType::IQ4_XS>(w, a, tile, y);
    case GgmlType::MXFP4: return packed_tile<V, GgmlType::MXFP4>(w, a, tile, y);
    default: break;
  }
  // A type prepare() accepts with no kernel here would leave y unwritten.
  PAGODA_CHECK(false, std::string("matmul: no packed kernel for weight type ") + type_name(w.type()));
}

}  // namespace pagoda::matmul_detail
