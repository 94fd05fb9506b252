// Any InnerStep used as an outer optimizer, one instance per fragment.
#pragma once

#include <concepts>
#include <cstdint>
#include <istream>
#include <optional>
#include <ostream>
#include <span>

#include "diloco/concepts/checkpointable.hpp"
#include "diloco/concepts/inner_step.hpp"
#include "diloco/outer/detail/per_fragment.hpp"

namespace diloco::outer {

/// Treats the merged outer gradient as a gradient and hands it to an
/// InnerStep, keeping one instance (and so one optimizer state) per fragment.
///
/// This is what makes synchronous data parallelism a configuration of the
/// DiLoCo runtime: with H = 1, an inner `sgd` of learning rate 1 and every
/// learner in every round, a learner's outer gradient is its gradient, their
/// average is the data-parallel gradient, and `from_inner<inner::adamw<T>>`
/// applies AdamW to it at the syncer.
///
/// `Inner` must be checkpointable as well (the syncer checkpoints every
/// fragment's state), default-constructible (`load` fills a new instance) and
/// constructible from its `options_type`. The checks before the concepts name
/// the first requirement a type misses.
template <class Inner>
requires(check_inner_step<Inner>() && inner_step<Inner> && check_checkpointable<Inner>() && checkpointable<Inner> &&
         std::default_initializable<Inner> &&
         std::constructible_from<Inner, const typename Inner::options_type&>) class from_inner {
 public:
  using scalar_type = typename Inner::scalar_type;
  using options_type = typename Inner::options_type;

  /// Throws `std::invalid_argument` when `Inner` rejects the options.
  explicit from_inner(options_type options = {}) : options_(options) { (void)Inner{options}; }

  void step(std::uint32_t fragment, std::span<scalar_type> global, std::span<const scalar_type> delta) {
    auto& slot = states_[fragment];
    if (!slot.inner) slot.inner.emplace(options_);
    slot.inner->options() = options_;
    slot.inner->step(global, delta);
  }

  /// Forgets fragment's inner-optimizer state (the syncer refused the step that built it).
  void reset(std::uint32_t fragment) { states_.reset(fragment); }

  options_type& options() noexcept { return options_; }

  void save(std::ostream& out) const {
    diloco::serial::write_tag(out, "FINR", 1);
    states_.save(out);
  }
  void load(std::istream& in) {
    diloco::serial::expect_tag(in, "FINR", 1);
    states_.load(in);
  }

 private:
  struct slot_state {
    std::optional<Inner> inner;
    void save(std::ostream& out) const {
      diloco::serial::write_pod<std::uint8_t>(out, inner ? 1 : 0);
      if (inner) inner->save(out);
    }
    void load(std::istream& in) {
      const auto present = diloco::serial::read_pod<std::uint8_t>(in, "inner presence");
      if (present > 1) throw diloco::corrupt_state("diloco: bad inner presence flag");
      if (present) {
        Inner loaded{};
        loaded.load(in);
        inner.emplace(std::move(loaded));
      } else {
        inner.reset();
      }
    }
  };

  options_type options_;
  detail::per_fragment<slot_state> states_;
};

}  // namespace diloco::outer
