// Kernel dispatch on a weight type it has no kernel for fails loudly, naming the type,
// instead of returning with the output unwritten; and every type prepare() accepts
// has a packed layout (so the check never fires on a supported model).
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/matmul_impl.h"
#include "tensor/types.h"

namespace pagoda::matmul_detail {
namespace {

TEST(PackedUnitBytesDeathTest, TypeWithoutPackedLayoutAbortsNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)packed_unit_bytes(GgmlType::Q8_1, 8), "no packed layout for q8_1");
  EXPECT_DEATH((void)packed_unit_bytes(GgmlType::F32, 16), "no packed layout for f32");
}

TEST(PackedUnitBytes, EveryQuantizedWeightTypeHasALayout) {
  for (uint32_t id = 0; id < 64; ++id) {
    const auto tt = type_traits(id);
    if (!tt || !tt->weight_supported) continue;
    const auto type = static_cast<GgmlType>(id);
    if (is_float_type(type)) continue;
    for (int lanes : {8, 16}) {
      // One unit holds lanes rows of unit_cols(type) codes, at least 2 bits each (Q2_K),
      // and no fewer bytes than the GGUF blocks it repacks, bar none.
      EXPECT_GE(packed_unit_bytes(type, lanes), static_cast<size_t>(lanes * unit_cols(type) / 4)) << tt->name;
      EXPECT_GE(packed_unit_bytes(type, lanes), lanes * tt->type_size * (unit_cols(type) / tt->block_size))
          << tt->name;
    }
  }
}

}  // namespace
}  // namespace pagoda::matmul_detail
