// diloco_syncer: the syncer as a ready-to-run service over ZeroMQ. It needs no
// knowledge of the model: the first learner to join provides the parameter
// layout and the initial parameters (or --layout fixes the layout up front).
//
//   diloco_syncer --endpoint tcp://127.0.0.1:5555 --fragments 4 --H 50 --learners 4

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/metrics/prometheus.hpp>
#include <diloco/metrics/trace.hpp>
#include <diloco/runtime/checkpoint.hpp>
#include <diloco/runtime/journal.hpp>
#include <diloco/runtime/syncer/checkpoint.hpp>
#include <diloco/transport/zeromq.hpp>
#include <diloco_tools/cli.hpp>
#include <diloco_tools/json.hpp>
#include <nlohmann/json.hpp>

#include "log_sink.hpp"
#include "metrics_server.hpp"

namespace {

/// A command line that makes no sense, found after parsing (exit status 2).
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct settings {
  std::string endpoint = "tcp://127.0.0.1:5555";
  diloco::syncer_options options = diloco::presets::decoupled_diloco(50, 8, 1, 5);
  std::string outer = "nesterov";
  /// η and μ; default: Decoupled DiLoCo's (`presets::decoupled_outer_options`),
  /// DiLoCo's with --lock-step or --world-size.
  std::optional<double> outer_lr, outer_momentum;
  std::uint32_t delay = 4;
  unsigned threads = 0;  ///< of the Nesterov step and the weighted mean; 0: every core
  std::string merge = "tokens";
  std::string layout_file, curve_secret, save_file, metrics_file, checkpoint_dir, trace_file, metrics_jsonl;
  std::optional<std::uint16_t> metrics_port;  ///< serve the counters for Prometheus on 127.0.0.1
  double metrics_interval = 10;               ///< seconds between two lines of `metrics_jsonl`
  bool journal_sync = false;  ///< fdatasync the journal after each contribution
  std::vector<std::string> allow_files;
  double durability_seconds = 0;  ///< 0: before every published update
  std::uint64_t learners = 0;
  bool insecure = false, quiet = false;
  diloco::zeromq::socket_options sockets;
};

/// Reads the command line into `s`: nothing when the service is to start,
/// else the exit status (0 after --help, 2 for bad usage). Every number is
/// checked against the range the syncer accepts, so that a bad one is refused
/// here, naming its flag, rather than after the endpoint is bound.
std::optional<int> parse(int argc, char** argv, settings& s) {
  using diloco_tools::in;
  using diloco_tools::interval;
  auto& o = s.options;
  auto& t = o.training;
  CLI::App app{"Serves Decoupled DiLoCo learners over ZeroMQ. Logs one line per outer update\n"
               "and, when it stops, prints its counters as one JSON line.",
               "diloco_syncer"};
  // A repeated option keeps its last value (--allow excepted), as it always did.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const auto whole = diloco_tools::whole_at_least(0), one_or_more = diloco_tools::whole_at_least(1);
  const auto fraction = in(interval<double>{.min = 0, .max = 1, .open_max = true});
  const auto non_negative = diloco_tools::non_negative();
  const CLI::Validator clip_factor(
      [non_negative](std::string& text) {
        std::string bad = non_negative(text);
        if (bad.empty() && std::strtod(text.c_str(), nullptr) > 0 && std::strtod(text.c_str(), nullptr) < 1)
          bad = "must be 0 (off) or at least 1, not " + text;
        return bad;
      },
      "");
  const CLI::Validator durability(
      [non_negative](std::string& text) {
        return text == "update" || non_negative(text).empty() ? std::string()
                                                                : "takes 'update' or a number of seconds >= 0, not " + text;
      },
      "");
  double heartbeat_s = std::chrono::duration<double>(o.heartbeat_timeout).count();
  double rendezvous_s = std::chrono::duration<double>(o.world.rendezvous_timeout).count();
  double loss_wait_s = 0;
  std::string on_loss = "continue", end_when_gone = "60";
  double deadline_s = 0;
  std::string partial = "all", durability_text = "update";
  std::string contribution_codec = "fp32", update_codec = "fp32";

  app.add_option("--endpoint", s.endpoint, "tcp://HOST:PORT or ipc://PATH to bind")->type_name("URL")
      ->capture_default_str();
  app.add_option("--fragments", t.fragments, "fragments of the model")->type_name("P")->check(one_or_more)
      ->capture_default_str();
  app.add_option("--H", t.sync_period, "inner steps between two sends of a fragment")->type_name("H")
      ->check(one_or_more)->capture_default_str();
  const CLI::Option* overlap =
      app.add_option("--overlap", t.overlap, "steps between a send and the use of its answer (default: H/10)")
          ->type_name("TAU")->check(whole);
  app.add_option("--alpha", t.mixing, "mixing on adoption, in [0, 1); 0 overwrites")->type_name("A")->check(fraction)
      ->capture_default_str();
  app.add_flag("--lock-step", t.lock_step, "learners wait for each answer (synchronous DiLoCo)");
  const auto codecs = CLI::IsMember({"fp32", "bf16", "int8", "fp8", "int4"}).description("");
  app.add_option("--codec", contribution_codec, "outer gradients, learners to syncer (fp32: full precision)")
      ->type_name("fp32|bf16|int8|fp8|int4")->check(codecs)->capture_default_str();
  app.add_option("--update-codec", update_codec, "global fragments, syncer to learners")
      ->type_name("fp32|bf16|int8|fp8|int4")->check(codecs)->capture_default_str();
  app.add_option("--codec-block", t.codecs.block, "values per scaled block of int8, fp8 and int4, in [1, 65536]")
      ->type_name("B")->check(CLI::Range(1u, diloco::max_codec_block).description(""))->capture_default_str();
  app.add_option("--quorum", o.quorum, "distinct learners before a round may close")->type_name("K")
      ->check(one_or_more)->capture_default_str();
  app.add_option("--world-size", o.world.size,
                 "M: a fixed world of learners 0..M-1 (synchronous modes): nobody trains before all M have joined, "
                 "and every round waits for every live one (0: open membership)")
      ->type_name("M")->check(whole)->capture_default_str();
  app.add_option("--rendezvous-timeout", rendezvous_s,
                 "with --world-size: fail (exit 3, naming the missing ids) unless all M learners joined within SEC")
      ->type_name("SEC")->check(in(interval<double>{.min = 0, .max = 1e9, .open_min = true}))->capture_default_str();
  app.add_option("--on-learner-loss", on_loss,
                 "with --world-size, a learner declared dead: rounds wait --loss-wait longer, then continue without "
                 "it (continue), or the run fails (fail, exit 3)")
      ->type_name("continue|fail")->check(CLI::IsMember({"continue", "fail"}).description(""))->capture_default_str();
  app.add_option("--loss-wait", loss_wait_s, "with --world-size: how long a dead learner still holds the rounds, s")
      ->type_name("SEC")->check(in(interval<double>{.min = 0, .max = 1e9}))->capture_default_str();
  app.add_option("--max-outer-updates", o.end.max_outer_updates,
                 "end the run after this many outer updates, all fragments together (0: no limit)")
      ->type_name("N")->check(whole)->capture_default_str();
  app.add_option("--max-tokens", o.end.max_tokens,
                 "end the run once this many tokens, all learners together, are merged into the global model "
                 "(per fragment; work still unsent or thrown away does not count; 0: no limit)")
      ->type_name("N")->check(whole)->capture_default_str();
  app.add_option("--max-steps", o.end.max_steps,
                 "end the run once this many inner steps, all learners together, are merged into the global model "
                 "(per fragment: steps computed but not merged yet, or thrown away, do not count; 0: no limit)")
      ->type_name("N")->check(whole)->capture_default_str();
  app.add_option("--deadline", deadline_s, "end the run SEC seconds after the first message (0: none)")
      ->type_name("SEC")->check(in(interval<double>{.min = 0, .max = 1e9}))->capture_default_str();
  app.add_option("--end-when-gone", end_when_gone,
                 "end the run once every learner that joined has left or been dead SEC seconds, and with "
                 "--learners N once N have joined (never: keep serving)")
      ->type_name("SEC|never")
      ->check(CLI::Validator(
          [](std::string& text) {
            return text == "never" ? std::string() : in(interval<double>{.min = 0, .max = 1e9})(text);
          },
          ""))
      ->capture_default_str();
  app.add_option("--grace", o.grace_factor, "grace-window factor gamma in [0, 1)")->type_name("G")->check(fraction)
      ->capture_default_str();
  app.add_option("--max-staleness", o.max_staleness, "refuse outer gradients more than S revisions old")
      ->type_name("S")->check(whole)->capture_default_str();
  const CLI::Option* heartbeat =
      app.add_option("--heartbeat-timeout", heartbeat_s, "silence before a learner counts as dead, in (0, 1e9] s")
          ->type_name("SEC")->check(in(interval<double>{.min = 0, .max = 1e9, .open_min = true}))->capture_default_str();
  app.add_option("--outer", s.outer,
                 "outer optimizer; adamw with --outer-lr as its learning rate is data parallelism's optimizer "
                 "(learners: SGD, rate 1, H=1)")
      ->type_name("nesterov|sgd|delayed-nesterov|adamw")
      ->check(CLI::IsMember({"nesterov", "sgd", "delayed-nesterov", "adamw"}).description(""))->capture_default_str();
  app.add_option("--threads", s.threads,
                 "threads of the outer Nesterov step and the weighted-mean merges (0: every core; the result is the "
                 "same bit for bit)")
      ->type_name("N")->capture_default_str();
  const auto decoupled = diloco::presets::decoupled_outer_options();
  const auto lock_step = diloco::presets::diloco_outer_options();
  app.add_option("--outer-lr", s.outer_lr,
                 "outer learning rate, >= 0 (" + diloco_tools::shown(decoupled.learning_rate) +
                     "; with --lock-step or --world-size " + diloco_tools::shown(lock_step.learning_rate) + ")")
      ->type_name("ETA")->check(non_negative);
  app.add_option("--outer-momentum", s.outer_momentum,
                 "outer momentum, in [0, 1) (" + diloco_tools::shown(decoupled.momentum) +
                     "; with --lock-step or --world-size " + diloco_tools::shown(lock_step.momentum) + ")")
      ->type_name("MU")->check(fraction);
  app.add_option("--delay", s.delay, "delayed Nesterov: outer steps per momentum update")->type_name("N")
      ->check(one_or_more)->capture_default_str();
  app.add_option("--merge", s.merge, "merge rule")->type_name("tokens|average|rda")
      ->check(CLI::IsMember({"tokens", "average", "rda"}).description(""))->capture_default_str();
  app.add_option("--partial-rounds", partial, "size of partial rounds")->type_name("all|live|full")
      ->check(CLI::IsMember({"all", "live", "full"}).description(""))->capture_default_str();
  app.add_option("--absent-half-life", o.membership.absent_half_life,
                 "a departed learner's weight in partial rounds halves every N periods (H steps at the learners' "
                 "mean step time), in (0, 10000]")
      ->type_name("N")->check(in(interval<double>{.min = 0, .max = 10000, .open_min = true}))->capture_default_str();
  app.add_option("--forget-after", o.membership.forget_after,
                 "a departed learner's table place is freed after N half-lives, in (0, 64]")
      ->type_name("N")->check(in(interval<double>{.min = 0, .max = 64, .open_min = true}))->capture_default_str();
  app.add_option("--max-learners", o.max_learners, "learners kept track of at once")->type_name("N")
      ->check(one_or_more)->capture_default_str();
  app.add_option("--clip", o.screening.clip_factor,
                 "clip outer gradients and merge weights above C x the lower median of recent ones (0: off, "
                 "else >= 1)")
      ->type_name("C")->check(clip_factor)->capture_default_str();
  app.add_option("--quarantine-after", o.screening.quarantine_after,
                 "refuse a learner (until it rejoins) after N of its contributions in a row were norm-clipped "
                 "or refused for their content (0: never)")
      ->type_name("N")->check(whole)->capture_default_str();
  app.add_option("--max-update-ratio", o.screening.max_update_ratio,
                 "do not publish an outer step that moves a fragment by more than R x its norm (0: no bound)")
      ->type_name("R")->check(non_negative)->capture_default_str();
  app.add_option("--max-tokens-per-step", o.screening.max_tokens_per_step,
                 "refuse contributions claiming more tokens per step")
      ->type_name("N")->check(one_or_more)->capture_default_str();
  app.add_option("--layout", s.layout_file, "accept only this layout: lines \"name size [dense|embedding]\"")
      ->type_name("FILE");
  app.add_option("--learners", s.learners, "stop once N learners have left and none is live (0: until SIGINT/SIGTERM)")
      ->type_name("N")->check(whole)->capture_default_str();
  app.add_option("--curve-secret", s.curve_secret, "the syncer's CURVE key pair (diloco_keygen); needs --allow")
      ->type_name("FILE");
  app.add_option("--allow", s.allow_files,
                 "learners' public keys (repeatable): each \"public-key = KEY\" line followed by \"learners = IDS\", "
                 "the learner ids that key may speak for (\"0-3,7\", or \"*\" for any); diloco_keygen NAME "
                 "--learners IDS writes such a file")
      ->type_name("FILE")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--insecure", s.insecure, "allow binding a non-loopback address without CURVE");
  app.add_option("--chunk-bytes", s.sockets.chunk_bytes,
                 "send payloads larger than this in parts of this size (docs/protocol.md, \"Framing\"; 0: whole)")
      ->type_name("BYTES")->check(whole)->capture_default_str();
  app.add_option("--memory-budget", s.sockets.memory_bytes,
                 "bytes peers can make the endpoint hold, all together: unfinished inbound messages and queued "
                 "sends (docs/protocol.md, \"Framing\")")
      ->type_name("BYTES")->check(one_or_more)->capture_default_str();
  app.add_option("--save", s.save_file, "write the final global parameters (raw little-endian f32)")
      ->type_name("FILE");
  app.add_option("--metrics", s.metrics_file, "also write the final counters (the JSON line) to FILE")
      ->type_name("FILE");
  std::uint64_t metrics_port = 0;
  const CLI::Option* metrics_port_given = app.add_option("--metrics-port", metrics_port,
                 "serve the counters in the Prometheus text format at http://127.0.0.1:PORT/metrics (0: a free "
                 "port, logged)")
      ->type_name("PORT")->check(in(interval<std::uint64_t>{.min = 0, .max = 65535}));
  app.add_option("--metrics-jsonl", s.metrics_jsonl,
                 "append every counter to FILE as one JSON line every --metrics-interval seconds, and once at the end")
      ->type_name("FILE");
  app.add_option("--metrics-interval", s.metrics_interval, "seconds between two --metrics-jsonl lines")
      ->type_name("SEC")->check(in(interval<double>{.min = 0, .max = 1e9, .open_min = true}))->capture_default_str();
  app.add_option("--checkpoint-dir", s.checkpoint_dir, "keep checkpoints there; on start, resume from the newest "
                                                        "intact one")
      ->type_name("DIR");
  app.add_flag("--journal-sync", s.journal_sync,
               "with --checkpoint-dir: flush the contribution journal to disk before each acknowledgement, so that "
               "it survives the machine and not only the process (one disk flush per contribution)");
  app.add_option("--durability", durability_text,
                 "checkpoint before every outer update is published (update), or every SEC seconds")
      ->type_name("update|SEC")->check(durability)->capture_default_str();
  app.add_option("--trace", s.trace_file, "append contributions and outer updates to FILE as JSON lines "
                                          "(docs/chaos.md)")
      ->type_name("FILE");
  app.add_flag("--quiet", s.quiet, "no per-update lines");
  std::string shard = "0/1";
  app.add_option("--shard", shard,
                 "this process is shard S of N, owning the fragments p with p mod N = S (docs/design.md, "
                 "\"Sharded syncer\")")
      ->type_name("S/N")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            unsigned index = 0, count = 0;
            char slash = 0;
            std::istringstream in(v);
            if (!(in >> index >> slash >> count) || slash != '/' || !in.eof() || count == 0 || index >= count)
              return "expected S/N with 0 <= S < N, got '" + v + "'";
            return {};
          },
          "S/N", "shard"))
      ->capture_default_str();
  if (const auto status = diloco_tools::parse(app, argc, argv)) return status;
  {
    std::istringstream in(shard);
    char slash = 0;
    in >> o.shard.index >> slash >> o.shard.count;
  }

  if (overlap->count() == 0) t.overlap = t.sync_period / 10;
  {
    const bool synchronous = t.lock_step || o.world.size > 0;
    const auto outer = synchronous ? lock_step : decoupled;
    if (!s.outer_lr) s.outer_lr = outer.learning_rate;
    if (!s.outer_momentum) s.outer_momentum = outer.momentum;
  }
  if (metrics_port_given->count() > 0) s.metrics_port = static_cast<std::uint16_t>(metrics_port);
  const auto seconds_of = [](double v) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(v));
  };
  o.world.rendezvous_timeout = seconds_of(rendezvous_s);
  o.world.loss_wait = seconds_of(loss_wait_s);
  o.world.on_loss = on_loss == "fail" ? diloco::lost_learner::fail : diloco::lost_learner::continue_without;
  if (o.world.size > 0) o.quorum = o.world.size;
  o.end.deadline = seconds_of(deadline_s);
  if (end_when_gone != "never") o.end.when_all_gone = seconds_of(std::strtod(end_when_gone.c_str(), nullptr));
  // Learners that finish early do not end a run of --learners N before the others joined.
  o.end.expected_learners = static_cast<std::uint32_t>(std::min<std::uint64_t>(s.learners, UINT32_MAX));
  if (heartbeat->count() > 0)
    o.heartbeat_timeout =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(heartbeat_s));
  o.scaling = partial == "live"   ? diloco::partial_rounds::live_share
              : partial == "full" ? diloco::partial_rounds::full_step
                                  : diloco::partial_rounds::all_share;
  t.codecs.contributions = *diloco::codec::parse(contribution_codec);
  t.codecs.updates = *diloco::codec::parse(update_codec);
  s.durability_seconds = durability_text == "update" ? 0.0 : std::strtod(durability_text.c_str(), nullptr);
  if (s.curve_secret.empty() != s.allow_files.empty()) {
    std::fprintf(stderr, "diloco_syncer: --curve-secret and --allow go together\n");
    return diloco_tools::bad_usage;
  }
  return std::nullopt;
}

