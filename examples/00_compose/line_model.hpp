// The smallest useful Model: fit y = a·x + b to points of the line y = 2x − 1.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <span>

#include <diloco/concepts/model.hpp>
#include <diloco/params/layout.hpp>

class line_model {
 public:
  using scalar_type = float;
  using batch_type = std::array<float, 8>;  ///< eight x values; y = 2x − 1

  line_model() {
    layout_.add("a", 1);
    layout_.add("b", 1);
  }

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return params_; }
  std::span<const float> gradients() const { return grads_; }

  /// Mean squared error and its gradient.
  diloco::step_stats compute_gradients(const batch_type& xs) {
    grads_ = {0.0f, 0.0f};
    double loss = 0.0;
    for (float x : xs) {
      const float err = params_[0] * x + params_[1] - (2.0f * x - 1.0f);
      loss += double(err) * double(err) / double(xs.size());
      grads_[0] += 2.0f * err * x / float(xs.size());
      grads_[1] += 2.0f * err / float(xs.size());
    }
    return {loss, xs.size()};
  }

  /// Deterministic points in [−1, 1) for learner `id` at step `step`.
  static batch_type sample(std::uint32_t id, int step) {
    batch_type xs{};
    for (std::size_t i = 0; i < xs.size(); ++i)
      xs[i] = std::fmod(0.37f * float(step * 8 + int(i)) + 0.11f * float(id), 2.0f) - 1.0f;
    return xs;
  }

 private:
  diloco::parameter_layout layout_;
  std::array<float, 2> params_{0.0f, 0.0f};
  std::array<float, 2> grads_{0.0f, 0.0f};
};

static_assert(diloco::model<line_model>);
