// The OuterOptimizer concept: how the syncer applies a merged outer gradient.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "diloco/concepts/check.hpp"
#include "diloco/concepts/checkpointable.hpp"
#include "diloco/scalar.hpp"

namespace diloco {

/// The requirements of `outer_optimizer`, one named concept each, numbered as
/// `check_outer_optimizer` walks them.
namespace requirements::outer_optimizer {

/// 1. `typename O::scalar_type` — `float` or `double` (`diloco::scalar`).
template <class O>
concept scalar_type = requires {
  typename O::scalar_type;
}
&&scalar<typename O::scalar_type>;

/// 2. `typename O::options_type` — a plain aggregate of hyperparameters.
template <class O>
concept options_type = requires {
  typename O::options_type;
};

/// 3. `o.step(fragment, global, delta)` with a `std::uint32_t` fragment index,
///    the fragment's global parameters `std::span<scalar_type>` and the merged
///    outer gradient `std::span<const scalar_type>` (Δ = Θ_base − θ, so a
///    descent step subtracts it), returning `void`. State is per fragment and
///    created on the fragment's first step, when its size is known.
template <class O>
concept step = requires(O& o, std::uint32_t fragment, std::span<typename O::scalar_type> global,
                        std::span<const typename O::scalar_type> delta) {
  { o.step(fragment, global, delta) } -> std::same_as<void>;
};

/// 4. `o.reset(fragment)` with a `std::uint32_t` fragment index, returning
///    `void`: forgets that fragment's state, so that its next step starts as
///    its first did. The syncer calls it after refusing to publish a step the
///    optimizer has already taken (a non-finite or too large result).
template <class O>
concept reset = requires(O& o, std::uint32_t fragment) {
  { o.reset(fragment) } -> std::same_as<void>;
};

// 5 and 6. `o.save(std::ostream&) const` and `o.load(std::istream&)`: the
// whole state, so the syncer can checkpoint it (`checkpointable`, whose
// requirements `requirements::checkpointable::save` and `load` are these two).

/// 7. Move-constructible: the syncer takes it by value.
template <class O>
concept move_constructible = std::move_constructible<O>;

}  // namespace requirements::outer_optimizer

/// Requirements on an OuterOptimizer type `O`: requirements 1 to 7 above
/// (examples: `outer::sgd<T>`, `outer::nesterov<T>`,
/// `outer::delayed_nesterov<T>`, `outer::from_inner<S>`).
template <class O>
concept outer_optimizer =
    requirements::outer_optimizer::scalar_type<O> && requirements::outer_optimizer::options_type<O> &&
    requirements::outer_optimizer::step<O> && requirements::outer_optimizer::reset<O> && checkpointable<O> &&
    requirements::outer_optimizer::move_constructible<O>;

/// Returns true if `O` is an outer optimizer; otherwise, with
/// `on_unmet::fail`, stops compilation naming the first requirement `O`
/// misses.
template <class O, on_unmet Unmet = on_unmet::fail>
consteval bool check_outer_optimizer() {
  namespace r = requirements::outer_optimizer;
  namespace c = requirements::checkpointable;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!r::scalar_type<O>) {
    static_assert(r::scalar_type<O> || quiet,
                  "diloco::outer_optimizer: member type `scalar_type` is missing or is not float or double");
    return !quiet;
  } else if constexpr (!r::options_type<O>) {
    static_assert(r::options_type<O> || quiet,
                  "diloco::outer_optimizer: missing member type `options_type` (an aggregate of hyperparameters)");
    return !quiet;
  } else if constexpr (!r::step<O>) {
    static_assert(r::step<O> || quiet,
                  "diloco::outer_optimizer: missing member `void step(std::uint32_t fragment, "
                  "std::span<scalar_type> global, std::span<const scalar_type> delta)`");
    return !quiet;
  } else if constexpr (!r::reset<O>) {
    static_assert(r::reset<O> || quiet, "diloco::outer_optimizer: missing member `void reset(std::uint32_t fragment)`");
    return !quiet;
  } else if constexpr (!c::save<O>) {
    static_assert(c::save<O> || quiet, "diloco::outer_optimizer: missing member `void save(std::ostream&) const`");
    return !quiet;
  } else if constexpr (!c::load<O>) {
    static_assert(c::load<O> || quiet, "diloco::outer_optimizer: missing member `void load(std::istream&)`");
    return !quiet;
  } else if constexpr (!r::move_constructible<O>) {
    static_assert(r::move_constructible<O> || quiet,
                  "diloco::outer_optimizer: must be move-constructible (the syncer owns it)");
    return !quiet;
  } else {
    return true;
  }
}

}  // namespace diloco
