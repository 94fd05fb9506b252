// How the `check_*` functions of the concept headers answer for a type that
// misses a requirement.
#pragma once

namespace diloco {

/// Each concept `c` has a `check_c<T, on_unmet>()` that walks the same named
/// requirements as `c` itself, in the order its documentation numbers them,
/// and stops at the first one `T` misses.
enum class on_unmet {
  /// A `static_assert` naming the requirement and its expected signature stops
  /// compilation; the function then returns true, so that a caller's own
  /// `static_assert(check_c<T>())` adds no second, wordless error. This is
  /// what the runtime's templates use.
  fail,
  /// The function returns false, silently: whether `T` meets every
  /// requirement the check lists, which must equal `c<T>`
  /// (tests/concepts/agreement.cpp holds them to that).
  return_false,
};

}  // namespace diloco
