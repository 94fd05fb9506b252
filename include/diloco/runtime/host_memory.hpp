// Host memory as a learner's memory space: the outer-loop passes over a
// model whose parameters are ordinary host memory (every model that says
// nothing else; concepts/memory_space.hpp).
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "diloco/codec/blocks.hpp"
#include "diloco/concepts/memory_space.hpp"
#include "diloco/params/fragments.hpp"
#include "diloco/params/mixing.hpp"
#include "diloco/protocol/payload.hpp"
#include "diloco/runtime/fused_passes.hpp"
#include "diloco/scalar.hpp"

namespace diloco {

/// The memory space of a model whose parameters are host memory: buffers
/// are `std::vector`s and every pass is a loop on the calling thread.
/// Stateless. Its passes take any contiguous buffer of `T`s in host memory
/// (`Buffer`), so that another space whose memory the host can read reuses
/// them.
struct host_memory {
  template <class T>
  using buffer = std::vector<T>;

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n, T(0));
  }

  /// One pass reads θ_p (through its slices), the base and the residual and
  /// writes the encoded outer gradient, and, with error feedback, leaves in
  /// the residual what the codec rounded away. For `float` models it is the
  /// fused, vectorized pass of codec/kernels.hpp (bench/codecs; fused_passes.hpp), on the
  /// calling thread: a learner's other cores are training. For `double`
  /// models, a loop through `payload::encode`, then a second pass over the
  /// bytes for the residual.
  template <scalar T, class Buffer>
  bool encode_delta(codec_id c, std::uint32_t block, std::span<const fragment_slice> slices, std::span<const T> theta,
                    const Buffer& base, Buffer* residual, std::span<std::byte> out) const {
    if constexpr (std::is_same_v<T, float>) {
      if (codec::float_codec(c))
        return detail::encode_fragment_delta(
            c, block, slices, theta.data(), std::span<const float>(base.data(), base.size()),
            residual ? std::span<float>(residual->data(), residual->size()) : std::span<float>(), out);
    }
    const T* r = residual ? residual->data() : nullptr;
    if (!payload::encode<T>(c, block, base.size(), delta_reader<T>{slices, theta.data(), base.data(), r}, out))
      return false;
    if (residual) {
      auto value = delta_reader<T>{slices, theta.data(), base.data(), r};
      T* e = residual->data();
      codec::decode(c, base.size(), block, out, [&](std::size_t i, float decoded) { e[i] = value(i) - T(decoded); });
    }
    return true;
  }

  template <scalar T, class Buffer>
  void adopt(codec_id c, std::uint32_t block, std::span<const std::byte> payload,
             std::span<const fragment_slice> slices, std::span<T> theta, Buffer& base, adoption how, T alpha) const {
    if (how == adoption::rebase) apply(local_work_element<T>{T(1) - alpha}, slices, theta, base);
    double ignored = 0.0;
    [[maybe_unused]] const auto verdict =
        payload::decode<T>(c, block, payload, std::span<T>(base.data(), base.size()), ignored);
    assert(verdict == payload::verdict::ok);  // checked where it arrived
    if (how == adoption::overwrite) return scatter(slices, base, theta);
    if (how == adoption::keep) return;
    if (how == adoption::rebase) return apply(add_global_element<T>{T(1) - alpha}, slices, theta, base);
    apply(mixing_element<T>{alpha}, slices, theta, base);
  }

  template <scalar T, class Buffer>
  void scatter(std::span<const fragment_slice> slices, const Buffer& base, std::span<T> theta) const {
    const T* global = base.data();
    for (const auto& s : slices) std::copy_n(global + s.packed_offset, s.size, theta.data() + s.flat_offset);
  }

  template <scalar T>
  void gather(std::span<const fragment_slice> slices, std::span<const T> theta, std::span<T> host) const {
    for (const auto& s : slices) std::copy_n(theta.data() + s.flat_offset, s.size, host.data() + s.packed_offset);
  }

  template <scalar T, class Buffer>
  void pack(std::span<const fragment_slice> slices, std::span<const T> theta, Buffer& base) const {
    gather(slices, theta, std::span<T>(base.data(), base.size()));
  }

  template <scalar T>
  void read(std::span<const T> from, std::span<T> host) const {
    std::copy(from.begin(), from.end(), host.begin());
  }

  template <scalar T>
  void write(std::span<const T> host, std::span<T> to) const {
    std::copy(host.begin(), host.end(), to.begin());
  }

 private:
  /// `f(θ_p[i], buffer[i])` for every element of the fragment.
  template <class F, class T, class Buffer>
  static void apply(F f, std::span<const fragment_slice> slices, std::span<T> theta, const Buffer& buffer) {
    const T* packed = buffer.data();
    for (const auto& s : slices)
      for (std::size_t i = 0; i < s.size; ++i) f(theta[s.flat_offset + i], packed[s.packed_offset + i]);
  }

  /// Fragment p's outer gradient by packed index, `base − θ_p`, plus the
  /// residual of error feedback. Indexes are read in order (twice per block
  /// for a block-scaled codec), which the slice cursor follows.
  template <class T>
  struct delta_reader {
    std::span<const fragment_slice> slices;
    const T* theta;
    const T* base;
    const T* residual;
    std::size_t s = 0;
    T operator()(std::size_t i) {
      if (i < slices[s].packed_offset) s = 0;
      while (i >= slices[s].packed_offset + slices[s].size) ++s;
      const T delta = base[i] - theta[slices[s].flat_offset + (i - slices[s].packed_offset)];
      return residual ? delta + residual[i] : delta;
    }
  };
};

/// The memory space of model `M`: what its `memory()` returns
/// (requirement 7 of `model`), else `host_memory`.
template <class M>
struct model_memory {
  using type = host_memory;
};
template <class M>
requires requires(M& m) { m.memory(); }
struct model_memory<M> {
  using type = std::remove_cvref_t<decltype(std::declval<M&>().memory())>;
};
template <class M>
using memory_space_of = typename model_memory<M>::type;

static_assert(check_memory_space<host_memory, float>() && memory_space<host_memory, float>);
static_assert(check_memory_space<host_memory, double>() && memory_space<host_memory, double>);

}  // namespace diloco
