// fashion_mnist: trains an MLP on the real Fashion-MNIST with synchronous data
// parallelism, DiLoCo or Decoupled DiLoCo — three configurations of the same
// diloco runtime — and prints the result as one JSON line.
//
//   fashion_mnist --mode decoupled --learners 4 --speeds 1,1,0.7,0.5

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <diloco_tools/json.hpp>
#include <example_trainer/outcome.hpp>
#include <example_trainer/this_program.hpp>
#include <nlohmann/json.hpp>

#include "command_line.hpp"
#include "trainer.hpp"
#ifdef FASHION_MNIST_MPI
#include "mpi_unit.hpp"
#endif

namespace {

using json = nlohmann::ordered_json;  // keeps the fields in the order written
using diloco_tools::six_digits;
using example_trainer::name;

/// The f32 parameters in `path`, which must hold exactly `count` of them.
std::vector<float> read_parameters(const std::string& path, std::size_t count) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::invalid_argument("cannot read " + path);
  const auto bytes = static_cast<std::size_t>(in.tellg());
  if (bytes != count * sizeof(float))
    throw std::invalid_argument(path + " holds " + std::to_string(bytes) + " bytes; this model has " +
                                std::to_string(count) + " f32 parameters");
  std::vector<float> params(count);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(params.data()), static_cast<std::streamsize>(bytes));
  if (!in) throw std::invalid_argument("cannot read " + path);
  return params;
}

void print_evaluation(const std::string& file, std::span<const float> params, const fashion::split& test,
                      std::uint64_t seed) {
  const auto [accuracy, loss] = fashion::evaluate(params, test, seed);
  std::printf(
      "%s\n",
      json{{"file", file}, {"test_accuracy", six_digits(accuracy)}, {"test_loss", six_digits(loss)}}.dump().c_str());
}

/// `--evaluate`: the test accuracy and loss of the parameters in each of
/// `paths`, one JSON line each.
int evaluate_saved(const fashion::settings& s, const std::vector<std::string>& paths) {
  fashion::mlp shape({784, 256, 256, 10}, s.seed);
  const auto test = fashion::load_split(s.data_dir, "t10k");
  for (const auto& path : paths) print_evaluation(path, read_parameters(path, shape.parameters().size()), test, s.seed);
  return 0;
}

/// `--evaluate-shards`: the model of a sharded syncer, `paths[k]` the
/// parameters shard k of S saved (diloco_syncer --save): fragment p of
/// `fragments` is shard p mod S's. One JSON line.
int evaluate_shards(const fashion::settings& s, const std::vector<std::string>& paths, std::uint32_t fragments) {
  fashion::mlp shape({784, 256, 256, 10}, s.seed);
  if (paths.size() > fragments)
    throw std::invalid_argument(std::to_string(paths.size()) + " shards of " + std::to_string(fragments) +
                                " fragments: a shard owns at least one fragment");
  const auto plan = diloco::fragment_plan::balanced(shape.layout(), fragments);
  const auto total = shape.parameters().size();
  std::vector<float> model(total);
  std::vector<float> packed;
  for (std::size_t k = 0; k < paths.size(); ++k) {
    const auto shard = read_parameters(paths[k], total);
    for (std::size_t p = k; p < plan.count(); p += paths.size()) {
      packed.resize(plan[p].size());
      plan.gather<float>(p, shard, packed);
      plan.scatter<float>(p, packed, model);
    }
  }
  std::string joined;
  for (const auto& path : paths) joined += (joined.empty() ? "" : ",") + path;
  print_evaluation(joined, model, fashion::load_split(s.data_dir, "t10k"), s.seed);
  return 0;
}

/// The syncer options of a mode, with the command line's overrides.
diloco::syncer_options syncer_options_for(const fashion::settings& s) {
  diloco::syncer_options o = example_trainer::syncer_options_for(s);
  o.screening = s.screening;
  return o;
}

/// Calls `go(inner, outer, merge)` with the policies the settings choose.
template <class Go>
fashion::outcome with_policies(const fashion::settings& s, Go&& go) {
  using namespace diloco;
  const inner::adamw_options adamw = fashion::adamw_options_of(s);
  if (s.run_mode == fashion::mode::data_parallel)
    return go(presets::data_parallel_inner<float>(presets::data_parallel_inner_options()),
              presets::data_parallel_outer<float>(adamw), merge::average{});
  const inner::adamw<float> inner_step(adamw);
  const auto outer_step = example_trainer::nesterov_of(s);
  switch (s.merge) {
    case fashion::merge_rule::average: return go(inner_step, outer_step, merge::average{});
    case fashion::merge_rule::radial_directional: return go(inner_step, outer_step, merge::radial_directional<>{});
    case fashion::merge_rule::trimmed_mean: return go(inner_step, outer_step, merge::trimmed_mean<>{});
    case fashion::merge_rule::coordinate_median: return go(inner_step, outer_step, merge::coordinate_median<>{});
    case fashion::merge_rule::token_weighted: break;
  }
  return go(inner_step, outer_step, merge::token_weighted{});
}

