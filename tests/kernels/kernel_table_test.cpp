// The kernel table (kernels/kernel_table.h): every level has a matmul kernel for every
// weight type prepare() accepts, its activation quantizer, row ops, attention kernels and
// packing geometry;
// dispatch on a missing entry aborts naming the level and the type; the process runs the
// table of best_isa(), which PAGODA_ISA caps. Whether each entry computes the right thing
// is the business of matmul_test / matmul_amx_test / ops_test / paged_attention_test,
// which run every level this CPU has against the scalar references.
#include "kernels/kernel_table.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/cpu_features.h"
#include "tensor/types.h"

namespace pagoda {
namespace {

using matmul_detail::is_float_type;

TEST(KernelTable, EveryLevelHasAKernelForEveryWeightType) {
  for (Isa isa : kAllIsas) {
    const KernelTable& t = kernel_table_entries(isa);
    EXPECT_EQ(t.isa, isa);
    for (uint32_t id = 0; id < kMaxTypeIds; ++id) {
      const auto tt = type_traits(id);
      if (!tt || !tt->weight_supported) continue;
      const auto type = static_cast<GgmlType>(id);
      const MatmulKernels& k = t.matmul[id];
      if (is_float_type(type)) {
        EXPECT_NE(k.flt, nullptr) << isa_name(isa) << " " << tt->name;
      } else {
        EXPECT_NE(k.quant, nullptr) << isa_name(isa) << " " << tt->name;
        EXPECT_TRUE(matmul_detail::pack_traits(type).packed) << tt->name;
      }
    }
  }
}

TEST(KernelTable, EveryLevelHasItsQuantizerRowOpsAttentionAndGeometry) {
  for (Isa isa : kAllIsas) {
    const KernelTable& t = kernel_table_entries(isa);
    EXPECT_NE(t.quantize_act_row, nullptr) << isa_name(isa);
    EXPECT_NE(t.attention.attend, nullptr) << isa_name(isa);
    EXPECT_NE(t.attention.attend_softcap, nullptr) << isa_name(isa);
    EXPECT_NE(t.attention.attend_tile, nullptr) << isa_name(isa);
    EXPECT_EQ(t.ops.isa, isa);
    for (auto fn : {(void*)t.ops.rms_norm, (void*)t.ops.softmax, (void*)t.ops.swiglu, (void*)t.ops.add_inplace,
                    (void*)t.ops.rope, (void*)t.ops.rope_apply, (void*)t.ops.dot_f32, (void*)t.ops.axpy_f32,
                    (void*)t.ops.scale_f32, (void*)t.ops.exp_f32})
      EXPECT_NE(fn, nullptr) << isa_name(isa);
    // Packed groups must tile a row slice (WeightMatrix::kSliceRowAlign) and a matmul tile.
    if (isa == Isa::Scalar) {
      EXPECT_EQ(t.packed_lanes, 0);
    } else {
      EXPECT_GT(t.packed_lanes, 0) << isa_name(isa);
      EXPECT_EQ(WeightMatrix::kSliceRowAlign % t.packed_lanes, 0) << isa_name(isa);
      EXPECT_EQ(t.tile_rows_quant % t.packed_lanes, 0) << isa_name(isa);
    }
  }
}

TEST(KernelTable, AmxReadsTheAvx512PackingAndAddsOnlyPrefillKernels) {
  const KernelTable& avx512 = kernel_table_entries(Isa::Avx512);
  const KernelTable& amx = kernel_table_entries(Isa::Amx);
  EXPECT_EQ(amx.packed_lanes, avx512.packed_lanes);
  EXPECT_EQ(amx.tile_rows_quant, avx512.tile_rows_quant);
  for (size_t id = 0; id < kMaxTypeIds; ++id) {
    EXPECT_EQ(amx.matmul[id].quant, avx512.matmul[id].quant) << id;
    EXPECT_EQ(amx.matmul[id].flt, avx512.matmul[id].flt) << id;
    EXPECT_EQ(avx512.matmul[id].prefill, nullptr) << id;
  }
  EXPECT_NE(amx.matmul[static_cast<size_t>(GgmlType::Q8_0)].prefill, nullptr);
  EXPECT_NE(amx.matmul[static_cast<size_t>(GgmlType::Q4_0)].prefill, nullptr);
  EXPECT_NE(amx.matmul[static_cast<size_t>(GgmlType::Q4_K)].prefill, nullptr);
  EXPECT_NE(amx.matmul[static_cast<size_t>(GgmlType::Q6_K)].prefill, nullptr);
  EXPECT_EQ(amx.prefill_min_tokens, 16);  // one AMX tile of tokens
}

TEST(KernelTableDeathTest, DispatchOnAMissingEntryAbortsNamingLevelAndType) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KernelTable empty;
  empty.isa = Isa::Avx2;
  EXPECT_DEATH((void)matmul_kernels(empty, GgmlType::Q4_K), "no avx2 kernel for weight type q4_K");
  EXPECT_DEATH((void)matmul_kernels(kernel_table_entries(Isa::Scalar), GgmlType::Q8_1),
               "no scalar kernel for weight type q8_1");
}

TEST(KernelTable, TheProcessRunsTheTableOfBestIsa) {
  EXPECT_EQ(active_kernels().isa, best_isa());
  EXPECT_EQ(&active_kernels(), &kernel_table(best_isa()));
}

// PAGODA_ISA caps the level chosen at start-up and never raises it. Each case runs in a
// fresh child process (threadsafe death tests re-execute the binary), where the level has
// not been chosen yet.
TEST(KernelTableDeathTest, PagodaIsaCapsTheLevel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (Isa cap : kAllIsas) {
    const Isa want = static_cast<int>(cap) <= static_cast<int>(isa_for_features(cpu_features()))
                         ? cap : isa_for_features(cpu_features());
    EXPECT_EXIT(
        {
          setenv("PAGODA_ISA", isa_name(cap), 1);
          const bool ok = active_kernels().isa == best_isa() &&
                          // Amx also needs the tile permission; refused, the level is Avx512.
                          (best_isa() == want || (want == Isa::Amx && best_isa() == Isa::Avx512));
          std::_Exit(ok ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "")
        << "PAGODA_ISA=" << isa_name(cap);
  }
}

TEST(KernelTableDeathTest, ALevelTheCpuLacksIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (Isa isa : kAllIsas) {
    if (matmul_detail::isa_runs(isa)) continue;
    EXPECT_DEATH((void)kernel_table(isa), "ISA not supported by this CPU");
  }
}

}  // namespace
}  // namespace pagoda
