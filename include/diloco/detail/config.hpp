// Portability macros shared by the host and CUDA code paths.
#pragma once

/// Marks element-wise functions that run on the host and, under nvcc, on the
/// device too, so the CPU path and the CUDA kernels share one definition of the
/// math (as Eigen's EIGEN_DEVICE_FUNC does).
#if defined(__CUDACC__)
#define DILOCO_HOST_DEVICE __host__ __device__
#else
#define DILOCO_HOST_DEVICE
#endif