std::string stamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  char b[32];
  std::strftime(b, sizeof b, "%H:%M:%S", std::gmtime(&t));
  return b;
}

/// Log lines go to stderr through a queue of their own: a reader that stops
/// reading never stalls the syncer (docs/protocol.md, "Threat model").
diloco_syncer::log_sink& sink() {
  static diloco_syncer::log_sink instance(STDERR_FILENO);
  return instance;
}

void log(const std::string& line) { sink().write(stamp() + " diloco_syncer: " + line); }

/// The Prometheus endpoint (--metrics-port): up from before the first
/// learner provides the model, until the end of `main`.
std::optional<diloco_syncer::metrics_server>& scrapes() {
  static std::optional<diloco_syncer::metrics_server> instance;
  return instance;
}

std::size_t number_of(const std::string& text, const std::string& path, int line) {
  std::istringstream in(text);
  std::size_t v = 0;
  if (!(in >> v) || !in.eof() || v == 0)
    throw std::runtime_error(path + ":" + std::to_string(line) + ": size must be a positive integer, got '" + text + "'");
  return v;
}

diloco::parameter_layout read_layout(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read layout file " + path);
  diloco::parameter_layout layout;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    std::string name, size, role = "dense";
    if (!(fields >> name) || name.front() == '#') continue;
    if (!(fields >> size)) throw std::runtime_error(path + ":" + std::to_string(number) + ": expected 'name size [role]'");
    fields >> role;
    if (role != "dense" && role != "embedding")
      throw std::runtime_error(path + ":" + std::to_string(number) + ": role must be dense or embedding");
    layout.add(name, number_of(size, path, number), role == "embedding" ? diloco::tensor_role::embedding
                                                                        : diloco::tensor_role::dense);
  }
  if (layout.tensor_count() == 0) throw std::runtime_error(path + ": no tensors");
  return layout;
}

