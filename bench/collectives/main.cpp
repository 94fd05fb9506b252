// bench_collectives: the all-reduce of a learner unit through
// `diloco::mpi::communicator` against Open MPI's own MPI_Allreduce, and what
// data parallel costs a unit per inner step. Run under mpirun:
//
//   mpirun -np 2 bench_collectives [--sizes 1,4,16,64] [--repeat 20] [--warmup 2]
//                                  [--step-parameters 269322] [--json]
//
// For each size (MiB of fp32 per rank), on the same buffers and the same
// communicator, repetition after repetition (A B A B …):
//   concept     communicator::all_reduce (MPI_Iallreduce, tested until done or the deadline)
//   mpi         MPI_Allreduce, blocking
// each timed from a barrier to the slowest rank's return; prints median,
// min and max GB/s (bytes of one rank's buffer per second) and the ratio
// concept/mpi of the median speeds. Then `unit_model::compute_gradients`
// on a model whose forward and backward pass is free, with the parameter
// count of the Fashion-MNIST trainer's MLP: the time data parallel adds to
// each inner step (the gradients' all-reduce and the loss and token counts').
// Before timing, both all-reduces are checked against the sum by formula.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <diloco/collective/mpi.hpp>
#include <diloco/collective/unit_model.hpp>
#include <diloco_tools/cli.hpp>

#include "../common/json.hpp"
#include "../common/stats.hpp"

namespace {

using namespace std::chrono_literals;

struct options {
  std::vector<std::size_t> sizes{1, 4, 16, 64};
  int repeat = 20;
  int warmup = 2;
  std::size_t step_parameters = 269'322;  // 784-256-256-10 with biases
  bool json = false;
};

std::optional<int> parse(int argc, char** argv, options& o) {
  CLI::App app(
      "A learner unit's all-reduce through diloco::mpi against MPI_Allreduce, and data parallel's cost "
      "per inner step (run under mpirun).",
      "bench_collectives");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--sizes", o.sizes, "MiB of fp32 per rank (1,4,16,64)")
      ->delimiter(',')
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}).description(""))
      ->option_text("MiB,...");
  app.add_option("--repeat", o.repeat, "timed repetitions of each method (>= 1)")
      ->check(CLI::Range(1, 1'000'000).description(""))
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed repetitions first (>= 0)")
      ->check(CLI::Range(0, 1'000'000).description(""))
      ->capture_default_str();
  app.add_option("--step-parameters", o.step_parameters, "parameters of the model whose inner step is timed")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30).description(""))
      ->capture_default_str();
  app.add_flag("--json", o.json, "one JSON object per measurement on stdout, nothing else");
  return diloco_tools::parse(app, argc, argv);
}

void check(std::error_code e, const char* what) {
  if (e) throw std::system_error(e, what);
}

