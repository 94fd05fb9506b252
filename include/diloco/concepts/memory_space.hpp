// The MemorySpace concept: where a model's parameters live, and the learner's
// outer-loop passes over them, done there.
//
// A learner touches its model's parameters θ outside the inner step only in
// a few passes per fragment: encoding the outer gradient `base − θ` for the
// wire, taking θ_p as the new base after a send, adopting a global fragment
// that arrived, and the copies of checkpoints. A memory space does those passes where θ lives, and keeps the
// learner's per-fragment buffers (the base Θ_p and the error-feedback
// residual) there too. Host memory is `host_memory`
// (runtime/host_memory.hpp); `diloco::cuda::device_memory`
// (cuda/memory_space.cuh) runs them as CUDA kernels on the device, so that
// the only bytes to cross between host and device are those on the wire.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "diloco/concepts/check.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/protocol/message.hpp"

namespace diloco {

/// How a learner adopts a global fragment Θ_p into its parameters θ_p. In
/// every case the base becomes Θ_p.
enum class adoption : std::uint8_t {
  overwrite,  ///< θ_p ← Θ_p (the first state, a resync)
  mix,        ///< θ_p ← α·θ_p + (1−α)·Θ_p (a merged revision, α > 0; `mixing_element`)
  keep,       ///< θ_p unchanged (a restarted learner resuming the work it saved)
  /// θ_p ← θ_p + (1−α)·(Θ_p − base): the work since the old base kept, and
  /// the global value's move followed by 1 − α (`adoption_rule::rebase`;
  /// α = 0: θ_p ← Θ_p + (θ_p − base)), rounded as `local_work_element` and
  /// `add_global_element` say.
  rebase,
};

/// The requirements of `memory_space<S, T>` for a model of `T`s, one named
/// concept each, numbered as `check_memory_space` walks them. In what
/// follows a `slices` argument is a fragment's `fragment_slice`s; `theta` is
/// the model's whole parameter span, in this memory; a buffer holds a
/// fragment packed (`fragment_plan`); `host` spans are host memory.
namespace requirements::memory_space {

/// 1. `typename S::template buffer<T>` — memory of this space holding `T`s,
///    with `data()` (a pointer into this memory, never dereferenced by the
///    learner) and `size()`; `s.template allocate<T>(n)` returns one of n
///    zeros. Move-constructible: the learner keeps one per fragment.
template <class S, class T>
concept buffer = requires(S& s, std::size_t n, const typename S::template buffer<T>& b) {
  { s.template allocate<T>(n) } -> std::same_as<typename S::template buffer<T>>;
  { b.data() } -> std::convertible_to<const T*>;
  { b.size() } -> std::convertible_to<std::size_t>;
  requires std::move_constructible<typename S::template buffer<T>>;
};

/// 2. `s.encode_delta(codec, block, slices, theta, base, residual, out)`
///    returning `bool` — the outer gradient `Δ = base − θ_p` (plus
///    `*residual` when `residual` is not null: error feedback) written in
///    `codec` (blocks of `block` values) into `out`, host bytes of exactly
///    `payload::size(codec, n, block)`. With a residual, it becomes what the
///    codec rounded away, `Δ − decode(out)`. False, with `out` not to be
///    sent, if a value of Δ is not finite. The bytes and residual must be
///    those of `host_memory` for the same values, bit for bit.
template <class S, class T>
concept encode_delta = requires(S& s, codec_id c, std::uint32_t block, std::span<const fragment_slice> slices,
                                std::span<const T> theta, const typename S::template buffer<T>& base,
                                typename S::template buffer<T>* residual, std::span<std::byte> out) {
  { s.encode_delta(c, block, slices, theta, base, residual, out) } -> std::same_as<bool>;
};

/// 3. `s.adopt(codec, block, payload, slices, theta, base, how, alpha)` —
///    `base ← decode(payload)` (host bytes that passed `payload::check`),
///    and θ_p as `how` says (`adoption`), with mixing factor `alpha`; a
///    rebase reads the old base first. The same bits as `host_memory`.
template <class S, class T>
concept adopt = requires(S& s, codec_id c, std::uint32_t block, std::span<const std::byte> payload,
                         std::span<const fragment_slice> slices, std::span<T> theta,
                         typename S::template buffer<T>& base, adoption how, T alpha) {
  { s.adopt(c, block, payload, slices, theta, base, how, alpha) } -> std::same_as<void>;
};

/// 4. `s.scatter(slices, base, theta)` — θ_p ← base, within this memory.
template <class S, class T>
concept scatter = requires(S& s, std::span<const fragment_slice> slices, const typename S::template buffer<T>& base,
                           std::span<T> theta) {
  { s.scatter(slices, base, theta) } -> std::same_as<void>;
};

/// 5. `s.gather(slices, theta, host)` — θ_p packed into host memory (the
///    initial state a learner sends a syncer that has none).
template <class S, class T>
concept gather = requires(S& s, std::span<const fragment_slice> slices, std::span<const T> theta, std::span<T> host) {
  { s.gather(slices, theta, host) } -> std::same_as<void>;
};

/// 6. `s.read(from, host)` and `s.write(host, to)` — copies of equal-sized
///    spans between this memory and host memory (checkpoints).
template <class S, class T>
concept copies = requires(S& s, std::span<const T> from, std::span<T> to) {
  { s.read(from, to) } -> std::same_as<void>;
  { s.write(from, to) } -> std::same_as<void>;
};

/// 7. `s.pack(slices, theta, base)` — base ← θ_p, within this memory (the
///    reverse of `scatter`: after a send, what was sent leaves the
///    learner's account).
template <class S, class T>
concept pack = requires(S& s, std::span<const fragment_slice> slices, std::span<const T> theta,
                        typename S::template buffer<T>& base) {
  { s.pack(slices, theta, base) } -> std::same_as<void>;
};

}  // namespace requirements::memory_space

/// Requirements on a memory space `S` for models of `T`s: 1 to 7 above
/// (`host_memory`; `diloco::cuda::device_memory`). Each operation is done by
/// the time it returns: the learner may send `out`, or write θ, right after.
template <class S, class T>
concept memory_space = requirements::memory_space::buffer<S, T> && requirements::memory_space::encode_delta<S, T> &&
    requirements::memory_space::adopt<S, T> && requirements::memory_space::scatter<S, T> &&
    requirements::memory_space::gather<S, T> && requirements::memory_space::copies<S, T> &&
    requirements::memory_space::pack<S, T>;

/// Returns true if `S` is a memory space for `T`s; otherwise, with
/// `on_unmet::fail`, stops compilation naming the first requirement missed.
template <class S, class T, on_unmet Unmet = on_unmet::fail>
consteval bool check_memory_space() {
  namespace r = requirements::memory_space;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!r::buffer<S, T>) {
    static_assert(r::buffer<S, T> || quiet,
                  "diloco::memory_space: missing member template `buffer<T>` (with data() and size()) or "
                  "`buffer<T> allocate<T>(std::size_t)`");
    return !quiet;
  } else if constexpr (!r::encode_delta<S, T>) {
    static_assert(r::encode_delta<S, T> || quiet,
                  "diloco::memory_space: missing member `bool encode_delta(codec_id, std::uint32_t block, "
                  "std::span<const fragment_slice>, std::span<const T> theta, const buffer<T>& base, "
                  "buffer<T>* residual, std::span<std::byte> out)`");
    return !quiet;
  } else if constexpr (!r::adopt<S, T>) {
    static_assert(r::adopt<S, T> || quiet,
                  "diloco::memory_space: missing member `void adopt(codec_id, std::uint32_t block, "
                  "std::span<const std::byte> payload, std::span<const fragment_slice>, std::span<T> theta, "
                  "buffer<T>& base, adoption, T alpha)`");
    return !quiet;
  } else if constexpr (!r::scatter<S, T>) {
    static_assert(r::scatter<S, T> || quiet,
                  "diloco::memory_space: missing member `void scatter(std::span<const fragment_slice>, "
                  "const buffer<T>& base, std::span<T> theta)`");
    return !quiet;
  } else if constexpr (!r::gather<S, T>) {
    static_assert(r::gather<S, T> || quiet,
                  "diloco::memory_space: missing member `void gather(std::span<const fragment_slice>, "
                  "std::span<const T> theta, std::span<T> host)`");
    return !quiet;
  } else if constexpr (!r::copies<S, T>) {
    static_assert(r::copies<S, T> || quiet,
                  "diloco::memory_space: missing members `void read(std::span<const T>, std::span<T> host)` "
                  "and `void write(std::span<const T> host, std::span<T>)`");
    return !quiet;
  } else if constexpr (!r::pack<S, T>) {
    static_assert(r::pack<S, T> || quiet,
                  "diloco::memory_space: missing member `void pack(std::span<const fragment_slice>, "
                  "std::span<const T> theta, buffer<T>& base)`");
    return !quiet;
  } else {
    return true;
  }
}

}  // namespace diloco
