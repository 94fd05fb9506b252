// A small model for runtime tests: linear regression y = w·x + b with mean
// squared error, on batches drawn from a fixed seeded teacher. Satisfies
// diloco::model for float and double.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <diloco/concepts/model.hpp>
#include <diloco/params/layout.hpp>
#include <diloco/random.hpp>

namespace toy {

template <class T>
struct batch {
  std::vector<T> x;  ///< n × features, row-major
  std::vector<T> y;
};

template <class T>
class linear_regression {
 public:
  using scalar_type = T;
  using batch_type = batch<T>;

  explicit linear_regression(std::size_t features = 8, std::uint64_t seed = 1) : features_(features) {
    layout_.add("weight", features);
    layout_.add("bias", 1);
    params_.resize(features + 1);
    grads_.resize(features + 1);
    diloco::splitmix64 rng(seed);
    for (auto& p : params_) p = T(rng.uniform() - 0.5);
  }

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<T> parameters() { return params_; }
  std::span<const T> gradients() const { return grads_; }

  /// Loss ½·mean((w·x + b − y)²); gradient by hand.
  diloco::step_stats compute_gradients(const batch_type& b) {
    std::fill(grads_.begin(), grads_.end(), T(0));
    const std::size_t n = b.y.size();
    double loss = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      T pred = params_[features_];
      for (std::size_t k = 0; k < features_; ++k) pred += params_[k] * b.x[i * features_ + k];
      const T err = pred - b.y[i];
      loss += 0.5 * double(err) * double(err);
      for (std::size_t k = 0; k < features_; ++k) grads_[k] += err * b.x[i * features_ + k] / T(n);
      grads_[features_] += err / T(n);
    }
    return {loss / double(n), n};
  }

  std::size_t features() const { return features_; }

 private:
  std::size_t features_;
  diloco::parameter_layout layout_;
  std::vector<T> params_, grads_;
};

/// Draws batches from the teacher w_k = (−1)^k·(k+1)/features, b = 0.5, plus
/// small noise; one stream per learner.
template <class T>
class teacher {
 public:
  teacher(std::size_t features, std::uint64_t seed) : features_(features), rng_(seed) {}

  batch<T> next(std::size_t n) {
    batch<T> b;
    for (std::size_t i = 0; i < n; ++i) {
      T y = T(bias);
      for (std::size_t k = 0; k < features_; ++k) {
        const T x = T(2.0 * rng_.uniform() - 1.0);
        b.x.push_back(x);
        y += weight(k) * x;
      }
      b.y.push_back(y + T(0.01 * (rng_.uniform() - 0.5)));
    }
    return b;
  }

  T weight(std::size_t k) const { return T((k % 2 ? -1.0 : 1.0) * double(k + 1) / double(features_)); }
  static constexpr double bias = 0.5;

  /// ½·‖θ − θ*‖² for a model's parameters θ (the weights, then the bias) and
  /// this teacher's θ*.
  double distance(std::span<const T> params) const {
    double d = 0;
    for (std::size_t k = 0; k < features_; ++k) d += std::pow(double(params[k]) - double(weight(k)), 2);
    return 0.5 * (d + std::pow(double(params[features_]) - bias, 2));
  }

 private:
  std::size_t features_;
  diloco::splitmix64 rng_;
};

static_assert(diloco::model<linear_regression<float>>);
static_assert(diloco::model<linear_regression<double>>);

}  // namespace toy
