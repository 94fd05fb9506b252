// What a syncer keeps of a fragment and of each contribution in its open
// round, and how a contribution's payload is read: its norm, decoded, or
// summed into a merge as it is decoded.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/codec/blocks.hpp"
#include "diloco/protocol/buffer.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/runtime/fused_passes.hpp"
#include "diloco/runtime/syncer/screening.hpp"
#include "diloco/runtime/syncer/state.hpp"

namespace diloco::detail {

/// An accepted contribution waiting in its fragment's open round.
template <class T>
struct contribution_entry {
  std::uint32_t learner;
  std::uint32_t incarnation;
  std::uint64_t sequence;
  std::uint64_t base_revision;
  double weight;         ///< the merge weight of this contribution's own work
  double period_weight;  ///< the weight of a full period at its tokens per step
  double norm;           ///< ‖Δ‖₂ as it arrived
  double pace;           ///< `norm` per step^(3/4) of its work (steps capped at H): what clipping compares
  bool final;
  std::uint64_t tokens;  ///< of the work behind it, as the learner reported
  std::uint64_t steps;
  std::uint64_t credited_tokens;  ///< what of it counts as work done (`open_rounds::credit_of`)
  std::uint64_t credited_steps;
  time_point arrived;
  /// Δ as it arrived: `T`s at full precision, else the encoded bytes
  /// (`codec`, `block`), decoded when the round is merged.
  byte_buffer payload;
  codec_id codec = codec_of<T>;
  std::uint32_t block = 0;

  bool compressed() const noexcept { return codec != codec_of<T>; }
};

/// A fragment: what a checkpoint keeps of it (values, revision,
/// idempotency keys), and its open round.
template <class T>
struct fragment_state : fragment_record<T> {
  std::vector<contribution_entry<T>> round;
  time_point opened{};
  bool quorum = false;
  std::optional<time_point> deadline;
  detail::value_ring paces;  ///< recent published (clipped) paces: outer-gradient norms per step^(3/4)
};

/// Distinct learners in fragment `f`'s open round.
template <class T>
std::size_t contributors(const fragment_state<T>& f) {
  std::set<std::uint32_t> ids;
  for (const auto& c : f.round) ids.insert(c.learner);
  return ids.size();
}

/// Whether learner `id` is in fragment `f`'s open round.
template <class T>
bool contributed(const fragment_state<T>& f, std::uint32_t id) {
  return std::any_of(f.round.begin(), f.round.end(), [id](const auto& c) { return c.learner == id; });
}

/// ": learner 1/2 norm 0.5 weight 3, …" for a log line.
template <class T>
std::string describe_round(const fragment_state<T>& f) {
  std::string s = ":";
  for (const auto& c : f.round)
    s += " learner " + std::to_string(c.learner) + "/" + std::to_string(c.incarnation) + " norm " +
         std::to_string(c.norm) + " weight " + std::to_string(c.weight) + ";";
  return s;
}

/// Checks the outer gradient of contribution `m` (whose codec is
/// `readable` and size right) and sets `squared` to ‖Δ‖²; false if a value
/// is not finite or a compressed payload is malformed. A compressed one is
/// decoded for that without being kept: it stays compressed until its round
/// is merged. Cost: one pass over the payload.
template <class T>
bool payload_norm(const message& m, double& squared) {
  const auto& h = m.header;
  if (h.codec == codec_of<T>) return detail::finite_squared_norm(m.payload.template as<const T>(), squared);
  const codec_id f = h.codec;
  const auto n = static_cast<std::size_t>(h.element_count);
  if (!codec::valid(f, n, h.block, m.payload.bytes())) return false;
  double sum = 0.0;
  codec::decode(f, n, h.block, m.payload.bytes(), [&sum](std::size_t, float v) { sum += double(v) * double(v); });
  squared = sum;
  return std::isfinite(sum);
}

/// Adds `c ·` contribution `e`'s outer gradient to `out`, in one pass over
/// its payload (decoding it on the way when it is compressed). For a
/// `float` model, the fused pass of codec/kernels.hpp (fused_passes.hpp) on `threads` threads
/// (the merge policy's; the result does not depend on them).
template <class T>
void accumulate(const contribution_entry<T>& e, T c, std::span<T> out, unsigned threads) {
  if constexpr (std::is_same_v<T, float>) {
    if (codec::float_codec(e.codec))
      return detail::decode_accumulate(e.codec, e.block, e.payload.bytes(), c, out, threads);
  }
  if (!e.compressed()) {
    const T* d = e.payload.template as<const T>().data();
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += c * d[i];
    return;
  }
  T* o = out.data();
  codec::decode(e.codec, out.size(), e.block, e.payload.bytes(), [o, c](std::size_t i, float v) { o[i] += c * T(v); });
}

/// Contribution `e`'s outer gradient as `T`s: its payload, or the payload
/// decoded into `scratch` (`n` values).
template <class T>
std::span<const T> values_of(const contribution_entry<T>& e, std::vector<T>& scratch, std::size_t n) {
  if (!e.compressed()) return e.payload.template as<const T>();
  scratch.resize(n);
  codec::decode(e.codec, n, e.block, e.payload.bytes(), [&scratch](std::size_t i, float v) { scratch[i] = T(v); });
  return scratch;
}

}  // namespace diloco::detail
