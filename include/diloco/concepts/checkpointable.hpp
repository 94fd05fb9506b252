// The Checkpointable concept: state that can be written to a stream and read
// back.
#pragma once

#include <concepts>
#include <istream>
#include <ostream>

#include "diloco/concepts/check.hpp"

namespace diloco {

/// The requirements of `checkpointable`, one named concept each.
namespace requirements::checkpointable {

/// 1. `c.save(out)` on a `const C` with a `std::ostream&`, returning `void`:
///    writes the whole state.
template <class C>
concept save = requires(const C& c, std::ostream& out) {
  { c.save(out) } -> std::same_as<void>;
};

/// 2. `c.load(in)` with a `std::istream&`, returning `void`: replaces the
///    state with one `save` wrote. On corrupt input it throws (the library's
///    own types throw `diloco::corrupt_state`) and leaves the state as it was.
template <class C>
concept load = requires(C& c, std::istream& in) {
  { c.load(in) } -> std::same_as<void>;
};

}  // namespace requirements::checkpointable

/// Requirements on a Checkpointable type `C` (examples: every outer optimizer,
/// `inner::sgd<T>`, `inner::adamw<T>`): requirements 1 and 2 above, so that a
/// syncer checkpoint can hold it. Outer optimizers must be checkpointable;
/// `outer::from_inner<S>` needs its inner step `S` to be.
template <class C>
concept checkpointable = requirements::checkpointable::save<C> && requirements::checkpointable::load<C>;

/// Returns true if `C` is checkpointable; otherwise, with `on_unmet::fail`, stops
/// compilation naming the first requirement `C` misses.
template <class C, on_unmet Unmet = on_unmet::fail>
consteval bool check_checkpointable() {
  namespace r = requirements::checkpointable;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!r::save<C>) {
    static_assert(r::save<C> || quiet, "diloco::checkpointable: missing member `void save(std::ostream&) const`");
    return !quiet;
  } else if constexpr (!r::load<C>) {
    static_assert(r::load<C> || quiet, "diloco::checkpointable: missing member `void load(std::istream&)`");
    return !quiet;
  } else {
    return true;
  }
}

}  // namespace diloco
