// The Model concept: what a learner needs from the user's model.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>

#include "diloco/params/layout.hpp"

namespace diloco {

/// What one forward/backward pass reports.
struct step_stats {
  double loss = 0.0;         ///< mean loss over the batch
  std::uint64_t tokens = 0;  ///< examples (or tokens) in the batch; weights the learner's contribution
};

/// Requirements on a Model type `M`:
///
/// 1. `typename M::scalar_type` — `float` or `double`.
/// 2. `typename M::batch_type` — whatever one inner step consumes.
/// 3. `m.layout()` on a `const M` — returns `const parameter_layout&` (names,
///    sizes, roles of its parameters), constant for the model's lifetime.
/// 4. `m.parameters()` — `std::span<scalar_type>` over all parameters, flat, in
///    layout order; the same memory for the model's lifetime.
/// 5. `m.gradients()` — a span (convertible to `std::span<const scalar_type>`) of
///    the same size, holding the gradients of the last `compute_gradients`.
/// 6. `m.compute_gradients(batch)` with a `const batch_type&` — one forward and
///    backward pass that overwrites the gradients and returns `step_stats`. It
///    must not change the parameters.
template <class M>
concept model = requires(M& m, const M& cm, const typename M::batch_type& batch) {
  typename M::scalar_type;
  typename M::batch_type;
  { cm.layout() } -> std::same_as<const parameter_layout&>;
  { m.parameters() } -> std::same_as<std::span<typename M::scalar_type>>;
  { m.gradients() } -> std::convertible_to<std::span<const typename M::scalar_type>>;
  { m.compute_gradients(batch) } -> std::same_as<step_stats>;
};

namespace detail {

/// Fails compilation with a message naming the first requirement `M` misses.
template <class M>
consteval bool check_model() {
  static_assert(requires { typename M::scalar_type; },
                "diloco::model: missing member type `scalar_type` (float or double)");
  static_assert(requires { typename M::batch_type; },
                "diloco::model: missing member type `batch_type` (what one inner step consumes)");
  static_assert(requires(const M& m) { { m.layout() } -> std::same_as<const parameter_layout&>; },
                "diloco::model: missing member `const parameter_layout& layout() const`");
  if constexpr (requires { typename M::scalar_type; }) {
    using T = typename M::scalar_type;
    static_assert(std::is_floating_point_v<T>, "diloco::model: `scalar_type` must be float or double");
    static_assert(requires(M& m) { { m.parameters() } -> std::same_as<std::span<T>>; },
                  "diloco::model: missing member `std::span<scalar_type> parameters()`");
    static_assert(requires(M& m) { { m.gradients() } -> std::convertible_to<std::span<const T>>; },
                  "diloco::model: missing member `std::span<const scalar_type> gradients()`");
    if constexpr (requires { typename M::batch_type; })
      static_assert(requires(M& m, const typename M::batch_type& b) {
                      { m.compute_gradients(b) } -> std::same_as<step_stats>;
                    },
                    "diloco::model: missing member `diloco::step_stats compute_gradients(const batch_type&)`");
  }
  return true;
}

}  // namespace detail
}  // namespace diloco
