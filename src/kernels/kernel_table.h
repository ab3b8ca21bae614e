// The one seam between the forward pass and the instruction set: a table of kernels per
// ISA level, chosen once at start-up.
//
// Contract:
// - kernel_table(isa) is the complete set of kernels of one level: matmul per weight type
//   (quantized packed kernels, float kernels, an optional prefill kernel for large token
//   tiles — AMX), the activation quantizer, the row ops (ops.h), the paged-attention
//   kernels, and the packing geometry the matmul kernels read (rows per packed group,
//   tile rows). Built on first use (thread-safe static) from the registration functions
//   of that level's translation units (register_*_kernels below); immutable afterwards,
//   so any thread may read it. Requires: isa_supported(isa) (aborts naming the level
//   otherwise: a table of a level the CPU lacks would die of SIGILL).
// - active_kernels() is kernel_table(best_isa()): the level the process runs, chosen once
//   (CPUID capped by PAGODA_ISA=scalar|avx2|avx512|amx, see cpu_features.h).
// - matmul_kernels(table, type) aborts naming the level and the type when the table has no
//   kernel for a weight type, instead of returning with the output unwritten.
//
// Adding an ISA: an Isa value and its feature test (cpu_features), its compiler flags
// (CMakeLists.txt, by file-name suffix), its kernel files with a register function, and
// one case in kernel_table.cpp. Adding a weight type (MXFP4 was the last; grep it for each
// place):
//   1. tensor/types.h, types.cpp: the GgmlType value and its traits (block size and bytes,
//      weight_supported); tensor/codecs*.cpp its scalar dequantize / quantize (the
//      reference everything else is checked against); tensor/file_type.* its llama.cpp
//      label when it has one.
//   2. kernels/matmul_impl.h: its packed layout: pack_traits, unit_layout (where each part
//      of a unit lies, which the packing, the unpacking and the kernels all read) and the
//      comment above them; matmul_pack.cpp the packing and matmul_unpack.cpp its inverse;
//      matmul.cpp the scalar level's kernel, when the generic dequantize-and-dot path does
//      not already take it.
//   3. kernels/matmul_simd.h: the type in register_packed_kernels' list and in
//      packed_dispatch, and its weight decode in the packed kernel (shared by AVX2 and
//      AVX-512 through the vector traits); AMX only where its tile path takes the type.
//   4. Tests: tests/tensor codecs (known answers and tests/model/gguf_numpy.py's numpy
//      decoder), tests/kernels/matmul_test.cpp and matmul_unpack_test.cpp type lists;
//      tests/kernels/kernel_table_test.cpp fails for a level that lacks an entry for a
//      type prepare() accepts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "kernels/matmul_impl.h"
#include "kernels/ops_internal.h"
#include "tensor/block_id.h"
#include "tensor/types.h"

