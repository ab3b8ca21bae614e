// The ISA a CPU gets from its features: every flag the AVX2 / AVX-512 files are built
// with (CMakeLists.txt PAGODA_AVX2_FLAGS: -mavx2 -mfma -mf16c -mbmi2) must be present,
// or the kernels could hit an unsupported instruction; checked on made-up feature sets.
#include "kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <string>

namespace pagoda {
namespace {

CpuFeatures avx2_cpu() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.bmi2 = true;
  return f;
}

CpuFeatures avx512_cpu() {
  CpuFeatures f = avx2_cpu();
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512vnni = true;
  return f;
}

TEST(IsaForFeatures, NothingIsScalar) { EXPECT_EQ(isa_for_features(CpuFeatures{}), Isa::Scalar); }

TEST(IsaForFeatures, FullSetsGetTheirLevel) {
  EXPECT_EQ(isa_for_features(avx2_cpu()), Isa::Avx2);
  EXPECT_EQ(isa_for_features(avx512_cpu()), Isa::Avx512);
}

TEST(IsaForFeatures, AmxIsAvx512PlusTileAndInt8) {
  CpuFeatures f = avx512_cpu();
  f.amx_tile = f.amx_int8 = true;
  EXPECT_EQ(isa_for_features(f), Isa::Amx);
  f.amx_int8 = false;
  EXPECT_EQ(isa_for_features(f), Isa::Avx512);
  CpuFeatures g = avx2_cpu();  // tiles without the AVX-512 level they are used from
  g.amx_tile = g.amx_int8 = true;
  EXPECT_EQ(isa_for_features(g), Isa::Avx2);
}

TEST(IsaForFeatures, Avx2WithoutBmi2RunsScalar) {
  CpuFeatures f = avx2_cpu();
  f.bmi2 = false;
  EXPECT_EQ(isa_for_features(f), Isa::Scalar);
}

TEST(IsaForFeatures, Avx512WithoutBmi2RunsScalar) {
  // The AVX-512 files are built with -mbmi2 too, and fall back to nothing in between.
  CpuFeatures f = avx512_cpu();
  f.bmi2 = false;
  EXPECT_EQ(isa_for_features(f), Isa::Scalar);
}

TEST(IsaForFeatures, EachAvx2LevelFlagIsRequired) {
  for (bool CpuFeatures::*flag : {&CpuFeatures::avx2, &CpuFeatures::fma, &CpuFeatures::f16c, &CpuFeatures::bmi2}) {
    CpuFeatures f = avx2_cpu();
    f.*flag = false;
    EXPECT_EQ(isa_for_features(f), Isa::Scalar);
    CpuFeatures g = avx512_cpu();
    g.*flag = false;
    EXPECT_EQ(isa_for_features(g), Isa::Scalar);
  }
}

TEST(IsaForFeatures, EachAvx512FlagIsRequiredAndMissingOneFallsBackToAvx2) {
  for (bool CpuFeatures::*flag : {&CpuFeatures::avx512f, &CpuFeatures::avx512bw, &CpuFeatures::avx512vl,
                                  &CpuFeatures::avx512dq, &CpuFeatures::avx512vnni}) {
    CpuFeatures f = avx512_cpu();
    f.*flag = false;
    EXPECT_EQ(isa_for_features(f), Isa::Avx2);
  }
  // BF16 and AVX-VNNI are optional extras, checked where they are used.
  CpuFeatures f = avx512_cpu();
  f.avx512bf16 = f.avxvnni = false;
  EXPECT_EQ(isa_for_features(f), Isa::Avx512);
}

TEST(IsaForFeatures, ThisCpusLevelIsWhatItsFeaturesGive) {
  EXPECT_EQ(isa_supported(Isa::Avx2), isa_for_features(cpu_features()) >= Isa::Avx2);
  EXPECT_LE(static_cast<int>(best_isa()), static_cast<int>(isa_for_features(cpu_features())));
  if (isa_supported(Isa::Avx2)) {
    EXPECT_TRUE(cpu_features().bmi2);
    EXPECT_NE(cpu_features_string().find("bmi2"), std::string::npos) << cpu_features_string();
  }
}

}  // namespace
}  // namespace pagoda
