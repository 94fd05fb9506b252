// GPU learners of the trainer, tested from the host through gpu.hpp (this
// file is plain C++; the GPU code is in gpu_learner.cu).
//
//   fashion_mnist_gpu_tests model      the GPU model against the CPU `mlp`
//   fashion_mnist_gpu_tests mixed_run  1 CPU + 1 GPU learner on one syncer
//
// Exit status 0 if every check passed, 1 if one failed or a GPU is there
// but unusable, 77 (CTest: skipped) where there is no GPU at all — after the
// checks that need none (DILOCO_REQUIRE_GPU=1: 1; tests/support/gpu.hpp).
//
// `model`: the layout and the initial parameters must equal `mlp`'s, bit for
// bit (the same names, sizes and draws). Loss and gradients on a fixed batch
// are compared with a double-precision reference written here from the
// formulas (plain loops, an implementation independent of both models):
// each tensor's gradient within `gradient_tolerance` × its largest reference
// magnitude, the loss within `loss_tolerance` relative. The CPU `mlp` is held
// to the same bounds (checked without a GPU too), so they are attainable and
// tight enough to fail (a wrong index, mask or scale is off by far more).
// Why these bounds: every value is a float sum of at most 784 products in an
// order the library picks (Eigen's blocks, cuBLAS's tiles); rounding errors
// of such sums grow like √k·u of the sum of magnitudes in practice (u = 2⁻²⁴,
// √784·u ≈ 1.7·10⁻⁶), and three layers compound them: about 5·10⁻⁶ of a
// tensor's largest gradient. The bound, 2·10⁻⁵ of it, leaves a factor 4 for
// the order cuBLAS picks; the CPU `mlp` measured 3.7·10⁻⁷ (under 2 % of the
// bound; each run prints its own). The loss: 10⁻⁶ relative (the CPU's
// error: 10⁻⁸).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>

#include "gpu.hpp"
#include "idx.hpp"
#include "mlp.hpp"
#include "support/gpu.hpp"
#include "trainer.hpp"

namespace {

constexpr int skipped = 77;
constexpr double gradient_tolerance = 2e-5;
constexpr double loss_tolerance = 1e-6;
int failures = 0;

/// 0 when the GPU checks can run; else the exit status: skipped (77) only
/// where there is no GPU at all and DILOCO_REQUIRE_GPU=1 is not set, failed
/// (1) where one is there but cannot be used (tests/support/gpu.hpp).
int gpu_status() {
  const auto gpus = diloco::test::count_gpus();
  if (gpus.devices == 0) return diloco::test::no_gpu_status(gpus);
  if (const auto why = fashion::gpu_unavailable()) {
    std::printf("FAILED: a GPU is here, but the GPU learner cannot use it: %s\n", why->c_str());
    return 1;
  }
  return 0;
}

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "check failed: %s\n", what.c_str());
  }
}

/// A fixed batch: n images of pseudo-random pixels in [0, 1], with labels.
fashion::batch fixed_batch(std::uint32_t n) {
  fashion::batch b;
  b.features = 784;
  b.x.resize(std::size_t(784) * n);
  b.y.resize(n);
  diloco::splitmix64 rng(2024);
  for (auto& v : b.x) v = float(rng.uniform());
  for (auto& y : b.y) y = static_cast<std::uint8_t>(rng.below(10));
  return b;
}

/// Loss and gradients of the 784-256-256-10 MLP in double, from the
/// formulas: Z_l = W_l A_{l−1} + b_l, A_l = max(Z_l, 0), softmax
/// cross-entropy; dZ_L = (P − onehot)/n, dW_l = dZ_l A_{l−1}ᵀ, db_l = Σ_j dZ_l,
/// dA_{l−1} = W_lᵀ dZ_l, dZ_{l−1} = dA_{l−1} · [Z_{l−1} > 0]. Weights
/// column-major out × in, as the models hold them.
struct reference {
  double loss = 0.0;
  std::vector<double> gradients;
};

