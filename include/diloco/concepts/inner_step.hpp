// The InnerStep concept: the optimizer a learner runs at every inner step.
#pragma once

#include <concepts>
#include <span>

#include "diloco/concepts/check.hpp"
#include "diloco/scalar.hpp"

namespace diloco {

/// The requirements of `inner_step`, one named concept each, numbered as
/// `check_inner_step` walks them.
namespace requirements::inner_step {

/// 1. `typename S::scalar_type` — `float` or `double` (`diloco::scalar`), the
///    element type it updates. An integer type is refused: parameters and
///    gradients are real numbers, and the learner's model must share it.
template <class S>
concept scalar_type = requires {
  typename S::scalar_type;
}
&&scalar<typename S::scalar_type>;

/// 2. `typename S::options_type` — a plain aggregate of hyperparameters.
template <class S>
concept options_type = requires {
  typename S::options_type;
};

/// 3. `s.step(params, grads)` with `std::span<scalar_type>` parameters and
///    `std::span<const scalar_type>` gradients of the same length, returning
///    `void`: one update, in place. Optimizer state (moments, step count)
///    lives in `s` and is created on the first call, when the size is known.
template <class S>
concept step = requires(S& s, std::span<typename S::scalar_type> params,
                        std::span<const typename S::scalar_type> grads) {
  { s.step(params, grads) } -> std::same_as<void>;
};

/// 4. `s.options()` — returns `options_type&`, so a trainer can change, e.g.,
///    the learning rate between steps.
template <class S>
concept options = requires(S& s) {
  { s.options() } -> std::same_as<typename S::options_type&>;
};

/// 5. Move-constructible: the learner takes it by value.
template <class S>
concept move_constructible = std::move_constructible<S>;

}  // namespace requirements::inner_step

/// Requirements on an InnerStep type `S`: requirements 1 to 5 above
/// (examples: `inner::sgd<T>`, `inner::adamw<T>`).
template <class S>
concept inner_step = requirements::inner_step::scalar_type<S> && requirements::inner_step::options_type<S> &&
    requirements::inner_step::step<S> && requirements::inner_step::options<S> &&
    requirements::inner_step::move_constructible<S>;

/// Returns true if `S` is an inner step; otherwise, with `on_unmet::fail`,
/// stops compilation naming the first requirement `S` misses.
template <class S, on_unmet Unmet = on_unmet::fail>
consteval bool check_inner_step() {
  namespace r = requirements::inner_step;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!r::scalar_type<S>) {
    static_assert(r::scalar_type<S> || quiet,
                  "diloco::inner_step: member type `scalar_type` is missing or is not float or double");
    return !quiet;
  } else if constexpr (!r::options_type<S>) {
    static_assert(r::options_type<S> || quiet,
                  "diloco::inner_step: missing member type `options_type` (an aggregate of hyperparameters)");
    return !quiet;
  } else if constexpr (!r::step<S>) {
    static_assert(r::step<S> || quiet,
                  "diloco::inner_step: missing member `void step(std::span<scalar_type> params, "
                  "std::span<const scalar_type> grads)`");
    return !quiet;
  } else if constexpr (!r::options<S>) {
    static_assert(r::options<S> || quiet, "diloco::inner_step: missing member `options_type& options()`");
    return !quiet;
  } else if constexpr (!r::move_constructible<S>) {
    static_assert(r::move_constructible<S> || quiet,
                  "diloco::inner_step: must be move-constructible (the learner owns it)");
    return !quiet;
  } else {
    return true;
  }
}

}  // namespace diloco
