// The kernel table of each ISA level, assembled from the levels' registration functions,
// and the one choice of the level the process runs (active_kernels).
#include "kernels/kernel_table.h"

#include <string>

#include "common/error.h"

namespace pagoda {

namespace {

KernelTable build(Isa isa) {
  KernelTable t;
  t.isa = isa;
  switch (isa) {
    case Isa::Scalar:
      t.packed_lanes = 0;
      t.tile_rows_quant = t.tile_rows_float = 16;
      t.ops = ops_internal::kOpsScalar;
      register_matmul_kernels_scalar(t);
      register_attention_kernels_scalar(t);
      break;
    case Isa::Avx2:
      // Tile rows: 4 packed groups (see matmul.cpp); float rows 64 at every SIMD level.
      t.packed_lanes = 8;
      t.tile_rows_quant = 4 * 8;
      t.tile_rows_float = 64;
      t.ops = ops_internal::kOpsAvx2;
      register_matmul_kernels_avx2(t);
      register_attention_kernels_avx2(t);
      break;
    case Isa::Avx512:
    case Isa::Amx:
      t.packed_lanes = 16;
      t.tile_rows_quant = 4 * 16;
      t.tile_rows_float = 64;
      t.ops = ops_internal::kOpsAvx512;
      register_matmul_kernels_avx512(t);
      register_attention_kernels_avx512(t);
      if (isa == Isa::Amx) {
        register_matmul_kernels_amx(t);
        register_matmul_kernels_amx_bf16(t);
      }
      break;
  }
  t.ops.isa = isa;
  return t;
}

}  // namespace

const KernelTable& kernel_table_entries(Isa isa) {
  static const KernelTable tables[] = {build(Isa::Scalar), build(Isa::Avx2), build(Isa::Avx512), build(Isa::Amx)};
  static_assert(sizeof tables / sizeof tables[0] == kNumIsas);
  return tables[static_cast<int>(isa)];
}

const KernelTable& kernel_table(Isa isa) {
  PAGODA_CHECK(matmul_detail::isa_runs(isa), std::string("kernels: ISA not supported by this CPU: ") + isa_name(isa));
  return kernel_table_entries(isa);
}

const KernelTable& active_kernels() {
  static const KernelTable& t = kernel_table(best_isa());
  return t;
}

const MatmulKernels& matmul_kernels(const KernelTable& table, GgmlType type) {
  const auto id = static_cast<size_t>(type);
  const MatmulKernels* k = id < kMaxTypeIds ? &table.matmul[id] : nullptr;
  PAGODA_CHECK(k && (k->quant || k->flt),
               std::string("matmul: no ") + isa_name(table.isa) + " kernel for weight type " + type_name(type));
  return *k;
}

int matmul_detail::packed_lanes(Isa isa) { return kernel_table(isa).packed_lanes; }

}  // namespace pagoda
