// fashion_mnist: trains an MLP on the real Fashion-MNIST with synchronous data
// parallelism, DiLoCo or Decoupled DiLoCo — three configurations of the same
// diloco runtime — and prints the result as one JSON line.
//
//   fashion_mnist --mode decoupled --learners 4 --speeds 1,1,0.7,0.5

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "launcher.hpp"
#include "trainer.hpp"

namespace {

constexpr const char* usage = R"(usage: fashion_mnist [options]

Trains a 784-256-256-10 MLP on Fashion-MNIST with M learners and prints one
JSON line with the test accuracy of the final global model.

  --mode dp|diloco|decoupled   data parallel, DiLoCo or Decoupled DiLoCo (decoupled)
  --learners M                 learner units (4)
  --steps N                    inner steps per learner (1000)
  --batch B                    examples per inner step (64)
  --H H                        inner steps between two sends of a fragment (50)
  --fragments P                fragments (decoupled: 4; dp and diloco: 1)
  --quorum K                   learners a round waits for (decoupled: 1; others: M)
  --overlap TAU                steps between a send and the use of its answer (decoupled: H/10)
  --alpha A                    mixing on adoption, 0 overwrites (0)
  --speeds S1,S2,...           relative learner speeds, e.g. 1,1,0.7,0.5 (all 1)
  --stall L:AFTER:STEPS        learner L freezes after its step AFTER for STEPS of its steps
  --leave N:AFTER              the last N learners leave for good after AFTER of their steps
  --transport threads|sim      learner threads in this process, or the deterministic simulator (threads)
  --merge tokens|average|rda|trimmed|median
                               merge rule (tokens; trimmed: coordinate-wise 25 % trimmed mean,
                               median: coordinate-wise median, both robust to outlying learners)
  --clip C                     clip outer gradients and weights above C x the median (8; 0: off)
  --quarantine-after N         quarantine a learner after N clipped or refused contributions in a row (8; 0: never)
  --absent-half-life N         a departed learner's weight in partial rounds halves every N periods (20)
  --partial-rounds all|live|full
                               size of partial rounds: share of all learners' weight (all),
                               of the live learners' weight (live), or a full step (full)
  --lr LR                      AdamW learning rate (1e-3)
  --weight-decay WD            AdamW weight decay (0.01)
  --outer-lr ETA               Nesterov outer learning rate (0.7)
  --outer-momentum MU          Nesterov outer momentum (0.9)
  --seed SEED                  seed of initialization, sharding and sampling (1)
  --data-dir DIR               Fashion-MNIST files (/usr/share/datasets/fashion-mnist)
  --role syncer|learner|all    run as separate processes over ZeroMQ: this process is the syncer,
                               one learner, or starts 1 syncer + M learner processes (all)
  --endpoint URL               the syncer's ZeroMQ endpoint, e.g. tcp://127.0.0.1:5555
                               (all: a free loopback port)
  --learner-id N               role learner: which learner (0..M-1); it trains shard N
  --incarnation I              role learner: bump when restarting learner N (1)
  --curve-secret FILE          CURVE key pair of this process (diloco_keygen)
  --curve-peer FILE            syncer: the learners' public key; learner: the syncer's
  --insecure                   syncer: serve a non-loopback endpoint without CURVE
  --progress SECONDS           seconds between progress lines on stderr, 0 for none (2)
  --trace FILE                 role learner: append its events to FILE as JSON lines (docs/chaos.md)
  --stop-at UNIX_SECONDS       role learner: finish (final contributions, leave) at this wall time
  --evaluate FILE              only evaluate the parameters in FILE (raw little-endian f32, as
                               diloco_syncer --save writes them) on the test set
  --help                       this text
)";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
T parse_number(std::string_view option, const std::string& text) {
  std::istringstream in(text);
  T value{};
  if (!(in >> value) || !in.eof()) throw usage_error("bad value '" + text + "' for " + std::string(option));
  return value;
}

