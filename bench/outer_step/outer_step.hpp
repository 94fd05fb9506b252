// One outer Nesterov step over N fp32 parameters, and the loops it is measured
// against. Each implementation lives in its own translation unit, so none is
// inlined into or fused with another.
#pragma once

#include <cstddef>
#include <span>

#include "diloco/outer/nesterov.hpp"

namespace bench {

/// η and μ of DiLoCo's outer Nesterov (Douillard et al. 2023, arXiv 2311.08105).
inline constexpr float outer_lr = 0.7f;
inline constexpr float outer_momentum = 0.9f;

/// Bytes moved per element as STREAM counts them: 4 per fp32 read or written
/// by the program; the line read that write-allocate adds to a store is not
/// counted.
namespace bytes_per_param {
inline constexpr double triad = 12;      ///< reads b, c; writes a
inline constexpr double copy = 8;        ///< reads src; writes dst
inline constexpr double fused = 20;      ///< reads Θ, m, Δ; writes Θ, m
inline constexpr double four_pass = 44;  ///< 8 + 12 + 12 + 12, see four_pass.cpp
}  // namespace bytes_per_param

// stream.cpp: the references.

/// STREAM triad `a[i] = b[i] + s·c[i]`.
void triad(std::span<float> a, std::span<const float> b, std::span<const float> c, float s);
/// `std::memcpy(dst, src, …)`.
void copy(std::span<float> dst, std::span<const float> src);

// diloco.cpp: the library.

/// `diloco::outer::nesterov<float>::step` on fragment 0.
void diloco_step(diloco::outer::nesterov<float>& optimizer, std::span<float> global, std::span<const float> delta);
/// The library's element functor `nesterov_element` in a plain loop over
/// caller-owned buffers: the same one pass, without the optimizer's own
/// momentum storage.
void diloco_element_loop(std::span<float> global, std::span<float> momentum, std::span<const float> delta);

// four_pass.cpp: the unfused competitor.

/// Nesterov as PyTorch's foreach SGD does it: four passes over memory,
/// `m ← μm; m ← m + Δ; tmp ← Δ + μm; Θ ← Θ − η·tmp` (44 bytes per parameter).
void four_pass_nesterov(std::span<float> global, std::span<float> momentum, std::span<float> tmp,
                        std::span<const float> delta);

}  // namespace bench
