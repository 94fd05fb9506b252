// char_lm: trains a character-level transformer (LibTorch, through the
// diloco::torch adapter) on the King James Bible with synchronous data
// parallelism, DiLoCo or Decoupled DiLoCo, and prints the result as one JSON
// line: validation loss, bits per character, outer updates, inner steps.
//
//   char_lm --mode decoupled --learners 4 --speeds 1,1,0.7,0.5

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
#include <diloco_tools/launch/this_program.hpp>
#include <nlohmann/json.hpp>

#include "trainer.hpp"

namespace {

using json = nlohmann::ordered_json;
using diloco_tools::add_choice;
using diloco_tools::add_number;
using diloco_tools::parse_number;
using diloco_tools::split_list;

struct command {
  text::settings run;
  bool launch_all = false;  ///< `--role all`: 1 syncer and M learner processes
};

/// Reads the command line into `c`; nothing to go on, or the exit status.
std::optional<int> parse_command_line(int argc, char** argv, command& c) {
  CLI::App app("Trains a character-level transformer on the King James Bible (Debian's bible-kjv) with M learners "
               "and prints one JSON line with the validation loss of the final global model.",
               "char_lm");
  app.get_formatter()->column_width(34);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.allow_extras();
  text::settings& s = c.run;
  std::optional<std::uint32_t> fragments;
  using u32 = std::uint32_t;
  using u64 = std::uint64_t;
  using i64 = std::int64_t;
  constexpr double real_max = std::numeric_limits<double>::max();

  add_choice(app, "--mode", s.run_mode,
             {{"dp", text::mode::data_parallel}, {"diloco", text::mode::diloco}, {"decoupled", text::mode::decoupled}},
             "mode", "data parallel, DiLoCo or Decoupled DiLoCo (decoupled)");
  add_number<u32>(app, "--learners", s.learners, {1, 1024}, "learner units (4)", "M");
  add_number<u64>(app, "--steps", s.steps, {1}, "inner steps per learner (600)", "N");
  add_number<u32>(app, "--batch", s.batch, {1, 1 << 16}, "windows per inner step (16)", "B");
  add_number<u32>(app, "--H", s.sync_period, {1}, "inner steps between two sends of a fragment (50)", "H");
  app.add_option_function<std::string>(
         "--fragments", [&](const std::string& v) { fragments = parse_number<u32>("--fragments", v, {1}); },
         "fragments (decoupled: 4; dp and diloco: 1)")
      ->type_name("P");
  app.add_option_function<std::string>(
         "--quorum", [&](const std::string& v) { s.quorum = parse_number<u32>("--quorum", v, {1}); },
         "learners a round waits for (decoupled: 1; others: M)")
      ->type_name("K");
  app.add_option_function<std::string>(
         "--overlap", [&](const std::string& v) { s.overlap = parse_number<u32>("--overlap", v, {0}); },
         "steps between a send and the use of its answer, below H (decoupled: H/10)")
      ->type_name("TAU");
  add_number<double>(app, "--alpha", s.alpha, {0.0, 1.0, false, true}, "mixing on adoption, 0 overwrites (0)", "A");
  app.add_option_function<std::string>(
         "--speeds",
         [&](const std::string& v) {
           s.speeds.clear();
           for (const auto part : split_list(v, ','))
             s.speeds.push_back(parse_number<double>("--speeds", part, {0.0, 1.0, true, false}));
         },
         "relative learner speeds in (0, 1], one per learner, e.g. 1,1,0.7,0.5 (all 1)")
      ->type_name("S1,S2,...");
  add_choice(app, "--transport", s.via, {{"threads", text::transport::threads}, {"sim", text::transport::simulated}},
             "transport", "learner threads in this process, or the deterministic simulator (threads)");
  add_choice(app, "--merge", s.merge,
             {{"tokens", text::merge_rule::token_weighted},
              {"average", text::merge_rule::average},
              {"rda", text::merge_rule::radial_directional}},
             "merge rule", "token-weighted mean, plain mean or radial-directional averaging (tokens)");
  add_choice(app, "--inner", s.inner, {{"torch", text::inner_optimizer::torch}, {"library", text::inner_optimizer::library}},
             "inner optimizer",
             "DiLoCo's inner AdamW: LibTorch's torch::optim::AdamW, or diloco::inner::adamw (torch)");
  const std::vector<std::pair<std::string, diloco::codec::format>> formats{
      {"fp32", diloco::codec::format::fp32}, {"bf16", diloco::codec::format::bf16},
      {"int8", diloco::codec::format::int8}, {"fp8", diloco::codec::format::fp8}, {"int4", diloco::codec::format::int4}};
  add_choice(app, "--codec", s.codecs.contributions, formats, "codec",
             "outer gradients, learners to syncer: fp32, bf16, int8, fp8 or int4 (fp32)");
  add_choice(app, "--update-codec", s.codecs.updates, formats, "codec", "global fragments, syncer to learners (fp32)");
  app.add_flag("--error-feedback", s.error_feedback,
               "learners add each fragment's encoding error to its next outer gradient");
  add_number<double>(app, "--lr", s.lr, {0.0, real_max}, "AdamW learning rate, the peak of the schedule (3e-3)", "LR");
  add_choice(app, "--schedule", s.lr_schedule, {{"cosine", text::schedule::cosine}, {"constant", text::schedule::constant}},
             "schedule",
             "learning rate over the steps: warm-up over 5 %, then cosine decay to lr/10 (cosine), or constant");
  add_number<double>(app, "--weight-decay", s.weight_decay, {0.0, real_max}, "AdamW weight decay (0.01)", "WD");
  add_number<double>(app, "--outer-lr", s.outer_lr, {0.0, real_max}, "Nesterov outer learning rate (0.7)", "ETA");
  add_number<double>(app, "--outer-momentum", s.outer_momentum, {0.0, 1.0, false, true},
                     "Nesterov outer momentum, in [0, 1) (0.9)", "MU");
  add_number<i64>(app, "--width", s.dimensions.width, {8, 4096}, "transformer width, d_model (128)", "D");
  add_number<i64>(app, "--layers", s.dimensions.layers, {1, 64}, "transformer blocks (2)", "L");
  add_number<i64>(app, "--heads", s.dimensions.heads, {1, 64}, "attention heads, dividing the width (4)", "H");
  add_number<i64>(app, "--context", s.dimensions.context, {2, 4096}, "characters per window (64)", "T");
  add_number<u32>(app, "--validation-windows", s.validation_windows, {1, 1 << 20},
                  "windows of validation text the final loss is measured on (256)", "N");
  app.add_option("--text", s.text_path, "train on this text file instead of the King James Bible")->type_name("FILE");
  add_number<int>(app, "--threads", s.threads, {1, 256}, "LibTorch threads per process (1)", "N");
  add_number<u64>(app, "--seed", s.seed, {}, "seed of initialization and sampling (1)", "SEED");
  app.add_option_function<std::string>(
         "--role",
         [&](const std::string& v) {
           if (v == "all") c.launch_all = true;
           else if (v == "syncer") s.part = text::role::syncer;
           else if (v == "learner") s.part = text::role::learner;
           else throw CLI::ValidationError("unknown role '" + v + "' (syncer, learner or all)");
         },
         "separate processes over ZeroMQ: this process is the syncer, one learner, or starts 1 syncer + M learner "
         "processes (all)")
      ->type_name("syncer|learner|all");
  app.add_option("--endpoint", s.endpoint, "the syncer's ZeroMQ endpoint, e.g. tcp://127.0.0.1:5555 (all: a free "
                                            "loopback port)")
      ->type_name("URL");
  add_number<u32>(app, "--learner-id", s.learner_id, {0}, "role learner: which learner (0..M-1)", "N");
  add_number<u32>(app, "--incarnation", s.incarnation, {0}, "role learner: bump when restarting learner N (1)", "I");
  add_number<double>(app, "--progress", s.progress_seconds, {0.0, real_max},
                     "seconds between progress lines on stderr, 0 for none (2)", "SECONDS");
  add_number<u64>(app, "--eval-every", s.eval_every, {0},
                  "print the validation loss of the global model every N outer updates, 0 for never (0)", "N");
  app.final_callback([&] {
    if (const auto extra = app.remaining(); !extra.empty())
      throw CLI::ValidationError((extra.front().starts_with("-") ? "unknown option '" : "unexpected argument '") +
                                 extra.front() + "'");
    auto refuse = [](const std::string& why) { throw CLI::ValidationError(why); };
    if (!s.speeds.empty() && s.speeds.size() != s.learners)
      refuse("--speeds needs one value per learner (" + std::to_string(s.learners) + ")");
    s.fragments = fragments.value_or(s.run_mode == text::mode::decoupled ? 4u : 1u);
    if (s.overlap && *s.overlap >= s.sync_period) refuse("--overlap must be smaller than --H");
    if (s.dimensions.width % s.dimensions.heads != 0) refuse("--width must be a multiple of --heads");
    if (s.part != text::role::in_process && s.endpoint.empty()) refuse("--role syncer and --role learner need --endpoint");
    if (s.part == text::role::learner && s.learner_id >= s.learners) refuse("--learner-id must be below --learners");
  });
  return diloco_tools::parse(app, argc, argv);
}

const char* name(text::mode m) {
  switch (m) {
    case text::mode::data_parallel: return "dp";
    case text::mode::diloco: return "diloco";
    case text::mode::decoupled: return "decoupled";
  }
  return "?";
}

const char* name(text::merge_rule m) {
  switch (m) {
    case text::merge_rule::token_weighted: return "tokens";
    case text::merge_rule::average: return "average";
    case text::merge_rule::radial_directional: return "rda";
  }
  return "?";
}

/// The syncer options of a mode, with the command line's overrides.
diloco::syncer_options syncer_options_for(const text::settings& s) {
  diloco::syncer_options o;
  switch (s.run_mode) {
    case text::mode::data_parallel: o = diloco::presets::data_parallel(s.learners); break;
    case text::mode::diloco: o = diloco::presets::diloco(s.learners, s.sync_period); break;
    case text::mode::decoupled:
      o = diloco::presets::decoupled_diloco(s.sync_period, s.fragments, s.quorum.value_or(1),
                                            s.overlap.value_or(s.sync_period / 10));
      break;
  }
  if (s.run_mode != text::mode::data_parallel) {
    o.training.fragments = s.fragments;
    if (s.quorum) o.quorum = *s.quorum;
    if (s.overlap) o.training.overlap = *s.overlap;
  }
  o.training.mixing = s.alpha;
  o.training.codecs = s.codecs;
  return o;
}

/// Calls `go(make_inner, outer, merge)` with the policies the settings
/// choose; `make_inner(model)` makes a learner's inner step for its model.
template <class Go>
text::outcome with_policies(const text::settings& s, Go&& go) {
  using namespace diloco;
  const inner::adamw_options adamw{.learning_rate = s.lr, .weight_decay = s.weight_decay};
  if (s.run_mode == text::mode::data_parallel)
    return go([](text::lm_model&) { return presets::data_parallel_inner<float>(presets::data_parallel_inner_options()); },
              presets::data_parallel_outer<float>(adamw), merge::average{});
  const outer::nesterov<float> outer_step({.learning_rate = s.outer_lr, .momentum = s.outer_momentum});
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
      return with_policies(sized, [&](auto, auto outer, auto merge) {
        return text::serve(sized, corpus, outer, merge, options);
      });
    case text::role::learner:
      return with_policies(sized, [&](auto make_inner, auto, auto) { return text::learn(sized, corpus, make_inner); });
    case text::role::in_process: break;
  }
  return with_policies(sized, [&](auto make_inner, auto outer, auto merge) {
    return text::train(sized, corpus, make_inner, outer, merge, options);
  });
}

