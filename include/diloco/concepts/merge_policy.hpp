// The MergePolicy concept: how the syncer turns the contributions of a round
// into one outer gradient.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "diloco/params/fragments.hpp"

namespace diloco {

/// One learner's outer gradient for a fragment (packed layout) and its weight.
template <class T>
struct weighted_delta {
  std::span<const T> delta;
  double weight = 0.0;
};

/// Requirements on a MergePolicy type `P` for scalar type `T` (examples:
/// `merge::average`, `merge::token_weighted`, `merge::radial_directional<>`):
///
/// 1. `p.weight(tokens, steps)` — `std::uint64_t` tokens and inner steps behind a
///    contribution, returning its weight (`double`, ≥ 0).
/// 2. `p.merge(contributions, slices, out, scale)` with
///    `std::span<const weighted_delta<T>>` (at least one, all the fragment's
///    size), the fragment's `std::span<const fragment_slice>` (tensor pieces in
///    packed order, with their roles), the output `std::span<T>` and a `double`
///    scale, returning `void`. It writes `scale ×` the merged outer gradient,
///    normalized so that identical contributions merge to themselves; the
///    syncer uses `scale` to shrink partial rounds. It must not keep references
///    to its inputs.
/// 3. Move-constructible: the syncer takes it by value.
template <class P, class T>
concept merge_policy = std::move_constructible<P> && requires(const P& p, std::uint64_t tokens, std::uint64_t steps,
                                std::span<const weighted_delta<T>> contributions,
                                std::span<const fragment_slice> slices, std::span<T> out, double scale) {
  { p.weight(tokens, steps) } -> std::convertible_to<double>;
  { p.merge(contributions, slices, out, scale) } -> std::same_as<void>;
};

namespace detail {

/// Fails compilation with a message naming the first requirement `P` misses.
template <class P, class T>
consteval bool check_merge_policy() {
  static_assert(requires(const P& p, std::uint64_t n) { { p.weight(n, n) } -> std::convertible_to<double>; },
                "diloco::merge_policy: missing member `double weight(std::uint64_t tokens, std::uint64_t steps) "
                "const`");
  static_assert(requires(const P& p, std::span<const weighted_delta<T>> c, std::span<const fragment_slice> s,
                         std::span<T> out, double scale) { { p.merge(c, s, out, scale) } -> std::same_as<void>; },
                "diloco::merge_policy: missing member `void merge(std::span<const weighted_delta<T>>, "
                "std::span<const fragment_slice>, std::span<T> out, double scale) const`");
  static_assert(std::move_constructible<P>, "diloco::merge_policy: must be move-constructible (the syncer owns it)");
  return true;
}

}  // namespace detail
}  // namespace diloco