reference reference_gradients(const std::vector<float>& params, const fashion::batch& b) {
  const std::vector<std::size_t> w{784, 256, 256, 10};
  const std::size_t layers = w.size() - 1, n = b.size();
  std::vector<std::size_t> weight_at, bias_at;
  std::size_t offset = 0;
  for (std::size_t l = 0; l < layers; ++l) {
    weight_at.push_back(offset);
    offset += w[l + 1] * w[l];
    bias_at.push_back(offset);
    offset += w[l + 1];
  }
  std::vector<std::vector<double>> z(layers), a(layers + 1);
  a[0].assign(b.x.begin(), b.x.end());
  for (std::size_t l = 0; l < layers; ++l) {
    const std::size_t out = w[l + 1], in = w[l];
    z[l].assign(out * n, 0.0);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t r = 0; r < out; ++r) {
        double sum = params[bias_at[l] + r];
        for (std::size_t k = 0; k < in; ++k) sum += double(params[weight_at[l] + r + k * out]) * a[l][k + j * in];
        z[l][r + j * out] = sum;
      }
    a[l + 1] = z[l];
    if (l + 1 < layers)
      for (auto& v : a[l + 1]) v = std::max(v, 0.0);
  }
  reference ref;
  ref.gradients.assign(offset, 0.0);
  const std::size_t classes = w.back();
  std::vector<double> dz(classes * n);
  for (std::size_t j = 0; j < n; ++j) {
    const double* logits = &z.back()[j * classes];
    const double top = *std::max_element(logits, logits + classes);
    double sum = 0.0;
    for (std::size_t r = 0; r < classes; ++r) sum += std::exp(logits[r] - top);
    ref.loss += std::log(sum) - (logits[b.y[j]] - top);
    for (std::size_t r = 0; r < classes; ++r)
      dz[r + j * classes] = (std::exp(logits[r] - top) / sum - (r == b.y[j] ? 1.0 : 0.0)) / double(n);
  }
  ref.loss /= double(n);
  for (std::size_t l = layers; l-- > 0;) {
    const std::size_t out = w[l + 1], in = w[l];
    for (std::size_t r = 0; r < out; ++r) {
      for (std::size_t k = 0; k < in; ++k) {
        double sum = 0.0;
        for (std::size_t j = 0; j < n; ++j) sum += dz[r + j * out] * a[l][k + j * in];
        ref.gradients[weight_at[l] + r + k * out] = sum;
      }
      double sum = 0.0;
      for (std::size_t j = 0; j < n; ++j) sum += dz[r + j * out];
      ref.gradients[bias_at[l] + r] = sum;
    }
    if (l == 0) break;
    std::vector<double> previous(in * n, 0.0);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t k = 0; k < in; ++k) {
        double sum = 0.0;
        for (std::size_t r = 0; r < out; ++r) sum += double(params[weight_at[l] + r + k * out]) * dz[r + j * out];
        previous[k + j * in] = z[l - 1][k + j * in] > 0.0 ? sum : 0.0;
      }
    dz = std::move(previous);
  }
  return ref;
}

/// Checks `loss` and `gradients` of model `who` against the reference, tensor
/// by tensor; prints the worst error as a fraction of the tolerance.
void check_against(const char* who, const diloco::parameter_layout& layout, double loss,
                   std::span<const float> gradients, const reference& ref) {
  check(std::fabs(loss - ref.loss) <= loss_tolerance * std::max(1.0, std::fabs(ref.loss)),
        std::string(who) + ": loss " + std::to_string(loss) + ", reference " + std::to_string(ref.loss));
  double worst = 0.0;
  for (const auto& t : layout.tensors()) {
    double largest = 0.0;
    for (std::size_t i = 0; i < t.size; ++i) largest = std::max(largest, std::fabs(ref.gradients[t.offset + i]));
    check(largest > 0.0, std::string(who) + ": tensor " + t.name + " has no gradient in the reference");
    const double tolerance = gradient_tolerance * largest;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < t.size; ++i) {
      const double error = std::fabs(double(gradients[t.offset + i]) - ref.gradients[t.offset + i]);
      worst = std::max(worst, error / tolerance);
      wrong += !(error <= tolerance);
    }
    check(wrong == 0,
          std::string(who) + ": " + std::to_string(wrong) + " gradients of " + t.name + " beyond the tolerance");
  }
  std::printf("%s: loss %.9g (reference %.9g); worst gradient error %.3g of the tolerance\n", who, loss, ref.loss,
              worst);
}

/// The parameters to compare at: `mlp`'s initial ones, with biases made
/// non-zero so that their path is checked too.
std::vector<float> test_parameters(fashion::mlp& cpu) {
  std::vector<float> params(cpu.parameters().begin(), cpu.parameters().end());
  diloco::splitmix64 rng(99);
  for (const auto& t : cpu.layout().tensors())
    if (t.name.ends_with(".bias"))
      for (std::size_t i = 0; i < t.size; ++i) params[t.offset + i] = float(0.1 * (2.0 * rng.uniform() - 1.0));
  return params;
}

