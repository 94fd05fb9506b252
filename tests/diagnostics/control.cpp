// The positive control: the same kind of user types as the other files here,
// complete, with a learner and a syncer on the in-process transport and the
// public checks. It must compile; if it does not, the expected errors in the
// other files prove nothing.
#include <diloco/diloco.hpp>

#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <vector>

namespace {

struct user_model {
  using scalar_type = float;
  struct batch_type {};

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }
  std::span<const float> gradients() { return gradients_; }
  diloco::step_stats compute_gradients(const batch_type&) { return {}; }

  diloco::parameter_layout layout_;
  std::vector<float> parameters_, gradients_;
};

struct user_inner {
  using scalar_type = float;
  struct options_type {
    float learning_rate = 0.1f;
  };

  void step(std::span<float> params, std::span<const float> grads) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= options_.learning_rate * grads[i];
  }
  options_type& options() { return options_; }

  options_type options_;
};

struct user_outer {
  using scalar_type = float;
  struct options_type {};

  void step(std::uint32_t, std::span<float> global, std::span<const float> delta) {
    for (std::size_t i = 0; i < global.size(); ++i) global[i] -= delta[i];
  }
  void reset(std::uint32_t) {}
  void save(std::ostream&) const {}
  void load(std::istream&) {}
};

struct user_merge {
  double weight(std::uint64_t tokens, std::uint64_t) const { return static_cast<double>(tokens); }
  void merge(std::span<const diloco::weighted_delta<float>> in, std::span<const diloco::fragment_slice>,
             std::span<float> out, double scale) const {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(scale) * in[0].delta[i];
  }
};

// The public checks accept what the runtime accepts.
static_assert(diloco::check_model<user_model>() && diloco::check_inner_step<user_inner>() &&
              diloco::check_outer_optimizer<user_outer>() && diloco::check_merge_policy<user_merge, float>() &&
              diloco::check_transport<diloco::inproc::endpoint>() &&
              diloco::check_blocking_transport<diloco::inproc::endpoint>() &&
              diloco::check_checkpointable<user_outer>());

}  // namespace

int main() {
  user_model model;
  model.layout_.add("w", 4);
  model.parameters_.assign(4, 0.0f);
  model.gradients_.assign(4, 0.0f);
  diloco::inproc::hub hub;
  diloco::learner<user_model, user_inner, diloco::inproc::endpoint> learner(model, hub.attach(1), {}, user_inner{});
  diloco::syncer<user_outer, user_merge, diloco::inproc::endpoint> syncer(
      model.layout(), model.parameters(), hub.attach(diloco::syncer_peer), {}, user_outer{}, user_merge{});
  return learner.joined() || syncer.live_learners() != 0 ? 1 : 0;
}
