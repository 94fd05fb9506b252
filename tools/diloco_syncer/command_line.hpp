// diloco_syncer's command line, read with CLI11 into `settings`:
//   diloco_syncer [--endpoint URL] [--fragments P] [--H H] [--learners N] [options]
// Every number is checked against the range the syncer accepts and every
// name against the names it knows; a bad one is refused with exit status 2,
// naming the flag and the value (docs/protocol.md and docs/design.md describe
// what the options do).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <diloco/diloco.hpp>
#include <diloco/transport/zeromq.hpp>
#include <diloco_tools/cli.hpp>

namespace diloco_syncer {

/// What diloco_syncer was asked to do.
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
  bool journal_sync = false;                  ///< fdatasync the journal after each contribution
  std::vector<std::string> allow_files;
  double durability_seconds = 0;  ///< 0: before every published update
  std::uint64_t learners = 0;
  bool insecure = false, quiet = false;
  diloco::zeromq::socket_options sockets;
  /// --etcd: lead the shard under a lease in etcd (http://HOST:PORT), as a
  /// standby until then; the key, and the lease's time to live in seconds.
  std::string etcd, leader_key;
  std::uint32_t lease_ttl = 5;
  /// --replication-endpoint: with --etcd and --checkpoint-dir, where this
  /// syncer serves its replication stream while it leads, and keeps a copy
  /// of the leader's while it stands by (docs/protocol.md, "Replication").
  std::string replication_endpoint;
  bool replication_async = false;
  double replication_timeout = 2;  ///< seconds a synchronous primary waits for a standby
};

