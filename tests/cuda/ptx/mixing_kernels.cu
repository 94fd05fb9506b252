// The mixing and rebasing kernels alone, compiled to PTX for the check
// `cuda_mixing_no_fma` (tests/cuda/CMakeLists.txt): their arithmetic must
// hold no fused multiply-add, or a GPU learner would round unlike a CPU one.
#include "diloco/cuda/mixing.cuh"

template cudaError_t diloco::cuda::mix<float>(const diloco::mixing_element<float>&, std::span<float>,
                                              std::span<const float>, cudaStream_t);
template cudaError_t diloco::cuda::mix<double>(const diloco::mixing_element<double>&, std::span<double>,
                                               std::span<const double>, cudaStream_t);
template cudaError_t diloco::cuda::subtract_base<float>(std::span<float>, std::span<const float>, float, cudaStream_t);
template cudaError_t diloco::cuda::add_global<float>(std::span<float>, std::span<const float>, float, cudaStream_t);
template cudaError_t diloco::cuda::subtract_base<double>(std::span<double>, std::span<const double>, double,
                                                         cudaStream_t);
template cudaError_t diloco::cuda::add_global<double>(std::span<double>, std::span<const double>, double, cudaStream_t);
