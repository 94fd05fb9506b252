// A merge policy without `weight`, handed to a syncer.
// expect-error: diloco::merge_policy: missing member `double weight\(std::uint64_t tokens, std::uint64_t steps\) const`
#include <diloco/diloco.hpp>

#include <span>
#include <vector>

namespace {

struct merge_without_weight {
  void merge(std::span<const diloco::weighted_delta<float>> in, std::span<const diloco::fragment_slice>,
             std::span<float> out, double scale) const {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(scale) * in[0].delta[i];
  }
};

}  // namespace

int main() {
  diloco::parameter_layout layout;
  layout.add("w", 4);
  const std::vector<float> initial(4, 0.0f);
  diloco::inproc::hub hub;
  diloco::syncer<diloco::outer::nesterov<float>, merge_without_weight, diloco::inproc::endpoint> syncer(
      layout, initial, hub.attach(diloco::syncer_peer));
}
