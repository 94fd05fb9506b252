// An outer optimizer that can save its state but not load it, handed to a
// syncer. The syncer never calls `load` itself; the concept check still
// rejects the type, so checkpointing code cannot be written against it.
// expect-error: diloco::outer_optimizer: missing member `void load\(std::istream&\)`
#include <diloco/diloco.hpp>

#include <cstdint>
#include <ostream>
#include <span>
#include <vector>

namespace {

struct outer_without_load {
  using scalar_type = float;
  struct options_type {};

  void step(std::uint32_t, std::span<float> global, std::span<const float> delta) {
    for (std::size_t i = 0; i < global.size(); ++i) global[i] -= delta[i];
  }
  void reset(std::uint32_t) {}
  void save(std::ostream&) const {}
};

}  // namespace

int main() {
  diloco::parameter_layout layout;
  layout.add("w", 4);
  const std::vector<float> initial(4, 0.0f);
  diloco::inproc::hub hub;
  diloco::syncer<outer_without_load, diloco::merge::average, diloco::inproc::endpoint> syncer(
      layout, initial, hub.attach(diloco::syncer_peer));
}