/// Where the syncer starts: the model and, after a restart, its saved state.
struct start {
  diloco::parameter_layout layout;
  std::vector<float> initial;
  std::string state;                    ///< the syncer's saved state, empty for a fresh start
  std::vector<diloco::envelope> joins;  ///< joins held by the bootstrap
};

/// The model and state of a checkpoint body (diloco::checkpoint_body); throws
/// `corrupt_state` naming what makes it unusable.
start from_checkpoint(const std::string& body) {
  auto checkpoint = diloco::read_checkpoint_body(body);
  start st;
  st.initial.assign(checkpoint.layout.size(), 0.0f);
  st.layout = std::move(checkpoint.layout);
  st.state = std::move(checkpoint.state);
  return st;
}

/// Every counter and gauge of `sync` as one JSON object (a `--metrics-jsonl`
/// line): the time, each `syncer_metrics` counter by name, `rejected` by
/// reason (zeros included), the learners, the training loss (null while
/// unknown), the steps the learners computed and the compute efficiency
/// (null before any report), and each fragment's revision.
template <class Syncer>
nlohmann::ordered_json counters_json(const Syncer& sync, double seconds) {
  const auto& m = sync.metrics();
  const auto g = diloco::syncer_gauges::of(sync);
  nlohmann::ordered_json line;
  line["time"] = std::round(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() *
                            1000) / 1000;
  line["seconds"] = std::round(seconds * 1000) / 1000;
  for (const auto& c : diloco::syncer_counter_descriptions) line[std::string(c.name)] = m.*c.field;
  nlohmann::ordered_json rejected = nlohmann::ordered_json::object();
  for (std::size_t r = 0; r < diloco::reject_reason_count; ++r)
    rejected[std::string(diloco::to_string(static_cast<diloco::reject_reason>(r)))] = m.rejected[r];
  line["rejected"] = std::move(rejected);
  line["live_learners"] = g.live_learners;
  line["known_learners"] = g.known_learners;
  line["training_loss"] = g.training_loss ? nlohmann::ordered_json(*g.training_loss) : nlohmann::ordered_json(nullptr);
  line["steps_computed"] = g.steps_computed;
  line["compute_efficiency"] =
      g.compute_efficiency ? nlohmann::ordered_json(*g.compute_efficiency) : nlohmann::ordered_json(nullptr);
  line["revisions"] = g.revisions;
  return line;
}

