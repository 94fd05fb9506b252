// DILOCO_HOST_DEVICE: marks the element-wise functions of the optimizers.
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
