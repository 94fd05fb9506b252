// One learner of the trainer, whichever model it trains: the CPU `mlp` or the
// GPU `gpu_mlp`. The trainer holds its learners through this interface, so
// that a run mixes CPU and GPU learners on one transport, and the GPU ones are
// built in a CUDA translation unit of their own (gpu.hpp) that the rest of
// the trainer never compiles. One virtual call per inner step; none per
// parameter.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include <diloco/concepts/checkpointable.hpp>
#include <diloco/concepts/transport.hpp>
#include <diloco/error.hpp>
#include <diloco/runtime/checkpoint.hpp>
#include <diloco/runtime/learner.hpp>
#include <diloco/runtime/learner/checkpoint.hpp>

#include "batch.hpp"

namespace fashion {

/// What the trainer reads of a learner whose model is hidden, a
/// `learner_unit` or a rank of a learner unit (`unit_member`).
class learner_readings {
 public:
  virtual ~learner_readings() = default;

  virtual const diloco::learner_metrics& metrics() const = 0;
  virtual std::uint64_t local_step() const = 0;
  virtual bool ended() const = 0;
  /// Wall time of the last `compute_gradients` (for the emulated speeds).
  virtual std::chrono::steady_clock::duration last_compute() const = 0;
  /// "cpu" or "gpu".
  virtual const char* device() const = 0;
  /// `diloco::save_learner_checkpoint` (of this rank's learner, in a
  /// unit); throws `std::logic_error` if the inner step is not
  /// checkpointable.
  virtual std::uint64_t save_checkpoint(diloco::checkpoint_store& store) const = 0;
};

/// A `diloco::learner` on `Transport`, its model and inner step hidden: what
/// `sim::run` drives (`poll`, `train_step`, `drain`, `drained`, `finish`,
/// `next_deadline`, `transport`) and what the threaded trainer and the
/// learner process use.
template <class Transport>
class learner_unit : public learner_readings {
 public:
  virtual bool poll(diloco::time_point now) = 0;
  virtual diloco::step_stats train_step(const batch& b, diloco::time_point now) = 0;
  /// `learner::step`; throws `std::logic_error` on a transport that does not block.
  virtual diloco::result<diloco::step_stats> step(const batch& b) = 0;
  virtual void drain() = 0;
  virtual bool drained() const = 0;
  virtual void finish(diloco::time_point now) = 0;
  /// `learner::finish()`: waits for the answers in flight first; throws
  /// `std::logic_error` on a transport that does not block.
  virtual void finish() = 0;
  virtual std::optional<diloco::time_point> next_deadline() const = 0;
  virtual Transport& transport() = 0;

  /// `diloco::load_latest_learner_checkpoint`, with what it throws.
  virtual std::optional<std::uint64_t> load_latest_checkpoint(const diloco::checkpoint_store& store,
                                                              std::vector<std::string>* skipped) = 0;
};

/// `learner_unit` for a model type: owns the model and its learner. `Model`
/// has `last_compute()` besides the Model concept.
template <class Model, class Inner, class Transport>
class learner_unit_of final : public learner_unit<Transport> {
 public:
  learner_unit_of(std::unique_ptr<Model> model, Transport& transport, const diloco::learner_options& options,
                  Inner inner, const char* device)
      : model_(std::move(model)), learner_(*model_, transport, options, std::move(inner)), device_(device) {}

  bool poll(diloco::time_point now) override { return learner_.poll(now); }
  diloco::step_stats train_step(const batch& b, diloco::time_point now) override { return learner_.train_step(b, now); }
  diloco::result<diloco::step_stats> step(const batch& b) override {
    if constexpr (diloco::blocking_transport<Transport>)
      return learner_.step(b);
    else
      throw std::logic_error("fashion::learner_unit::step: the transport does not block; use poll and train_step");
  }
  void drain() override { learner_.drain(); }
  bool drained() const override { return learner_.drained(); }
  void finish(diloco::time_point now) override { learner_.finish(now); }
  void finish() override {
    if constexpr (diloco::blocking_transport<Transport>)
      learner_.finish();
    else
      throw std::logic_error("fashion::learner_unit::finish: the transport does not block; drain, poll, finish(now)");
  }
  std::optional<diloco::time_point> next_deadline() const override { return learner_.next_deadline(); }
  Transport& transport() override { return learner_.transport(); }

  const diloco::learner_metrics& metrics() const override { return learner_.metrics(); }
  std::uint64_t local_step() const override { return learner_.local_step(); }
  bool ended() const override { return learner_.ended(); }
  std::chrono::steady_clock::duration last_compute() const override { return model_->last_compute(); }
  const char* device() const override { return device_; }

  std::uint64_t save_checkpoint(diloco::checkpoint_store& store) const override {
    if constexpr (diloco::checkpointable<Inner>)
      return diloco::save_learner_checkpoint(learner_, store);
    else
      throw std::logic_error("learner checkpoints need a checkpointable inner step");
  }
  std::optional<std::uint64_t> load_latest_checkpoint(const diloco::checkpoint_store& store,
                                                      std::vector<std::string>* skipped) override {
    if constexpr (diloco::checkpointable<Inner>)
      return diloco::load_latest_learner_checkpoint(learner_, store, skipped);
    else
      throw std::logic_error("learner checkpoints need a checkpointable inner step");
  }

 private:
  std::unique_ptr<Model> model_;
  diloco::learner<Model, Inner, Transport> learner_;
  const char* device_;
};

}  // namespace fashion
