#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace pagoda {

namespace {

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return f;
  unsigned max_leaf = eax;
  f.amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // "Auth" "enti" "cAMD"
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  bool osxsave = ecx & (1u << 27);
  f.fma = ecx & (1u << 12);
  f.f16c = ecx & (1u << 29);
  bool avx = ecx & (1u << 28);
  uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  bool ymm_ok = (xcr0 & 0x6) == 0x6;
  bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  bool tile_ok = (xcr0 & 0x60000) == 0x60000;  // XTILECFG (17) and XTILEDATA (18)
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    f.avx2 = avx && ymm_ok && (ebx & (1u << 5));
    f.bmi2 = ebx & (1u << 8);
    f.avx512f = zmm_ok && (ebx & (1u << 16));
    f.avx512dq = zmm_ok && (ebx & (1u << 17));
    f.avx512bw = zmm_ok && (ebx & (1u << 30));
    f.avx512vl = zmm_ok && (ebx & (1u << 31));
    f.avx512vnni = zmm_ok && (ecx & (1u << 11));
    f.amx_bf16 = tile_ok && (edx & (1u << 22));
    f.amx_tile = tile_ok && (edx & (1u << 24));
    f.amx_int8 = tile_ok && (edx & (1u << 25));
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    f.avxvnni = ymm_ok && (eax & (1u << 4));
    f.avx512bf16 = zmm_ok && (eax & (1u << 5));
  }
  f.fma = f.fma && ymm_ok;
  f.f16c = f.f16c && ymm_ok;
  return f;
}

}  // namespace

// BMI2 is required at both levels because the *_avx2.cpp / *_avx512.cpp files are
// compiled with -mbmi2 (CMakeLists.txt: PAGODA_AVX2_FLAGS / PAGODA_AVX512_FLAGS), so
// the compiler may emit SHLX / SARX / BZHI / PDEP anywhere in them. Every AVX2 CPU
// Intel and AMD shipped has BMI2, but some virtual machines and emulators expose AVX2
// without it; there those kernels would die of SIGILL, so such a CPU runs scalar.
Isa isa_for_features(const CpuFeatures& f) {
  const bool avx2_level = f.avx2 && f.fma && f.f16c && f.bmi2;
  const bool avx512_level = avx2_level && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
  if (avx512_level && f.amx_tile && f.amx_int8) return Isa::Amx;
  if (avx512_level) return Isa::Avx512;
  if (avx2_level) return Isa::Avx2;
  return Isa::Scalar;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

namespace {

// Linux: a process must ask for the AMX tile data state before using it (arch_prctl
// ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18); without it the first tile
// instruction faults.
bool request_amx_permission() {
#ifdef __linux__
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

// The highest level this CPU runs: its features, with AMX only once Linux granted the
// tile state (asked once, on the first question about the level).
Isa hardware_isa() {
  static const Isa isa = [] {
    const Isa hw = isa_for_features(cpu_features());
    if (hw == Isa::Amx && !request_amx_permission()) return Isa::Avx512;
    return hw;
  }();
  return isa;
}

}  // namespace

// Unknown PAGODA_ISA values leave the level uncapped (as before this table existed).
Isa best_isa() {
  static const Isa isa = [] {
    const Isa hw = hardware_isa();
    const char* env = std::getenv("PAGODA_ISA");
    if (!env) return hw;
    Isa want = hw;
    if (std::strcmp(env, "scalar") == 0) want = Isa::Scalar;
    else if (std::strcmp(env, "avx2") == 0) want = Isa::Avx2;
    else if (std::strcmp(env, "avx512") == 0) want = Isa::Avx512;
    else if (std::strcmp(env, "amx") == 0) want = Isa::Amx;
    return static_cast<int>(want) < static_cast<int>(hw) ? want : hw;
  }();
  return isa;
}

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(hardware_isa()); }

bool amx_int8_enabled() { return best_isa() == Isa::Amx; }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Amx: return "amx";
  }
  return "?";
}

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s = isa_name(best_isa());
  s += " (";
  const std::pair<bool, const char*> flags[] = {
      {f.avx2, "avx2"},         {f.fma, "fma"},           {f.f16c, "f16c"},  {f.bmi2, "bmi2"},
      {f.avx512f, "avx512f"},   {f.avx512bw, "avx512bw"}, {f.avx512vnni, "avx512vnni"},
      {f.avx512bf16, "avx512bf16"}, {f.avxvnni, "avxvnni"}, {f.amx_int8, "amx-int8"}, {f.amx_bf16, "amx-bf16"}};
  bool first = true;
  for (auto& [on, name] : flags) {
    if (!on) continue;
    if (!first) s += ' ';
    s += name;
    first = false;
  }
  s += ")";
  if (amx_int8_enabled()) s += ", AMX-INT8 prefill";
  return s;
}

}  // namespace pagoda
