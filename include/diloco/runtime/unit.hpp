// One rank of a learner unit: a learner that speaks for its share of the
// fragments, over a model whose gradients are averaged across the unit, and
// the collectives that keep the unit's ranks in step.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/collective/unit_model.hpp"
#include "diloco/concepts/checkpointable.hpp"
#include "diloco/concepts/collective.hpp"
#include "diloco/error.hpp"
#include "diloco/runtime/learner.hpp"
#include "diloco/runtime/learner/state.hpp"

namespace diloco {

/// One rank r of a learner unit of R ranks (docs/units.md). Every rank
/// holds the whole model and trains it data parallel (`unit_model`: the
/// ranks' gradients averaged before the inner step), and every rank runs a
/// `learner` that speaks for the fragments p with p mod R = r
/// (`learner_options::share`): it keeps their outer state (base and
/// error-feedback residual, 1/R of a one-process learner's), sends their
/// contributions and takes their updates in, to and from the syncer shards
/// that own them — rank r is connected to the shards s with s mod R = r of
/// a syncer of S shards, S a multiple of R. Each fragment thus travels once,
/// as from a one-process learner, and the syncer counts the unit's work once.
///
/// `poll` keeps the ranks in step: after each rank's learner has polled,
/// the fragments a rank took in are broadcast from it to the others, and
/// the unit steps only when every rank may. A rank whose learner stops (an
/// error, `errc::ended`) stops the unit; a collective that fails (a rank
/// died, `errc::rank_lost` or `errc::timed_out`) ends it: the unit is then
/// restarted as a whole.
///
/// A model in memory of its own (`memory()`, a GPU model) needs a second
/// collective, `Data`, on that memory (`nccl::communicator`): it averages
/// the gradients and broadcasts the fragments taken in, while `Collective`
/// (`mpi::communicator`) carries the unit's host values — its votes, the
/// loss, the resume. With one collective, host models only (`unit_model`).
///
/// Every call that communicates is collective: every rank makes it, in the
/// same order. Not thread-safe, like the learner.
template <class Model, class InnerStep, class Transport, class Collective, class Data = Collective>
class unit_learner {
 public:
  using model_type = unit_model<Model, Collective, Data>;
  using learner_type = learner<model_type, InnerStep, Transport>;
  using batch_type = typename Model::batch_type;
  using T = typename Model::scalar_type;

  /// `options.share` is set from the collective (rank of size); the other
  /// options are the learner's, the same on every rank (one id, one
  /// incarnation for the unit). Collective: broadcasts rank 0's parameters.
  unit_learner(Model& model, Collective& ranks, Transport& transport, learner_options options = {},
               InnerStep inner = InnerStep{}, unit_model_options unit = {}) requires std::same_as<Collective, Data>
      : unit_learner(model, ranks, ranks, transport, std::move(options), std::move(inner), unit) {
    static_assert(
        model_type::on_host,
        "diloco::unit_learner: a model with memory() (its own memory space) needs a second collective on that "
        "memory (unit_learner<M, S, E, C, D>, e.g. D = nccl::communicator) besides the host one");
  }

  /// The same, the model's parameters and gradients reduced and broadcast
  /// by `data`, a collective of the same ranks on the model's memory.
  unit_learner(Model& model, Collective& ranks, Data& data, Transport& transport, learner_options options = {},
               InnerStep inner = InnerStep{}, unit_model_options unit = {})
      : ranks_(ranks),
        timeout_(unit.timeout),
        model_(model, ranks, data, unit),
        learner_(model_, transport, shared(options, ranks), std::move(inner)) {}

  unit_learner(const unit_learner&) = delete;
  unit_learner& operator=(const unit_learner&) = delete;

  /// Collective. `learner::poll` on this rank, then the unit agrees: the
  /// fragments any rank took in reach every rank, and the answer is true only
  /// when every rank's learner may step. False also once the unit has
  /// stopped (`error()`).
  bool poll(time_point now) {
    if (error_) return false;
    const bool ready = learner_.poll(now);
    // Per rank: may not step, has stopped, has not joined; summed.
    std::array<double, 3> votes{ready ? 0.0 : 1.0, learner_.error() ? 1.0 : 0.0, learner_.joined() ? 0.0 : 1.0};
    if (!agree(votes)) return false;
    if (votes[1] > 0) {
      error_ = learner_.error() ? learner_.error() : make_error_code(errc::rank_lost);
      return false;
    }
    if (votes[2] > 0) return false;  // the plan is known once every rank has joined
    share_adoptions(false);
    return !error_ && votes[0] == 0;
  }