/// `v` to six significant digits.
double six_digits(double v) {
  if (v == 0.0 || !std::isfinite(v)) return v;
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return std::strtod(text, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  command c;
  if (const auto status = parse_command_line(argc, argv, c)) return *status;
  const text::settings& s = c.run;
  ::torch::set_num_threads(s.threads);
  try {
    if (c.launch_all) return diloco_tools::launch::run_this_program(argc, argv, "char_lm", s.learners, s.endpoint);
    const auto options = syncer_options_for(s);
    if (s.progress_seconds > 0 && s.part != text::role::learner)
      std::fprintf(stderr, "char_lm: %s, %u learners x %llu steps of %u x %lld characters, H=%u, P=%u, K=%u, tau=%u, %s\n",
                   name(s.run_mode), s.learners, static_cast<unsigned long long>(s.steps), s.batch,
                   static_cast<long long>(s.dimensions.context), options.training.sync_period,
                   options.training.fragments, options.quorum, options.training.overlap,
                   s.part == text::role::syncer           ? "ZeroMQ processes"
                   : s.via == text::transport::threads ? "threads"
                                                         : "simulator");
    const auto r = run(s);
    if (!r.error.empty()) {
      std::fprintf(stderr, "char_lm: error: %s\n", r.error.c_str());
      return 1;
    }
    if (s.part == text::role::learner) {
      const json line{{"role", "learner"},           {"learner", s.learner_id},
                      {"inner_steps", r.inner_steps}, {"bytes_sent", r.bytes_sent},
                      {"bytes_received", r.bytes_received}, {"seconds", six_digits(r.seconds)}};
      std::printf("%s\n", line.dump().c_str());
      return 0;
    }
    json speeds = json::array();
    for (std::size_t i = 0; i < s.learners; ++i) speeds.push_back(six_digits(i < s.speeds.size() ? s.speeds[i] : 1.0));
    const json line{{"mode", name(s.run_mode)},
                    {"transport", s.part == text::role::syncer ? "zmq"
                                  : s.via == text::transport::threads ? "threads"
                                                                        : "sim"},
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
                    {"merge", s.run_mode == text::mode::data_parallel ? "average" : name(s.merge)},
                    {"inner", s.run_mode == text::mode::data_parallel ? "sgd"
                              : s.inner == text::inner_optimizer::torch ? "torch"
                                                                          : "library"},
                    {"lr", s.lr},
                    {"schedule", s.lr_schedule == text::schedule::cosine ? "cosine" : "constant"},
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
