// The InnerStep concept: the optimizer a learner runs at every inner step.
#pragma once

#include <concepts>
#include <span>
#include <type_traits>

namespace diloco {

/// Requirements on an InnerStep type `S` (examples: `inner::sgd<T>`, `inner::adamw<T>`):
///
/// 1. `typename S::scalar_type` — `float` or `double`, the element type it updates.
/// 2. `typename S::options_type` — a plain aggregate of hyperparameters.
/// 3. `s.step(params, grads)` with `std::span<scalar_type>` parameters and
///    `std::span<const scalar_type>` gradients of the same length, returning
///    `void`: one update, in place. Optimizer state (moments, step count) lives
///    in `s` and is created on the first call, when the size is known.
/// 4. `s.options()` — returns `options_type&`, so a trainer can change, e.g.,
///    the learning rate between steps.
/// 5. Move-constructible: the learner takes it by value.
template <class S>
concept inner_step = std::move_constructible<S> && requires(S& s, std::span<typename S::scalar_type> params,
                              std::span<const typename S::scalar_type> grads) {
  typename S::scalar_type;
  typename S::options_type;
  { s.step(params, grads) } -> std::same_as<void>;
  { s.options() } -> std::same_as<typename S::options_type&>;
};

namespace detail {

/// Fails compilation with a message naming the first requirement `S` misses.
template <class S>
consteval bool check_inner_step() {
  static_assert(requires { typename S::scalar_type; },
                "diloco::inner_step: missing member type `scalar_type` (float or double)");
  static_assert(requires { typename S::options_type; },
                "diloco::inner_step: missing member type `options_type` (an aggregate of hyperparameters)");
  if constexpr (requires { typename S::scalar_type; }) {
    using T = typename S::scalar_type;
    static_assert(std::is_floating_point_v<T>, "diloco::inner_step: `scalar_type` must be float or double");
    static_assert(requires(S& s, std::span<T> p, std::span<const T> g) { { s.step(p, g) } -> std::same_as<void>; },
                  "diloco::inner_step: missing member `void step(std::span<scalar_type> params, "
                  "std::span<const scalar_type> grads)`");
    if constexpr (requires { typename S::options_type; })
      static_assert(requires(S& s) { { s.options() } -> std::same_as<typename S::options_type&>; },
                    "diloco::inner_step: missing member `options_type& options()`");
  }
  static_assert(std::move_constructible<S>, "diloco::inner_step: must be move-constructible (the learner owns it)");
  return true;
}

}  // namespace detail
}  // namespace diloco
