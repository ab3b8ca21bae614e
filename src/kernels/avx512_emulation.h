// Test-only: the AVX-512 intrinsics of the *_avx512.cpp files mapped onto SIMDe's portable
// AVX-512 (SIMDE_ENABLE_NATIVE_ALIASES), plus stand-ins for the ones SIMDe 0.7.4 (Debian 12's
// libsimde-dev) lacks, so the AVX-512 kernels build for an AVX2 CPU and run (slowly) there:
// the CMake preset `emu` (PAGODA_AVX512_EMULATION), which builds only the kernel tests and
// which scripts/test.sh runs where the CPU has no AVX-512. Each stand-in is the
// instruction's documented lane-wise semantics, written plainly. The kernel files compile
// unchanged: what SIMDe lacks is added here, not worked around there.
#pragma once

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/types.h"

namespace pagoda::emu {

template <class To, class From>
inline To bits(const From& f) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}

template <class Src, class Dst, int N, class V, class R, class Fn>
inline R lanewise(V v, Fn fn) {
  Src in[N];
  Dst out[N];
  std::memcpy(in, &v, sizeof in);
  for (int i = 0; i < N; ++i) out[i] = fn(in[i]);
  R r;
  static_assert(sizeof(r) == sizeof(out));
  std::memcpy(&r, out, sizeof r);
  return r;
}

inline __m512i cvtepu8_epi32(__m128i v) { return lanewise<uint8_t, int32_t, 16, __m128i, __m512i>(v, [](uint8_t x) { return int32_t(x); }); }
inline __m512i cvtepi8_epi32(__m128i v) { return lanewise<int8_t, int32_t, 16, __m128i, __m512i>(v, [](int8_t x) { return int32_t(x); }); }
inline __m512i cvtepu16_epi32(__m256i v) { return lanewise<uint16_t, int32_t, 16, __m256i, __m512i>(v, [](uint16_t x) { return int32_t(x); }); }
inline __m128i cvtepi32_epi8(__m512i v) { return lanewise<int32_t, int8_t, 16, __m512i, __m128i>(v, [](int32_t x) { return int8_t(x); }); }
inline __m512 cvtepi32_ps(__m512i v) { return lanewise<int32_t, float, 16, __m512i, __m512>(v, [](int32_t x) { return float(x); }); }
inline __m512i cvtps_epi32(__m512 v) { return lanewise<float, int32_t, 16, __m512, __m512i>(v, [](float x) { return int32_t(std::nearbyint(x)); }); }
inline __m512 cvtph_ps(__m256i v) { return lanewise<uint16_t, float, 16, __m256i, __m512>(v, [](uint16_t x) { return f16_to_f32(x); }); }
inline __m256bh cvtneps_pbh(__m512 v) { return lanewise<float, uint16_t, 16, __m512, __m256bh>(v, [](float x) { return f32_to_bf16(x); }); }

