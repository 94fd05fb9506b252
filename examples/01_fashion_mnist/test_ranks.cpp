// A learner unit of R ranks at batch B trains the same model as one process at
// batch R·B: Fashion-MNIST, the trainer's MLP and inner AdamW, `unit_model`
// over a `diloco::collective`.
//
//   fashion_mnist_ranks_test --backend threads [--ranks 2]   the ranks are threads
//   mpirun -np 2 fashion_mnist_ranks_test --backend mpi      the ranks are processes
//
// Each rank trains on its share of every step's batch (rank r on examples
// [r·B, (r+1)·B) of it), from its own initialization: `unit_model` starts
// every rank from rank 0's parameters. Then one process trains alone on the
// whole batches, twice: in order (the reference), and with each batch's
// examples reversed. The two single-process runs differ only in the order
// their sums are taken, so the distance between them is what reduction-order
// rounding alone does to this model over these steps; the unit must stay as
// close to the reference as that, with every rank holding the same bits.
//
// Prints the distances and exits 0 when the unit agrees; 1 when it does not.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <diloco/collective/threads.hpp>
#include <diloco/collective/unit_model.hpp>
#include <diloco/inner/adamw.hpp>

#include "idx.hpp"
#include "mlp.hpp"

#ifdef FASHION_MNIST_MPI
#include <diloco/collective/mpi.hpp>
#endif

namespace {

struct settings {
  std::string backend = "threads";
  std::size_t ranks = 2;
  std::size_t batch = 32;  ///< per rank
  std::size_t steps = 200;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
};

/// What a run leaves: the final parameters and the loss of every step.
struct trajectory {
  std::vector<float> parameters;
  std::vector<double> losses;
};

/// Examples [first, first + count) of step `step`'s batch of `whole`
/// examples, in order or reversed (the batches walk through the training set
/// and wrap around).
fashion::batch slice(const fashion::split& train, std::size_t step, std::size_t whole, std::size_t first,
                     std::size_t count, bool reversed) {
  fashion::batch b;
  b.features = train.features;
  b.x.resize(std::size_t{train.features} * count);
  b.y.resize(count);
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t within = reversed ? whole - 1 - (first + j) : first + j;
    const std::size_t example = (step * whole + within) % train.count;
    std::copy_n(train.x.begin() + static_cast<std::ptrdiff_t>(example * train.features), train.features,
                b.x.begin() + static_cast<std::ptrdiff_t>(j * train.features));
    b.y[j] = train.y[example];
  }
  return b;
}

/// One rank of a unit: its share of each batch, gradients averaged over the
/// unit by `unit_model`, then AdamW.
template <class Collective>
trajectory train_rank(const fashion::split& train, const settings& s, Collective& ranks) {
  fashion::mlp local({784, 256, 256, 10}, 1 + ranks.rank());  // each rank its own start
  diloco::unit_model unit(local, ranks);
  diloco::inner::adamw<float> inner;
  trajectory t;
  for (std::size_t step = 0; step < s.steps; ++step) {
    const auto b = slice(train, step, s.ranks * s.batch, ranks.rank() * s.batch, s.batch, false);
    t.losses.push_back(unit.compute_gradients(b).loss);
    inner.step(unit.parameters(), unit.gradients());
  }
  t.parameters.assign(unit.parameters().begin(), unit.parameters().end());
  return t;
}

/// One process on the unit's whole batches.
trajectory train_alone(const fashion::split& train, const settings& s, bool reversed) {
  fashion::mlp model({784, 256, 256, 10}, 1);
  diloco::inner::adamw<float> inner;
  trajectory t;
  for (std::size_t step = 0; step < s.steps; ++step) {
    const auto b = slice(train, step, s.ranks * s.batch, 0, s.ranks * s.batch, reversed);
    t.losses.push_back(model.compute_gradients(b).loss);
    inner.step(model.parameters(), model.gradients());
  }
  t.parameters.assign(model.parameters().begin(), model.parameters().end());
  return t;
}

struct distance {
  double parameters = 0;  ///< max |a − b| over the parameters
  double loss = 0;        ///< max |a − b| over the steps' losses
};

distance between(const trajectory& a, const trajectory& b) {
  distance d;
  for (std::size_t i = 0; i < a.parameters.size(); ++i)
    d.parameters = std::max(d.parameters, std::abs(double(a.parameters[i]) - double(b.parameters[i])));
  for (std::size_t i = 0; i < a.losses.size(); ++i) d.loss = std::max(d.loss, std::abs(a.losses[i] - b.losses[i]));
  return d;
}

