// An inner optimizer without `save`, used as an outer optimizer through
// `outer::from_inner`: the syncer checkpoints the outer state, so the inner
// step must be checkpointable.
// expect-error: diloco::checkpointable: missing member `void save\(std::ostream&\) const`
#include <diloco/diloco.hpp>

#include <istream>
#include <span>
#include <vector>

namespace {

struct inner_without_save {
  using scalar_type = float;
  struct options_type {
    float learning_rate = 0.1f;
  };

  inner_without_save() = default;
  explicit inner_without_save(const options_type& options) : options_(options) {}
  void step(std::span<float> params, std::span<const float> grads) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= options_.learning_rate * grads[i];
  }
  options_type& options() { return options_; }
  void load(std::istream&) {}

  options_type options_;
};

}  // namespace

int main() {
  diloco::parameter_layout layout;
  layout.add("w", 4);
  const std::vector<float> initial(4, 0.0f);
  diloco::inproc::hub hub;
  diloco::syncer<diloco::outer::from_inner<inner_without_save>, diloco::merge::average, diloco::inproc::endpoint>
      syncer(layout, initial, hub.attach(diloco::syncer_peer));
}
