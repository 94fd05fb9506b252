// A minimal `diloco::outer_optimizer` (docs/concepts/outer_optimizer.md):
// heavy-ball momentum, v ← μ·v + Δ, Θ ← Θ − η·v, with one velocity per
// fragment, saved with the library's `diloco::serial` helpers. `main` takes
// the steps a syncer takes, saves and loads the state, and checks the values.
#include <cstdint>
#include <cstdio>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <diloco/concepts/outer_optimizer.hpp>
#include <diloco/serialize.hpp>

template <class T>
class heavy_ball {
 public:
  using scalar_type = T;
  struct options_type {
    double learning_rate = 0.7;  ///< η
    double momentum = 0.9;       ///< μ
  };

  explicit heavy_ball(options_type options = {}) : options_(options) {}

  /// Δ = Θ_base − θ points away from the learners' progress: descent subtracts it.
  void step(std::uint32_t fragment, std::span<T> global, std::span<const T> delta) {
    std::vector<T>& v = velocity_[fragment];
    if (v.empty()) v.assign(global.size(), T(0));  // the fragment's first step: its size is known now
    const T lr = T(options_.learning_rate), mu = T(options_.momentum);
    for (std::size_t i = 0; i < global.size(); ++i) {
      v[i] = mu * v[i] + delta[i];
      global[i] -= lr * v[i];
    }
  }

  void reset(std::uint32_t fragment) { velocity_.erase(fragment); }

  void save(std::ostream& out) const {
    diloco::serial::write_tag(out, "HBAL", 1);  // refuses, on load, a block of another type or version
    diloco::serial::write_pod<std::uint64_t>(out, velocity_.size());
    for (const auto& [fragment, v] : velocity_) {
      diloco::serial::write_pod(out, fragment);
      diloco::serial::write_array(out, v);
    }
  }

  /// Reads into a local map and swaps it in last: a load that throws keeps the state.
  void load(std::istream& in) {
    diloco::serial::expect_tag(in, "HBAL", 1);
    std::map<std::uint32_t, std::vector<T>> loaded;
    const auto count = diloco::serial::read_pod<std::uint64_t>(in, "fragment count");
    for (std::uint64_t k = 0; k < count; ++k) {
      const auto fragment = diloco::serial::read_pod<std::uint32_t>(in, "fragment");
      loaded[fragment] = diloco::serial::read_array<T>(in, diloco::serial::max_state_elements, "velocity");
    }
    velocity_.swap(loaded);
  }

 private:
  options_type options_;
  std::map<std::uint32_t, std::vector<T>> velocity_;
};

static_assert(diloco::check_outer_optimizer<heavy_ball<float>>());

int main() {
  heavy_ball<float> outer({.learning_rate = 1.0, .momentum = 0.5});
  std::vector<float> global{1.0f, 1.0f};
  const std::vector<float> delta{0.5f, 0.5f};
  outer.step(0, global, delta);  // v = 0.5,  Θ = 0.5
  outer.step(0, global, delta);  // v = 0.75, Θ = −0.25
  bool ok = global[0] == -0.25f && global[1] == -0.25f;

  std::stringstream saved;
  outer.save(saved);
  heavy_ball<float> restored({.learning_rate = 1.0, .momentum = 0.5});
  restored.load(saved);
  std::istringstream corrupt(saved.str().substr(0, 10));
  try {
    restored.load(corrupt);
    ok = false;
  } catch (const diloco::corrupt_state& e) {
    std::printf("refused: %s\n", e.what());
  }
  std::vector<float> a = global, b = global;
  outer.step(0, a, delta);  // v = 0.875, from the velocity both hold
  restored.step(0, b, delta);
  ok = ok && a == b && a[0] == -1.125f;

  outer.reset(0);  // the next step is a first step again
  outer.step(0, global, delta);
  ok = ok && global[0] == -0.75f;
  std::printf("after the restored step %.4f, after a reset %.4f\n", double(a[0]), double(global[0]));
  return ok ? 0 : 1;
}