/// Compares the unit (`ranks_agree`: every rank holds the same bits) with
/// the single process, prints the figures and returns the exit status.
int verdict(const trajectory& unit, bool ranks_agree, const fashion::split& train, const settings& s) {
  const trajectory reference = train_alone(train, s, false);
  const trajectory reordered = train_alone(train, s, true);
  const distance rounding = between(reference, reordered);
  const distance d = between(unit, reference);
  double largest = 0;
  for (float p : reference.parameters) largest = std::max(largest, std::abs(double(p)));
  std::printf("%zu ranks at batch %zu (%s) against one process at batch %zu, %zu steps of AdamW on Fashion-MNIST:\n",
              s.ranks, s.batch, s.backend.c_str(), s.ranks * s.batch, s.steps);
  std::printf("  max |parameter difference|: unit %.3g, reduction order alone %.3g (largest parameter %.3g)\n",
              d.parameters, rounding.parameters, largest);
  std::printf("  max |loss difference| over the steps: unit %.3g, reduction order alone %.3g\n", d.loss, rounding.loss);
  std::printf("  loss at the first and last step: unit %.6f -> %.6f, one process %.6f -> %.6f\n", unit.losses.front(),
              unit.losses.back(), reference.losses.front(), reference.losses.back());
  std::printf("  every rank holds the same parameters: %s\n", ranks_agree ? "yes" : "NO");
  // Within reduction-order rounding: no farther from the reference than the
  // reordered run is, with a factor 4 for the randomness of rounding (two
  // different orders do not land at exactly the same distance).
  const bool close = d.parameters <= 4 * rounding.parameters && d.loss <= 4 * rounding.loss;
  std::printf("%s\n",
              close && ranks_agree ? "the unit trains the same model" : "FAILED: the unit trains another model");
  return close && ranks_agree ? 0 : 1;
}

int run_threads(const fashion::split& train, const settings& s) {
  auto unit = diloco::threads::make_unit(s.ranks);
  std::vector<trajectory> ranks(s.ranks);
  std::vector<std::exception_ptr> errors(s.ranks);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < s.ranks; ++r)
      threads.emplace_back([&, r] {
        try {
          ranks[r] = train_rank(train, s, unit[r]);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  bool agree = true;
  for (const auto& r : ranks) agree = agree && r.parameters == ranks.front().parameters;
  return verdict(ranks.front(), agree, train, s);
}

#ifdef FASHION_MNIST_MPI
int run_mpi(const fashion::split& train, settings s) {
  diloco::mpi::communicator ranks;
  s.ranks = ranks.size();
  const trajectory mine = train_rank(train, s, ranks);
  // Rank 0's parameters to every rank; each compares them with its own.
  std::vector<float> first = mine.parameters;
  const auto deadline = diloco::clock::now() + std::chrono::seconds(60);
  if (auto e = ranks.broadcast(std::span<float>(first), 0, deadline)) throw std::system_error(e, "broadcast");
  double differs = first == mine.parameters ? 0.0 : 1.0;
  if (auto e = ranks.all_reduce(std::span<const double>(&differs, 1), std::span<double>(&differs, 1),
                                diloco::reduce_op::sum, deadline))
    throw std::system_error(e, "all_reduce");
  int status = 0;
  if (ranks.rank() == 0) status = verdict(mine, differs == 0.0, train, s);
  double verdicts = status;
  if (auto e = ranks.all_reduce(std::span<const double>(&verdicts, 1), std::span<double>(&verdicts, 1),
                                diloco::reduce_op::sum, diloco::clock::now() + std::chrono::minutes(10)))
    throw std::system_error(e, "all_reduce");
  return verdicts == 0.0 ? 0 : 1;
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef FASHION_MNIST_MPI
  diloco::mpi::environment mpi(argc, argv);
#endif
  settings s;
  CLI::App app{"A learner unit of several ranks against one process at the unit's batch (Fashion-MNIST)"};
  app.add_option("--backend", s.backend, "threads, or mpi (under mpirun: the unit is the MPI job)")
      ->check(CLI::IsMember({"threads", "mpi"}));
  app.add_option("--ranks", s.ranks, "ranks of the unit (threads; with mpi, mpirun's -np)")->check(CLI::Range(1, 64));
  app.add_option("--batch", s.batch, "examples per rank and step")->check(CLI::Range(1, 4096));
  app.add_option("--steps", s.steps, "inner steps")->check(CLI::Range(1, 100000));
  app.add_option("--data", s.data_dir, "directory of the Fashion-MNIST files (Debian: dataset-fashion-mnist)");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto train = fashion::load_split(s.data_dir, "train");
    if (s.backend == "mpi") {
#ifdef FASHION_MNIST_MPI
      return run_mpi(train, s);
#else
      std::fprintf(stderr, "fashion_mnist_ranks_test: built without MPI (DILOCO_WITH_MPI)\n");
      return 2;
#endif
    }
    return run_threads(train, s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist_ranks_test: %s\n", e.what());
    return 1;
  }
}