namespace pagoda {

struct KvLayerView;                // kernels/paged_attention.h

// Quantized weights (packed for the level, or GGUF layout for Scalar) x quantized activations,
// one tile of the output.
using QuantMatmulFn = void (*)(const WeightMatrix& w, const matmul_detail::QuantizedActs& a,
                               const matmul_detail::Tile& tile, float* y);
// Float weights (F32 / F16 / BF16, GGUF layout) x f32 activations x [n_tokens, n_cols];
// xbf: the activations as bf16 when the table has bf16_acts and the weights are BF16, else null.
using FloatMatmulFn = void (*)(const WeightMatrix& w, const float* x, const uint16_t* xbf,
                               const matmul_detail::Tile& tile, float* y);
// BF16 weights on AMX (matmul_bf16_amx.cpp): FloatMatmulFn's arguments and xvnni, the
// activations' whole 16-token groups as AMX B tiles (KernelTable::bf16_acts_vnni).
using FloatPrefillFn = void (*)(const WeightMatrix& w, const float* x, const uint16_t* xbf,
                                const uint16_t* xvnni, const matmul_detail::Tile& tile, float* y);
// 16 row-major bf16 token rows (n_cols each) -> their B tiles at out: per 32-column chunk,
// 16 rows of 64 bytes (row kk: for each of the 16 tokens, its columns 2 kk and 2 kk + 1),
// n_cols * 16 values in all. Requires n_cols % 32 == 0.
using Bf16VnniFn = void (*)(const uint16_t* rows, int64_t n_cols, uint16_t* out);
// One token row of activations quantized (bit-identical at every level).
using QuantizeActRowFn = void (*)(matmul_detail::ActKind kind, const float* x, int64_t n_cols,
                                  const matmul_detail::ActRowOut& out);
// f32 -> bf16 (round to nearest even) of n values.
using ConvertBf16Fn = void (*)(const float* x, uint16_t* out, int64_t n);

// Paged attention (kernels/paged_attention.h has the contract of each).
using PagedAttendFn = void (*)(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                               int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                               float* o, float* m, float* l);
using PagedAttendSoftcapFn = void (*)(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                      int64_t p_end, int64_t kv_head, const float* q, int n_q, float scale,
                                      float softcap, float* o, float* m, float* l);
using PagedAttendTileFn = void (*)(const KvLayerView& view, const BlockId* blocks, int64_t pos0, int n_tok,
                                   int64_t kv_head, const float* q, int64_t q_stride, int n_q, float scale,
                                   float* out, int64_t out_stride, int64_t window, float softcap,
                                   const float* sinks);
using PagedAttendHeadsFn = void (*)(const KvLayerView& view, const BlockId* blocks, int64_t p_begin,
                                    int64_t p_end, int n_kv, const float* q, int n_q, float scale,
                                    float softcap, float* o, float* m, float* l);

// The matmul kernels of one weight type at one level: `quant` for quantized types, `flt` for
// F32 / F16 / BF16; `prefill`, where set, replaces `quant` on tiles of at least
// KernelTable::prefill_min_tokens tokens (bit-identical to it); `flt_prefill` replaces
// `flt` on such tiles (AMX-BF16: the same bf16 products, summed in another order).
struct MatmulKernels {
  QuantMatmulFn quant = nullptr;
  FloatMatmulFn flt = nullptr;
  QuantMatmulFn prefill = nullptr;
  FloatPrefillFn flt_prefill = nullptr;
  // `prefill` reads QuantizedActs' Block32 tile layout where the caller gives one.
  bool prefill_reads_tiles = false;
};

// GGUF type ids are below 64 (tensor/types.h: MXFP4 = 39 is the largest weight type).
constexpr size_t kMaxTypeIds = 64;

struct AttentionKernels {
  PagedAttendFn attend = nullptr;
  PagedAttendSoftcapFn attend_softcap = nullptr;
  PagedAttendTileFn attend_tile = nullptr;
  PagedAttendHeadsFn attend_heads = nullptr;
};

struct KernelTable {
  Isa isa = Isa::Scalar;
  // Rows per packed group of the quantized weights (matmul_impl.h's L); 0: the GGUF layout,
  // nothing repacked (Scalar). AMX reads the AVX-512 packing, so both have 16.
  int packed_lanes = 0;
  // Rows per matmul tile (matmul.cpp): quantized and float weights.
  int64_t tile_rows_quant = 16, tile_rows_float = 16;
  int64_t prefill_min_tokens = 0;  // see MatmulKernels::prefill
  std::array<MatmulKernels, kMaxTypeIds> matmul{};
  QuantizeActRowFn quantize_act_row = nullptr;
  ConvertBf16Fn bf16_acts = nullptr;  // null: BF16 weights take f32 activations
  Bf16VnniFn bf16_acts_vnni = nullptr;  // set with a flt_prefill (AMX)
  ops_internal::OpsKernels ops{};
  AttentionKernels attention{};
};

// Requires: isa_supported(isa) (or the AVX-512 emulation build, see matmul_impl.h).
const KernelTable& kernel_table(Isa isa);
// The table of a level whether or not this CPU runs it, for tests that check its entries
// (never to call them: the AVX-512 entries on an AVX2 CPU would die of SIGILL).
const KernelTable& kernel_table_entries(Isa isa);
// kernel_table(best_isa()), chosen once.
const KernelTable& active_kernels();
// The entries of `type` in `table`; aborts naming the level and type if it has none.
const MatmulKernels& matmul_kernels(const KernelTable& table, GgmlType type);

// Registration: each level's translation units fill their entries (matmul_avx2.cpp, ...).
// The AMX table starts as a copy of the AVX-512 one and adds its prefill kernels.
void register_matmul_kernels_scalar(KernelTable& t);   // matmul.cpp
void register_matmul_kernels_avx2(KernelTable& t);     // matmul_avx2.cpp
void register_matmul_kernels_avx512(KernelTable& t);   // matmul_avx512.cpp
void register_matmul_kernels_amx(KernelTable& t);      // matmul_amx.cpp
void register_matmul_kernels_amx_bf16(KernelTable& t); // matmul_bf16_amx.cpp
void register_attention_kernels_scalar(KernelTable& t);   // paged_attention.cpp
void register_attention_kernels_avx2(KernelTable& t);     // paged_attention_avx2.cpp
void register_attention_kernels_avx512(KernelTable& t);   // paged_attention_avx512.cpp

}  // namespace pagoda
