// One inner step's worth of Fashion-MNIST examples, in plain host memory:
// the batch type of both models, the CPU `mlp` and the GPU `gpu_mlp`
// (no Eigen here, so that nvcc never reads Eigen).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fashion {

/// `size()` images of `features` pixels each, column-major (image j is
/// `x[j·features, (j+1)·features)`, pixels scaled to [0, 1]), and their
/// labels (0 to 9).
struct batch {
  std::uint32_t features = 0;
  std::vector<float> x;
  std::vector<std::uint8_t> y;

  std::size_t size() const noexcept { return y.size(); }
};

}  // namespace fashion