fashion::outcome run(const fashion::settings& s) {
  const auto options = syncer_options_for(s);
  switch (s.part) {
    case fashion::role::syncer: {
      const auto test = fashion::load_split(s.data_dir, "t10k");
      return with_policies(
          s, [&](auto, auto outer, auto merge) { return fashion::serve(s, test, outer, merge, options); });
    }
    case fashion::role::learner: {
      const auto train = fashion::load_split(s.data_dir, "train");
#ifdef FASHION_MNIST_MPI
      if (s.ranks_per_unit > 1)
        return with_policies(s, [&](auto inner, auto, auto) { return fashion::learn_in_unit(s, train, inner); });
#endif
      return with_policies(s, [&](auto inner, auto, auto) { return fashion::learn(s, train, inner); });
    }
    case fashion::role::in_process: break;
  }
  const auto train = fashion::load_split(s.data_dir, "train");
  const auto test = fashion::load_split(s.data_dir, "t10k");
  return with_policies(s, [&](auto inner, auto outer, auto merge) {
    return fashion::train(s, train, test, inner, outer, merge, options);
  });
}

/// The result line of the syncer (or of the whole run in one process).
json result_line(const fashion::settings& s, const diloco::syncer_options& options, const fashion::outcome& r) {
  json speeds = json::array();
  for (std::uint32_t i = 0; i < s.learners; ++i) speeds.push_back(six_digits(s.speed_of(i)));
  return {{"mode", name(s.run_mode)},
          {"transport", example_trainer::transport_name(s)},
          {"learners", s.learners},
          {"steps", s.steps},
          {"batch", s.batch},
          {"H", options.training.sync_period},
          {"fragments", options.training.fragments},
          {"quorum", options.quorum},
          {"overlap", options.training.overlap},
          {"alpha", six_digits(options.training.mixing)},
          {"adopt", diloco::name(s.adopt)},
          {"seed", s.seed},
          {"speeds", std::move(speeds)},
          {"test_accuracy", six_digits(r.test_accuracy)},
          {"test_loss", six_digits(r.test_loss)},
          {"train_loss", r.train_loss ? json(six_digits(*r.train_loss)) : json(nullptr)},
          {"outer_updates", r.outer_updates},
          {"inner_steps", r.inner_steps},
          {"contributions_merged", r.contributions_merged},
          {"rejected", r.rejected},
          {"clipped", r.clipped},
          {"quarantines", r.quarantines},
          {"rounds_dropped", r.rounds_dropped},
          {"partial_rounds", r.partial_rounds},
          {"staleness_mean", six_digits(r.staleness_mean)},
          {"staleness_max", r.staleness_max},
          {"codec", std::string(diloco::codec::name(options.training.codecs.contributions))},
          {"update_codec", std::string(diloco::codec::name(options.training.codecs.updates))},
          {"codec_block", options.training.codecs.block},
          {"error_feedback", s.error_feedback},
          {"bytes_sent", r.bytes_sent},
          {"bytes_received", r.bytes_received},
          {"end_scale", six_digits(r.end_scale)},
          {"fragment_imbalance", six_digits(r.imbalance)},
          {"completed", r.completed},
          {"seconds", six_digits(r.seconds)},
          {"virtual_seconds", six_digits(r.virtual_seconds)}};
}

}  // namespace

int main(int argc, char** argv) {
  fashion::command c;
  if (const auto status = fashion::parse_command_line(argc, argv, c)) return *status;
  const fashion::settings& s = c.run;
  try {
    if (c.parsed.launch_all)
      return example_trainer::run_this_program(argc, argv, "fashion_mnist", s.learners, s.endpoint);
    if (!c.evaluate_files.empty()) return evaluate_saved(s, c.evaluate_files);
    const auto options = syncer_options_for(s);  // validated again by the syncer
    if (!c.shard_files.empty()) return evaluate_shards(s, c.shard_files, options.training.fragments);
    if (s.progress_seconds > 0 && s.part != fashion::role::learner)
      std::fprintf(stderr,
                   "fashion_mnist: %s, %u learners x %llu steps of %u, H=%u, P=%u, K=%u, tau=%u, alpha=%g, %s\n",
                   name(s.run_mode), s.learners, static_cast<unsigned long long>(s.steps), s.batch,
                   options.training.sync_period, options.training.fragments, options.quorum, options.training.overlap,
                   options.training.mixing, example_trainer::run_description(s));
    const auto r = run(s);
    if (!r.error.empty()) {
      std::fprintf(stderr, "fashion_mnist: error: %s\n", r.error.c_str());
      return 1;
    }
    if (s.part == fashion::role::learner) {
      std::printf("%s\n", example_trainer::learner_line(s, r).dump().c_str());
      return 0;
    }
    auto line = result_line(s, options, r);
    example_trainer::add_outer_fields(line, s);
    example_trainer::add_work_fields(line, r);
    if (s.gpu_learners > 0) line["gpu_learners"] = s.gpu_learners;  // absent from CPU-only runs, as before
    std::printf("%s\n", line.dump().c_str());
    return r.completed ? 0 : 1;
  } catch (const fashion::dataset_error& e) {
    std::fprintf(stderr,
                 "fashion_mnist: error: %s\n(the dataset comes with Debian's dataset-fashion-mnist package; "
                 "pass --data-dir for another location)\n",
                 e.what());
    return 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return 2;
  } catch (const std::runtime_error& e) {  // e.g. diloco::cuda::error: a GPU learner's device failed
    std::fprintf(stderr, "fashion_mnist: error: %s\n", e.what());
    return 1;
  }
}