  /// Collective. One inner step on this rank's `batch` (its share of the
  /// unit's batch), gradients averaged across the unit, then the due
  /// fragments of this rank's share are sent. Precondition: `poll` returned
  /// true. Throws `std::system_error` if the unit's collective fails.
  step_stats train_step(const batch_type& batch, time_point now) {
    try {
      return learner_.train_step(batch, now);
    } catch (const std::system_error& e) {
      error_ = e.code();
      throw;
    }
  }

  /// Collective, for blocking transports: `poll` (waiting on this rank's
  /// transport between polls, at most 100 ms at a time) until the unit may
  /// step, then `train_step`. Fails with the error that stopped the unit,
  /// with `errc::timed_out` if a rank is not welcomed within
  /// `join_timeout`, or with `errc::cancelled` once a stop is requested on
  /// any rank's `stop`.
  result<step_stats> step(const batch_type& batch, std::stop_token stop = {}) requires blocking_transport<Transport> {
    const time_point started = clock::now();
    for (;;) {
      const time_point now = clock::now();
      const bool gave_up = !learner_.joined() && now - started > options().join_timeout;
      std::array<double, 2> reasons{stop.stop_requested() ? 1.0 : 0.0, gave_up ? 1.0 : 0.0};
      if (!agree(reasons)) return error_;
      if (reasons[0] > 0) return errc::cancelled;
      if (reasons[1] > 0) return errc::timed_out;
      if (poll(now)) break;
      if (error_) return error_;
      // Sleep on this rank's transport until a message or its next deadline.
      auto wait = std::chrono::nanoseconds(std::chrono::milliseconds(100));
      if (auto wake = learner_.next_deadline()) wait = std::clamp<std::chrono::nanoseconds>(*wake - now, {}, wait);
      if (auto e = learner_.transport().receive_for(wait)) learner_.receive(std::move(*e), clock::now());
    }
    try {
      return learner_.train_step(batch, clock::now());
    } catch (const std::system_error& e) {
      return error_ = e.code();
    }
  }

  /// Collective, for blocking transports: every rank's learner finishes
  /// (`learner::finish`: final contributions, leave), then every rank takes
  /// every other rank's fragments, so that all hold the same final model.
  void finish(std::stop_token stop = {}) requires blocking_transport<Transport> {
    if (!error_) learner_.finish(stop);
    std::array<double, 1> stopped{error_ ? 1.0 : 0.0};
    if (agree(stopped) && stopped[0] == 0 && learner_.joined()) share_adoptions(true);
  }

