// Nesterov in four passes, as PyTorch's foreach SGD does it (torch.optim.sgd
// `_multi_tensor_sgd`, nesterov=True, dampening=0):
//   _foreach_mul_(bufs, μ); _foreach_add_(bufs, grads); grads += μ·bufs;
//   _foreach_add_(params, grads, alpha=−η).
// PyTorch overwrites the gradient in the third pass; here Δ stays read-only
// (the library takes it as `std::span<const T>`), so that pass writes `tmp`.
// Each pass is its own loop over all N elements.
#include "outer_step.hpp"

namespace bench {

void four_pass_nesterov(std::span<float> global, std::span<float> momentum, std::span<float> tmp,
                        std::span<const float> delta) {
  const std::size_t n = global.size();
  float* __restrict g = global.data();
  float* __restrict m = momentum.data();
  float* __restrict t = tmp.data();
  const float* __restrict d = delta.data();
  for (std::size_t i = 0; i < n; ++i) m[i] *= outer_momentum;               // reads m, writes m: 8 B
  for (std::size_t i = 0; i < n; ++i) m[i] += d[i];                         // reads m, Δ, writes m: 12 B
  for (std::size_t i = 0; i < n; ++i) t[i] = d[i] + outer_momentum * m[i];  // reads Δ, m, writes tmp: 12 B
  for (std::size_t i = 0; i < n; ++i) g[i] -= outer_lr * t[i];              // reads Θ, tmp, writes Θ: 12 B
}

}  // namespace bench
