// char_lm: trains a character-level transformer (LibTorch, through the
// diloco::torch adapter) on the King James Bible with synchronous data
// parallelism, DiLoCo or Decoupled DiLoCo, and prints the result as one JSON
// line: validation loss, bits per character, outer updates, inner steps.
//
//   char_lm --mode decoupled --learners 4 --speeds 1,1,0.7,0.5

#include <dlfcn.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <diloco_tools/cli.hpp>
#include <diloco_tools/json.hpp>
#include <example_trainer/command_line.hpp>
#include <example_trainer/outcome.hpp>
#include <example_trainer/this_program.hpp>
#include <nlohmann/json.hpp>

#include "trainer.hpp"
#ifdef CHAR_LM_MPI
#include "unit.hpp"
#endif

namespace {

using json = nlohmann::ordered_json;
using diloco_tools::add_choice;
using diloco_tools::add_number;
using diloco_tools::parse_number;
using diloco_tools::six_digits;
using example_trainer::name;
using example_trainer::syncer_options_for;

struct command {
  text::settings run;
  example_trainer::parsed_run parsed;  ///< `--role all`, `--fragments`
};

/// Reads the command line into `c`; nothing to go on, or the exit status.
std::optional<int> parse_command_line(int argc, char** argv, command& c) {
  CLI::App app(
      "Trains a character-level transformer on the King James Bible (Debian's bible-kjv) with M learners "
      "and prints one JSON line with the validation loss of the final global model.",
      "char_lm");
  app.get_formatter()->column_width(34);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras();
  text::settings& s = c.run;
  using u32 = std::uint32_t;
  using u64 = std::uint64_t;
  using i64 = std::int64_t;
  constexpr double real_max = std::numeric_limits<double>::max();

  example_trainer::add_run_shape(app, s, c.parsed);
  add_number<u32>(app, "--batch", s.batch, {1, 1 << 16}, "windows per inner step (16)", "B");
  example_trainer::add_transport(app, s);
  add_choice(app, "--merge", s.merge,
             {{"tokens", text::merge_rule::token_weighted},
              {"average", text::merge_rule::average},
              {"rda", text::merge_rule::radial_directional}},
             "merge rule", "token-weighted mean, plain mean or radial-directional averaging (tokens)");
  add_choice(app, "--inner", s.inner,
             {{"torch", text::inner_optimizer::torch}, {"library", text::inner_optimizer::library}}, "inner optimizer",
             "DiLoCo's inner AdamW: LibTorch's torch::optim::AdamW, or diloco::inner::adamw (torch)");
  example_trainer::add_codecs(app, s);
  example_trainer::add_partial_rounds(app, s);
  add_number<double>(app, "--lr", s.lr, {0.0, real_max}, "AdamW learning rate, the peak of the schedule (3e-3)", "LR");
  add_choice(app, "--schedule", s.lr_schedule,
             {{"cosine", text::schedule::cosine}, {"constant", text::schedule::constant}}, "schedule",
             "learning rate over the steps: warm-up over 5 %, then cosine decay to lr/10 (cosine), or constant");
  add_number<double>(app, "--weight-decay", s.weight_decay, {0.0, real_max}, "AdamW weight decay (0.01)", "WD");
  example_trainer::add_outer(app, s);
  add_number<i64>(app, "--width", s.dimensions.width, {8, 4096}, "transformer width, d_model (128)", "D");
  add_number<i64>(app, "--layers", s.dimensions.layers, {1, 64}, "transformer blocks (2)", "L");
  add_number<i64>(app, "--heads", s.dimensions.heads, {1, 64}, "attention heads, dividing the width (4)", "H");
  add_number<i64>(app, "--context", s.dimensions.context, {2, 4096}, "characters per window (64)", "T");
  add_number<u32>(app, "--validation-windows", s.validation_windows, {1, 1 << 20},
                  "windows of validation text the final loss is measured on (256)", "N");
  add_choice(app, "--data", s.data, {{"shuffled", text::data_split::shuffled}, {"shares", text::data_split::shares}},
             "split",
             "every learner samples the whole training text (shuffled) or only its own contiguous share of it, "
             "the non-IID case (shuffled)");
  app.add_option("--text", s.text_path, "train on this text file instead of the King James Bible")->type_name("FILE");
  add_number<int>(app, "--threads", s.threads, {1, 256}, "LibTorch threads per process (1)", "N");
  add_number<u32>(app, "--ranks-per-unit", s.ranks_per_unit, {1, 4096},
                  "role learner: this learner is a unit of R MPI ranks, each this process under mpirun -np R (or "
                  "srun), gradients averaged over them; --batch is per rank; --endpoint lists the syncer shards, a "
                  "multiple of R (1)",
                  "R");
  add_number<u64>(app, "--seed", s.seed, {}, "seed of initialization and sampling (1)", "SEED");
  example_trainer::add_processes(app, s, c.parsed);
  example_trainer::add_progress(app, s);
  add_number<u64>(app, "--eval-every", s.eval_every, {0},
                  "print the validation loss of the global model every N outer updates, 0 for never (0)", "N");
  app.final_callback([&] {
    example_trainer::refuse_extras(app);
    example_trainer::check_run_settings(s, c.parsed);
    if (s.dimensions.width % s.dimensions.heads != 0)
      throw CLI::ValidationError("--width must be a multiple of --heads");
    if (s.ranks_per_unit > 1) {
#ifndef CHAR_LM_MPI
      throw CLI::ValidationError("--ranks-per-unit above 1 needs a build with MPI (CMake option DILOCO_WITH_MPI)");
#endif
      if (s.part != text::role::learner)
        throw CLI::ValidationError("--ranks-per-unit is for --role learner (started by mpirun or srun)");
    }
  });
  return diloco_tools::parse(app, argc, argv);
}

const char* name(text::merge_rule m) {
  switch (m) {
    case text::merge_rule::token_weighted: return "tokens";
    case text::merge_rule::average: return "average";
    case text::merge_rule::radial_directional: return "rda";
  }
  return "?";
}

/// Calls `go(make_inner, outer, merge)` with the policies the settings
/// choose; `make_inner(model)` makes a learner's inner step for its model.
template <class Go>
text::outcome with_policies(const text::settings& s, Go&& go) {
  using namespace diloco;
  const inner::adamw_options adamw{.learning_rate = s.lr, .weight_decay = s.weight_decay};
  if (s.run_mode == text::mode::data_parallel)
    return go(
        [](text::lm_model&) { return presets::data_parallel_inner<float>(presets::data_parallel_inner_options()); },
        presets::data_parallel_outer<float>(adamw), merge::average{});
  const auto outer_step = example_trainer::nesterov_of(s);
  auto with_merge = [&](auto make_inner) {
    switch (s.merge) {
      case text::merge_rule::average: return go(make_inner, outer_step, merge::average{});
      case text::merge_rule::radial_directional: return go(make_inner, outer_step, merge::radial_directional<>{});
      case text::merge_rule::token_weighted: break;
    }
    return go(make_inner, outer_step, merge::token_weighted{});
  };
  if (s.inner == text::inner_optimizer::library)
    return with_merge([adamw](text::lm_model&) { return inner::adamw<float>(adamw); });
  return with_merge([&s](text::lm_model& m) {
    return diloco::torch::optimizer<::torch::optim::AdamW>(
        m, ::torch::optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
  });
}

text::outcome run(const text::settings& s) {
  const auto options = syncer_options_for(s);
  const text::corpus corpus(s.text_path);
  text::settings sized = s;
  sized.dimensions.vocabulary = std::int64_t(corpus.vocabulary());
  switch (s.part) {
    case text::role::syncer:
      return with_policies(
          sized, [&](auto, auto outer, auto merge) { return text::serve(sized, corpus, outer, merge, options); });
    case text::role::learner:
#ifdef CHAR_LM_MPI
      if (s.ranks_per_unit > 1)
        return with_policies(
            sized, [&](auto make_inner, auto, auto) { return text::learn_in_unit(sized, corpus, make_inner); });
#endif
      return with_policies(sized, [&](auto make_inner, auto, auto) { return text::learn(sized, corpus, make_inner); });
    case text::role::in_process: break;
  }
  return with_policies(sized, [&](auto make_inner, auto outer, auto merge) {
    return text::train(sized, corpus, make_inner, outer, merge, options);
  });
}

/// Debian's LibTorch does its matrix products in OpenBLAS, whose thread pool
/// `torch::set_num_threads` does not reach: it keeps a thread per core, and
/// they wait for work spinning on sched_yield. With three learners on two
/// busy cores a run of 60 steps took 16 s instead of 1.4. Gives OpenBLAS the
/// same count, where OpenBLAS is the BLAS this process loaded.
void set_blas_threads(int threads) {
  using setter = void (*)(int);
  if (auto set = reinterpret_cast<setter>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

}  // namespace

int main(int argc, char** argv) {
  command c;
  if (const auto status = parse_command_line(argc, argv, c)) return *status;
  const text::settings& s = c.run;
  ::torch::set_num_threads(s.threads);
  set_blas_threads(s.threads);
  try {
    if (c.parsed.launch_all) return example_trainer::run_this_program(argc, argv, "char_lm", s.learners, s.endpoint);
    const auto options = syncer_options_for(s);
    if (s.progress_seconds > 0 && s.part != text::role::learner)
      std::fprintf(stderr,
                   "char_lm: %s, %u learners x %llu steps of %u x %lld characters, H=%u, P=%u, K=%u, tau=%u, "
                   "alpha=%g, %s\n",
                   name(s.run_mode), s.learners, static_cast<unsigned long long>(s.steps), s.batch,
                   static_cast<long long>(s.dimensions.context), options.training.sync_period,
                   options.training.fragments, options.quorum, options.training.overlap, options.training.mixing,
                   example_trainer::run_description(s));
    const auto r = run(s);
    if (!r.error.empty()) {
      std::fprintf(stderr, "char_lm: error: %s\n", r.error.c_str());
      return 1;
    }
    if (s.part == text::role::learner) {
      std::printf("%s\n", example_trainer::learner_line(s, r).dump().c_str());
      return 0;
    }
    json speeds = json::array();
    for (std::uint32_t i = 0; i < s.learners; ++i) speeds.push_back(six_digits(s.speed_of(i)));
    json line{{"mode", name(s.run_mode)},
              {"transport", example_trainer::transport_name(s)},
              {"learners", s.learners},
              {"steps", s.steps},
              {"batch", s.batch},
              {"context", s.dimensions.context},
              {"width", s.dimensions.width},
              {"layers", s.dimensions.layers},
              {"parameters", r.parameters},
              {"H", options.training.sync_period},
              {"fragments", options.training.fragments},
              {"quorum", options.quorum},
              {"overlap", options.training.overlap},
              {"alpha", six_digits(options.training.mixing)},
              {"adopt", diloco::name(s.adopt)},
              {"merge", s.run_mode == text::mode::data_parallel ? "average" : name(s.merge)},
              {"inner", s.run_mode == text::mode::data_parallel   ? "sgd"
                        : s.inner == text::inner_optimizer::torch ? "torch"
                                                                  : "library"},
              {"lr", s.lr},
              {"schedule", s.lr_schedule == text::schedule::cosine ? "cosine" : "constant"},
              {"data", s.data == text::data_split::shuffled ? "shuffled" : "shares"},
              {"seed", s.seed},
              {"speeds", std::move(speeds)},
              {"val_loss", six_digits(r.val_loss)},
              {"bits_per_char", six_digits(r.val_loss / std::log(2.0))},
              {"train_loss", r.train_loss ? json(six_digits(*r.train_loss)) : json(nullptr)},
              {"outer_updates", r.outer_updates},
              {"inner_steps", r.inner_steps},
              {"contributions_merged", r.contributions_merged},
              {"rejected", r.rejected},
              {"partial_rounds", r.partial_rounds},
              {"codec", std::string(diloco::codec::name(options.training.codecs.contributions))},
              {"bytes_sent", r.bytes_sent},
              {"bytes_received", r.bytes_received},
              {"completed", r.completed},
              {"seconds", six_digits(r.seconds)},
              {"virtual_seconds", six_digits(r.virtual_seconds)}};
    example_trainer::add_outer_fields(line, s);
    example_trainer::add_work_fields(line, r);
    std::printf("%s\n", line.dump().c_str());
    return r.completed ? 0 : 1;
  } catch (const text::corpus_error& e) {
    std::fprintf(stderr, "char_lm: error: %s\n", e.what());
    return 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "char_lm: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "char_lm: error: %s\n", e.what());
    return 1;
  }
}
