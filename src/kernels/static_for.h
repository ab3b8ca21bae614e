// static_for<Begin, End>(fn): fn(std::integral_constant<int, i>{}) for i in [Begin, End),
// unrolled at compile time. Why not a plain loop the compiler unrolls: GCC unrolls after
// it decides which arrays live in registers, so an accumulator array indexed by a loop
// variable stays in memory and is stored every step (measured in the float micro-kernels:
// 16 accumulators spilled per step; in the AMX-INT8 epilogue: a stack store per token).
#pragma once

#include <utility>

namespace pagoda::matmul_detail {

template <int Begin, int End, class Fn>
inline __attribute__((always_inline)) void static_for(Fn&& fn) {
  if constexpr (Begin < End) {
    fn(std::integral_constant<int, Begin>{});
    static_for<Begin + 1, End>(fn);
  }
}

}  // namespace pagoda::matmul_detail
