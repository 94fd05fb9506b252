// The MergePolicy concept: how the syncer turns the contributions of a round
// into one outer gradient.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "diloco/concepts/check.hpp"
#include "diloco/params/fragments.hpp"

namespace diloco {

/// One learner's outer gradient for a fragment (packed layout) and its weight.
template <class T>
struct weighted_delta {
  std::span<const T> delta;
  double weight = 0.0;
};

/// A Weighting: `w.weight(tokens, steps)` on a `const W`, with the
/// `std::uint64_t` tokens and inner steps behind a contribution, returning its
/// weight (convertible to `double`, ≥ 0). Requirement 1 of a MergePolicy, and
/// on its own the policy parameter of the merges that take one
/// (`merge::weighted_mean<W>`, `merge::trimmed_mean<W>`, ...): `merge::uniform`
/// and `merge::token`.
template <class W>
concept weighting = requires(const W& w, std::uint64_t tokens, std::uint64_t steps) {
  { w.weight(tokens, steps) } -> std::convertible_to<double>;
};

/// The requirements of `merge_policy`, one named concept each, numbered as
/// `check_merge_policy` walks them.
namespace requirements::merge_policy {

/// 1. `p.weight(tokens, steps)` — `P` is a `weighting`.
template <class P>
concept weight = weighting<P>;

/// 2. `p.merge(contributions, slices, out, scale)` on a `const P` with
///    `std::span<const weighted_delta<T>>` (at least one, all the fragment's
///    size), the fragment's `std::span<const fragment_slice>` (tensor pieces in
///    packed order, with their roles), the output `std::span<T>` and a
///    `double` scale, returning `void`. It writes `scale ×` the merged outer
///    gradient, normalized so that identical contributions merge to
///    themselves; the syncer uses `scale` to shrink partial rounds. It must not
///    keep references to its inputs.
template <class P, class T>
concept merge = requires(const P& p, std::span<const weighted_delta<T>> contributions,
                         std::span<const fragment_slice> slices, std::span<T> out, double scale) {
  { p.merge(contributions, slices, out, scale) } -> std::same_as<void>;
};

/// 3. Move-constructible: the syncer takes it by value.
template <class P>
concept move_constructible = std::move_constructible<P>;

}  // namespace requirements::merge_policy

/// Requirements on a MergePolicy type `P` for scalar type `T`: requirements 1
/// to 3 above (examples: `merge::weighted_mean<W>`, `merge::radial_directional<W>`,
/// `merge::trimmed_mean<W>`, `merge::coordinate_median<W>`).
template <class P, class T>
concept merge_policy = requirements::merge_policy::weight<P> && requirements::merge_policy::merge<P, T> &&
    requirements::merge_policy::move_constructible<P>;

namespace merge {

/// A merge policy that declares `static constexpr bool is_weighted_mean =
/// true` promises that its merge is exactly `scale · Σ_m w_m Δ_m / Σ_m w_m`,
/// summed per element in input order (0 when Σ_m w_m ≤ 0). The syncer then
/// decodes compressed contributions straight into that sum, one pass over
/// their bytes, instead of decoding each one first (`merge::weighted_mean`).
template <class P>
concept linear = requires {
  requires P::is_weighted_mean;
};

}  // namespace merge

/// Returns true if `P` is a merge policy for `T`; otherwise, with
/// `on_unmet::fail`, stops compilation naming the first requirement `P` misses.
template <class P, class T, on_unmet Unmet = on_unmet::fail>
consteval bool check_merge_policy() {
  namespace r = requirements::merge_policy;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!r::weight<P>) {
    static_assert(r::weight<P> || quiet,
                  "diloco::merge_policy: missing member `double weight(std::uint64_t tokens, std::uint64_t steps) "
                  "const`");
    return !quiet;
  } else if constexpr (!r::merge<P, T>) {
    static_assert(r::merge<P, T> || quiet,
                  "diloco::merge_policy: missing member `void merge(std::span<const weighted_delta<T>>, "
                  "std::span<const fragment_slice>, std::span<T> out, double scale) const`");
    return !quiet;
  } else if constexpr (!r::move_constructible<P>) {
    static_assert(r::move_constructible<P> || quiet,
                  "diloco::merge_policy: must be move-constructible (the syncer owns it)");
    return !quiet;
  } else {
    return true;
  }
}

}  // namespace diloco