/// Reads the command line into `s`: nothing when the service is to start,
/// else the exit status (0 after --help, 2 for bad usage, the reason on
/// stderr). Every number is checked against the range the syncer accepts, so
/// that a bad one is refused here, naming its flag, rather than after the
/// endpoint is bound.
inline std::optional<int> parse_command_line(int argc, const char* const* argv, settings& s) {
  using diloco_tools::in;
  using diloco_tools::interval;
  auto& o = s.options;
  auto& t = o.training;
  CLI::App app{
      "Serves Decoupled DiLoCo learners over ZeroMQ. Logs one line per outer update\n"
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
        return text == "update" || non_negative(text).empty()
                   ? std::string()
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

  app.add_option("--endpoint", s.endpoint, "tcp://HOST:PORT or ipc://PATH to bind")
      ->type_name("URL")
      ->capture_default_str();
  app.add_option("--fragments", t.fragments, "fragments of the model")
      ->type_name("P")
      ->check(one_or_more)
      ->capture_default_str();
  app.add_option("--H", t.sync_period, "inner steps between two sends of a fragment")
      ->type_name("H")
      ->check(one_or_more)
      ->capture_default_str();
  const CLI::Option* overlap =
      app.add_option("--overlap", t.overlap, "steps between a send and the use of its answer (default: H/10)")
          ->type_name("TAU")
          ->check(whole);
  app.add_option("--alpha", t.mixing, "mixing on adoption, in [0, 1); 0 overwrites")
      ->type_name("A")
      ->check(fraction)
      ->capture_default_str();
  app.add_flag("--lock-step", t.lock_step, "learners wait for each answer (synchronous DiLoCo)");
  const auto codecs = CLI::IsMember({"fp32", "bf16", "int8", "fp8", "int4"}).description("");
  app.add_option("--codec", contribution_codec, "outer gradients, learners to syncer (fp32: full precision)")
      ->type_name("fp32|bf16|int8|fp8|int4")
      ->check(codecs)
      ->capture_default_str();
  app.add_option("--update-codec", update_codec, "global fragments, syncer to learners")
      ->type_name("fp32|bf16|int8|fp8|int4")
      ->check(codecs)
      ->capture_default_str();
  app.add_option("--codec-block", t.codecs.block, "values per scaled block of int8, fp8 and int4, in [1, 65536]")
      ->type_name("B")
      ->check(CLI::Range(1u, diloco::max_codec_block).description(""))
      ->capture_default_str();
  app.add_option("--quorum", o.quorum, "distinct learners before a round may close")
      ->type_name("K")
      ->check(one_or_more)
      ->capture_default_str();
  app.add_option("--world-size", o.world.size,
                 "M: a fixed world of learners 0..M-1 (synchronous modes): nobody trains before all M have joined, "
                 "and every round waits for every live one (0: open membership)")
      ->type_name("M")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--rendezvous-timeout", rendezvous_s,
                 "with --world-size: fail (exit 3, naming the missing ids) unless all M learners joined within SEC")
      ->type_name("SEC")
      ->check(in(interval<double>{.min = 0, .max = 1e9, .open_min = true}))
      ->capture_default_str();
  app.add_option("--on-learner-loss", on_loss,
                 "with --world-size, a learner declared dead: rounds wait --loss-wait longer, then continue without "
                 "it (continue), or the run fails (fail, exit 3)")
      ->type_name("continue|fail")
      ->check(CLI::IsMember({"continue", "fail"}).description(""))
      ->capture_default_str();
  app.add_option("--loss-wait", loss_wait_s, "with --world-size: how long a dead learner still holds the rounds, s")
      ->type_name("SEC")
      ->check(in(interval<double>{.min = 0, .max = 1e9}))
      ->capture_default_str();
  app.add_option("--max-outer-updates", o.end.max_outer_updates,
                 "end the run after this many outer updates, all fragments together (0: no limit)")
      ->type_name("N")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--max-tokens", o.end.max_tokens,
                 "end the run once this many tokens, all learners together, are merged into the global model "
                 "(per fragment; work still unsent or thrown away does not count; 0: no limit)")
      ->type_name("N")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--max-steps", o.end.max_steps,
                 "end the run once this many inner steps, all learners together, are merged into the global model "
                 "(per fragment: steps computed but not merged yet, or thrown away, do not count; 0: no limit)")
      ->type_name("N")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--deadline", deadline_s, "end the run SEC seconds after the first message (0: none)")
      ->type_name("SEC")
      ->check(in(interval<double>{.min = 0, .max = 1e9}))
      ->capture_default_str();
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
  app.add_option("--grace", o.grace_factor, "grace-window factor gamma in [0, 1)")
      ->type_name("G")
      ->check(fraction)
      ->capture_default_str();
  app.add_option("--max-staleness", o.max_staleness, "refuse outer gradients more than S revisions old")
      ->type_name("S")
      ->check(whole)
      ->capture_default_str();
  const CLI::Option* heartbeat =
      app.add_option("--heartbeat-timeout", heartbeat_s, "silence before a learner counts as dead, in (0, 1e9] s")
          ->type_name("SEC")
          ->check(in(interval<double>{.min = 0, .max = 1e9, .open_min = true}))
          ->capture_default_str();
  app.add_option("--outer", s.outer,
                 "outer optimizer; adamw with --outer-lr as its learning rate is data parallelism's optimizer "
                 "(learners: SGD, rate 1, H=1)")
      ->type_name("nesterov|sgd|delayed-nesterov|adamw")
      ->check(CLI::IsMember({"nesterov", "sgd", "delayed-nesterov", "adamw"}).description(""))
      ->capture_default_str();
  app.add_option("--threads", s.threads,
                 "threads of the outer Nesterov step and the weighted-mean merges (0: every core; the result is the "
                 "same bit for bit)")
      ->type_name("N")
      ->capture_default_str();
  const auto decoupled = diloco::presets::decoupled_outer_options();
  const auto lock_step = diloco::presets::diloco_outer_options();
  app.add_option("--outer-lr", s.outer_lr,
                 "outer learning rate, >= 0 (" + diloco_tools::shown(decoupled.learning_rate) +
                     "; with --lock-step or --world-size " + diloco_tools::shown(lock_step.learning_rate) + ")")
      ->type_name("ETA")
      ->check(non_negative);
  app.add_option("--outer-momentum", s.outer_momentum,
                 "outer momentum, in [0, 1) (" + diloco_tools::shown(decoupled.momentum) +
                     "; with --lock-step or --world-size " + diloco_tools::shown(lock_step.momentum) + ")")
      ->type_name("MU")
      ->check(fraction);
  app.add_option("--delay", s.delay, "delayed Nesterov: outer steps per momentum update")
      ->type_name("N")
      ->check(one_or_more)
      ->capture_default_str();
  app.add_option("--merge", s.merge, "merge rule")
      ->type_name("tokens|average|rda")
      ->check(CLI::IsMember({"tokens", "average", "rda"}).description(""))
      ->capture_default_str();
  app.add_option("--partial-rounds", partial, "size of partial rounds")
      ->type_name("all|live|full")
      ->check(CLI::IsMember({"all", "live", "full"}).description(""))
      ->capture_default_str();
  app.add_option("--absent-half-life", o.membership.absent_half_life,
                 "a departed learner's weight in partial rounds halves every N periods (H steps at the learners' "
                 "mean step time), in (0, 10000]")
      ->type_name("N")
      ->check(in(interval<double>{.min = 0, .max = 10000, .open_min = true}))
      ->capture_default_str();
  app.add_option("--forget-after", o.membership.forget_after,
                 "a departed learner's table place is freed after N half-lives, in (0, 64]")
      ->type_name("N")
      ->check(in(interval<double>{.min = 0, .max = 64, .open_min = true}))
      ->capture_default_str();
  app.add_option("--max-learners", o.max_learners, "learners kept track of at once")
      ->type_name("N")
      ->check(one_or_more)
      ->capture_default_str();
  app.add_option("--clip", o.screening.clip_factor,
                 "clip outer gradients and merge weights above C x the lower median of recent ones (0: off, "
                 "else >= 1)")
      ->type_name("C")
      ->check(clip_factor)
      ->capture_default_str();
  app.add_option("--quarantine-after", o.screening.quarantine_after,
                 "refuse a learner (until it rejoins) after N of its contributions in a row were norm-clipped "
                 "or refused for their content (0: never)")
      ->type_name("N")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--max-update-ratio", o.screening.max_update_ratio,
                 "do not publish an outer step that moves a fragment by more than R x its norm (0: no bound)")
      ->type_name("R")
      ->check(non_negative)
      ->capture_default_str();
  app.add_option("--max-tokens-per-step", o.screening.max_tokens_per_step,
                 "refuse contributions claiming more tokens per step")
      ->type_name("N")
      ->check(one_or_more)
      ->capture_default_str();
  app.add_option("--layout", s.layout_file, "accept only this layout: lines \"name size [dense|embedding]\"")
      ->type_name("FILE");
  app.add_option("--learners", s.learners, "stop once N learners have left and none is live (0: until SIGINT/SIGTERM)")
      ->type_name("N")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--curve-secret", s.curve_secret, "the syncer's CURVE key pair (diloco_keygen); needs --allow")
      ->type_name("FILE");
  app.add_option("--allow", s.allow_files,
                 "learners' public keys (repeatable): each \"public-key = KEY\" line followed by \"learners = IDS\", "
                 "the learner ids that key may speak for (\"0-3,7\", or \"*\" for any); diloco_keygen NAME "
                 "--learners IDS writes such a file")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_flag("--insecure", s.insecure, "allow binding a non-loopback address without CURVE");
  app.add_option("--chunk-bytes", s.sockets.chunk_bytes,
                 "send payloads larger than this in parts of this size (docs/protocol.md, \"Framing\"; 0: whole)")
      ->type_name("BYTES")
      ->check(whole)
      ->capture_default_str();
  app.add_option("--memory-budget", s.sockets.memory_bytes,
                 "bytes peers can make the endpoint hold, all together: unfinished inbound messages and queued "
                 "sends (docs/protocol.md, \"Framing\")")
      ->type_name("BYTES")
      ->check(one_or_more)
      ->capture_default_str();
  app.add_option("--save", s.save_file, "write the final global parameters (raw little-endian f32)")->type_name("FILE");
  app.add_option("--metrics", s.metrics_file, "also write the final counters (the JSON line) to FILE")
      ->type_name("FILE");
  std::uint64_t metrics_port = 0;
  const CLI::Option* metrics_port_given =
      app.add_option("--metrics-port", metrics_port,
                     "serve the counters in the Prometheus text format at http://127.0.0.1:PORT/metrics (0: a free "
                     "port, logged)")
          ->type_name("PORT")
          ->check(in(interval<std::uint64_t>{.min = 0, .max = 65535}));
  app.add_option("--metrics-jsonl", s.metrics_jsonl,
                 "append every counter to FILE as one JSON line every --metrics-interval seconds, and once at the end")
      ->type_name("FILE");
  app.add_option("--metrics-interval", s.metrics_interval, "seconds between two --metrics-jsonl lines")
      ->type_name("SEC")
      ->check(in(interval<double>{.min = 0, .max = 1e9, .open_min = true}))
      ->capture_default_str();
  app.add_option("--checkpoint-dir", s.checkpoint_dir,
                 "keep checkpoints there; on start, resume from the newest "
                 "intact one")
      ->type_name("DIR");
  app.add_flag("--journal-sync", s.journal_sync,
               "with --checkpoint-dir: flush the contribution journal to disk before each acknowledgement, so that "
               "it survives the machine and not only the process (one disk flush per contribution)");
  app.add_option("--durability", durability_text,
                 "checkpoint before every outer update is published (update), or every SEC seconds")
      ->type_name("update|SEC")
      ->check(durability)
      ->capture_default_str();
  app.add_option("--trace", s.trace_file,
                 "append contributions and outer updates to FILE as JSON lines "
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
  app.add_option("--etcd", s.etcd,
                 "lead this shard under a lease in the etcd at URL (http://HOST:PORT): wait as a standby while "
                 "another syncer leads it, stamp the leadership's epoch on every message, and exit with status 4 "
                 "the moment the lease is not surely held (docs/protocol.md, \"Epochs\")")
      ->type_name("URL")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const bool ok = v.starts_with("http://") && v.find(':', 7) != std::string::npos;
            return ok ? std::string() : "expected http://HOST:PORT, got '" + v + "'";
          },
          "URL", "etcd"));
  app.add_option("--leader-key", s.leader_key, "with --etcd: the key of this shard's leadership")
      ->type_name("KEY")
      ->default_str("/diloco/shard-S/leader");
  app.add_option("--lease-ttl", s.lease_ttl,
                 "with --etcd: the lease's time to live, how long a lost leader holds up its standby")
      ->type_name("SEC")
      ->check(diloco_tools::whole_at_least(1))
      ->capture_default_str();
  app.add_option("--replication-endpoint", s.replication_endpoint,
                 "with --etcd and --checkpoint-dir: while leading, serve the replication stream here (every "
                 "checkpoint and journal record, to each standby); while standing by, keep a copy of the leader's "
                 "in --checkpoint-dir, to take over from (docs/protocol.md, \"Replication\")")
      ->type_name("ENDPOINT");
  std::string replication = "sync";
  app.add_option("--replication", replication,
                 "sync: a contribution is acknowledged once every standby has it (a failover loses nothing "
                 "acknowledged); async: without waiting (a failover may lose what was in flight to the standby)")
      ->check(CLI::IsMember({"sync", "async"}).description(""))
      ->capture_default_str();
  app.add_option("--replication-timeout", s.replication_timeout,
                 "with --replication sync: how long the primary waits for a standby's acknowledgement before it "
                 "drops that standby (which then catches up from a snapshot)")
      ->type_name("SEC")
      ->check(in(interval<double>{.min = 0.001, .max = 3600}))
      ->capture_default_str();
  if (const auto status = diloco_tools::parse(app, argc, argv)) return status;
  s.replication_async = replication == "async";
  if (!s.replication_endpoint.empty() && (s.etcd.empty() || s.checkpoint_dir.empty())) {
    std::cerr << "diloco_syncer: --replication-endpoint needs --etcd (who leads) and --checkpoint-dir (what is "
                 "replicated, and where a standby keeps its copy)\n";
    return diloco_tools::bad_usage;
  }
  if (s.etcd.empty() && !s.leader_key.empty()) {
    std::cerr << "diloco_syncer: --leader-key needs --etcd\n";
    return diloco_tools::bad_usage;
  }
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
  if (!s.etcd.empty() && s.leader_key.empty())
    s.leader_key = "/diloco/shard-" + std::to_string(o.shard.index) + "/leader";
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
    std::cerr << "diloco_syncer: --curve-secret and --allow go together\n";
    return diloco_tools::bad_usage;
  }
  return std::nullopt;
}

}  // namespace diloco_syncer
