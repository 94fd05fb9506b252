// The syncer's saved state (global fragments, revisions, idempotency keys, the
// learner table and the counters), written and read field by field under a
// versioned tag.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <map>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "diloco/metrics/counters.hpp"
#include "diloco/serialize.hpp"

namespace diloco {

/// A contribution's idempotency key: (learner, incarnation, base revision).
using idempotency_key = std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>;

/// What a restarted syncer keeps of one fragment.
template <std::floating_point T>
struct fragment_record {
  std::uint64_t revision = 0;
  std::vector<T> global;  ///< the global parameters, packed
  /// Idempotency keys not yet stale, with the sequence number of the
  /// contribution accepted under each.
  std::map<idempotency_key, std::uint64_t> seen;
};

/// What a restarted syncer keeps of one learner. Whether it is live is not
/// kept: every restored learner is welcomed again when it speaks.
struct learner_record {
  std::uint32_t incarnation = 0;
  bool left = false;
  bool quarantined = false;
  std::uint32_t strikes = 0;  ///< consecutive contributions clipped or refused for their content
  /// Inner steps its current incarnation reported having computed
  /// (heartbeat, leave): the largest report, as the learner sent it. Kept so
  /// that a restarted syncer's compute efficiency still counts the work
  /// behind what it merged before the restart.
  std::uint64_t steps_reported = 0;
  /// Per fragment: the weight a full period (H steps) of this learner's work
  /// would have, at the tokens per step of its last regular contribution;
  /// NaN until then.
  std::vector<double> expected_weight;
};

/// A contribution accepted (and acknowledged) but not merged yet, as a
/// checkpoint keeps it: who sent it, against which base, the work behind it
/// and its outer gradient. `Values` is `std::span<const T>` when written and
/// `std::vector<T>` when read back.
template <class Values>
struct saved_contribution {
  std::uint32_t learner = 0;
  std::uint32_t incarnation = 0;
  std::uint64_t sequence = 0;
  std::uint64_t base_revision = 0;
  std::uint64_t tokens = 0;
  std::uint64_t steps = 0;
  bool final = false;
  Values values{};
};

/// A syncer state as read back (the outer optimizer's state follows it in
/// the stream and is read by the optimizer).
template <std::floating_point T>
struct syncer_state {
  std::vector<fragment_record<T>> fragments;
  std::map<std::uint32_t, learner_record> learners;
  syncer_metrics metrics;
  /// Per fragment, its open round (empty in a version 3 or 4 state, which
  /// did not keep them).
  std::vector<std::vector<saved_contribution<std::vector<T>>>> rounds;
};

/// What a state must match to be read into a syncer: its model (layout
/// fingerprint and parameter count), the sizes of its fragments, and the
/// bound of its learner table.
struct syncer_state_shape {
  std::uint64_t layout_fingerprint = 0;
  std::uint64_t parameter_count = 0;
  std::vector<std::size_t> fragment_sizes;
  std::uint32_t max_learners = 0;
};

/// The version `write_syncer_state` writes. Versions 5 (no steps reported
/// per learner), 4 (also no open rounds) and 3 (also counters as one raw
/// struct, 22 counters and 25 refusal reasons) are still read.
inline constexpr std::uint32_t syncer_state_version = 6;

/// Writes a syncer state (little-endian): tag `SYNC` version 6; u64 layout
/// fingerprint, u64 parameter count, u32 fragment count; per fragment u64
/// revision, its values (u64 count, then each), u64 key count and per key u32
/// learner, u32 incarnation, u64 base revision, u64 sequence; u64 learner
/// count and per learner u32 id, u32 incarnation, u8 flags (1 left, 2
/// quarantined), u32 strikes, u64 steps reported, its expected weights (u64
/// count, then each as f64); the counters (`write_syncer_metrics`); then per fragment its open
/// round: u64 count and per contribution u32 learner, u32 incarnation, u64
/// sequence, u64 base revision, u64 tokens, u64 steps, u8 final, its values
/// (u64 count, then each). `Fragment` and `Learner` are the caller's own
/// records, which extend the ones saved here; `rounds[p]` lists fragment p's
/// open round. Cost: one pass over the parameters and the open rounds.
template <std::floating_point T, std::derived_from<fragment_record<T>> Fragment,
          std::derived_from<learner_record> Learner>
void write_syncer_state(std::ostream& out, std::uint64_t layout_fingerprint, std::uint64_t parameter_count,
                        const std::vector<Fragment>& fragments, const std::map<std::uint32_t, Learner>& learners,
                        const syncer_metrics& metrics,
                        const std::vector<std::vector<saved_contribution<std::span<const T>>>>& rounds) {
  serial::write_tag(out, "SYNC", syncer_state_version);
  serial::write_pod<std::uint64_t>(out, layout_fingerprint);
  serial::write_pod<std::uint64_t>(out, parameter_count);
  serial::write_pod(out, static_cast<std::uint32_t>(fragments.size()));
  for (const fragment_record<T>& f : fragments) {
    serial::write_pod(out, f.revision);
    serial::write_array(out, f.global);
    serial::write_pod<std::uint64_t>(out, f.seen.size());
    for (const auto& [key, sequence] : f.seen) {
      const auto& [learner, incarnation, base] = key;
      serial::write_pod(out, learner);
      serial::write_pod(out, incarnation);
      serial::write_pod(out, base);
      serial::write_pod(out, sequence);
    }
  }
  serial::write_pod<std::uint64_t>(out, learners.size());
  for (const auto& [id, entry] : learners) {
    const learner_record& l = entry;
    serial::write_pod(out, id);
    serial::write_pod(out, l.incarnation);
    serial::write_pod<std::uint8_t>(out, std::uint8_t((l.left ? 1 : 0) | (l.quarantined ? 2 : 0)));
    serial::write_pod(out, l.strikes);
    serial::write_pod(out, l.steps_reported);
    serial::write_array(out, l.expected_weight);
  }
  write_syncer_metrics(out, metrics);
  for (std::size_t p = 0; p < fragments.size(); ++p) {
    const auto none = std::span<const saved_contribution<std::span<const T>>>{};
    const auto round = p < rounds.size() ? std::span(rounds[p]) : none;
    serial::write_pod<std::uint64_t>(out, round.size());
    for (const auto& c : round) {
      serial::write_pod(out, c.learner);
      serial::write_pod(out, c.incarnation);
      serial::write_pod(out, c.sequence);
      serial::write_pod(out, c.base_revision);
      serial::write_pod(out, c.tokens);
      serial::write_pod(out, c.steps);
      serial::write_pod<std::uint8_t>(out, c.final ? 1 : 0);
      serial::write_array(out, c.values);
    }
  }
}

namespace detail {

/// The counters of a version 3 state: the struct as it was then, dumped raw
/// (11 counters, 25 refusal counts, 11 counters; all u64, no padding).
inline syncer_metrics read_syncer_metrics_v3(std::istream& in) {
  constexpr std::size_t before = 11, reasons = 25, after = 11;
  static_assert(before + after <= syncer_counter_count && reasons <= reject_reason_count);
  syncer_metrics m;
  for (std::size_t i = 0; i < before; ++i)
    m.*syncer_counter_fields[i] = serial::read_pod<std::uint64_t>(in, "counters");
  for (std::size_t r = 0; r < reasons; ++r) m.rejected[r] = serial::read_pod<std::uint64_t>(in, "counters");
  for (std::size_t i = before; i < before + after; ++i)
    m.*syncer_counter_fields[i] = serial::read_pod<std::uint64_t>(in, "counters");
  return m;
}

}  // namespace detail

/// Reads what `write_syncer_state` wrote (version 6, 5, 4 or 3) for a syncer of
/// `shape`. Throws `corrupt_state`, naming what is wrong, on a truncated or
/// corrupt state, one of another model or fragment count, one with more
/// learners than `shape.max_learners`, parameters or open contributions that
/// are not all finite, or an open contribution of a learner not in the table,
/// without work, of the wrong size, or from the future.
/// Memory grows with what is actually read.
template <std::floating_point T>
syncer_state<T> read_syncer_state(std::istream& in, const syncer_state_shape& shape) {
  char tag[4] = {};
  if (!in.read(tag, 4)) throw corrupt_state("diloco: truncated state, expected tag SYNC");
  if (std::string(tag, 4) != "SYNC") throw corrupt_state("diloco: state tag mismatch, expected SYNC");
  const auto version = serial::read_pod<std::uint32_t>(in, "format version");
  if (version < 3 || version > syncer_state_version)
    throw corrupt_state("diloco: unsupported state version " + std::to_string(version) + " for SYNC (reads 3 to " +
                        std::to_string(syncer_state_version) + ")");
  if (serial::read_pod<std::uint64_t>(in, "layout fingerprint") != shape.layout_fingerprint ||
      serial::read_pod<std::uint64_t>(in, "parameter count") != shape.parameter_count)
    throw corrupt_state("diloco: the checkpoint is of another model");
  if (serial::read_pod<std::uint32_t>(in, "fragment count") != shape.fragment_sizes.size())
    throw corrupt_state("diloco: the checkpoint has another fragment count");
  syncer_state<T> state;
  state.fragments.resize(shape.fragment_sizes.size());
  for (std::size_t p = 0; p < state.fragments.size(); ++p) {
    auto& f = state.fragments[p];
    const std::size_t size = shape.fragment_sizes[p];
    f.revision = serial::read_pod<std::uint64_t>(in, "revision");
    f.global = serial::read_array<T>(in, size, "global fragment");
    if (f.global.size() != size) throw corrupt_state("diloco: a checkpointed fragment has the wrong size");
    if (!std::all_of(f.global.begin(), f.global.end(), [](T v) { return std::isfinite(v); }))
      throw corrupt_state("diloco: a checkpointed fragment is not finite");
    const auto keys = serial::read_pod<std::uint64_t>(in, "idempotency key count");
    if (keys > (std::uint64_t{1} << 32)) throw corrupt_state("diloco: implausible idempotency key count");
    for (std::uint64_t k = 0; k < keys; ++k) {
      const auto learner = serial::read_pod<std::uint32_t>(in, "key learner");
      const auto incarnation = serial::read_pod<std::uint32_t>(in, "key incarnation");
      const auto base = serial::read_pod<std::uint64_t>(in, "key base revision");
      const auto sequence = serial::read_pod<std::uint64_t>(in, "key sequence");
      f.seen.emplace(idempotency_key{learner, incarnation, base}, sequence);
    }
  }
  const auto count = serial::read_pod<std::uint64_t>(in, "learner count");
  if (count > shape.max_learners) throw corrupt_state("diloco: more learners than max_learners");
  for (std::uint64_t i = 0; i < count; ++i) {
    const auto id = serial::read_pod<std::uint32_t>(in, "learner id");
    auto& l = state.learners[id];
    l.incarnation = serial::read_pod<std::uint32_t>(in, "learner incarnation");
    const auto flags = serial::read_pod<std::uint8_t>(in, "learner flags");
    if (flags > 3) throw corrupt_state("diloco: bad learner flags");
    l.left = (flags & 1) != 0;
    l.quarantined = (flags & 2) != 0;
    l.strikes = serial::read_pod<std::uint32_t>(in, "learner strikes");
    if (version >= 6) l.steps_reported = serial::read_pod<std::uint64_t>(in, "learner steps reported");
    l.expected_weight = serial::read_array<double>(in, state.fragments.size(), "expected weights");
    if (l.expected_weight.size() != state.fragments.size())
      throw corrupt_state("diloco: expected weights of the wrong size");
  }
  state.metrics = version == 3 ? detail::read_syncer_metrics_v3(in) : read_syncer_metrics(in);
  state.rounds.resize(state.fragments.size());
  if (version < 5) return state;
  for (std::size_t p = 0; p < state.fragments.size(); ++p) {
    const auto size_of_round = serial::read_pod<std::uint64_t>(in, "open round size");
    if (size_of_round > std::uint64_t{shape.max_learners} * 64)
      throw corrupt_state("diloco: implausible open round size " + std::to_string(size_of_round));
    for (std::uint64_t i = 0; i < size_of_round; ++i) {
      saved_contribution<std::vector<T>> c;
      c.learner = serial::read_pod<std::uint32_t>(in, "open contribution learner");
      c.incarnation = serial::read_pod<std::uint32_t>(in, "open contribution incarnation");
      c.sequence = serial::read_pod<std::uint64_t>(in, "open contribution sequence");
      c.base_revision = serial::read_pod<std::uint64_t>(in, "open contribution base revision");
      c.tokens = serial::read_pod<std::uint64_t>(in, "open contribution tokens");
      c.steps = serial::read_pod<std::uint64_t>(in, "open contribution steps");
      const auto final = serial::read_pod<std::uint8_t>(in, "open contribution flags");
      if (final > 1) throw corrupt_state("diloco: bad open contribution flags");
      c.final = final == 1;
      const std::size_t size = shape.fragment_sizes[p];
      c.values = serial::read_array<T>(in, size, "open contribution");
      if (c.values.size() != size) throw corrupt_state("diloco: an open contribution has the wrong size");
      if (!std::all_of(c.values.begin(), c.values.end(), [](T v) { return std::isfinite(v); }))
        throw corrupt_state("diloco: an open contribution is not finite");
      if (c.steps == 0) throw corrupt_state("diloco: an open contribution without work");
      if (c.base_revision > state.fragments[p].revision)
        throw corrupt_state("diloco: an open contribution against a future revision");
      const auto l = state.learners.find(c.learner);
      if (l == state.learners.end() || l->second.incarnation < c.incarnation)
        throw corrupt_state("diloco: an open contribution of a learner not in the table");
      state.rounds[p].push_back(std::move(c));
    }
  }
  return state;
}

}  // namespace diloco
