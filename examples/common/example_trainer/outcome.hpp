// What a run of an example trainer reports whatever its model (a trainer's
// outcome derives from `run_outcome` and adds its model's figures), and the
// JSON line a learner process prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <diloco/diloco.hpp>
#include <diloco_tools/json.hpp>
#include <example_trainer/settings.hpp>
#include <nlohmann/json.hpp>

namespace example_trainer {

using diloco_tools::six_digits;

struct run_outcome {
  std::optional<double> train_loss;  ///< the learners' training loss as of the last outer update (heartbeats)
  std::uint64_t outer_updates = 0;
  std::uint64_t inner_steps = 0;
  std::uint64_t contributions_merged = 0;
  std::uint64_t rejected = 0;
  std::uint64_t partial_rounds = 0;  ///< rounds merged without every learner (0 in a healthy synchronous run)
  std::uint64_t bytes_sent = 0;      ///< payload bytes learners → syncer (contributions, and states)
  std::uint64_t bytes_received = 0;  ///< payload bytes syncer → learners (updates)
  /// Where the learners' work went (docs/design.md, "Keeping every step"):
  /// inner steps computed (as the learners reported them to the syncer),
  /// fragment-steps merged into the global model, and their share, the
  /// compute efficiency; the learners' own account of the rest — sent,
  /// overwritten on adoption, refused by the syncer, unsent at the end — in
  /// fragment-steps, where the learners run in this process or this is one.
  std::uint64_t steps_computed = 0;
  std::uint64_t steps_merged = 0;
  std::optional<double> compute_efficiency;
  std::uint64_t steps_sent = 0;
  std::uint64_t steps_overwritten = 0;
  std::uint64_t steps_refused = 0;
  std::uint64_t steps_unsent = 0;
  double seconds = 0.0;          ///< wall time of training
  double virtual_seconds = 0.0;  ///< simulated time (simulator only)
  bool completed = true;
  std::string error;
  /// Role learner, a unit of several ranks: this process's rank, of `ranks`.
  std::optional<std::uint32_t> rank, ranks;

  /// The syncer's counters and figures this outcome reports. The payload
  /// bytes are what the syncer saw; a run with the learners in this process
  /// may count them at the learners instead (`take_learners`).
  template <class Syncer>
  void take(const Syncer& sync) {
    const diloco::syncer_metrics& m = sync.metrics();
    steps_computed = sync.steps_computed();
    steps_merged = m.steps_merged;
    compute_efficiency = sync.compute_efficiency();
    outer_updates = m.outer_updates;
    contributions_merged = m.contributions_merged;
    rejected = m.rejected_total();
    partial_rounds = m.partial_rounds;
    bytes_sent = m.payload_bytes_received;
    bytes_received = m.payload_bytes_sent;
  }

  /// The payload bytes every learner (pointers to) sent and received, as
  /// they counted them.
  template <class Learners>
  void take_learner_bytes(const Learners& learners) {
    bytes_sent = bytes_received = 0;
    for (const auto& l : learners) {
      bytes_sent += l->metrics().bytes_sent;
      bytes_received += l->metrics().bytes_received;
    }
  }

  /// Where every learner's (pointers to) work went, as they counted it.
  template <class Learners>
  void take_learner_work(const Learners& learners) {
    for (const auto& l : learners) take_learner_work(l->metrics());
  }

  /// Where one learner's work went (`learner_metrics`), added to this outcome's.
  void take_learner_work(const diloco::learner_metrics& m) {
    steps_sent += m.steps_sent;
    steps_overwritten += m.steps_overwritten;
    steps_refused += m.steps_refused;
    steps_unsent += m.steps_unsent;
  }
};

/// `compute_efficiency` as a JSON value: null when unknown.
inline nlohmann::ordered_json efficiency_json(const std::optional<double>& e) {
  return e ? nlohmann::ordered_json(six_digits(*e)) : nlohmann::ordered_json(nullptr);
}

/// The outer Nesterov step's rate and momentum (`nesterov_options_of`),
/// appended to a result line; null for data parallel, whose outer step is
/// AdamW at the run's inner learning rate.
inline void add_outer_fields(nlohmann::ordered_json& line, const run_settings& s) {
  const bool nesterov = s.run_mode != mode::data_parallel;
  const auto o = nesterov_options_of(s);
  line["outer_lr"] = nesterov ? nlohmann::ordered_json(six_digits(o.learning_rate)) : nlohmann::ordered_json(nullptr);
  line["outer_momentum"] = nesterov ? nlohmann::ordered_json(six_digits(o.momentum)) : nlohmann::ordered_json(nullptr);
}

/// The fields of `r` that say where the learners' work went (see
/// `run_outcome`), appended to a result line.
inline void add_work_fields(nlohmann::ordered_json& line, const run_outcome& r) {
  line["steps_computed"] = r.steps_computed;
  line["steps_merged"] = r.steps_merged;
  line["compute_efficiency"] = efficiency_json(r.compute_efficiency);
  line["steps_sent"] = r.steps_sent;
  line["steps_overwritten"] = r.steps_overwritten;
  line["steps_refused"] = r.steps_refused;
  line["steps_unsent"] = r.steps_unsent;
}

/// The result line of a learner process (role learner): which learner, its
/// inner steps (its local step) and those this process computed, where
/// their work went (fragment-steps sent, overwritten, refused, unsent), the
/// payload bytes it sent and received, its wall time.
inline nlohmann::ordered_json learner_line(const run_settings& s, const run_outcome& r) {
  nlohmann::ordered_json line{{"role", "learner"},
                              {"learner", s.learner_id},
                              {"adopt", diloco::name(s.adopt)},
                              {"inner_steps", r.inner_steps},
                              {"steps_computed", r.steps_computed},
                              {"steps_sent", r.steps_sent},
                              {"steps_overwritten", r.steps_overwritten},
                              {"steps_refused", r.steps_refused},
                              {"steps_unsent", r.steps_unsent},
                              {"bytes_sent", r.bytes_sent},
                              {"bytes_received", r.bytes_received},
                              {"seconds", six_digits(r.seconds)}};
  if (r.rank) {  // one line per rank of a unit; the bytes are the unit's
    line["rank"] = *r.rank;
    line["ranks"] = r.ranks.value_or(1);
  }
  return line;
}

}  // namespace example_trainer