/// Seconds from a barrier to the slowest rank's return from `f`.
template <class F>
double timed(MPI_Comm comm, F&& f) {
  MPI_Barrier(comm);
  const auto started = std::chrono::steady_clock::now();
  f();
  double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

/// A model whose forward and backward pass costs nothing: what remains of
/// `unit_model::compute_gradients` is what data parallel adds.
struct free_model {
  using scalar_type = float;
  struct batch_type {};
  explicit free_model(std::size_t n) : w(n, 0.5f), g(n, 1.0f) { shape.add("w", n); }
  const diloco::parameter_layout& layout() const { return shape; }
  std::span<float> parameters() { return w; }
  std::span<const float> gradients() const { return g; }
  diloco::step_stats compute_gradients(const batch_type&) { return {1.0, 32}; }
  diloco::parameter_layout shape;
  std::vector<float> w, g;
};

int run(const options& o) {
  diloco::mpi::communicator unit;
  const MPI_Comm comm = unit.native();
  const bool root = unit.rank() == 0;
  const auto ranks = static_cast<double>(unit.size());
  auto deadline = [] { return diloco::clock::now() + 60s; };

  for (const std::size_t mib : o.sizes) {
    const std::size_t n = mib * (std::size_t{1} << 20) / sizeof(float);
    // Rank r holds r + (i mod 8): the sum is Σr + R·(i mod 8), exact in fp32.
    std::vector<float> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = float(unit.rank()) + float(i % 8);
    const double sum_of_ranks = ranks * (ranks - 1) / 2;
    auto correct = [&] {
      for (std::size_t i = 0; i < n; ++i)
        if (double(out[i]) != sum_of_ranks + ranks * double(i % 8)) return false;
      return true;
    };
    auto concept_once = [&] {
      check(unit.all_reduce(std::span<const float>(in), std::span<float>(out), diloco::reduce_op::sum, deadline()),
            "all_reduce");
    };
    auto mpi_once = [&] { MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm); };
    concept_once();
    const bool concept_ok = correct();
    std::fill(out.begin(), out.end(), 0.0f);
    mpi_once();
    if (!concept_ok || !correct()) throw std::runtime_error("an all-reduce gave a wrong sum");

    std::vector<double> concept_s, mpi_s;
    for (int k = 0; k < o.warmup + o.repeat; ++k) {
      const double a = timed(comm, concept_once), b = timed(comm, mpi_once);
      if (k >= o.warmup) {
        concept_s.push_back(a);
        mpi_s.push_back(b);
      }
    }
    const double bytes = double(n) * sizeof(float);
    auto speeds = [&](const std::vector<double>& seconds) {
      std::vector<double> gbs;
      for (double s : seconds) gbs.push_back(bytes / s / 1e9);
      return bench::summarize(gbs);
    };
    const auto c = speeds(concept_s), m = speeds(mpi_s);
    if (!root) continue;
    if (o.json) {
      bench::json j;
      j["measurement"] = "all_reduce";
      j["ranks"] = unit.size();
      j["mib_per_rank"] = mib;
      j["concept_gbs"] = {{"median", bench::rounded(c.median, 3)},
                          {"min", bench::rounded(c.min, 3)},
                          {"max", bench::rounded(c.max, 3)}};
      j["mpi_allreduce_gbs"] = {{"median", bench::rounded(m.median, 3)},
                                {"min", bench::rounded(m.min, 3)},
                                {"max", bench::rounded(m.max, 3)}};
      j["concept_over_mpi"] = bench::rounded(c.median / m.median, 3);
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf(
          "all_reduce %4zu MiB x %zu ranks: concept %7.3f GB/s [%.3f, %.3f], MPI_Allreduce %7.3f GB/s "
          "[%.3f, %.3f], concept/mpi %.3f\n",
          mib, unit.size(), c.median, c.min, c.max, m.median, m.min, m.max, c.median / m.median);
    }
  }

  // Data parallel's cost per inner step.
  free_model model(o.step_parameters);
  diloco::unit_model<free_model, diloco::mpi::communicator> dp(model, unit);
  std::vector<double> step_s;
  for (int k = 0; k < o.warmup + o.repeat * 5; ++k) {
    const double s = timed(comm, [&] { dp.compute_gradients({}); });
    if (k >= o.warmup) step_s.push_back(s);
  }
  if (dp.gradients()[0] != 1.0f) throw std::runtime_error("unit_model: the mean of equal gradients changed");
  const auto step = bench::summarize(step_s);
  if (root) {
    if (o.json) {
      bench::json j;
      j["measurement"] = "data_parallel_step";
      j["ranks"] = unit.size();
      j["parameters"] = o.step_parameters;
      j["added_us"] = {{"median", bench::rounded(step.median * 1e6, 1)},
                       {"min", bench::rounded(step.min * 1e6, 1)},
                       {"max", bench::rounded(step.max * 1e6, 1)}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("data parallel: %zu parameters x %zu ranks add %.1f us to each inner step [%.1f, %.1f]\n",
                  o.step_parameters, unit.size(), step.median * 1e6, step.min * 1e6, step.max * 1e6);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  diloco::mpi::environment mpi(argc, argv);
  options o;
  if (auto status = parse(argc, argv, o)) return *status;
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
