// Role learner with --ranks-per-unit R: one rank of a learner unit of R MPI
// ranks (docs/units.md), started by `mpirun -np R` (or `srun`). Each rank
// trains the whole transformer on its own windows, LibTorch's gradients
// averaged over the unit in place (as DDP averages them), and speaks for its
// share of the fragments to the syncer shards s with s mod R = r of the S
// shards `--endpoint` lists (S a multiple of R).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include <diloco/collective/mpi.hpp>
#include <diloco/runtime/unit.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>
#include <example_trainer/unit.hpp>

#include "trainer.hpp"

namespace text {

/// Role learner, unit of `s.ranks_per_unit` ranks: this process is rank r
/// of learner `s.learner_id`, sampling as learner `learner_id·R + r` of
/// `learners·R` would, `s.batch` windows per step, so a unit takes R·B
/// windows per step. Every rank returns its own result (`rank` set), whose
/// bytes are the unit's.
template <class MakeInner>
outcome learn_in_unit(const settings& s, const corpus& text, MakeInner make_inner) {
  using namespace diloco;
  using inner_type = std::invoke_result_t<MakeInner&, lm_model&>;
  example_trainer::unit_rank rank(s, s.ranks_per_unit);
  const std::uint32_t R = rank.size(), r = rank.rank();
  outcome out;
  if (rank.refused(out)) return out;
  lm_model model(s.dimensions, s.seed + 1000 + s.learner_id);
  sampler data(text, s.learners * R, s.learner_id * R + r, std::uint32_t(s.dimensions.context), s.seed, s.data);
  auto inner = make_inner(model);
  unit_learner<lm_model, inner_type, example_trainer::shard_transport, mpi::communicator> unit(
      model, rank.ranks(), rank.transport(), example_trainer::learner_options_for(s, s.learner_id), std::move(inner));
  const double speed = s.speed_of(s.learner_id);
  const auto started = std::chrono::steady_clock::now();
  const auto said = [&](const std::string& why) {
    return "learner " + std::to_string(s.learner_id) + " rank " + std::to_string(r) + ": " + why;
  };
  try {
    const auto error = rank.drive(
        unit, s.steps, 0.0,
        [&] {
          set_learning_rate(unit.rank_learner().inner(), learning_rate(s, unit.rank_learner().metrics().steps));
          return data.next(s.batch);
        },
        [&](const step_stats&) {
          if (speed < 1.0) std::this_thread::sleep_for(model.last_compute() * (1.0 / speed - 1.0));
        });
    if (!error.empty()) out.error = said(error);
  } catch (const std::exception& e) {
    out.error = said(e.what());
  }
  rank.report(unit, out, started);
  return out;
}

}  // namespace text