template <class T, int N, class V, class M>
inline V maskz_load(M m, const void* p) {
  T out[N] = {};
  for (int i = 0; i < N; ++i)
    if ((m >> i) & 1) std::memcpy(&out[i], static_cast<const char*>(p) + i * sizeof(T), sizeof(T));
  V r;
  std::memcpy(&r, out, sizeof r);
  return r;
}
inline __m512 maskz_loadu_ps(__mmask16 m, const float* p) { return maskz_load<float, 16, __m512>(m, p); }
inline __m512i maskz_loadu_epi16(__mmask32 m, const void* p) { return maskz_load<uint16_t, 32, __m512i>(m, p); }
inline __m256i maskz_loadu_epi16_256(__mmask16 m, const void* p) { return maskz_load<uint16_t, 16, __m256i>(m, p); }
inline __m512 mask_loadu_ps(__m512 src, __mmask16 m, const void* p) {
  float out[16];
  std::memcpy(out, &src, sizeof out);
  for (int i = 0; i < 16; ++i)
    if ((m >> i) & 1) std::memcpy(&out[i], static_cast<const char*>(p) + i * sizeof(float), sizeof(float));
  __m512 r;
  std::memcpy(&r, out, sizeof r);
  return r;
}
inline __mmask16 cmplt_epi32_mask(__m512i a, __m512i b) {
  int32_t x[16], y[16];
  std::memcpy(x, &a, sizeof x);
  std::memcpy(y, &b, sizeof y);
  __mmask16 m = 0;
  for (int i = 0; i < 16; ++i)
    if (x[i] < y[i]) m = static_cast<__mmask16>(m | (1u << i));
  return m;
}
// vpermilps with an immediate: within each 128-bit lane, element i takes the lane's
// element (imm >> 2 (i mod 4)) & 3.
inline __m512 permute_ps(__m512 v, int imm) {
  float in[16], out[16];
  std::memcpy(in, &v, sizeof in);
  for (int i = 0; i < 16; ++i) out[i] = in[(i & ~3) + ((imm >> (2 * (i & 3))) & 3)];
  __m512 r;
  std::memcpy(&r, out, sizeof r);
  return r;
}
// vpsrad: arithmetic right shift; counts above 31 fill with the sign.
inline __m512i srai_epi32(__m512i v, unsigned int n) {
  return lanewise<int32_t, int32_t, 16, __m512i, __m512i>(v, [n](int32_t x) { return x >> (n > 31 ? 31 : n); });
}
inline void mask_storeu_ps(float* p, __mmask16 m, __m512 v) {
  float in[16];
  std::memcpy(in, &v, sizeof in);
  for (int i = 0; i < 16; ++i)
    if ((m >> i) & 1) p[i] = in[i];
}
inline int32_t reduce_add_epi32(__m512i v) {
  int32_t in[16];
  std::memcpy(in, &v, sizeof in);
  int32_t s = 0;
  for (int32_t x : in) s += x;
  return s;
}
// The hardware adds in a tree; the order only moves the last bits, which the
// tests' tolerances cover.
inline float reduce_add_ps(__m512 v) {
  float in[16];
  std::memcpy(in, &v, sizeof in);
  for (int w = 8; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) in[i] += in[i + w];
  return in[0];
}
inline float reduce_max_ps(__m512 v) {
  float in[16];
  std::memcpy(in, &v, sizeof in);
  float m = in[0];
  for (float x : in) m = std::fmax(m, x);
  return m;
}

}  // namespace pagoda::emu

#define _mm512_cvtepu8_epi32 pagoda::emu::cvtepu8_epi32
#define _mm512_cvtepi8_epi32 pagoda::emu::cvtepi8_epi32
#define _mm512_cvtepu16_epi32 pagoda::emu::cvtepu16_epi32
#define _mm512_cvtepi32_epi8 pagoda::emu::cvtepi32_epi8
#define _mm512_cvtepi32_ps pagoda::emu::cvtepi32_ps
#define _mm512_cvtps_epi32 pagoda::emu::cvtps_epi32
#define _mm512_cvtph_ps pagoda::emu::cvtph_ps
#define _mm512_cvtneps_pbh pagoda::emu::cvtneps_pbh
#define _mm512_maskz_loadu_ps pagoda::emu::maskz_loadu_ps
#define _mm512_maskz_loadu_epi16 pagoda::emu::maskz_loadu_epi16
#define _mm256_maskz_loadu_epi16 pagoda::emu::maskz_loadu_epi16_256
#define _mm512_mask_storeu_ps pagoda::emu::mask_storeu_ps
#define _mm512_mask_loadu_ps pagoda::emu::mask_loadu_ps
#define _mm512_permute_ps pagoda::emu::permute_ps
#define _mm512_srai_epi32 pagoda::emu::srai_epi32
#define _mm512_cmplt_epi32_mask pagoda::emu::cmplt_epi32_mask
#define _mm512_reduce_add_epi32 pagoda::emu::reduce_add_epi32
#define _mm512_reduce_add_ps pagoda::emu::reduce_add_ps
#define _mm512_reduce_max_ps pagoda::emu::reduce_max_ps
// SIMDe 0.7.4 has the function but no native alias for it.
#define _mm512_shuffle_f32x4(a, b, imm8) simde_mm512_shuffle_f32x4(a, b, imm8)
