// DILOCO_HOST_DEVICE: marks the element-wise functions of the optimizers.
// DILOCO_DECL: marks the functions a program may compile once.
#pragma once

/// Marks element-wise functions (an optimizer's per-element update) so that,
/// compiled by nvcc, they are `__host__ __device__` and a device kernel can call
/// the same definition of the math as the CPU loop, as Eigen's
/// EIGEN_DEVICE_FUNC does (the kernels of diloco/cuda/). Under a host compiler
/// the macro is empty.
#if defined(__CUDACC__)
#define DILOCO_HOST_DEVICE __host__ __device__
#else
#define DILOCO_HOST_DEVICE
#endif

/// Marks the non-template functions whose definitions a program may compile
/// once (diloco/separate_compilation.hpp, as Asio's ASIO_DECL): `inline` in
/// the header-only library; with DILOCO_SEPARATE_COMPILATION defined, nothing,
/// and the headers only declare them.
#if defined(DILOCO_SEPARATE_COMPILATION)
#define DILOCO_DECL
#else
#define DILOCO_DECL inline
#endif
