// The element types of parameters, gradients and payloads.
#pragma once

#include <concepts>

namespace diloco {

/// `float` or `double`: the element types the wire carries (`codec_id::f32`,
/// `codec_id::f64`), and so the only `scalar_type`s of a model, an inner step
/// or an outer optimizer the runtime can move between processes.
template <class T>
concept scalar = std::same_as<T, float> || std::same_as<T, double>;

/// `A` and `B` name the same `scalar_type` (a learner's model and inner step,
/// a syncer's outer optimizer and the merge it feeds). False, not an error,
/// when either has none.
template <class A, class B>
concept same_scalar_type = std::same_as<typename A::scalar_type, typename B::scalar_type>;

}  // namespace diloco
