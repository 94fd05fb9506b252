// The OuterOptimizer concept: how the syncer applies a merged outer gradient.
#pragma once

#include <concepts>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <type_traits>

namespace diloco {

/// Requirements on an OuterOptimizer type `O` (examples: `outer::sgd<T>`,
/// `outer::nesterov<T>`, `outer::delayed_nesterov<T>`, `outer::from_inner<S>`):
///
/// 1. `typename O::scalar_type` — `float` or `double`.
/// 2. `typename O::options_type` — a plain aggregate of hyperparameters.
/// 3. `o.step(fragment, global, delta)` with a `std::uint32_t` fragment index,
///    the fragment's global parameters `std::span<scalar_type>` and the merged
///    outer gradient `std::span<const scalar_type>` (Δ = Θ_base − θ, so a
///    descent step subtracts it), returning `void`. State is per fragment and
///    created on the fragment's first step, when its size is known.
/// 4. `o.reset(fragment)` with a `std::uint32_t` fragment index, returning
///    `void`: forgets that fragment's state, so that its next step starts as
///    its first did. The syncer calls it after refusing to publish a step the
///    optimizer has already taken (a non-finite or too large result).
/// 5. `o.save(std::ostream&) const` and `o.load(std::istream&)` — the whole
///    state, so the syncer can checkpoint it; `load` throws on corrupt input
///    and then leaves the state unchanged.
/// 6. Move-constructible: the syncer takes it by value.
template <class O>
concept outer_optimizer = std::move_constructible<O> && requires(O& o, const O& co, std::uint32_t fragment,
                                   std::span<typename O::scalar_type> global,
                                   std::span<const typename O::scalar_type> delta, std::ostream& out,
                                   std::istream& in) {
  typename O::scalar_type;
  typename O::options_type;
  { o.step(fragment, global, delta) } -> std::same_as<void>;
  { o.reset(fragment) } -> std::same_as<void>;
  { co.save(out) } -> std::same_as<void>;
  { o.load(in) } -> std::same_as<void>;
};

namespace detail {

/// Fails compilation with a message naming the first requirement `O` misses.
template <class O>
consteval bool check_outer_optimizer() {
  static_assert(requires { typename O::scalar_type; },
                "diloco::outer_optimizer: missing member type `scalar_type` (float or double)");
  static_assert(requires { typename O::options_type; },
                "diloco::outer_optimizer: missing member type `options_type` (an aggregate of hyperparameters)");
  if constexpr (requires { typename O::scalar_type; }) {
    using T = typename O::scalar_type;
    static_assert(std::is_floating_point_v<T>, "diloco::outer_optimizer: `scalar_type` must be float or double");
    static_assert(requires(O& o, std::uint32_t f, std::span<T> g, std::span<const T> d) {
                    { o.step(f, g, d) } -> std::same_as<void>;
                  },
                  "diloco::outer_optimizer: missing member `void step(std::uint32_t fragment, "
                  "std::span<scalar_type> global, std::span<const scalar_type> delta)`");
  }
  static_assert(requires(O& o, std::uint32_t f) { { o.reset(f) } -> std::same_as<void>; },
                "diloco::outer_optimizer: missing member `void reset(std::uint32_t fragment)`");
  static_assert(requires(const O& o, std::ostream& out) { { o.save(out) } -> std::same_as<void>; },
                "diloco::outer_optimizer: missing member `void save(std::ostream&) const`");
  static_assert(requires(O& o, std::istream& in) { { o.load(in) } -> std::same_as<void>; },
                "diloco::outer_optimizer: missing member `void load(std::istream&)`");
  static_assert(std::move_constructible<O>,
                "diloco::outer_optimizer: must be move-constructible (the syncer owns it)");
  return true;
}

}  // namespace detail
}  // namespace diloco
