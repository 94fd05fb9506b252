// A learner's saved state (its parameters, the inner step's state, per
// fragment the base, the counters since it and the error-feedback residual),
// written and read field by
// field under a versioned tag and a checksum (docs/design.md, "Learner
// checkpoints").
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/crc32c.hpp"
#include "diloco/runtime/config.hpp"
#include "diloco/serialize.hpp"

namespace diloco {

/// What a restarted learner keeps of one fragment.
template <std::floating_point T>
struct learner_fragment_record {
  /// No contribution of this fragment was in flight when it was saved: the
  /// counters hold only work the syncer has not been sent.
  bool resumable = false;
  std::uint64_t revision = 0;  ///< the global revision the base is
  std::vector<T> base;         ///< Θ_p at `revision`, packed
  std::uint64_t tokens = 0;    ///< trained since the base
  std::uint64_t steps = 0;
  /// With error feedback: what the codec has rounded away from this
  /// fragment's outer gradients and not sent yet, packed; empty without.
  std::vector<T> residual;
};

/// A learner state as saved and read back.
template <std::floating_point T>
struct learner_state {
  std::uint32_t learner = 0;
  std::uint32_t incarnation = 0;  ///< the incarnation that saved it
  std::vector<T> parameters;      ///< θ, flat
  /// The schedule it trained under; empty when saved before it joined (then
  /// there are no fragments either).
  std::optional<training_config> config;
  std::vector<learner_fragment_record<T>> fragments;  ///< one per fragment of `config`
  std::uint64_t local_step = 0;
  std::uint64_t tokens = 0;  ///< the learner's totals
  std::uint64_t steps = 0;
  std::string inner;  ///< what the inner step's `save` wrote
};

/// The version `write_learner_state` writes and `read_learner_state` reads:
/// 2 added each fragment's error-feedback residual. A learner refuses a
/// state of version 1 (`corrupt_state`) and starts afresh from the global
/// model: what it loses is its work since its last contribution.
inline constexpr std::uint32_t learner_state_version = 2;

/// Writes a learner state (little-endian): tag `LRNR` version 2, u64 body
/// length, the body, u32 CRC-32C of the body. The body: u32 learner id, u32
/// incarnation, u64 layout fingerprint, u64 parameter count, θ (u64 count,
/// then each value), u32 fragment count P (0: saved before joining; the
/// schedule and the fragments are then left out), u32 H, u32 τ, f64 α, u8
/// lock-step; per fragment u8 flags (1: resumable), u64 revision, the base
/// (u64 count, then each), u64 tokens, u64 steps, the residual (u64 count, 0
/// or the base's, then each); then u64 local step, u64
/// total tokens, u64 total steps, and the inner step's state (u64 length, its
/// bytes). Cost: the body is built in memory (one copy of θ, the bases and
/// the inner state and the residuals) and checksummed in one pass.
template <std::floating_point T>
void write_learner_state(std::ostream& out, const learner_state<T>& s, const parameter_layout& layout) {
  std::ostringstream body;
  serial::write_pod(body, s.learner);
  serial::write_pod(body, s.incarnation);
  serial::write_pod<std::uint64_t>(body, layout.fingerprint());
  serial::write_pod<std::uint64_t>(body, layout.size());
  serial::write_array(body, s.parameters);
  serial::write_pod<std::uint32_t>(body, s.config ? s.config->fragments : 0);
  if (s.config) {
    serial::write_pod(body, s.config->sync_period);
    serial::write_pod(body, s.config->overlap);
    serial::write_pod(body, s.config->mixing);
    serial::write_pod<std::uint8_t>(body, s.config->lock_step ? 1 : 0);
    for (const auto& f : s.fragments) {
      serial::write_pod<std::uint8_t>(body, f.resumable ? 1 : 0);
      serial::write_pod(body, f.revision);
      serial::write_array(body, f.base);
      serial::write_pod(body, f.tokens);
      serial::write_pod(body, f.steps);
      if (!f.residual.empty() && f.residual.size() != f.base.size())
        throw std::invalid_argument("diloco: learner state: a residual of another size than its fragment");
      serial::write_array(body, f.residual);
    }
  }
  serial::write_pod(body, s.local_step);
  serial::write_pod(body, s.tokens);
  serial::write_pod(body, s.steps);
  serial::write_array(body, std::span<const char>(s.inner));  // no copy of the inner state
  const std::string bytes = std::move(body).str();
  serial::write_tag(out, "LRNR", learner_state_version);
  serial::write_pod<std::uint64_t>(out, bytes.size());
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  serial::write_pod(out, crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))));
}

