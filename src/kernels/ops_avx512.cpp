// AVX-512F instances of the row kernels (ops_simd.h): 16 floats per register, tails
// through mask registers, through the shared traits of simd_avx512.h.

// First: its pragma must cover the first inclusion of <immintrin.h>.
#include "kernels/simd_avx512.h"

#include "kernels/ops_internal.h"
#include "kernels/ops_simd.h"

namespace pagoda {

namespace ops_internal {
constinit const OpsKernels kOpsAvx512 = make_ops_kernels<simd_avx512::Vec>(Isa::Avx512);
}  // namespace ops_internal

}  // namespace pagoda
