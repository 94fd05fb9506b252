// A learner unit's checkpoints: every rank keeps its own `checkpoint_store`
// (one directory per rank), and the ranks resume together at a step they all
// saved (docs/units.md, "Checkpoints").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diloco/concepts/checkpointable.hpp"
#include "diloco/runtime/checkpoint.hpp"
#include "diloco/runtime/learner/checkpoint.hpp"
#include "diloco/runtime/unit.hpp"

namespace diloco {

/// Writes this rank's state (`learner::save`: θ, the inner step's state and
/// the outer state of the rank's own fragments, about 1/R of a one-process
/// learner's) as the next checkpoint of `store`, this rank's own, and
/// returns its sequence number (`save_learner_checkpoint`). Not collective,
/// but every rank calls it at the same local step (every N steps, say), so
/// that the ranks can resume together.
template <class Model, class InnerStep, class Transport, class Collective, class Data>
requires checkpointable<InnerStep> std::uint64_t save_unit_checkpoint(
    const unit_learner<Model, InnerStep, Transport, Collective, Data>& unit, checkpoint_store& store) {
  return save_learner_checkpoint(unit.rank_learner(), store);
}

/// Collective, before the unit joins: every rank resumes from its own
/// `store` at the newest step every rank saved intact, or none does
/// (`unit_learner::resume`, which says what it throws). Returns that local
/// step, or nothing. `skipped` receives a line for every torn or corrupt
/// file passed over.
template <class Model, class InnerStep, class Transport, class Collective, class Data>
requires checkpointable<InnerStep> std::optional<std::uint64_t> load_unit_checkpoint(
    unit_learner<Model, InnerStep, Transport, Collective, Data>& unit, const checkpoint_store& store,
    std::vector<std::string>* skipped = nullptr) {
  auto found =
      store.intact(unit_learner<Model, InnerStep, Transport, Collective, Data>::max_resume_candidates, skipped);
  std::vector<std::string> saved;
  saved.reserve(found.size());
  for (auto& c : found) saved.push_back(std::move(c.body));
  return unit.resume(saved);
}

}  // namespace diloco
