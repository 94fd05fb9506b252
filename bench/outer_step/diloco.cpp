// The library: diloco::outer::nesterov's fused step.
#include "outer_step.hpp"

namespace bench {

void diloco_step(diloco::outer::nesterov<float>& optimizer, std::span<float> global, std::span<const float> delta) {
  optimizer.step(0, global, delta);
}

void diloco_element_loop(std::span<float> global, std::span<float> momentum, std::span<const float> delta) {
  const diloco::outer::nesterov_element<float> f{outer_lr, outer_momentum};
  float* __restrict g = global.data();
  float* __restrict m = momentum.data();
  const float* __restrict d = delta.data();
  const std::size_t n = global.size();
  for (std::size_t i = 0; i < n; ++i) f(g[i], m[i], d[i]);
}

}  // namespace bench
