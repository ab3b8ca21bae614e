// CPU feature detection and the instruction-set level kernels dispatch on.
//
// Contract: detected once (thread-safe static); `PAGODA_ISA=scalar|avx2|avx512|amx`
// in the environment caps the level (never raises it above what the CPU has),
// which is how tests and benchmarks pin a path. AMX is not a packing level of its
// own: it is the AVX-512 level plus Intel AMX tiles, used by the prefill kernels of
// the weight types that have an AMX path (amx_int8_enabled()).
#pragma once

#include <string>

namespace pagoda {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool bmi2 = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avxvnni = false;
  bool amx_tile = false;  // CPUID and the OS's XCR0 (XTILECFG / XTILEDATA state)
  bool amx_int8 = false;
  bool amx_bf16 = false;
};

const CpuFeatures& cpu_features();

// Scalar: portable C++ reference. Avx2: AVX2+FMA+F16C+BMI2 (the flags its files are
// built with). Avx512: that plus F/BW/VL/DQ + VNNI (BF16 used where present and
// checked separately).
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// The highest level a CPU with these features can run (no PAGODA_ISA cap). Pure, so
// tests can pass made-up feature sets.
Isa isa_for_features(const CpuFeatures& f);

// Highest level the CPU supports (capped by PAGODA_ISA).
Isa best_isa();
// Whether `isa` can run on this CPU.
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);
// One line for logs, e.g. "avx512 (avx2 fma f16c avx512f avx512bw avx512vnni avx512bf16)".
std::string cpu_features_string();

// Whether the AMX-INT8 prefill kernels run: the CPU has AMX-TILE and AMX-INT8, the
// level is AVX-512 (PAGODA_ISA unset or amx), and Linux granted this process the tile
// data state (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once; a refusal, e.g. an old
// kernel or a seccomp policy, leaves AMX off and everything on AVX-512).
bool amx_int8_enabled();
// Tests and benchmarks: turn the AMX kernels off (false) or back on (true, which
// still requires amx_int8_enabled()'s conditions). Not thread-safe against running
// matmuls.
void set_amx_int8_allowed(bool allowed);

}  // namespace pagoda
