// Exhaustive numerical sweeps under a sanitizer: a deterministic sample of their cases.
// ASan / UBSan / TSan hunt memory errors, undefined behaviour and races, which every code path
// of a kernel shows at a few shapes as well as at all of them; the release suite runs every
// case. Measured under ASan on 2 cores: the paged-attention and matmul sweeps took 80-260 s
// each (release: 1-5 s), most of the sanitizer suite's time. Rejected: leaving them out of the
// ASan set (the SIMD kernels are where an out-of-bounds load would hide).
#pragma once

namespace pagoda::test {

// The emulated AVX-512 build (preset `emu`) samples too: SIMDe's AVX-512 runs the sweeps
// ~10x slower than the hardware, and the release build runs every case where the CPU has it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(PAGODA_AVX512_EMULATION)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif

// take() is true for every case in release builds, and for the 1st, (stride+1)th, ... case
// it is asked about under a sanitizer.
class CaseSample {
 public:
  explicit CaseSample(int stride = 4) : stride_(stride) {}
  bool take() { return !kUnderSanitizer || n_++ % stride_ == 0; }

 private:
  int stride_;
  long n_ = 0;
};

}  // namespace pagoda::test
