// Eigen adapter: a model's tensors as Eigen maps into one flat parameter buffer
// and one flat gradient buffer, with the layout the runtime needs.
#pragma once

#include <Eigen/Core>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "diloco/params/layout.hpp"

namespace diloco::eigen {

/// Owns a model's parameters and gradients as two flat buffers and hands out
/// column-major `Eigen::Map`s onto its named tensors. Add every tensor first:
/// maps taken before a later `add` dangle.
template <class T>
class parameter_store {
 public:
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using matrix_map = Eigen::Map<matrix>;
  using const_matrix_map = Eigen::Map<const matrix>;

  /// Adds a `rows × cols` tensor, zero-initialized; returns its index.
  /// Throws `std::invalid_argument` like `parameter_layout::add`.
  std::size_t add(std::string name, Eigen::Index rows, Eigen::Index cols, tensor_role role = tensor_role::dense) {
    const std::size_t i = layout_.add(std::move(name), static_cast<std::size_t>(rows * cols), role);
    shapes_.push_back({rows, cols});
    params_.resize(layout_.size(), T(0));
    grads_.resize(layout_.size(), T(0));
    return i;
  }

  matrix_map param(std::size_t i) { return map(params_, i); }
  matrix_map grad(std::size_t i) { return map(grads_, i); }
  const_matrix_map param(std::size_t i) const { return cmap(params_, i); }

  const parameter_layout& layout() const noexcept { return layout_; }
  std::span<T> parameters() noexcept { return params_; }
  std::span<const T> gradients() const noexcept { return grads_; }
  std::span<T> gradients() noexcept { return grads_; }

 private:
  struct shape {
    Eigen::Index rows, cols;
  };

  matrix_map map(std::vector<T, Eigen::aligned_allocator<T>>& v, std::size_t i) {
    return matrix_map(v.data() + layout_[i].offset, shapes_[i].rows, shapes_[i].cols);
  }
  const_matrix_map cmap(const std::vector<T, Eigen::aligned_allocator<T>>& v, std::size_t i) const {
    return const_matrix_map(v.data() + layout_[i].offset, shapes_[i].rows, shapes_[i].cols);
  }

  parameter_layout layout_;
  std::vector<shape> shapes_;
  std::vector<T, Eigen::aligned_allocator<T>> params_;
  std::vector<T, Eigen::aligned_allocator<T>> grads_;
};

}  // namespace diloco::eigen