template <class Syncer>
std::string revisions(const Syncer& sync) {
  std::string out;
  for (std::uint32_t p = 0; p < sync.plan().count(); ++p) out += (p ? "," : "") + std::to_string(sync.revision(p));
  return out;
}

template <class Outer, class Merge>
int serve(const settings& s, diloco::zeromq::server& server, start& from, diloco::checkpoint_store* store,
          std::stop_token stop, Outer outer, Merge merge) {
  using syncer_type = diloco::syncer<Outer, Merge, diloco::zeromq::server>;
  auto options = s.options;
  options.log = log;
  const syncer_type* self = nullptr;
  // With checkpoints, a journal beside them keeps what was acknowledged since
  // the last one (docs/design.md, "Nothing acknowledged is lost").
  std::optional<diloco::contribution_journal> journal;
  if (store) journal.emplace(store->directory() / "journal.bin", s.journal_sync);
  auto write_checkpoint = [&] {
    store->write(diloco::checkpoint_body(*self));
    journal->clear();  // the checkpoint holds all of it now: merged, or in an open round
  };
  if (journal) options.before_ack = [&](const diloco::message& m) { journal->append(m); };
  std::optional<diloco::trace_writer> trace;
  if (!s.trace_file.empty()) trace.emplace(s.trace_file);
  // Traced, then made durable (per-update durability), then published. A
  // SIGKILL between the two leaves a merge traced but not saved: the journal
  // still holds its contributions, which the restarted syncer merges again
  // (traced again), so the trace accounts for every one. The other order
  // could save a merge the trace never shows, and an auditor of the trace
  // (diloco_chaos) would count its contributions as lost.
  options.before_publish = [&](const diloco::update_event& e) {
    if (trace) trace->merged(e.fragment, e.revision, e.contributions);
    if (store && s.durability_seconds == 0) write_checkpoint();
  };
  if (trace) options.on_contribution = [&](const diloco::contribution_event& e) { trace->contribution(e); };
  if (trace) options.on_drop = [&](const diloco::drop_event& e) { trace->dropped(e); };
  std::optional<double> loss;  // the training loss as of the latest outer update
  options.on_update = [&loss, quiet = s.quiet](const diloco::update_event& e) {
    loss = e.training_loss;
    if (!quiet) {
      char line[160];
      std::snprintf(line, sizeof line, "%s update fragment=%u revision=%llu contributors=%u staleness=%llu scale=%.3f",
                    stamp().c_str(), e.fragment, static_cast<unsigned long long>(e.revision), e.contributors,
                    static_cast<unsigned long long>(e.max_staleness), e.scale);
      sink().write(line);
    }
  };
  syncer_type sync(from.layout, from.initial, server, options, std::move(outer), std::move(merge));
  self = &sync;
  if (!from.state.empty()) {
    std::istringstream in(from.state);
    sync.load(in);  // throws corrupt_state with the reason
    log("resumed at revisions " + revisions(sync) + " with " + std::to_string(sync.metrics().contributions_pending) +
        " contributions in open rounds; learners rejoin by themselves");
  }
  if (journal) {
    auto journaled = diloco::contribution_journal::read(journal->path(), from.layout.size() * sizeof(float));
    if (!from.state.empty()) {
      std::size_t taken = 0;
      for (auto& m : journaled.messages) taken += sync.replay(std::move(m), diloco::clock::now());
      if (!journaled.messages.empty() || journaled.torn_bytes)
        log("journal: " + std::to_string(taken) + " acknowledged contributions taken back, " +
            std::to_string(journaled.messages.size() - taken) + " already in the checkpoint, " +
            std::to_string(journaled.torn_bytes) + " torn bytes ignored");
    } else if (!journaled.messages.empty()) {
      log("journal: " + std::to_string(journaled.messages.size()) +
          " records without a checkpoint beneath them (another run's) discarded");
    }
    // Durable before anything else is accepted: the journal then holds only
    // what this process acknowledges.
    write_checkpoint();
  }
  if (trace) {
    // A shard names the revisions of its own fragments only (−1: another shard's).
    std::vector<std::int64_t> at;
    for (std::uint32_t p = 0; p < sync.plan().count(); ++p)
      at.push_back(sync.options().shard.owns(p) ? static_cast<std::int64_t>(sync.revision(p)) : -1);
    nlohmann::ordered_json fields = {{"pid", ::getpid()}, {"restored", !from.state.empty()}, {"revisions", at}};
    if (sync.options().shard.count > 1) fields["shard"] = sync.options().shard.index;
    trace->write("syncer", "start", diloco_tools::trace_fields(fields));
  }
  const auto started = std::chrono::steady_clock::now();
  // Counters for Prometheus (republished every 200 ms at most) and as JSON
  // lines (every --metrics-interval, and once at the end).
  auto* page = scrapes() ? &*scrapes() : nullptr;
  if (page) page->publish(diloco::prometheus_text(sync.metrics(), diloco::syncer_gauges::of(sync)));
  std::optional<std::ofstream> jsonl;
  if (!s.metrics_jsonl.empty()) {
    jsonl.emplace(s.metrics_jsonl, std::ios::app);
    if (!*jsonl) throw std::runtime_error("cannot write " + s.metrics_jsonl);
  }
  const auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  auto write_jsonl = [&] {
    *jsonl << counters_json(sync, since_start()).dump() << '\n' << std::flush;
    if (!*jsonl) log("error: cannot write " + s.metrics_jsonl);
  };
  auto last_published = started, last_jsonl = started;
  for (auto& join : from.joins) sync.handle(std::move(join), diloco::clock::now());
  auto last_checkpoint = std::chrono::steady_clock::now();
  sync.run_until(stop, [&] {
    const auto now = std::chrono::steady_clock::now();
    if (page && now - last_published >= std::chrono::milliseconds(200)) {
      page->publish(diloco::prometheus_text(sync.metrics(), diloco::syncer_gauges::of(sync)));
      last_published = now;
    }
    if (jsonl && now - last_jsonl >= std::chrono::duration<double>(s.metrics_interval)) {
      write_jsonl();
      last_jsonl = now;
    }
    if (store && s.durability_seconds > 0 &&
        std::chrono::steady_clock::now() - last_checkpoint > std::chrono::duration<double>(s.durability_seconds)) {
      write_checkpoint();
      last_checkpoint = std::chrono::steady_clock::now();
    }
    return s.learners > 0 && sync.metrics().leaves >= s.learners && sync.live_learners() == 0;
  });
  if (store) write_checkpoint();  // after the final flush
  if (trace) trace->write("syncer", "stop");
  if (jsonl) write_jsonl();
  if (page) page->publish(diloco::prometheus_text(sync.metrics(), diloco::syncer_gauges::of(sync)));

  const auto& m = sync.metrics();
  if (!s.save_file.empty()) {
    const auto params = sync.parameters();
    std::ofstream out(s.save_file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size() * sizeof(float)));
    if (!out) log("error: cannot write " + s.save_file);
  }
  // One JSON line, keys in a fixed order; "rejected" counts by reason, only the reasons that occurred.
  nlohmann::ordered_json rejected = nlohmann::ordered_json::object();
  for (std::size_t r = 0; r < diloco::reject_reason_count; ++r)
    if (m.rejected[r]) rejected[std::string(diloco::to_string(static_cast<diloco::reject_reason>(r)))] = m.rejected[r];
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const nlohmann::ordered_json counters = {
      {"outer_updates", m.outer_updates},
      {"contributions_accepted", m.contributions_accepted},
      {"contributions_merged", m.contributions_merged},
      {"contributions_replayed", m.contributions_replayed},
      {"contributions_dropped", m.contributions_dropped},
      {"rounds_dropped", m.rounds_dropped},
      {"contributions_clipped", m.contributions_clipped},
      {"weights_clipped", m.weights_clipped},
      {"quarantines", m.quarantines},
      {"learners_forgotten", m.learners_forgotten},
      {"log_lines_dropped", sink().dropped()},
      {"rejected", rejected},
      {"joins", m.joins},
      {"rejoins", m.rejoins},
      {"reconnects", m.reconnects},
      {"leaves", m.leaves},
      {"declared_dead", m.declared_dead},
      {"revived", m.revived},
      {"staleness_max", m.staleness_max},
      {"partial_rounds", m.partial_rounds},
      {"failure", sync.failure() ? nlohmann::ordered_json(*sync.failure()) : nlohmann::ordered_json(nullptr)},
      {"ended", sync.ended() ? nlohmann::ordered_json(*sync.ended()) : nlohmann::ordered_json(nullptr)},
      {"tokens_merged", m.tokens_merged},
      {"steps_merged", m.steps_merged},
      {"steps_computed", sync.steps_computed()},
      {"compute_efficiency", sync.compute_efficiency() ? nlohmann::ordered_json(*sync.compute_efficiency())
                                                       : nlohmann::ordered_json(nullptr)},
      {"training_loss", loss ? nlohmann::ordered_json(*loss) : nlohmann::ordered_json(nullptr)},
      {"losses_ignored", m.losses_ignored},
      {"payload_bytes_received", m.payload_bytes_received},
      {"payload_bytes_sent", m.payload_bytes_sent},
      {"curve_admitted", server.admitted()},
      {"curve_denied", server.denied()},
      {"seconds", std::round(seconds * 1000) / 1000},  // milliseconds are all a run's length needs
  };
  const std::string line = counters.dump() + '\n';
  std::fputs(line.c_str(), stdout);
  if (!s.metrics_file.empty()) {
    std::ofstream out(s.metrics_file, std::ios::trunc);
    out << line;
    if (!out) log("error: cannot write " + s.metrics_file);
  }
  if (sync.failure()) {
    log("run failed: " + *sync.failure());
    return 3;
  }
  return 0;
}

