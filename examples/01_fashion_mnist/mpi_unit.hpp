// Role learner with --ranks-per-unit R: one rank of a learner unit of R MPI
// ranks (docs/units.md). Started by `mpirun -np R` (or `srun`), each rank
// trains the whole model on its own share of the data, gradients averaged
// over the unit, and speaks for its share of the fragments to the syncer
// shards that own them: rank r to the shards s with s mod R = r of the S
// shards that `--endpoint` lists (S a multiple of R).
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
#include <vector>

#include <diloco/collective/mpi.hpp>
#include <diloco/metrics/trace.hpp>
#include <diloco/runtime/unit.hpp>
#include <diloco/runtime/unit_checkpoint.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>

#include "trainer.hpp"

namespace fashion {

/// Role learner, unit of `s.ranks_per_unit` ranks: this process is one rank
/// of learner `s.learner_id`. Rank r samples shard `learner_id·R + r` of
/// `learners·R` shards of the training set, `s.batch` examples per step, so a
/// unit takes R·B examples per step. Rank 0 writes the trace; every rank
/// returns its own result (`rank` set), whose bytes are the unit's, summed
/// over its ranks, and whose step counts are the rank's own share. A rank that dies ends the
/// unit: the others fail their next collective and return the error.
template <class Inner>
outcome learn_in_unit(const settings& s, const split& train_set, Inner inner) {
  using namespace diloco;
  int argc = 0;
  char** argv = nullptr;
  mpi::environment environment(argc, argv);
  mpi::communicator ranks;
  const auto R = static_cast<std::uint32_t>(ranks.size()), r = static_cast<std::uint32_t>(ranks.rank());
  outcome out;
  out.rank = r;
  if (R != s.ranks_per_unit) {
    out.error = "--ranks-per-unit " + std::to_string(s.ranks_per_unit) + " but MPI started " + std::to_string(R) +
                " rank" + (R == 1 ? "" : "s") + " (start the unit with mpirun -np " + std::to_string(s.ranks_per_unit) +
                " or srun --ntasks " + std::to_string(s.ranks_per_unit) + ")";
    return out;
  }
  const auto endpoints = split_endpoints(s.endpoint);
  const auto shards = static_cast<std::uint32_t>(endpoints.size());
  if (shards % R != 0) {
    out.error = "--endpoint names " + std::to_string(shards) + " syncer shard" + (shards == 1 ? "" : "s") +
                "; a unit of " + std::to_string(R) + " ranks needs a multiple of " + std::to_string(R) +
                " (rank r speaks to the shards s with s mod " + std::to_string(R) + " = r)";
    return out;
  }

  const auto security = example_trainer::client_security_for(s);
  zeromq::keep_large_blocks();
  ::zmq::context_t context;
  std::vector<std::unique_ptr<zeromq::client>> clients;
  std::vector<zeromq::client*> connections;
  for (std::uint32_t shard = r; shard < shards; shard += R) {
    clients.push_back(std::make_unique<zeromq::client>(context, endpoints[shard], s.learner_id, s.incarnation,
                                                       zeromq::socket_options{}, security));
    connections.push_back(clients.back().get());
  }
  sharded<zeromq::client> client(connections, shards);

  mlp model({784, 256, 256, 10}, s.seed);
  shard_sampler sampler(train_set, s.learners * R, s.learner_id * R + r, s.seed);
  auto options = example_trainer::learner_options_for(s, s.learner_id);
  std::optional<trace_writer> trace;
  if (!s.trace_file.empty() && r == 0) {
    trace.emplace(s.trace_file);
    options.on_event = [&trace, &s](const learner_event& e) { trace->learner(s.learner_id, s.incarnation, e); };
    trace->learner_line(s.learner_id, s.incarnation, "start", json_fields().add("pid", ::getpid()).add("ranks", R));
  }
  unit_learner<mlp, Inner, sharded<zeromq::client>, mpi::communicator> unit(model, ranks, client, options,
                                                                            std::move(inner));
  // Each rank its own store, DIR/rank-R; the ranks resume together at a
  // step every rank saved (docs/units.md, "Checkpoints").
  std::optional<checkpoint_store> checkpoints;
  if (!s.checkpoint_dir.empty()) {
    static_assert(checkpointable<Inner>, "learner checkpoints need a checkpointable inner step");
    checkpoints.emplace(std::filesystem::path(s.checkpoint_dir) / ("rank-" + std::to_string(r)));
    std::vector<std::string> skipped;
    try {
      if (const auto k = load_unit_checkpoint(unit, *checkpoints, &skipped))
        std::fprintf(stderr, "fashion_mnist learner %u rank %u: resuming from learner checkpoint at step %llu\n",
                     s.learner_id, r, static_cast<unsigned long long>(*k));
      else
        std::fprintf(stderr, "fashion_mnist learner %u rank %u: no step saved by every rank; not resuming\n",
                     s.learner_id, r);
    } catch (const std::exception& e) {
      out.error = "learner " + std::to_string(s.learner_id) + " rank " + std::to_string(r) + ": " + e.what();
      return out;
    }
    for (const auto& why : skipped)
      std::fprintf(stderr, "fashion_mnist learner %u rank %u: skipped checkpoint %s\n", s.learner_id, r, why.c_str());
  }
  const double speed = s.speed_of(s.learner_id);
  const auto stop_at = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(s.stop_at)));
  const auto started = std::chrono::steady_clock::now();
  const auto& m = unit.rank_learner().metrics();
  try {
    auto failed = [&](const std::string& why) {
      out.error = "learner " + std::to_string(s.learner_id) + " rank " + std::to_string(r) + ": " + why;
    };
    bool ended = false;
    for (std::uint64_t step = m.steps; step < steps_of(s, s.learner_id); ++step) {  // resumed: from its step
      if (s.stop_at > 0) {  // every rank stops at the same step: rank 0's clock decides
        std::array<double, 1> stop{std::chrono::system_clock::now() >= stop_at ? 1.0 : 0.0};
        if (auto e = ranks.broadcast(std::span<double>(stop), 0, clock::now() + std::chrono::seconds(60))) {
          failed(e.message());
          break;
        }
        if (stop[0] > 0) break;
      }
      const auto b = sampler.next(s.batch);
      const auto result = unit.step(b);
      if (result && checkpoints && m.steps % s.checkpoint_every == 0) save_unit_checkpoint(unit, *checkpoints);
      if (!result) {
        // The syncer ends the run through each rank's own shards: the unit
        // stopped because it ended if any rank saw the end.
        std::array<double, 1> any{unit.rank_learner().ended() ? 1.0 : 0.0};
        const bool agreed = !ranks.all_reduce(std::span<const double>(any), std::span<double>(any), reduce_op::sum,
                                              clock::now() + std::chrono::seconds(60));
        ended = agreed && any[0] > 0;
        if (!ended) failed(result.error().message());
        break;
      }
      if (speed < 1.0)
        std::this_thread::sleep_for(std::chrono::duration<double>(model.last_compute()) * (1.0 / speed - 1.0));
    }
    if (out.error.empty() && !ended) {
      unit.finish();
      if (unit.error()) failed(unit.error().message());
    }
  } catch (const std::exception& e) {
    out.error = "learner " + std::to_string(s.learner_id) + " rank " + std::to_string(r) + ": " + e.what();
  }
  out.completed = out.error.empty();
  out.inner_steps = unit.rank_learner().local_step();
  out.steps_computed = m.steps_computed;
  out.take_learner_work(m);
  // The unit's traffic: the sum over its ranks (a rank whose unit broke keeps its own).
  std::array<double, 2> bytes{double(m.bytes_sent), double(m.bytes_received)};
  if (out.completed && !ranks.all_reduce(std::span<const double>(bytes), std::span<double>(bytes), reduce_op::sum,
                                         clock::now() + std::chrono::seconds(60))) {
    out.bytes_sent = static_cast<std::uint64_t>(bytes[0]);
    out.bytes_received = static_cast<std::uint64_t>(bytes[1]);
  } else {
    out.bytes_sent = m.bytes_sent;
    out.bytes_received = m.bytes_received;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (trace) trace_stop(*trace, s, m);
  return out;
}

}  // namespace fashion
