// An independent AdamW in double precision, the reference for the inner AdamW
// and for `outer::from_inner<inner::adamw<T>>`.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "diloco/inner/adamw.hpp"

namespace diloco::test {

/// PyTorch's `torch.optim.AdamW` (amsgrad off) for one parameter vector,
/// written from its documented algorithm:
/// `θ ← θ(1 − lr·λ); m ← β1m + (1−β1)g; v ← β2v + (1−β2)g²;`
/// `θ ← θ − (lr / (1−β1^t)) · m / (sqrt(v) / sqrt(1−β2^t) + ε)`.
struct reference_adamw {
  inner::adamw_options o;
  std::vector<double> m, v;
  int t = 0;

  void step(std::vector<double>& p, const std::vector<double>& g) {
    ++t;
    m.resize(p.size());
    v.resize(p.size());
    const double bias1 = 1 - std::pow(o.beta1, t);
    const double bias2 = 1 - std::pow(o.beta2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - o.learning_rate * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      const double denom = std::sqrt(v[i]) / std::sqrt(bias2) + o.epsilon;
      p[i] -= o.learning_rate / bias1 * m[i] / denom;
    }
  }
};

}  // namespace diloco::test
