// Data parallel inside a learner unit: the user's model on each rank, seen as
// one model whose gradients are the mean over the unit's ranks.
#pragma once

#include <array>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/concepts/collective.hpp"
#include "diloco/concepts/model.hpp"
#include "diloco/error.hpp"
#include "diloco/params/layout.hpp"

namespace diloco {

struct unit_model_options {
  /// How long each collective may wait for the other ranks: a rank that has
  /// not answered by then ends the unit (`std::system_error` with
  /// `errc::timed_out`). Size it above the slowest rank's forward and
  /// backward pass.
  std::chrono::nanoseconds timeout = std::chrono::seconds(60);
};

/// A `model` made of the same model on every rank of a unit, as DDP makes
/// one: each rank computes the gradients of its own batch, and
/// `compute_gradients` then all-reduces them to their mean over the ranks, so
/// the inner step (the same on every rank) keeps the ranks' parameters equal.
/// With equal batches of B on R ranks, the mean is the gradient of the batch
/// of R·B they form together, up to the rounding of the summation order.
///
/// `step_stats::loss` is the mean of the ranks' losses and `tokens` their sum:
/// the unit's contribution counts every rank's examples once.
///
/// Collective failures (`errc::rank_lost`, `errc::timed_out`) are thrown as
/// `std::system_error`: the unit has ended, and so should this rank.
///
/// A model with `std::span<scalar_type> mutable_gradients()` (the
/// LibTorch adapter's `torch::module_model`) has its gradients averaged
/// where it keeps them, in place, and `gradients()` are then the model's
/// own: an inner step that reads them there (a `torch::optim` optimizer
/// through `torch::optimizer`, which reads the parameters' `.grad()`) steps
/// on the mean. Other models' means are kept in a buffer of the unit's.
///
/// A model whose parameters live elsewhere (`memory()`, a GPU model) is
/// reduced where they live, by a second collective `D` on that memory — a
/// `nccl::communicator` on the rank's GPU — while `C` carries the host values
/// (the loss and token counts here, the unit's votes in `unit_learner`):
/// `unit_model<M, C, D>(model, ranks, data)`. Such a model must have
/// `mutable_gradients()`: the mean is taken in place, in its memory. The
/// one-collective constructors take models without `memory()` only (a model
/// whose `memory()` is host memory may pass one communicator twice).
template <class M, class C, class D = C>
requires(check_model<M>() && model<M> && check_collective<C>() && collective<C> && check_collective<D>() &&
         collective<D>) class unit_model {
 public:
  using scalar_type = typename M::scalar_type;
  using batch_type = typename M::batch_type;

  /// The model keeps its parameters in host memory: it has no `memory()`
  /// (requirement 7 of `model`), so one collective can do.
  static constexpr bool on_host = !requires(M & m) { m.memory(); };

  /// Rank 0's parameters are broadcast to the others, so that every rank
  /// starts from the same model whatever its own initialization.
  unit_model(M& model, C& ranks, unit_model_options options = {}) requires std::same_as<C, D>
      : unit_model(model, ranks, ranks, options) {
    static_assert(on_host,
                  "diloco::unit_model: a model with memory() (its own memory space) needs a second collective on that "
                  "memory (unit_model<M, C, D>, e.g. D = nccl::communicator) besides the host one");
  }

  /// The same, the parameters and gradients reduced by `data`, a collective
  /// of the same ranks (rank for rank) on the model's memory.
  unit_model(M& model, C& ranks, D& data, unit_model_options options = {})
      : model_(model),
        ranks_(ranks),
        data_(data),
        options_(options),
        gradients_(in_place ? 0 : model.parameters().size()) {
    if (data_.rank() != ranks_.rank() || data_.size() != ranks_.size())
      throw std::invalid_argument("diloco::unit_model: the data collective is rank " + std::to_string(data_.rank()) +
                                  " of " + std::to_string(data_.size()) + ", the unit's rank " +
                                  std::to_string(ranks_.rank()) + " of " + std::to_string(ranks_.size()));
    check(data_.broadcast(model_.parameters(), 0, deadline()));
  }

  const parameter_layout& layout() const noexcept { return model_.layout(); }
  /// The model's own memory space, if it has one (requirement 7 of `model`).
  auto& memory() requires requires(M& m) { m.memory(); }
  { return model_.memory(); }
  std::span<scalar_type> parameters() noexcept { return model_.parameters(); }
  std::span<const scalar_type> gradients() const noexcept {
    if constexpr (in_place)
      return model_.mutable_gradients();
    else
      return gradients_;
  }

  step_stats compute_gradients(const batch_type& batch) {
    const step_stats own = model_.compute_gradients(batch);
    if constexpr (in_place) {
      const std::span<scalar_type> own_gradients = model_.mutable_gradients();
      check(data_.all_reduce(std::span<const scalar_type>(own_gradients), own_gradients, reduce_op::mean, deadline()));
    } else {
      static_assert(on_host,
                    "diloco::unit_model: a model with memory() (its own memory space) needs "
                    "`std::span<scalar_type> mutable_gradients()`: the mean is taken in place, in its memory");
      const std::span<const scalar_type> local = model_.gradients();
      check(data_.all_reduce(local, std::span<scalar_type>(gradients_), reduce_op::mean, deadline()));
    }
    std::array<double, 2> stats{own.loss, static_cast<double>(own.tokens)};
    check(ranks_.all_reduce(std::span<const double>(stats), std::span<double>(stats), reduce_op::sum, deadline()));
    return {stats[0] / static_cast<double>(ranks_.size()), static_cast<std::uint64_t>(stats[1])};
  }

  M& local_model() noexcept { return model_; }
  /// The unit's collective on the host, and the one on the model's memory
  /// (the same one unless two were given).
  C& ranks() noexcept { return ranks_; }
  D& data() noexcept { return data_; }

 private:
  time_point deadline() const { return clock::now() + options_.timeout; }

  static void check(std::error_code e) {
    if (e) throw std::system_error(e, "diloco::unit_model: the unit's collective failed");
  }

  /// The model's gradients are writable where it keeps them.
  static constexpr bool in_place = requires(M & m) {
    { m.mutable_gradients() } -> std::same_as<std::span<scalar_type>>;
  };

  M& model_;
  C& ranks_;
  D& data_;
  unit_model_options options_;
  std::vector<scalar_type> gradients_;  ///< the mean, unless `in_place`
};

}  // namespace diloco
