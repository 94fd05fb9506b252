// The parameter layout: a model's parameters as named tensors in one flat buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace diloco {

/// How the merge step treats a tensor. Radial-directional averaging averages
/// norms and directions of dense tensors separately but averages embedding
/// tables directly (Decoupled DiLoCo, arXiv 2604.21428).
enum class tensor_role : std::uint8_t { dense = 0, embedding = 1 };

/// One named tensor inside the flat parameter buffer: elements
/// `[offset, offset + size)`.
struct tensor_info {
  std::string name;
  std::size_t offset = 0;
  std::size_t size = 0;
  tensor_role role = tensor_role::dense;
};

/// An ordered list of named tensors packed back to back into one flat buffer.
///
/// The library never looks at shapes, only at names, sizes and roles: outer
/// gradients, fragments and merges work on the flat buffer and use tensor
/// boundaries where the math is per tensor. Learners and the syncer compare
/// `fingerprint()`s to make sure they talk about the same model.
class parameter_layout {
 public:
  /// Appends a tensor after the last one and returns its index.
  /// Throws `std::invalid_argument` for an empty or duplicate name or a zero size;
  /// the layout is unchanged then.
  std::size_t add(std::string name, std::size_t size, tensor_role role = tensor_role::dense) {
    if (name.empty()) throw std::invalid_argument("diloco::parameter_layout: tensor name is empty");
    if (size == 0) throw std::invalid_argument("diloco::parameter_layout: tensor '" + name + "' has size 0");
    if (find(name) != nullptr)
      throw std::invalid_argument("diloco::parameter_layout: duplicate tensor name '" + name + "'");
    tensors_.push_back(tensor_info{std::move(name), size_, size, role});
    size_ += size;
    return tensors_.size() - 1;
  }

  std::span<const tensor_info> tensors() const noexcept { return tensors_; }
  const tensor_info& operator[](std::size_t i) const noexcept { return tensors_[i]; }
  std::size_t tensor_count() const noexcept { return tensors_.size(); }

  /// Total number of elements over all tensors.
  std::size_t size() const noexcept { return size_; }

  /// The tensor called `name`, or null.
  const tensor_info* find(std::string_view name) const noexcept {
    for (const auto& t : tensors_)
      if (t.name == name) return &t;
    return nullptr;
  }

  /// A 64-bit FNV-1a hash of every tensor's name, size and role, in order.
  std::uint64_t fingerprint() const noexcept {
    std::uint64_t h = 14695981039346656037ull;
    auto mix = [&h](std::uint64_t byte) {
      h ^= byte;
      h *= 1099511628211ull;
    };
    for (const auto& t : tensors_) {
      for (unsigned char c : t.name) mix(c);
      mix(0);
      for (int i = 0; i < 8; ++i) mix((static_cast<std::uint64_t>(t.size) >> (8 * i)) & 0xff);
      mix(static_cast<std::uint64_t>(t.role));
    }
    return h;
  }

  friend bool operator==(const parameter_layout& a, const parameter_layout& b) {
    if (a.tensors_.size() != b.tensors_.size()) return false;
    for (std::size_t i = 0; i < a.tensors_.size(); ++i) {
      const auto& x = a.tensors_[i];
      const auto& y = b.tensors_[i];
      if (x.name != y.name || x.size != y.size || x.role != y.role) return false;
    }
    return true;
  }

 private:
  std::vector<tensor_info> tensors_;
  std::size_t size_ = 0;
};

}  // namespace diloco
