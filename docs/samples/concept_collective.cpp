// A minimal `diloco::collective` (docs/concepts/collective.md): the unit of
// one rank, where every collective is a copy. A trainer written for units of
// R ranks runs unchanged on one process with it. `main` hands it, with a
// small model, to `diloco::unit_model` and checks what comes back.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <span>
#include <system_error>
#include <vector>

#include <diloco/collective/unit_model.hpp>
#include <diloco/concepts/collective.hpp>
#include <diloco/error.hpp>

class solo {
 public:
  std::size_t rank() const { return 0; }
  std::size_t size() const { return 1; }

  template <class T>
  std::error_code all_reduce(std::span<const T> in, std::span<T> out, diloco::reduce_op, diloco::time_point d) {
    return copy(in, out, in.size() == out.size(), d);  // the sum and the mean over one rank: the value
  }
  template <class T>
  std::error_code reduce_scatter(std::span<const T> in, std::span<T> out, diloco::reduce_op, diloco::time_point d) {
    return copy(in, out, in.size() == out.size(), d);  // block 0 of one block
  }
  template <class T>
  std::error_code all_gather(std::span<const T> in, std::span<T> out, diloco::time_point d) {
    return copy(in, out, in.size() == out.size(), d);
  }
  template <class T>
  std::error_code broadcast(std::span<T>, std::size_t root, diloco::time_point d) {
    return copy(std::span<const T>{}, std::span<T>{}, root == 0, d);
  }
  std::error_code barrier(diloco::time_point d) { return copy(std::span<const float>{}, std::span<float>{}, true, d); }

 private:
  template <class T>
  static std::error_code copy(std::span<const T> in, std::span<T> out, bool fits, diloco::time_point deadline) {
    if (!fits) return std::make_error_code(std::errc::invalid_argument);
    if (diloco::clock::now() > deadline) return diloco::errc::timed_out;
    if (in.data() != out.data()) std::copy(in.begin(), in.end(), out.begin());
    return {};
  }
};

static_assert(diloco::check_collective<solo>());

/// Loss ½(w − x)² averaged over the batch: gradient w − mean(x).
struct pull_towards {
  using scalar_type = float;
  using batch_type = std::vector<float>;

  pull_towards() { shape.add("w", 1); }
  const diloco::parameter_layout& layout() const { return shape; }
  std::span<float> parameters() { return w; }
  std::span<const float> gradients() const { return g; }
  diloco::step_stats compute_gradients(const batch_type& xs) {
    float mean = 0;
    for (float x : xs) mean += x;
    mean /= float(xs.size());
    g[0] = w[0] - mean;
    return {0.5 * double(g[0]) * double(g[0]), xs.size()};
  }

  diloco::parameter_layout shape;
  std::vector<float> w{3.0f}, g{0.0f};
};

int main() {
  pull_towards model;
  solo ranks;
  diloco::unit_model unit(model, ranks);
  const diloco::step_stats stats = unit.compute_gradients({1.0f, 2.0f, 3.0f, 6.0f});  // mean 3
  const bool ok = unit.gradients()[0] == 0.0f && stats.tokens == 4 && stats.loss == 0.0;
  std::vector<float> too_short(0), two(2);
  const bool refused = ranks.all_gather(std::span<const float>(two), std::span<float>(too_short),
                                        diloco::clock::now()) == std::errc::invalid_argument;
  std::printf("%s\n", ok && refused ? "one rank: the unit's gradient is the model's" : "failed");
  return ok && refused ? 0 : 1;
}
