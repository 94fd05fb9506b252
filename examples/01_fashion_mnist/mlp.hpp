// A multilayer perceptron in Eigen that satisfies diloco's Model concept:
// 784-256-256-10, ReLU, softmax cross-entropy.
#pragma once

#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <diloco/adapters/eigen.hpp>
#include <diloco/concepts/model.hpp>
#include <diloco/random.hpp>

#include "batch.hpp"

namespace fashion {

class mlp {
 public:
  using scalar_type = float;
  using batch_type = batch;

  /// Layer widths, input first. Weights are drawn He-uniform
  /// (bound √(6/fan_in), He et al. 2015) from `seed`; biases start at 0.
  explicit mlp(std::vector<int> widths = {784, 256, 256, 10}, std::uint64_t seed = 1) : widths_(std::move(widths)) {
    for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
      weights_.push_back(store_.add("layer" + std::to_string(l) + ".weight", widths_[l + 1], widths_[l]));
      biases_.push_back(store_.add("layer" + std::to_string(l) + ".bias", widths_[l + 1], 1));
    }
    diloco::splitmix64 rng(seed);
    for (std::size_t l = 0; l < weights_.size(); ++l) {
      auto w = store_.param(weights_[l]);
      const double bound = std::sqrt(6.0 / widths_[l]);
      for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = float((2.0 * rng.uniform() - 1.0) * bound);
    }
  }

  const diloco::parameter_layout& layout() const noexcept { return store_.layout(); }
  std::span<float> parameters() noexcept { return store_.parameters(); }
  std::span<const float> gradients() const noexcept { return store_.gradients(); }

  /// Forward and backward pass; overwrites the gradients. Loss is the mean
  /// cross-entropy over the batch.
  diloco::step_stats compute_gradients(const batch& b) {
    const auto started = std::chrono::steady_clock::now();
    const auto n = static_cast<Eigen::Index>(b.size());
    const Eigen::Map<const Eigen::MatrixXf> x(b.x.data(), b.features, n);
    const double loss = forward(x, &b.y, nullptr);
    // dZ of the output layer: (softmax − onehot) / n.
    Eigen::MatrixXf& dz = delta_.back();
    dz = probs_;
    for (Eigen::Index j = 0; j < n; ++j) dz(b.y[j], j) -= 1.0f;
    dz /= float(n);
    for (std::size_t l = weights_.size(); l-- > 0;) {
      if (l == 0)
        store_.grad(weights_[l]).noalias() = delta_[l] * x.transpose();
      else
        store_.grad(weights_[l]).noalias() = delta_[l] * act_[l - 1].transpose();
      store_.grad(biases_[l]) = delta_[l].rowwise().sum();
      if (l > 0) {
        delta_[l - 1].noalias() = store_.param(weights_[l]).transpose() * delta_[l];
        delta_[l - 1].array() *= (pre_[l - 1].array() > 0.0f).cast<float>();
      }
    }
    last_compute_ = std::chrono::steady_clock::now() - started;
    return {loss, static_cast<std::uint64_t>(n)};
  }

  /// Mean cross-entropy and the number of correct argmax predictions on the
  /// examples in the columns of `x`.
  struct evaluation {
    double loss = 0.0;
    std::uint64_t correct = 0;
  };
  evaluation evaluate(const Eigen::Ref<const Eigen::MatrixXf>& x, std::span<const std::uint8_t> y) {
    std::uint64_t correct = 0;
    const double loss = forward(x, &y, &correct);
    return {loss, correct};
  }

  /// Wall time of the last `compute_gradients`.
  std::chrono::steady_clock::duration last_compute() const noexcept { return last_compute_; }

 private:
  template <class Labels>
  double forward(const Eigen::Ref<const Eigen::MatrixXf>& x, const Labels* y, std::uint64_t* correct) {
    const std::size_t layers = weights_.size();
    pre_.resize(layers);
    act_.resize(layers);
    delta_.resize(layers);
    for (std::size_t l = 0; l < layers; ++l) {
      const auto w = store_.param(weights_[l]);
      const auto bias = store_.param(biases_[l]);
      if (l == 0)
        pre_[l].noalias() = w * x;
      else
        pre_[l].noalias() = w * act_[l - 1];
      pre_[l].colwise() += bias.col(0);
      if (l + 1 < layers) act_[l] = pre_[l].cwiseMax(0.0f);
    }
    // Softmax with the max subtracted for stability; loss in double.
    const Eigen::MatrixXf& logits = pre_.back();
    probs_.resize(logits.rows(), logits.cols());
    double loss = 0.0;
    for (Eigen::Index j = 0; j < logits.cols(); ++j) {
      Eigen::Index arg = 0;
      const float top = logits.col(j).maxCoeff(&arg);
      probs_.col(j) = (logits.col(j).array() - top).exp();
      const float sum = probs_.col(j).sum();
      probs_.col(j) /= sum;
      const auto label = (*y)[static_cast<std::size_t>(j)];
      loss += double(std::log(sum)) - double(logits(label, j) - top);
      if (correct && arg == label) ++*correct;
    }
    return loss / double(logits.cols());
  }

  std::vector<int> widths_;
  diloco::eigen::parameter_store<float> store_;
  std::vector<std::size_t> weights_, biases_;
  std::vector<Eigen::MatrixXf> pre_, act_, delta_;
  Eigen::MatrixXf probs_;
  std::chrono::steady_clock::duration last_compute_{};
};

static_assert(diloco::model<mlp>);

}  // namespace fashion
