// CPU feature detection and the instruction-set level kernels dispatch on.
//
// Contract: detected once (thread-safe static); `PAGODA_ISA=scalar|avx2|avx512`
// in the environment caps the level (never raises it above what the CPU has),
// which is how tests and benchmarks pin a path.
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

}  // namespace pagoda
