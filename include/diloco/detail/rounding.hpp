// Products and sums rounded one at a time, on the host and on a CUDA device
// alike: the element functions the CPU loops and the CUDA kernels share.
#pragma once

#include <type_traits>

#include "diloco/detail/config.hpp"

namespace diloco::detail {

// nvcc contracts `a·b + c` into one FMA by default (`-fmad=true`): one
// rounding where the CPU, built with -ffp-contract=off, rounds the product
// and the sum each on its own. The `_rn` intrinsics are never contracted
// (CUDA C++ Programming Guide, "Intrinsic Functions": __fmul_rn, __fadd_rn,
// __dmul_rn, ...), so a kernel that writes its arithmetic with these gets the
// CPU's bits, whatever `-fmad` and `-prec-div` say. On the host they are the
// plain operators. (`-ftz=true`, which `--use_fast_math` implies, still
// flushes subnormal results to zero, and nvcc defines no macro for it: a
// program that uses the codecs on a device must not be built with it.)

/// `a · b`, rounded to nearest even, never fused with a neighbour.
template <class T>
DILOCO_HOST_DEVICE inline T mul_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/// `a + b`, rounded to nearest even, never fused with a neighbour.
template <class T>
DILOCO_HOST_DEVICE inline T add_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fadd_rn(a, b);
  else
    return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

/// `a − b`, rounded to nearest even, never fused with a neighbour.
template <class T>
DILOCO_HOST_DEVICE inline T sub_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fsub_rn(a, b);
  else
    return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

/// `a / b`, correctly rounded to nearest even: on the device `__fdiv_rn`,
/// which `-prec-div=false` and `--use_fast_math` leave exact (plain `/`
/// becomes `div.approx` under them).
template <class T>
DILOCO_HOST_DEVICE inline T div_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>)
    return __fdiv_rn(a, b);
  else
    return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace diloco::detail
