// Radial-directional averaging (RDA) of outer gradients, per tensor.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "diloco/concepts/merge_policy.hpp"
#include "diloco/merge/detail/linear.hpp"
#include "diloco/merge/weightings.hpp"

namespace diloco::merge {

/// Radial-directional averaging (Decoupled DiLoCo, arXiv 2604.21428): for each
/// dense tensor piece, average the norms and the directions separately,
/// `Δ = (Σ w‖Δ_m‖ / Σ w) · dir(Σ w·dir(Δ_m) / Σ w)` with `dir(x) = x/‖x‖`
/// (`dir(0) = 0`). Near-orthogonal outer gradients keep their typical norm
/// instead of shrinking like 1/√M, so η need not be retuned when M changes.
/// Embedding tensors are averaged directly with the same weights.
///
/// `Weighting` supplies `weight(tokens, steps)`; the default is token weighting.
/// Cost: three passes over the inputs (norms, combination) and two over the
/// output (norm, rescale); norms accumulate in double.
template <weighting Weighting = token>
struct radial_directional : Weighting {
  template <class T>
  void merge(std::span<const weighted_delta<T>> in, std::span<const fragment_slice> slices, std::span<T> out,
             double scale) const {
    const double w = detail::total_weight(in);
    if (!(w > 0)) {
      std::fill(out.begin(), out.end(), T(0));
      return;
    }
    std::vector<double> coefficient(in.size());
    for (const auto& s : slices) {
      if (s.role == tensor_role::embedding) {
        for (std::size_t m = 0; m < in.size(); ++m) coefficient[m] = scale * in[m].weight / w;
        detail::combine<T>(in, coefficient, out, s.packed_offset, s.size);
        continue;
      }
      double mean_norm = 0.0;
      for (std::size_t m = 0; m < in.size(); ++m) {
        const double norm = std::sqrt(detail::squared_norm(in[m].delta, s.packed_offset, s.size));
        mean_norm += in[m].weight / w * norm;
        coefficient[m] = norm > 0 ? in[m].weight / (w * norm) : 0.0;
      }
      detail::combine<T>(in, coefficient, out, s.packed_offset, s.size);
      const double u = std::sqrt(detail::squared_norm(std::span<const T>(out), s.packed_offset, s.size));
      const T factor = u > 0 ? T(scale * mean_norm / u) : T(0);
      T* o = out.data();
      for (std::size_t i = s.packed_offset; i < s.packed_offset + s.size; ++i) o[i] *= factor;
    }
  }
};

}  // namespace diloco::merge
