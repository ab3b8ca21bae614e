// CPU feature detection and the instruction-set level kernels dispatch on.
//
// Contract: detected once (thread-safe static); `PAGODA_ISA=scalar|avx2|avx512|amx`
// in the environment caps the level (never raises it above what the CPU has),
// which is how tests and benchmarks pin a path. The kernels of each level are one
// table (kernels/kernel_table.h). AMX is the AVX-512 level plus Intel AMX tiles: it
// reads the AVX-512 packing and adds prefill kernels for the weight types that have
// an AMX path.
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
  bool amd = false;  // CPUID vendor "AuthenticAMD"
};

const CpuFeatures& cpu_features();

// Scalar: portable C++ reference. Avx2: AVX2+FMA+F16C+BMI2 (the flags its files are
// built with). Avx512: that plus F/BW/VL/DQ + VNNI (BF16 used where present and
// checked separately). Amx: Avx512 plus AMX-TILE and AMX-INT8, with the tile state
// granted by Linux (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once; a refusal, e.g. an
// old kernel or a seccomp policy, leaves the process at Avx512). Ordered: a level
// runs everything the levels below it run.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Amx = 3 };
inline constexpr int kNumIsas = 4;
inline constexpr Isa kAllIsas[kNumIsas] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Amx};

// The highest level a CPU with these features can run (no PAGODA_ISA cap, no tile
// permission asked). Pure, so tests can pass made-up feature sets.
Isa isa_for_features(const CpuFeatures& f);

// Highest level the CPU supports (capped by PAGODA_ISA), chosen once.
Isa best_isa();
// Whether `isa` can run on this CPU (Amx: and the tile state was granted).
bool isa_supported(Isa isa);
const char* isa_name(Isa isa);
// One line for logs, e.g. "avx512 (avx2 fma f16c avx512f avx512bw avx512vnni avx512bf16)".
std::string cpu_features_string();

// Whether the process runs the AMX-INT8 prefill kernels: best_isa() == Isa::Amx.
bool amx_int8_enabled();

}  // namespace pagoda