  /// Collective, before the unit joins: restores this rank's learner
  /// (`learner::load`) from one of `saved`, states this rank's learner wrote
  /// (`learner::save`), newest first, so that every rank resumes at the same
  /// local step: the newest step every rank has among its newest
  /// `max_resume_candidates` states that fit its learner (this learner and
  /// model, an older incarnation). Ranks save at the same steps, so that is
  /// their newest unless a rank died while saving. With no step common to
  /// all ranks, no rank loads: the unit starts from the global model at the
  /// join. Returns the local step resumed, or nothing. Throws
  /// `std::system_error` if a collective fails, and `std::runtime_error` on
  /// every rank if a rank's agreed state still fails to load (its inner step
  /// refuses it): the unit cannot go on consistently and must start without
  /// these states.
  template <class Inner = InnerStep>
  requires checkpointable<Inner> std::optional<std::uint64_t> resume(std::span<const std::string> saved) {
    // This rank's usable steps, newest first; the rest of the slots -1.
    std::vector<double> steps(max_resume_candidates, -1.0);
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < saved.size() && index.size() < max_resume_candidates; ++i) {
      try {
        std::istringstream in(saved[i]);
        const auto s = read_learner_state<T>(in, model_.layout(), options().id);
        if (s.incarnation >= options().incarnation) continue;
        steps[index.size()] = static_cast<double>(s.local_step);
        index.push_back(i);
      } catch (const corrupt_state&) {
        continue;  // another learner's or model's, or damaged: not a candidate
      }
    }
    const std::size_t R = ranks_.size();
    std::vector<double> all(max_resume_candidates * R);
    if (auto e = ranks_.all_gather(std::span<const double>(steps), std::span<double>(all), deadline()))
      throw std::system_error(e, "diloco::unit_learner::resume");
    // The newest of this rank's steps that every rank has.
    std::optional<std::size_t> chosen;
    for (std::size_t k = 0; k < index.size() && !chosen; ++k) {
      bool everywhere = true;
      for (std::size_t q = 0; q < R && everywhere; ++q)
        everywhere = std::find(all.begin() + q * max_resume_candidates, all.begin() + (q + 1) * max_resume_candidates,
                               steps[k]) != all.begin() + (q + 1) * max_resume_candidates;
      if (everywhere) chosen = k;
    }
    std::string why;
    if (chosen) {
      try {
        std::istringstream in(saved[index[*chosen]]);
        learner_.load(in);
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    std::array<double, 1> failed{why.empty() ? 0.0 : 1.0};
    if (auto e =
            ranks_.all_reduce(std::span<const double>(failed), std::span<double>(failed), reduce_op::sum, deadline()))
      throw std::system_error(e, "diloco::unit_learner::resume");
    if (failed[0] > 0)
      throw std::runtime_error("diloco::unit_learner::resume: " + std::to_string(static_cast<int>(failed[0])) +
                               " rank(s) could not load the state all ranks agreed on" +
                               (why.empty() ? std::string() : " (this one: " + why + ")"));
    if (!chosen) return std::nullopt;
    return static_cast<std::uint64_t>(steps[*chosen]);
  }

  /// The most saved states per rank that `resume` considers.
  static constexpr std::size_t max_resume_candidates = 4;

  /// What stopped the unit: this rank's learner's error, `errc::rank_lost`
  /// for another rank's, or the collective's failure.
  std::error_code error() const noexcept { return error_; }
  learner_type& rank_learner() noexcept { return learner_; }
  const learner_type& rank_learner() const noexcept { return learner_; }
  model_type& model() noexcept { return model_; }

 private:
  static learner_options shared(learner_options o, const Collective& ranks) {
    o.share = {static_cast<std::uint32_t>(ranks.rank()), static_cast<std::uint32_t>(ranks.size())};
    return o;
  }
  const learner_options& options() const noexcept { return learner_.options(); }

  time_point deadline() const { return clock::now() + timeout_; }

  /// Sums `values` over the ranks; false (and `error_` set) if the
  /// collective failed.
  template <std::size_t N>
  bool agree(std::array<double, N>& values) {
    if (auto e =
            ranks_.all_reduce(std::span<const double>(values), std::span<double>(values), reduce_op::sum, deadline())) {
      error_ = e;
      return false;
    }
    return true;
  }

  /// Broadcasts, from the rank that speaks for it, each fragment taken in
  /// since the last time (`all`: every fragment), so that every rank's
  /// parameters are the same again.
  void share_adoptions(bool all) {
    const auto& plan = learner_.plan();
    const auto fragments = static_cast<std::uint32_t>(plan.count());
    const auto r = static_cast<std::uint32_t>(ranks_.rank()), size = static_cast<std::uint32_t>(ranks_.size());
    shared_revisions_.resize(fragments, std::numeric_limits<std::uint64_t>::max());
    std::vector<double> changed(fragments, 0.0);
    for (std::uint32_t p = r; p < fragments; p += size)
      if (all || learner_.revision(p) != shared_revisions_[p]) changed[p] = 1.0;
    if (auto e = ranks_.all_reduce(std::span<const double>(changed), std::span<double>(changed), reduce_op::sum,
                                   deadline())) {
      error_ = e;
      return;
    }
    const std::span<T> theta = model_.parameters();
    for (std::uint32_t p = 0; p < fragments; ++p) {
      if (changed[p] == 0) continue;
      for (const auto& s : plan[p].slices())
        if (auto e = model_.data().broadcast(theta.subspan(s.flat_offset, s.size), p % size, deadline())) {
          error_ = e;
          return;
        }
      if (p % size == r) shared_revisions_[p] = learner_.revision(p);
    }
  }

  Collective& ranks_;
  std::chrono::nanoseconds timeout_;
  model_type model_;
  learner_type learner_;
  std::error_code error_;
  std::vector<std::uint64_t> shared_revisions_;  ///< of this rank's fragments, as last broadcast
};

}  // namespace diloco
