// The Model concept: what a learner needs from the user's model.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>

#include "diloco/concepts/check.hpp"
#include "diloco/concepts/memory_space.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/scalar.hpp"

namespace diloco {

/// What one forward/backward pass reports.
struct step_stats {
  double loss = 0.0;         ///< mean loss over the batch
  std::uint64_t tokens = 0;  ///< examples (or tokens) in the batch; weights the learner's contribution
};

/// The requirements of `model`, one named concept each, numbered as
/// `check_model` walks them.
namespace requirements::model {

/// 1. `typename M::scalar_type` — `float` or `double` (`diloco::scalar`).
template <class M>
concept scalar_type = requires {
  typename M::scalar_type;
}
&&scalar<typename M::scalar_type>;

/// 2. `typename M::batch_type` — whatever one inner step consumes.
template <class M>
concept batch_type = requires {
  typename M::batch_type;
};

/// 3. `m.layout()` on a `const M` — returns `const parameter_layout&` (names,
///    sizes, roles of its parameters), constant for the model's lifetime.
template <class M>
concept layout = requires(const M& m) {
  { m.layout() } -> std::same_as<const parameter_layout&>;
};

/// 4. `m.parameters()` — `std::span<scalar_type>` over all parameters, flat, in
///    layout order; the same memory for the model's lifetime (host memory,
///    or the memory of requirement 7).
template <class M>
concept parameters = requires(M& m) {
  { m.parameters() } -> std::same_as<std::span<typename M::scalar_type>>;
};

/// 5. `m.gradients()` — a span (convertible to `std::span<const scalar_type>`)
///    of the same size, holding the gradients of the last `compute_gradients`.
template <class M>
concept gradients = requires(M& m) {
  { m.gradients() } -> std::convertible_to<std::span<const typename M::scalar_type>>;
};

/// 6. `m.compute_gradients(batch)` with a `const batch_type&` — one forward and
///    backward pass that overwrites the gradients and returns `step_stats`. It
///    must not change the parameters.
template <class M>
concept compute_gradients = requires(M& m, const typename M::batch_type& batch) {
  { m.compute_gradients(batch) } -> std::same_as<step_stats>;
};

/// 7. Optional: `m.memory()` — returns a reference to a `memory_space` for
///    `scalar_type` (e.g. `diloco::cuda::device_memory`) when the parameters
///    and gradients are not host memory. The learner then keeps its
///    per-fragment buffers there and does its outer-loop passes through it;
///    the inner step must work on that memory too. Without it, host memory.
template <class M>
concept memory = !requires(M & m) {
  m.memory();
}
|| requires(M& m) {
  requires std::is_lvalue_reference_v<decltype(m.memory())>;
  requires diloco::memory_space < std::remove_cvref_t<decltype(m.memory())>,
  typename M::scalar_type > ;
};

}  // namespace requirements::model

/// Requirements on a Model type `M`: requirements 1 to 7 above (the
/// learner's; examples in tests/support/toy_model.hpp and examples/).
template <class M>
concept model = requirements::model::scalar_type<M> && requirements::model::batch_type<M> &&
    requirements::model::layout<M> && requirements::model::parameters<M> && requirements::model::gradients<M> &&
    requirements::model::compute_gradients<M> && requirements::model::memory<M>;

/// Returns true if `M` is a model; otherwise, with `on_unmet::fail`, stops
/// compilation naming the first requirement `M` misses.
template <class M, on_unmet Unmet = on_unmet::fail>
consteval bool check_model() {
  namespace r = requirements::model;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!r::scalar_type<M>) {
    static_assert(r::scalar_type<M> || quiet,
                  "diloco::model: member type `scalar_type` is missing or is not float or double");
    return !quiet;
  } else if constexpr (!r::batch_type<M>) {
    static_assert(r::batch_type<M> || quiet,
                  "diloco::model: missing member type `batch_type` (what one inner step consumes)");
    return !quiet;
  } else if constexpr (!r::layout<M>) {
    static_assert(r::layout<M> || quiet, "diloco::model: missing member `const parameter_layout& layout() const`");
    return !quiet;
  } else if constexpr (!r::parameters<M>) {
    static_assert(r::parameters<M> || quiet, "diloco::model: missing member `std::span<scalar_type> parameters()`");
    return !quiet;
  } else if constexpr (!r::gradients<M>) {
    static_assert(r::gradients<M> || quiet, "diloco::model: missing member `std::span<const scalar_type> gradients()`");
    return !quiet;
  } else if constexpr (!r::compute_gradients<M>) {
    static_assert(r::compute_gradients<M> || quiet,
                  "diloco::model: missing member `diloco::step_stats compute_gradients(const batch_type&)`");
    return !quiet;
  } else if constexpr (!r::memory<M>) {
    static_assert(r::memory<M> || quiet,
                  "diloco::model: `memory()` must return a reference to a diloco::memory_space for scalar_type "
                  "(check it with diloco::check_memory_space<S, T>())");
    return !quiet;
  } else {
    return true;
  }
}

}  // namespace diloco
