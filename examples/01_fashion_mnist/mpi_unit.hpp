// Role learner with --ranks-per-unit R: one rank of a learner unit of R MPI
// ranks (docs/units.md). Started by `mpirun -np R` (or `srun`), each rank
// trains the whole model on its own share of the data, gradients averaged
// over the unit (on its GPU, over NCCL, in a GPU unit), and speaks for its
// share of the fragments to the syncer shards that own them: rank r to the
// shards s with s mod R = r of the S shards that `--endpoint` lists (S a
// multiple of R).
#pragma once

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <diloco/collective/mpi.hpp>
#include <diloco/metrics/trace.hpp>
#include <diloco/runtime/unit.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>
#include <example_trainer/unit.hpp>

#include "gpu.hpp"
#include "trainer.hpp"
#include "unit_member.hpp"

namespace fashion {

/// This process as a rank of a CPU unit: the `mlp` and `inner` on the
/// host, every collective over MPI.
template <class Inner>
std::unique_ptr<unit_member> make_cpu_unit_member(example_trainer::unit_rank& rank,
                                                  const diloco::learner_options& options, Inner inner,
                                                  std::uint64_t seed) {
  using unit = diloco::unit_learner<mlp, Inner, example_trainer::shard_transport, diloco::mpi::communicator>;
  return std::make_unique<unit_member_of<unit, mlp>>(
      std::make_unique<mlp>(std::vector<int>{784, 256, 256, 10}, seed), std::tuple<>{},
      [&](mlp& model) {
        return std::make_unique<unit>(model, rank.ranks(), rank.transport(), options, std::move(inner));
      },
      "cpu");
}

/// Role learner, unit of `s.ranks_per_unit` ranks: this process is one rank
/// of learner `s.learner_id`. Rank r samples shard `learner_id·R + r` of
/// `learners·R` shards of the training set, `s.batch` examples per step, so a
/// unit takes R·B examples per step. A unit below `--gpu-learners` trains on
/// GPUs, one per rank (gpu.hpp), the others on the CPU with `inner`. Every
/// rank traces its own events, with its rank (docs/chaos.md, "Learner
/// units"), and returns its own result (`rank` set), whose bytes are the
/// unit's, summed over its ranks, and whose step counts are the rank's own
/// share. A rank that dies ends the unit: the others fail their next
/// collective and return the error.
template <class Inner>
outcome learn_in_unit(const settings& s, const split& train_set, Inner inner) {
  using namespace diloco;
  example_trainer::unit_rank rank(s, s.ranks_per_unit);
  const std::uint32_t R = rank.size(), r = rank.rank();
  outcome out;
  if (rank.refused(out)) return out;
  shard_sampler sampler(train_set, s.learners * R, s.learner_id * R + r, s.seed);
  auto options = example_trainer::learner_options_for(s, s.learner_id);
  const bool on_gpu = s.learner_id < s.gpu_learners;
  std::optional<trace_writer> trace;
  if (!s.trace_file.empty()) {
    trace.emplace(s.trace_file);
    trace->unit_rank(r, R);
    options.on_event = [&trace, &s](const learner_event& e) { trace->learner(s.learner_id, s.incarnation, e); };
    trace->learner_line(s.learner_id, s.incarnation, "start",
                        json_fields().add("pid", ::getpid()).add("ranks", R).add("device", on_gpu ? "gpu" : "cpu"));
  }
  const auto said = [&](const std::string& why) {
    return "learner " + std::to_string(s.learner_id) + " rank " + std::to_string(r) + ": " + why;
  };
  std::unique_ptr<unit_member> unit;
  try {
    unit = on_gpu ? make_gpu_unit_member(rank.ranks(), rank.transport(), options, adamw_options_of(s), s.seed)
                  : make_cpu_unit_member(rank, options, std::move(inner), s.seed);
  } catch (const std::exception& e) {
    out.error = said(e.what());
    return out;
  }
  // Each rank its own store, DIR/rank-R; the ranks resume together at a
  // step every rank saved (docs/units.md, "Checkpoints").
  std::optional<checkpoint_store> checkpoints;
  if (!s.checkpoint_dir.empty()) {
    checkpoints.emplace(std::filesystem::path(s.checkpoint_dir) / ("rank-" + std::to_string(r)));
    std::vector<std::string> skipped;
    try {
      if (const auto k = unit->load_checkpoint(*checkpoints, &skipped))
        std::fprintf(stderr, "fashion_mnist learner %u rank %u: resuming from learner checkpoint at step %llu\n",
                     s.learner_id, r, static_cast<unsigned long long>(*k));
      else
        std::fprintf(stderr, "fashion_mnist learner %u rank %u: no step saved by every rank; not resuming\n",
                     s.learner_id, r);
    } catch (const std::exception& e) {
      out.error = said(e.what());
      return out;
    }
    for (const auto& why : skipped)
      std::fprintf(stderr, "fashion_mnist learner %u rank %u: skipped checkpoint %s\n", s.learner_id, r, why.c_str());
  }
  const double speed = s.speed_of(s.learner_id);
  const auto started = std::chrono::steady_clock::now();
  const auto& m = unit->metrics();
  try {
    const auto error = rank.drive(
        *unit, steps_of(s, s.learner_id), s.stop_at, [&] { return sampler.next(s.batch); },
        [&](const step_stats&) {
          if (checkpoints && m.steps % s.checkpoint_every == 0) unit->save_checkpoint(*checkpoints);
          if (speed < 1.0)
            std::this_thread::sleep_for(std::chrono::duration<double>(unit->last_compute()) * (1.0 / speed - 1.0));
        });
    if (!error.empty()) out.error = said(error);
  } catch (const std::exception& e) {
    out.error = said(e.what());
  }
  rank.report(*unit, out, started);
  if (trace) trace_stop(*trace, s, m);
  return out;
}

}  // namespace fashion
