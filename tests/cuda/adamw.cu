// The device AdamW step against inner::adamw on the same inputs, over
// several steps. Tolerance: both apply inner::adamw_element with the same
// per-step constants (adamw_element::at_step), and sqrt and division are
// correctly rounded on both (nvcc's defaults, no fast math); nvcc contracts
// the moment updates and the decayed-parameter update into FMAs. Each
// contraction changes a result by at most u of a term (u the unit roundoff:
// 2⁻²⁴ float, 2⁻⁵³ double), and Adam's step
// is at most (1−β1)/√(1−β2) ≈ 3.2 times lr (Kingma & Ba, section 2.1), so
// after s steps a parameter is within s·(4u·|p| + 64u·lr) of the CPU's (a
// margin of 5 over the roundings of the moments and the step).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "diloco/cuda/adamw.cuh"
#include "diloco/inner/adamw.hpp"
#include "harness.hpp"

namespace {

namespace dc = diloco::cuda;
namespace t = diloco::test::cuda;

template <class T>
void check_adamw() {
  constexpr double eps = std::numeric_limits<T>::epsilon() / 2;  // the unit roundoff
  constexpr std::size_t n = 100003;
  constexpr int steps = 5;
  const diloco::inner::adamw_options options{.learning_rate = 3e-3, .weight_decay = 0.1};
  std::mt19937 rng(11);
  std::normal_distribution<T> normal(T(0), T(1));
  std::vector<T> params(n);
  for (auto& x : params) x = normal(rng);
  std::vector<std::vector<T>> grads(steps, std::vector<T>(n));
  for (auto& g : grads)
    for (auto& x : g) x = T(0.1) * normal(rng);

  diloco::inner::adamw<T> cpu(options);
  std::vector<T> cpu_params = params;
  auto p = t::upload(params);
  auto m = t::upload(std::vector<T>(n, T(0)));
  auto v = t::upload(std::vector<T>(n, T(0)));
  for (int s = 0; s < steps; ++s) {
    cpu.step(std::span<T>(cpu_params), std::span<const T>(grads[s]));
    auto g = t::upload(grads[s]);
    const auto f = diloco::inner::adamw_element<T>::at_step(options, static_cast<std::uint64_t>(s + 1));
    CUDA_TEST_REQUIRE_SUCCESS(dc::adamw_step(f, p.span(), m.span(), v.span(), std::span<const T>(g.span()), nullptr));
    t::download(g);  // the step has finished before g is freed
  }
  const auto got = t::download(p);
  std::size_t wrong = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double tolerance = steps * (4 * eps * std::fabs(cpu_params[i]) + 64 * eps * options.learning_rate);
    const double error = std::fabs(double(got[i]) - cpu_params[i]);
    worst = std::max(worst, error / tolerance);
    wrong += !(error <= tolerance);
  }
  CUDA_TEST_CHECK(wrong == 0, std::string(sizeof(T) == 8 ? "double: " : "float: ") + std::to_string(wrong) +
                                  " parameters beyond the tolerance; worst error " + std::to_string(worst) +
                                  " times it");
  // The step moved the parameters: a kernel that did nothing would fail above
  // only if the tolerance were loose; make sure it is not.
  double moved = 0.0;
  for (std::size_t i = 0; i < n; ++i) moved = std::max(moved, std::fabs(double(cpu_params[i]) - params[i]));
  CUDA_TEST_CHECK(moved > 100 * steps * 64 * eps * options.learning_rate, "the test's steps are too small");
}

DILOCO_CUDA_TEST(adamw, matches_inner_adamw) {
  check_adamw<float>();
  check_adamw<double>();
}

/// `cuda::adamw<T>`, the inner step, against `inner::adamw<T>` on the same
/// inputs, with the kernel's bound above: `steps` steps on a stream of its
/// own; then each saves its state, the other loads it, and both take
/// `steps` more — within the bound for 2·steps, so the moments and the step
/// count crossed in `inner::adamw`'s format both ways.
template <class T>
void check_inner_step() {
  constexpr double eps = std::numeric_limits<T>::epsilon() / 2;
  constexpr std::size_t n = 4099;
  constexpr int steps = 4;
  const diloco::inner::adamw_options options{.learning_rate = 2e-3, .weight_decay = 0.05};
  std::mt19937 rng(5);
  std::normal_distribution<T> normal(T(0), T(1));
  std::vector<T> params(n);
  for (auto& x : params) x = normal(rng);
  std::vector<std::vector<T>> grads(2 * steps, std::vector<T>(n));
  for (auto& g : grads)
    for (auto& x : g) x = T(0.1) * normal(rng);

  dc::stream stream;
  diloco::inner::adamw<T> cpu(options);
  dc::adamw<T> gpu(options, stream.get());
  CUDA_TEST_CHECK(gpu.stream() == stream.get() && gpu.options().learning_rate == options.learning_rate, "options");
  std::vector<T> cpu_params = params;
  auto p = t::upload(params);
  std::vector<dc::device_buffer<T>> g;
  for (const auto& x : grads) g.push_back(t::upload(x));
  auto steps_on_both = [&](diloco::inner::adamw<T>& c, dc::adamw<T>& d, int from) {
    for (int s = from; s < from + steps; ++s) {
      c.step(std::span<T>(cpu_params), std::span<const T>(grads[s]));
      d.step(p.span(), std::span<const T>(g[s].span()));
    }
  };
  auto compare = [&](int after, const char* what) {
    const auto got = t::download(p);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double tolerance = after * (4 * eps * std::fabs(cpu_params[i]) + 64 * eps * options.learning_rate);
      wrong += !(std::fabs(double(got[i]) - cpu_params[i]) <= tolerance);
    }
    CUDA_TEST_CHECK(wrong == 0, std::string(sizeof(T) == 8 ? "double, " : "float, ") + what + ": " +
                                    std::to_string(wrong) + " parameters beyond the tolerance");
  };
  steps_on_both(cpu, gpu, 0);
  CUDA_TEST_CHECK(gpu.steps() == steps, "step count");
  compare(steps, "first steps");

  // Swap the states through save and load: the CPU continues from the GPU's
  // moments and the GPU from the CPU's.
  std::stringstream from_gpu, from_cpu;
  gpu.save(from_gpu);
  cpu.save(from_cpu);
  diloco::inner::adamw<T> cpu2(options);
  dc::adamw<T> gpu2(options, stream.get());
  cpu2.load(from_gpu);
  gpu2.load(from_cpu);
  CUDA_TEST_CHECK(cpu2.steps() == steps && gpu2.steps() == steps, "step counts after load");
  steps_on_both(cpu2, gpu2, steps);
  compare(2 * steps, "after swapping states");

  // A corrupt state is refused and leaves the step as it was.
  std::stringstream bad("not a state");
  bool refused = false;
  try {
    gpu2.load(bad);
  } catch (const diloco::corrupt_state&) {
    refused = true;
  }
  CUDA_TEST_CHECK(refused && gpu2.steps() == steps * 2, "a corrupt state was not refused");
  for (auto& x : g) t::download(x);  // the steps have finished before the gradients are freed
}

DILOCO_CUDA_TEST(adamw, inner_step_matches_inner_adamw) {
  check_inner_step<float>();
  check_inner_step<double>();
  bool refused = false;
  try {
    dc::adamw<float> bad({.beta1 = 1.0}, nullptr);
  } catch (const std::invalid_argument&) {
    refused = true;
  }
  CUDA_TEST_CHECK(refused, "beta1 = 1 was not refused");
}

}  // namespace