namespace detail {

/// `size` finite values (or none, if `may_be_empty`).
template <std::floating_point T>
std::vector<T> read_finite(std::istream& in, std::size_t size, const char* what, bool may_be_empty = false) {
  auto values = serial::read_array<T>(in, size, what);
  if (values.size() != size && !(may_be_empty && values.empty()))
    throw corrupt_state(std::string("diloco: learner state: ") + what + " has the wrong size");
  if (!std::all_of(values.begin(), values.end(), [](T v) { return std::isfinite(v); }))
    throw corrupt_state(std::string("diloco: learner state: ") + what + " is not finite");
  return values;
}

}  // namespace detail

/// Reads what `write_learner_state` wrote for learner `learner` of a model
/// with this layout. Throws `corrupt_state`, naming what is wrong, on a
/// truncated or corrupt state (checksum), one of another learner or model,
/// sizes that do not match, an impossible schedule or counters, or values
/// that are not all finite. Reads nothing after the checksum; memory grows
/// with what is actually read.
template <std::floating_point T>
learner_state<T> read_learner_state(std::istream& in, const parameter_layout& layout, std::uint32_t learner) {
  serial::expect_tag(in, "LRNR", learner_state_version);
  const auto bytes = serial::read_array<char>(in, serial::max_state_elements, "learner state");
  const auto crc = serial::read_pod<std::uint32_t>(in, "learner state checksum");
  if (crc != crc32c(std::as_bytes(std::span<const char>(bytes.data(), bytes.size()))))
    throw corrupt_state("diloco: learner state: checksum mismatch (corrupt)");
  std::istringstream body(std::string(bytes.begin(), bytes.end()));

  learner_state<T> s;
  s.learner = serial::read_pod<std::uint32_t>(body, "learner id");
  if (s.learner != learner)
    throw corrupt_state("diloco: learner state: saved by learner " + std::to_string(s.learner) + ", not " +
                        std::to_string(learner));
  s.incarnation = serial::read_pod<std::uint32_t>(body, "incarnation");
  if (serial::read_pod<std::uint64_t>(body, "layout fingerprint") != layout.fingerprint() ||
      serial::read_pod<std::uint64_t>(body, "parameter count") != layout.size())
    throw corrupt_state("diloco: learner state: saved for another model (layout)");
  s.parameters = detail::read_finite<T>(body, layout.size(), "parameters");
  const auto fragments = serial::read_pod<std::uint32_t>(body, "fragment count");
  if (fragments > layout.size()) throw corrupt_state("diloco: learner state: more fragments than parameters");
  if (fragments > 0) {
    training_config c;
    c.fragments = fragments;
    c.sync_period = serial::read_pod<std::uint32_t>(body, "sync period");
    c.overlap = serial::read_pod<std::uint32_t>(body, "overlap");
    c.mixing = serial::read_pod<double>(body, "mixing");
    const auto lock_step = serial::read_pod<std::uint8_t>(body, "lock-step");
    if (c.sync_period == 0 || c.overlap >= c.sync_period || !(c.mixing >= 0.0 && c.mixing < 1.0) || lock_step > 1)
      throw corrupt_state("diloco: learner state: impossible training configuration");
    c.lock_step = lock_step != 0;
    s.config = c;
    const auto plan = fragment_plan::balanced(layout, fragments);
    s.fragments.resize(fragments);
    for (std::uint32_t p = 0; p < fragments; ++p) {
      auto& f = s.fragments[p];
      const auto flags = serial::read_pod<std::uint8_t>(body, "fragment flags");
      if (flags > 1) throw corrupt_state("diloco: learner state: bad fragment flags");
      f.resumable = flags != 0;
      f.revision = serial::read_pod<std::uint64_t>(body, "fragment revision");
      // Empty for a fragment the learner did not keep (another rank's share).
      f.base = detail::read_finite<T>(body, plan[p].size(), "fragment base", !f.resumable);
      f.tokens = serial::read_pod<std::uint64_t>(body, "fragment tokens");
      f.steps = serial::read_pod<std::uint64_t>(body, "fragment steps");
      f.residual = detail::read_finite<T>(body, plan[p].size(), "error-feedback residual", true);
    }
  }
  s.local_step = serial::read_pod<std::uint64_t>(body, "local step");
  s.tokens = serial::read_pod<std::uint64_t>(body, "total tokens");
  s.steps = serial::read_pod<std::uint64_t>(body, "total steps");
  for (const auto& f : s.fragments)
    if (f.steps > s.local_step || f.steps > s.steps || f.tokens > s.tokens)
      throw corrupt_state("diloco: learner state: fragment counters beyond the learner's");
  const auto inner = serial::read_array<char>(body, serial::max_state_elements, "inner step state");
  s.inner.assign(inner.begin(), inner.end());
  if (body.peek() != std::istringstream::traits_type::eof())
    throw corrupt_state("diloco: learner state: bytes after the inner step's state");
  return s;
}

}  // namespace diloco
