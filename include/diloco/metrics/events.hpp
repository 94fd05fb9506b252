// What learners and the syncer report as it happens, for goodput and
// downtime accounting and for checking after a run that nothing accepted was
// lost (docs/chaos.md): every contribution sent, its verdict, every
// revision adopted or merged, every wait. Delivered through the
// `on_event`/`on_contribution` hooks of the options; `metrics/trace.hpp`
// writes them as JSON lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "diloco/metrics/counters.hpp"

namespace diloco {

/// One thing a learner did. Which fields mean something depends on `what`.
struct learner_event {
  enum class kind : std::uint8_t {
    joined,   ///< has every fragment of the global state; `revisions` holds them
    sent,     ///< a contribution left: `fragment`, `sequence`, `revision` (its base), `work`
    verdict,  ///< the syncer accepted (`accepted`) or refused (`reason`) `sequence`
    adopted,  ///< global `fragment` at `revision` was taken in; `work`: the unsent fragment-steps it threw away
    waited,   ///< a wait of `wait` ended (joining, or a lock-step wait for an answer)
  };
  kind what = kind::sent;
  std::uint32_t fragment = 0;
  std::uint64_t sequence = 0;
  std::uint64_t revision = 0;
  bool accepted = false;
  reject_reason reason = reject_reason::none;  ///< `verdict`: when refused
  std::vector<std::uint64_t> revisions{};      ///< `joined` only
  /// `sent`: the inner steps the contribution carries (its `steps` counter:
  /// fragment-steps, each inner step counts once per fragment); `adopted`:
  /// the fragment-steps of unsent work the adoption threw away (0 under the
  /// adoption rules that keep work).
  std::uint64_t work = 0;
  std::uint64_t steps = 0;                  ///< inner steps taken so far
  std::chrono::nanoseconds waited_total{};  ///< time spent waiting so far
  std::chrono::nanoseconds wait{};          ///< `waited`: this wait
  std::uint64_t epoch = 0;                  ///< `adopted`: the epoch of the syncer leadership that sent it
  /// `adopted`: CRC-32C of the update's payload as it arrived. Every learner
  /// given a revision gets the same bytes, so two CRCs for one fragment's
  /// revision mean it was published twice with different contents.
  std::uint32_t payload_crc = 0;
};

/// The syncer's verdict on one contribution.
struct contribution_event {
  std::uint32_t learner = 0;
  std::uint32_t incarnation = 0;
  std::uint64_t sequence = 0;
  std::uint32_t fragment = 0;
  std::uint64_t base_revision = 0;
  bool accepted = false;
  reject_reason reason = reject_reason::none;  ///< when refused
};

/// One contribution inside an outer update.
struct merged_contribution {
  std::uint32_t learner = 0;
  std::uint32_t incarnation = 0;
  std::uint64_t sequence = 0;
  std::uint64_t staleness = 0;  ///< revision before the merge − its base revision
};

/// Why the syncer refused to publish the result of a round.
enum class drop_reason : std::uint8_t {
  non_finite_merge,   ///< the merged outer gradient has a NaN or an infinity
  non_finite_result,  ///< the outer step produced a NaN or an infinity
  update_too_large,   ///< ‖Θ' − Θ‖ above `screening_options::max_update_ratio · ‖Θ‖`
};

constexpr std::string_view to_string(drop_reason r) noexcept {
  switch (r) {
    case drop_reason::non_finite_merge: return "non_finite_merge";
    case drop_reason::non_finite_result: return "non_finite_result";
    case drop_reason::update_too_large: return "update_too_large";
  }
  return "unknown";
}

/// What the syncer reports when it drops a round instead of publishing it.
struct drop_event {
  std::uint32_t fragment = 0;
  std::uint64_t revision = 0;  ///< the fragment's revision, unchanged
  drop_reason reason = drop_reason::non_finite_result;
  std::chrono::steady_clock::time_point at{};
  /// Who was in the round, with the L2 norm of each outer gradient as it
  /// arrived (before any clipping).
  std::vector<std::pair<merged_contribution, double>> contributions{};
};

}  // namespace diloco