template <class Merge>
int with_outer(const settings& s, diloco::zeromq::server& server, start& from, diloco::checkpoint_store* store,
               std::stop_token stop, Merge merge) {
  using namespace diloco;
  if (s.outer == "sgd")
    return serve(s, server, from, store, stop, outer::sgd<float>({.learning_rate = *s.outer_lr}), merge);
  if (s.outer == "adamw")
    return serve(s, server, from, store, stop,
                 presets::data_parallel_outer<float>(inner::adamw_options{.learning_rate = *s.outer_lr}), merge);
  if (s.outer == "delayed-nesterov")
    return serve(s, server, from, store, stop,
                 outer::delayed_nesterov<float>(
                     {.learning_rate = *s.outer_lr, .momentum = *s.outer_momentum, .delay = s.delay}),
                 merge);
  return serve(s, server, from, store, stop,
               outer::nesterov<float>(
                   {.learning_rate = *s.outer_lr, .momentum = *s.outer_momentum, .threads = s.threads}),
               merge);
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  if (const auto status = parse(argc, argv, s)) return *status;

  // SIGINT and SIGTERM stop the service cleanly (open rounds are merged):
  // blocked everywhere, awaited by one thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::stop_source stop;
  std::jthread waiter([&signals, &stop](std::stop_token) {
    int got = 0;
    sigwait(&signals, &got);
    if (got == SIGINT || got == SIGTERM) stop.request_stop();
  });

  int status = 1;
  try {
    std::optional<diloco::zeromq::server_security> security;
    if (!s.curve_secret.empty()) {
      security = diloco::zeromq::server_security{diloco::zeromq::load_keypair(s.curve_secret), {}};
      for (const auto& file : s.allow_files)
        for (auto& entry : diloco::zeromq::load_allow_list(file)) {
          log("CURVE: key " + entry.public_key.substr(0, 8) + "... from " + file + " may speak for learners " +
              entry.learners.to_string());
          security->allowed.push_back(std::move(entry));
        }
      log("CURVE on: " + std::to_string(security->allowed.size()) + " learner key(s) allowed");
    } else if (!diloco::zeromq::is_local_endpoint(s.endpoint) && !s.insecure) {
      throw usage_error("refusing to bind " + s.endpoint +
                        " without CURVE keys (--curve-secret, --allow); pass --insecure to do it anyway");
    } else {
      log(diloco::zeromq::is_local_endpoint(s.endpoint) ? "no CURVE keys: serving this machine only (loopback or ipc)"
                                 : "no CURVE keys and --insecure: anyone who reaches " + s.endpoint + " can join");
    }
    std::optional<diloco::parameter_layout> expected;
    if (!s.layout_file.empty()) expected = read_layout(s.layout_file);

    diloco::zeromq::keep_large_blocks();  // large fragments arrive without page faults (process-wide)
    ::zmq::context_t context;
    diloco::zeromq::server server(context, s.endpoint, s.sockets, security);
    log("listening on " + server.endpoint() + ", P=" + std::to_string(s.options.training.fragments) +
        " H=" + std::to_string(s.options.training.sync_period) + " tau=" + std::to_string(s.options.training.overlap) +
        " K=" + std::to_string(s.options.quorum));
    if (s.metrics_port) {
      scrapes().emplace(*s.metrics_port);  // throws when the port cannot be bound
      scrapes()->publish(diloco::prometheus_text(diloco::syncer_metrics{}));
      log("metrics at http://127.0.0.1:" + std::to_string(scrapes()->port()) + "/metrics");
    }
    std::optional<diloco::checkpoint_store> store;
    std::optional<start> from;
    if (!s.checkpoint_dir.empty()) {
      store.emplace(s.checkpoint_dir);
      std::vector<std::string> skipped;
      const auto latest = store->latest(&skipped);
      for (const auto& line : skipped) log("skipping checkpoint " + line);
      if (latest) {
        try {
          from = from_checkpoint(latest->body);
        } catch (const diloco::corrupt_state& e) {
          throw std::runtime_error("checkpoint " + std::to_string(latest->sequence) + ": " + e.what());
        }
        log("restarting from checkpoint " + std::to_string(latest->sequence) + " in " + s.checkpoint_dir);
      }
    }
    if (!from) {
      diloco::bootstrap<float, diloco::zeromq::server> boot(server, s.options.training, expected);
      while (!stop.stop_requested() && !boot.ready())
        if (auto e = server.receive_for(std::chrono::milliseconds(100))) boot.handle(std::move(*e), diloco::clock::now());
      if (boot.ready()) {
        log("model from the first learner: " + std::to_string(boot.layout().tensor_count()) + " tensors, " +
            std::to_string(boot.layout().size()) + " parameters");
        from = start{boot.layout(), {boot.initial().begin(), boot.initial().end()}, {}, boot.take_joins()};
      }
    }
    if (!from) {
      log("stopped before any learner provided the model");
      status = 0;
    } else {
      // Honest learners sending a fragment each at once must fit the memory
      // budget; past it the transport refuses some of them (`over_budget`).
      const auto plan = diloco::fragment_plan::balanced(from->layout, s.options.training.fragments);
      std::size_t largest = 0;
      for (const auto& f : plan.fragments()) largest = std::max(largest, f.size());
      const std::uint64_t fragment_bytes = std::uint64_t{largest} * sizeof(float);
      if (4 * fragment_bytes > s.sockets.memory_bytes)
        log("warning: --memory-budget " + std::to_string(s.sockets.memory_bytes) + " bytes holds fewer than 4 " +
            "full-precision fragments of " + std::to_string(fragment_bytes) + " bytes at once: learners sending " +
            "together will be refused as over_budget; give at least the learners x the fragment size");
      using namespace diloco;
      auto* st = store ? &*store : nullptr;
      merge::average average;
      merge::token_weighted tokens;
      average.threads = tokens.threads = s.threads;
      if (s.merge == "average") status = with_outer(s, server, *from, st, stop.get_token(), average);
      else if (s.merge == "rda") status = with_outer(s, server, *from, st, stop.get_token(), merge::radial_directional<>{});
      else status = with_outer(s, server, *from, st, stop.get_token(), tokens);
    }
  } catch (const usage_error& e) {
    std::fprintf(stderr, "diloco_syncer: %s\n", e.what());
    status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_syncer: error: %s\n", e.what());
    status = 1;
  }
  scrapes().reset();
  // Wake the signal thread if no signal came.
  if (!stop.stop_requested()) pthread_kill(waiter.native_handle(), SIGTERM);
  return status;
}