std::vector<std::string> split_list(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

/// Set by `--role all`.
bool launch_all = false;
/// Set by `--evaluate FILE`.
std::string evaluate_file;

/// `--evaluate`: the test accuracy and loss of the parameters in `path`.
int evaluate_saved(const fashion::settings& s, const std::string& path) {
  fashion::mlp shape({784, 256, 256, 10}, s.seed);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::invalid_argument("cannot read " + path);
  const auto bytes = static_cast<std::size_t>(in.tellg());
  if (bytes != shape.parameters().size() * sizeof(float))
    throw std::invalid_argument(path + " holds " + std::to_string(bytes) + " bytes; this model has " +
                                std::to_string(shape.parameters().size()) + " f32 parameters");
  std::vector<float> params(shape.parameters().size());
  in.seekg(0);
  in.read(reinterpret_cast<char*>(params.data()), static_cast<std::streamsize>(bytes));
  if (!in) throw std::invalid_argument("cannot read " + path);
  const auto [accuracy, loss] = fashion::evaluate(params, fashion::load_split(s.data_dir, "t10k"), s.seed);
  std::printf("{\"test_accuracy\":%.6g,\"test_loss\":%.6g}\n", accuracy, loss);
  return 0;
}

fashion::settings parse(int argc, char** argv) {
  fashion::settings s;
  std::optional<std::uint32_t> fragments;
  for (int i = 1; i < argc; ++i) {
    const std::string_view opt = argv[i];
    if (opt == "--help" || opt == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    if (opt == "--insecure") {
      s.insecure = true;
      continue;
    }
    if (i + 1 >= argc) throw usage_error("missing value for " + std::string(opt));
    const std::string v = argv[++i];
    if (opt == "--mode") {
      if (v == "dp") s.run_mode = fashion::mode::data_parallel;
      else if (v == "diloco") s.run_mode = fashion::mode::diloco;
      else if (v == "decoupled") s.run_mode = fashion::mode::decoupled;
      else throw usage_error("unknown mode '" + v + "' (dp, diloco or decoupled)");
    } else if (opt == "--learners") {
      s.learners = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--steps") {
      s.steps = parse_number<std::uint64_t>(opt, v);
    } else if (opt == "--batch") {
      s.batch = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--H") {
      s.sync_period = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--fragments") {
      fragments = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--quorum") {
      s.quorum = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--overlap") {
      s.overlap = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--alpha") {
      s.alpha = parse_number<double>(opt, v);
    } else if (opt == "--seed") {
      s.seed = parse_number<std::uint64_t>(opt, v);
    } else if (opt == "--speeds") {
      s.speeds.clear();
      for (const auto& part : split_list(v, ',')) s.speeds.push_back(parse_number<double>(opt, part));
    } else if (opt == "--stall") {
      const auto parts = split_list(v, ':');
      if (parts.size() != 3) throw usage_error("--stall takes LEARNER:AFTER:STEPS");
      s.stall = fashion::stall_plan{parse_number<std::uint32_t>(opt, parts[0]), parse_number<std::uint64_t>(opt, parts[1]),
                                    parse_number<std::uint64_t>(opt, parts[2])};
    } else if (opt == "--leave") {
      const auto parts = split_list(v, ':');
      if (parts.size() != 2) throw usage_error("--leave takes COUNT:AFTER");
      s.leave = fashion::leave_plan{parse_number<std::uint32_t>(opt, parts[0]), parse_number<std::uint64_t>(opt, parts[1])};
    } else if (opt == "--transport") {
      if (v == "threads") s.via = fashion::transport::threads;
      else if (v == "sim") s.via = fashion::transport::simulated;
      else throw usage_error("unknown transport '" + v + "' (threads or sim)");
    } else if (opt == "--merge") {
      if (v == "tokens") s.merge = fashion::merge_rule::token_weighted;
      else if (v == "average") s.merge = fashion::merge_rule::average;
      else if (v == "rda") s.merge = fashion::merge_rule::radial_directional;
      else if (v == "trimmed") s.merge = fashion::merge_rule::trimmed_mean;
      else if (v == "median") s.merge = fashion::merge_rule::coordinate_median;
      else throw usage_error("unknown merge rule '" + v + "' (tokens, average, rda, trimmed or median)");
    } else if (opt == "--partial-rounds") {
      if (v == "all") s.partial = diloco::partial_rounds::all_share;
      else if (v == "live") s.partial = diloco::partial_rounds::live_share;
      else if (v == "full") s.partial = diloco::partial_rounds::full_step;
      else throw usage_error("unknown partial-round rule '" + v + "' (all, live or full)");
    } else if (opt == "--clip") {
      s.screening.clip_factor = parse_number<double>(opt, v);
    } else if (opt == "--quarantine-after") {
      s.screening.quarantine_after = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--absent-half-life") {
      s.membership.absent_half_life = parse_number<double>(opt, v);
    } else if (opt == "--lr") {
      s.lr = parse_number<double>(opt, v);
    } else if (opt == "--weight-decay") {
      s.weight_decay = parse_number<double>(opt, v);
    } else if (opt == "--outer-lr") {
      s.outer_lr = parse_number<double>(opt, v);
    } else if (opt == "--outer-momentum") {
      s.outer_momentum = parse_number<double>(opt, v);
    } else if (opt == "--data-dir") {
      s.data_dir = v;
    } else if (opt == "--progress") {
      s.progress_seconds = parse_number<double>(opt, v);
    } else if (opt == "--role") {
      if (v == "syncer") s.part = fashion::role::syncer;
      else if (v == "learner") s.part = fashion::role::learner;
      else if (v == "all") launch_all = true;
      else throw usage_error("unknown role '" + v + "' (syncer, learner or all)");
    } else if (opt == "--endpoint") {
      s.endpoint = v;
    } else if (opt == "--learner-id") {
      s.learner_id = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--incarnation") {
      s.incarnation = parse_number<std::uint32_t>(opt, v);
    } else if (opt == "--curve-secret") {
      s.curve_secret = v;
    } else if (opt == "--curve-peer") {
      s.curve_peer = v;
    } else if (opt == "--trace") {
      s.trace_file = v;
    } else if (opt == "--stop-at") {
      s.stop_at = parse_number<double>(opt, v);
      if (!(s.stop_at >= 0)) throw usage_error("--stop-at must be a time in seconds since the epoch");
    } else if (opt == "--evaluate") {
      evaluate_file = v;
    } else {
      throw usage_error("unknown option '" + std::string(opt) + "'");
    }
  }
  if (s.learners == 0 || s.learners > 1024) throw usage_error("--learners must be in 1..1024");
  if (s.steps == 0) throw usage_error("--steps must be at least 1");
  if (s.batch == 0) throw usage_error("--batch must be at least 1");
  if (!s.speeds.empty() && s.speeds.size() != s.learners)
    throw usage_error("--speeds needs one value per learner (" + std::to_string(s.learners) + ")");
  for (double v : s.speeds)
    if (!(v > 0.0 && v <= 1.0)) throw usage_error("--speeds values must be in (0, 1]");
  if (s.stall && s.stall->learner >= s.learners) throw usage_error("--stall names a learner that does not exist");
  if (s.leave && (s.leave->count >= s.learners || s.leave->after == 0))
    throw usage_error("--leave needs fewer leavers than learners and at least one step");
  s.fragments = fragments.value_or(s.run_mode == fashion::mode::decoupled ? 4u : 1u);
  if (s.sync_period == 0) throw usage_error("--H must be at least 1");
  if (s.fragments == 0) throw usage_error("--fragments must be at least 1");
  if (s.quorum && *s.quorum == 0) throw usage_error("--quorum must be at least 1");
  if (s.overlap && *s.overlap >= s.sync_period) throw usage_error("--overlap must be smaller than --H");
  if (!(s.alpha >= 0.0 && s.alpha < 1.0)) throw usage_error("--alpha must be in [0, 1)");
  if ((s.part != fashion::role::in_process) && s.endpoint.empty())
    throw usage_error("--role syncer and --role learner need --endpoint");
  if (s.part == fashion::role::learner && s.learner_id >= s.learners)
    throw usage_error("--learner-id must be below --learners");
  if (s.curve_secret.empty() != s.curve_peer.empty()) throw usage_error("--curve-secret and --curve-peer go together");
  return s;
}

const char* name(fashion::mode m) {
  switch (m) {
    case fashion::mode::data_parallel: return "dp";
    case fashion::mode::diloco: return "diloco";
    case fashion::mode::decoupled: return "decoupled";
  }
  return "?";
}

/// The syncer options of a mode, with the command line's overrides.
diloco::syncer_options syncer_options_for(const fashion::settings& s) {
  diloco::syncer_options o;
  switch (s.run_mode) {
    case fashion::mode::data_parallel: o = diloco::presets::data_parallel(s.learners); break;
    case fashion::mode::diloco: o = diloco::presets::diloco(s.learners, s.sync_period); break;
    case fashion::mode::decoupled:
      o = diloco::presets::decoupled_diloco(s.sync_period, s.fragments, s.quorum.value_or(1),
                                            s.overlap.value_or(s.sync_period / 10));
      break;
  }
  if (s.run_mode != fashion::mode::data_parallel) {
    o.training.fragments = s.fragments;
    if (s.quorum) o.quorum = *s.quorum;
    if (s.overlap) o.training.overlap = *s.overlap;
  }
  o.training.mixing = s.alpha;
  o.scaling = s.partial;
  o.screening = s.screening;
  o.membership = s.membership;
  return o;
}

/// Calls `go(inner, outer, merge)` with the policies the settings choose.
template <class Go>
fashion::outcome with_policies(const fashion::settings& s, Go&& go) {
  using namespace diloco;
  const inner::adamw_options adamw{.learning_rate = s.lr, .weight_decay = s.weight_decay};
  if (s.run_mode == fashion::mode::data_parallel)
    return go(presets::data_parallel_inner<float>(presets::data_parallel_inner_options()),
              presets::data_parallel_outer<float>(adamw), merge::average{});
  const inner::adamw<float> inner_step(adamw);
  const outer::nesterov<float> outer_step({.learning_rate = s.outer_lr, .momentum = s.outer_momentum});
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
      return with_policies(s, [&](auto, auto outer, auto merge) { return fashion::serve(s, test, outer, merge, options); });
    }
    case fashion::role::learner: {
      const auto train = fashion::load_split(s.data_dir, "train");
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

std::string json_number(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  fashion::settings s;
  try {
    s = parse(argc, argv);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n\n%s", e.what(), usage);
    return 2;
  }
  try {
    if (launch_all) return fashion::launch_all(argc, argv, s);
    if (!evaluate_file.empty()) return evaluate_saved(s, evaluate_file);
    const auto options = syncer_options_for(s);  // validated again by the syncer
    if (s.progress_seconds > 0 && s.part != fashion::role::learner)
      std::fprintf(stderr, "fashion_mnist: %s, %u learners x %llu steps of %u, H=%u, P=%u, K=%u, tau=%u, alpha=%g, %s\n",
                   name(s.run_mode), s.learners, static_cast<unsigned long long>(s.steps), s.batch,
                   options.training.sync_period, options.training.fragments, options.quorum, options.training.overlap,
                   options.training.mixing,
                   s.part == fashion::role::syncer          ? "ZeroMQ processes"
                   : s.via == fashion::transport::threads ? "threads"
                                                          : "simulator");
    const auto r = run(s);
    if (!r.error.empty()) {
      std::fprintf(stderr, "fashion_mnist: error: %s\n", r.error.c_str());
      return 1;
    }
    if (s.part == fashion::role::learner) {
      std::printf("{\"role\":\"learner\",\"learner\":%u,\"inner_steps\":%llu,\"seconds\":%s}\n", s.learner_id,
                  static_cast<unsigned long long>(r.inner_steps), json_number(r.seconds).c_str());
      return 0;
    }
    std::string speeds;
    for (std::size_t i = 0; i < s.learners; ++i)
      speeds += (i ? "," : "") + json_number(i < s.speeds.size() ? s.speeds[i] : 1.0);
    std::printf(
        "{\"mode\":\"%s\",\"transport\":\"%s\",\"learners\":%u,\"steps\":%llu,\"batch\":%u,\"H\":%u,\"fragments\":%u,"
        "\"quorum\":%u,\"overlap\":%u,\"alpha\":%s,\"seed\":%llu,\"speeds\":[%s],\"test_accuracy\":%s,"
        "\"test_loss\":%s,\"outer_updates\":%llu,\"inner_steps\":%llu,\"contributions_merged\":%llu,"
        "\"rejected\":%llu,\"clipped\":%llu,\"quarantines\":%llu,\"rounds_dropped\":%llu,\"end_scale\":%s,\"fragment_imbalance\":%s,\"completed\":%s,\"seconds\":%s,\"virtual_seconds\":%s}\n",
        name(s.run_mode),
        s.part == fashion::role::syncer ? "zmq" : s.via == fashion::transport::threads ? "threads" : "sim",
        s.learners,
        static_cast<unsigned long long>(s.steps), s.batch, options.training.sync_period, options.training.fragments,
        options.quorum, options.training.overlap, json_number(options.training.mixing).c_str(),
        static_cast<unsigned long long>(s.seed), speeds.c_str(), json_number(r.test_accuracy).c_str(),
        json_number(r.test_loss).c_str(), static_cast<unsigned long long>(r.outer_updates),
        static_cast<unsigned long long>(r.inner_steps), static_cast<unsigned long long>(r.contributions_merged),
        static_cast<unsigned long long>(r.rejected), static_cast<unsigned long long>(r.clipped),
        static_cast<unsigned long long>(r.quarantines), static_cast<unsigned long long>(r.rounds_dropped),
        json_number(r.end_scale).c_str(), json_number(r.imbalance).c_str(), r.completed ? "true" : "false",
        json_number(r.seconds).c_str(), json_number(r.virtual_seconds).c_str());
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
  }
}
