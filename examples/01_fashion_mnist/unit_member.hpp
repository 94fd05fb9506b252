// One rank of a learner unit of the trainer, whichever model it trains: the
// CPU `mlp` (mpi_unit.hpp) or the GPU `gpu_mlp` (gpu.hpp), as `learner_unit`
// is for one-process learners. The unit's loop (`example_trainer::unit_rank`)
// drives it through this interface, so that the GPU ranks are built in the
// CUDA translation unit and the rest of the trainer never compiles them. One
// virtual call per inner step; none per parameter.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <diloco/concepts/checkpointable.hpp>
#include <diloco/error.hpp>
#include <diloco/runtime/checkpoint.hpp>
#include <diloco/runtime/learner.hpp>
#include <diloco/runtime/unit_checkpoint.hpp>

#include "batch.hpp"
#include "learner_unit.hpp"

namespace fashion {

/// A `diloco::unit_learner`, its model, inner step and collectives hidden.
/// Reads as a unit learner does to `example_trainer::unit_rank`: `step`,
/// `finish`, `error`, and `rank_learner()` for the rank learner's metrics,
/// local step and whether the syncer ended the run. Every call that
/// communicates is collective, as the unit learner's.
class unit_member : public learner_readings {
 public:
  virtual diloco::result<diloco::step_stats> step(const batch& b) = 0;
  virtual void finish() = 0;
  virtual std::error_code error() const = 0;

  /// This object: what `unit_rank` reads of a rank's learner is in
  /// `learner_readings`.
  const unit_member& rank_learner() const noexcept { return *this; }

  /// `diloco::load_unit_checkpoint` (collective), with what it throws.
  virtual std::optional<std::uint64_t> load_checkpoint(const diloco::checkpoint_store& store,
                                                       std::vector<std::string>* skipped) = 0;
};

/// `unit_member` for a unit learner type `Unit`: owns the model, whatever
/// the unit needs besides (`Owned...`: a device collective, say, built
/// before the unit) and the unit, destroyed in the reverse order.
template <class Unit, class Model, class... Owned>
class unit_member_of final : public unit_member {
 public:
  /// `make(model, owned...)` constructs the unit (collectively).
  template <class Make>
  unit_member_of(std::unique_ptr<Model> model, std::tuple<std::unique_ptr<Owned>...> owned, Make&& make,
                 const char* device)
      : model_(std::move(model)),
        owned_(std::move(owned)),
        unit_(std::apply([&](auto&... o) { return make(*model_, *o...); }, owned_)),
        device_(device) {}

  diloco::result<diloco::step_stats> step(const batch& b) override { return unit_->step(b); }
  void finish() override { unit_->finish(); }
  std::error_code error() const override { return unit_->error(); }
  const diloco::learner_metrics& metrics() const override { return unit_->rank_learner().metrics(); }
  std::uint64_t local_step() const override { return unit_->rank_learner().local_step(); }
  bool ended() const override { return unit_->rank_learner().ended(); }
  std::chrono::steady_clock::duration last_compute() const override { return model_->last_compute(); }
  const char* device() const override { return device_; }

  std::uint64_t save_checkpoint(diloco::checkpoint_store& store) const override {
    if constexpr (requires { diloco::save_unit_checkpoint(*unit_, store); })
      return diloco::save_unit_checkpoint(*unit_, store);
    else
      throw std::logic_error("learner checkpoints need a checkpointable inner step");
  }
  std::optional<std::uint64_t> load_checkpoint(const diloco::checkpoint_store& store,
                                               std::vector<std::string>* skipped) override {
    if constexpr (requires { diloco::load_unit_checkpoint(*unit_, store, skipped); })
      return diloco::load_unit_checkpoint(*unit_, store, skipped);
    else
      throw std::logic_error("learner checkpoints need a checkpointable inner step");
  }

 private:
  std::unique_ptr<Model> model_;
  std::tuple<std::unique_ptr<Owned>...> owned_;
  std::unique_ptr<Unit> unit_;
  const char* device_;
};

}  // namespace fashion
