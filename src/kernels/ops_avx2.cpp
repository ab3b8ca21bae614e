// AVX2 + FMA instances of the row kernels (ops_simd.h): 8 floats per register, through
// the shared traits of simd_avx2.h.

#include "kernels/simd_avx2.h"

#include "kernels/ops_internal.h"
#include "kernels/ops_simd.h"

namespace pagoda {

namespace ops_internal {
constinit const OpsKernels kOpsAvx2 = make_ops_kernels<simd_avx2::Vec>(Isa::Avx2);
}  // namespace ops_internal

}  // namespace pagoda
