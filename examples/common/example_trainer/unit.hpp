// One rank of a learner unit of R MPI ranks as the example trainers run one
// (`--ranks-per-unit R`, docs/units.md): MPI for the unit's collectives, and
// this rank's ZeroMQ connections to the syncer shards it speaks to — the
// shards s with s mod R = r of the comma-separated `--endpoint` list. The
// trainers bring the model, the data and the inner step; this is the rest.
// Included only where diloco::mpi is built.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <diloco/collective/mpi.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>

#include "outcome.hpp"
#include "processes.hpp"
#include "settings.hpp"

namespace example_trainer {

/// This process as rank r of learner `s.learner_id`'s unit of R ranks: MPI
/// started (or joined), the unit's communicator, and the connections to
/// this rank's shards as one transport. Check `refusal()` first: a unit
/// that cannot run (MPI started another number of ranks than R, or the
/// shards are not a multiple of R) has no transport.
class unit_rank {
 public:
  unit_rank(const run_settings& s, std::uint32_t ranks_per_unit) : environment_(no_argc_, no_argv_) {
    const auto R = size(), r = rank();
    if (R != ranks_per_unit) {
      refusal_ = "--ranks-per-unit " + std::to_string(ranks_per_unit) + " but MPI started " + std::to_string(R) +
                 " rank" + (R == 1 ? "" : "s") + " (start the unit with mpirun -np " + std::to_string(ranks_per_unit) +
                 " or srun --ntasks " + std::to_string(ranks_per_unit) + ")";
      return;
    }
    const auto shards = static_cast<std::uint32_t>(split_endpoints(s.endpoint).size());
    if (shards % R != 0) {
      refusal_ = "--endpoint names " + std::to_string(shards) + " syncer shard" + (shards == 1 ? "" : "s") +
                 "; a unit of " + std::to_string(R) + " ranks needs a multiple of " + std::to_string(R) +
                 " (rank r speaks to the shards s with s mod " + std::to_string(R) + " = r)";
      return;
    }
    links_.emplace(s, r, R);
  }

  /// Why this unit cannot run, if it cannot.
  const std::optional<std::string>& refusal() const noexcept { return refusal_; }

  /// Whether this unit cannot run; if so, `out` says why, for this rank.
  bool refused(run_outcome& out) const {
    if (!refusal_) return false;
    out.rank = rank();
    out.ranks = size();
    out.error = *refusal_;
    out.completed = false;
    return true;
  }
  std::uint32_t rank() const noexcept { return static_cast<std::uint32_t>(ranks_.rank()); }
  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(ranks_.size()); }
  diloco::mpi::communicator& ranks() noexcept { return ranks_; }
  /// This rank's shards. Precondition: no `refusal()`.
  shard_transport& transport() noexcept { return links_->transport(); }

  /// Collective: whether the unit stops now, by rank 0's clock against
  /// `stop_at` (seconds since the epoch; 0: never), so that every rank stops
  /// at the same step. Throws `std::system_error` if the broadcast fails.
  bool stop_now(double stop_at) {
    if (stop_at <= 0) return false;
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::array<double, 1> stop{now >= stop_at ? 1.0 : 0.0};
    if (auto e = ranks_.broadcast(std::span<double>(stop), 0, deadline()))
      throw std::system_error(e, "the unit's stop broadcast");
    return stop[0] > 0;
  }

  /// Collective: whether any rank's learner saw the syncer end the run.
  template <class Unit>
  bool ended_anywhere(Unit& unit) {
    std::array<double, 1> any{unit.rank_learner().ended() ? 1.0 : 0.0};
    return !ranks_.all_reduce(std::span<const double>(any), std::span<double>(any), diloco::reduce_op::sum,
                              deadline()) &&
           any[0] > 0;
  }

  /// Steps `unit` until its learner has taken `steps` steps (from where a
  /// restored one stands), then finishes it. Before each step the unit
  /// stops if `stop_at` has passed; `next()` gives this rank's batch and
  /// `after(result)` runs after each step (a checkpoint, a slowdown). The
  /// syncer ending the run ends it normally. Returns the error, if any.
  template <class Unit, class Next, class After>
  std::string drive(Unit& unit, std::uint64_t steps, double stop_at, Next&& next, After&& after) {
    const auto& m = unit.rank_learner().metrics();
    for (std::uint64_t step = m.steps; step < steps; ++step) {
      if (stop_now(stop_at)) break;
      const auto result = unit.step(next());
      if (!result) {
        // The syncer ends the run through each rank's own shards.
        if (ended_anywhere(unit)) return {};
        return result.error().message();
      }
      after(*result);
    }
    unit.finish();
    return unit.error() ? unit.error().message() : std::string();
  }

  /// This rank's result, `out.error` set: whether it completed, its
  /// learner's steps and work, the unit's traffic, summed over its ranks (a
  /// rank whose unit broke keeps its own), and the wall time since `started`.
  template <class Unit>
  void report(const Unit& unit, run_outcome& out, std::chrono::steady_clock::time_point started) {
    const auto& m = unit.rank_learner().metrics();
    out.completed = out.error.empty();
    out.rank = rank();
    out.ranks = size();
    out.inner_steps = unit.rank_learner().local_step();
    out.steps_computed = m.steps_computed;
    out.take_learner_work(m);
    std::array<double, 2> bytes{double(m.bytes_sent), double(m.bytes_received)};
    if (out.error.empty() && !ranks_.all_reduce(std::span<const double>(bytes), std::span<double>(bytes),
                                                diloco::reduce_op::sum, deadline())) {
      out.bytes_sent = static_cast<std::uint64_t>(bytes[0]);
      out.bytes_received = static_cast<std::uint64_t>(bytes[1]);
    } else {
      out.bytes_sent = m.bytes_sent;
      out.bytes_received = m.bytes_received;
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }

 private:
  static diloco::time_point deadline() { return diloco::clock::now() + std::chrono::seconds(60); }

  int no_argc_ = 0;
  char** no_argv_ = nullptr;
  diloco::mpi::environment environment_;
  diloco::mpi::communicator ranks_;
  std::optional<std::string> refusal_;
  std::optional<shard_links> links_;
};

}  // namespace example_trainer