int model_suite() {
  fashion::mlp cpu({784, 256, 256, 10}, 7);
  const auto params = test_parameters(cpu);
  std::copy(params.begin(), params.end(), cpu.parameters().begin());
  const auto b = fixed_batch(48);
  const auto ref = reference_gradients(params, b);
  const auto cpu_stats = cpu.compute_gradients(b);
  check_against("cpu mlp", cpu.layout(), cpu_stats.loss, cpu.gradients(), ref);
  if (const int status = gpu_status()) return failures == 0 ? status : 1;

  for (const std::uint64_t seed : {1ull, 7ull}) {
    fashion::mlp initial({784, 256, 256, 10}, seed);
    const auto probe = fashion::probe_gpu_mlp(seed, params, b);
    check(probe.layout == initial.layout() && probe.layout.fingerprint() == initial.layout().fingerprint(),
          "the GPU model's layout differs from mlp's");
    check(probe.initial.size() == initial.parameters().size() &&
              std::memcmp(probe.initial.data(), initial.parameters().data(), probe.initial.size() * sizeof(float)) == 0,
          "the GPU model's initial parameters differ from mlp's for seed " + std::to_string(seed));
    if (seed != 7) continue;
    check(probe.stats.tokens == b.size(), "the GPU model counts " + std::to_string(probe.stats.tokens) + " examples");
    check_against("gpu mlp", probe.layout, probe.stats.loss, probe.gradients, ref);
  }
  return failures == 0 ? 0 : 1;
}

/// One run of the trainer's decoupled mode on `via` with `gpu` of its 2
/// learners on the GPU.
fashion::outcome run(fashion::transport via, std::uint32_t gpu, std::uint64_t steps, const fashion::split& train,
                     const fashion::split& test) {
  fashion::settings s;
  s.via = via;
  s.learners = 2;
  s.gpu_learners = gpu;
  s.steps = steps;
  s.progress_seconds = 0;
  s.eval_every = 0;
  diloco::syncer_options options = diloco::presets::decoupled_diloco(s.sync_period, s.fragments, 1, s.sync_period / 10);
  return fashion::train(s, train, test, diloco::inner::adamw<float>(fashion::adamw_options_of(s)),
                        example_trainer::nesterov_of(s), diloco::merge::token_weighted{}, options);
}

/// 1 CPU + 1 GPU learner on one syncer, simulated (300 steps each) and on
/// threads (200 each): every step taken, and the model as good as a run of
/// 2 CPU learners (within 3 points; both are above 0.75 after 300 steps).
int mixed_run_suite() {
  if (const int status = gpu_status()) return status;
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  fashion::split train, test;
  try {
    train = fashion::load_split(dir, "train");
    test = fashion::load_split(dir, "t10k");
  } catch (const fashion::dataset_error& e) {
    std::printf("skipped: no Fashion-MNIST in %s (%s)\n", dir.c_str(), e.what());
    return skipped;
  }
  const auto cpu = run(fashion::transport::simulated, 0, 300, train, test);
  const auto mixed = run(fashion::transport::simulated, 1, 300, train, test);
  std::printf("sim, 300 steps: 2 CPU learners %.4f, 1 CPU + 1 GPU %.4f\n", cpu.test_accuracy, mixed.test_accuracy);
  check(mixed.completed && mixed.error.empty(), "mixed sim run: " + mixed.error);
  check(mixed.inner_steps == 600, "mixed sim run: " + std::to_string(mixed.inner_steps) + " inner steps");
  check(mixed.outer_updates > 0 && mixed.contributions_merged >= 2 * 300 / 50, "mixed sim run: too few contributions");
  check(mixed.test_accuracy >= 0.75, "mixed sim run: accuracy " + std::to_string(mixed.test_accuracy));
  check(std::fabs(mixed.test_accuracy - cpu.test_accuracy) <= 0.03, "mixed sim run: far from the CPU run");

  const auto threads = run(fashion::transport::threads, 1, 200, train, test);
  std::printf("threads, 200 steps: 1 CPU + 1 GPU %.4f\n", threads.test_accuracy);
  check(threads.completed && threads.error.empty(), "mixed threaded run: " + threads.error);
  check(threads.inner_steps == 400, "mixed threaded run: " + std::to_string(threads.inner_steps) + " inner steps");
  check(threads.test_accuracy >= 0.7, "mixed threaded run: accuracy " + std::to_string(threads.test_accuracy));
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string suite = argc > 1 ? argv[1] : "";
  try {
    if (suite == "model") return model_suite();
    if (suite == "mixed_run") return mixed_run_suite();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", suite.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: fashion_mnist_gpu_tests model|mixed_run\n");
  return 1;
}
