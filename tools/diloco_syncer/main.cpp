// diloco_syncer: the syncer as a ready-to-run service over ZeroMQ. It needs no
// knowledge of the model: the first learner to join provides the parameter
// layout and the initial parameters (or --layout fixes the layout up front).
//
//   diloco_syncer --endpoint tcp://127.0.0.1:5555 --fragments 4 --H 50 --learners 4

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/metrics/trace.hpp>
#include <diloco/runtime/checkpoint.hpp>
#include <diloco/transport/zeromq.hpp>

#include "log_sink.hpp"

namespace {

constexpr const char* usage = R"(usage: diloco_syncer [options]

Serves Decoupled DiLoCo learners over ZeroMQ. Logs one line per outer update
and, when it stops, prints its counters as one JSON line.

  --endpoint URL            tcp://HOST:PORT or ipc://PATH to bind (tcp://127.0.0.1:5555)
  --fragments P             fragments of the model (4)
  --H H                     inner steps between two sends of a fragment (50)
  --overlap TAU             steps between a send and the use of its answer (H/10)
  --alpha A                 mixing on adoption, 0 overwrites (0)
  --lock-step               learners wait for each answer (synchronous DiLoCo)
  --quorum K                distinct learners before a round may close (1)
  --grace G                 grace-window factor gamma in [0, 1) (0.5)
  --max-staleness S         refuse outer gradients more than S revisions old (16)
  --heartbeat-timeout SEC   silence before a learner counts as dead (10)
  --outer nesterov|sgd|delayed-nesterov|adamw
                            outer optimizer (nesterov); adamw with --outer-lr as its learning
                            rate is data parallelism's optimizer (learners: SGD, rate 1, H=1)
  --outer-lr ETA            outer learning rate (0.7)
  --outer-momentum MU       outer momentum (0.9)
  --delay N                 delayed Nesterov: outer steps per momentum update (4)
  --merge tokens|average|rda
                            merge rule (tokens)
  --partial-rounds all|live|full
                            size of partial rounds (all)
  --absent-half-life N      a departed learner's weight in partial rounds halves every N periods
                            (H steps at the learners' mean step time) (20)
  --forget-after N          a departed learner's table place is freed after N half-lives (10)
  --max-learners N          learners kept track of at once (4096)
  --clip C                  clip outer gradients and merge weights above C x the lower median
                            of recent ones (8; 0: off)
  --quarantine-after N      refuse a learner (until it rejoins) after N of its contributions in a
                            row were clipped or refused for their content (8; 0: never)
  --max-update-ratio R      do not publish an outer step that moves a fragment by more than
                            R x its norm (0: no bound)
  --max-tokens-per-step N   refuse contributions claiming more tokens per step (16777216)
  --layout FILE             accept only this layout: lines "name size [dense|embedding]"
  --learners N              stop once N learners have left and none is live (0: until SIGINT/SIGTERM)
  --curve-secret FILE       the syncer's CURVE key pair (diloco_keygen); needs --allow
  --allow FILE              learners' public keys (repeatable): each "public-key = KEY" line followed
                            by "learners = IDS", the learner ids that key may speak for ("0-3,7",
                            or "*" for any); diloco_keygen NAME --learners IDS writes such a file
  --insecure                allow binding a non-loopback address without CURVE
  --save FILE               write the final global parameters (raw little-endian f32)
  --metrics FILE            also write the final counters (the JSON line) to FILE
  --checkpoint-dir DIR      keep checkpoints there; on start, resume from the newest intact one
  --durability update|SEC   checkpoint before every outer update is published (update), or
                            every SEC seconds (default: update)
  --trace FILE              append contributions and outer updates to FILE as JSON lines
                            (docs/chaos.md)
  --quiet                   no per-update lines
  --help                    this text
)";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
T number(std::string_view option, const std::string& text) {
  std::istringstream in(text);
  T value{};
  if (!(in >> value) || !in.eof()) throw usage_error("bad value '" + text + "' for " + std::string(option));
  return value;
}

std::chrono::nanoseconds seconds_option(std::string_view option, const std::string& text) {
  const double v = number<double>(option, text);
  if (!(v > 0) || v > 1e9) throw usage_error("bad value '" + text + "' for " + std::string(option) + " (seconds > 0)");
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(v));
}

struct settings {
  std::string endpoint = "tcp://127.0.0.1:5555";
  diloco::syncer_options options = diloco::presets::decoupled_diloco(50, 4, 1, 5);
  bool overlap_given = false;
  std::string outer = "nesterov";
  double outer_lr = 0.7, outer_momentum = 0.9;
  std::uint32_t delay = 4;
  std::string merge = "tokens";
  std::string layout_file, curve_secret, save_file, metrics_file, checkpoint_dir, trace_file;
  std::vector<std::string> allow_files;
  double durability_seconds = 0;  ///< 0: before every published update
  std::uint64_t learners = 0;
  bool insecure = false, quiet = false;
};

settings parse(int argc, char** argv) {
  settings s;
  auto& o = s.options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view opt = argv[i];
    if (opt == "--help" || opt == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    if (opt == "--lock-step") { o.training.lock_step = true; continue; }
    if (opt == "--insecure") { s.insecure = true; continue; }
    if (opt == "--quiet") { s.quiet = true; continue; }
    if (i + 1 >= argc) throw usage_error("missing value for " + std::string(opt));
    const std::string v = argv[++i];
    if (opt == "--endpoint") s.endpoint = v;
    else if (opt == "--fragments") o.training.fragments = number<std::uint32_t>(opt, v);
    else if (opt == "--H") o.training.sync_period = number<std::uint32_t>(opt, v);
    else if (opt == "--overlap") o.training.overlap = number<std::uint32_t>(opt, v), s.overlap_given = true;
    else if (opt == "--alpha") o.training.mixing = number<double>(opt, v);
    else if (opt == "--quorum") o.quorum = number<std::uint32_t>(opt, v);
    else if (opt == "--grace") o.grace_factor = number<double>(opt, v);
    else if (opt == "--max-staleness") o.max_staleness = number<std::uint32_t>(opt, v);
    else if (opt == "--heartbeat-timeout") o.heartbeat_timeout = seconds_option(opt, v);
    else if (opt == "--outer") s.outer = v;
    else if (opt == "--outer-lr") s.outer_lr = number<double>(opt, v);
    else if (opt == "--outer-momentum") s.outer_momentum = number<double>(opt, v);
    else if (opt == "--delay") s.delay = number<std::uint32_t>(opt, v);
    else if (opt == "--merge") s.merge = v;
    else if (opt == "--partial-rounds") {
      if (v == "all") o.scaling = diloco::partial_rounds::all_share;
      else if (v == "live") o.scaling = diloco::partial_rounds::live_share;
      else if (v == "full") o.scaling = diloco::partial_rounds::full_step;
      else throw usage_error("unknown partial-round rule '" + v + "' (all, live or full)");
    } else if (opt == "--absent-half-life") o.membership.absent_half_life = number<double>(opt, v);
    else if (opt == "--forget-after") o.membership.forget_after = number<double>(opt, v);
    else if (opt == "--max-learners") o.max_learners = number<std::uint32_t>(opt, v);
    else if (opt == "--clip") o.screening.clip_factor = number<double>(opt, v);
    else if (opt == "--quarantine-after") o.screening.quarantine_after = number<std::uint32_t>(opt, v);
    else if (opt == "--max-update-ratio") o.screening.max_update_ratio = number<double>(opt, v);
    else if (opt == "--max-tokens-per-step") o.screening.max_tokens_per_step = number<std::uint64_t>(opt, v);
    else if (opt == "--layout") s.layout_file = v;
    else if (opt == "--learners") s.learners = number<std::uint64_t>(opt, v);
    else if (opt == "--curve-secret") s.curve_secret = v;
    else if (opt == "--allow") s.allow_files.push_back(v);
    else if (opt == "--save") s.save_file = v;
    else if (opt == "--metrics") s.metrics_file = v;
    else if (opt == "--checkpoint-dir") s.checkpoint_dir = v;
    else if (opt == "--trace") s.trace_file = v;
    else if (opt == "--durability") s.durability_seconds = v == "update" ? 0.0 : number<double>(opt, v);
    else throw usage_error("unknown option '" + std::string(opt) + "'");
  }
  if (!s.overlap_given) o.training.overlap = o.training.sync_period / 10;
  if (s.outer != "nesterov" && s.outer != "sgd" && s.outer != "delayed-nesterov" && s.outer != "adamw")
    throw usage_error("unknown outer optimizer '" + s.outer + "' (nesterov, sgd, delayed-nesterov or adamw)");
  if (s.merge != "tokens" && s.merge != "average" && s.merge != "rda")
    throw usage_error("unknown merge rule '" + s.merge + "' (tokens, average or rda)");
  if (s.curve_secret.empty() != s.allow_files.empty())
    throw usage_error("--curve-secret and --allow go together");
  if (!(s.durability_seconds >= 0)) throw usage_error("--durability takes 'update' or a number of seconds");
  return s;
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

/// A checkpoint body: the layout description (u64 length, bytes), then the
/// syncer's state.
template <class Syncer>
std::string checkpoint_body(const Syncer& sync) {
  std::ostringstream out;
  const auto description = diloco::wire::encode_layout(sync.layout());
  diloco::serial::write_pod<std::uint64_t>(out, description.size());
  out.write(reinterpret_cast<const char*>(description.data()), static_cast<std::streamsize>(description.size()));
  sync.save(out);
  return out.str();
}

/// The model and state of a checkpoint body, or nothing if it is unusable.
std::optional<start> from_checkpoint(const std::string& body) {
  std::istringstream in(body);
  std::uint64_t length = 0;
  if (!in.read(reinterpret_cast<char*>(&length), 8) || length > body.size()) return std::nullopt;
  std::vector<std::byte> description(static_cast<std::size_t>(length));
  if (!in.read(reinterpret_cast<char*>(description.data()), static_cast<std::streamsize>(length))) return std::nullopt;
  auto layout = diloco::wire::decode_layout(description, std::uint64_t{1} << 32);
  if (!layout) return std::nullopt;
  start st;
  st.initial.assign(layout->size(), 0.0f);
  st.layout = std::move(*layout);
  st.state = body.substr(8 + length);
  return st;
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
  auto write_checkpoint = [&] { store->write(checkpoint_body(*self)); };
  std::optional<diloco::trace_writer> trace;
  if (!s.trace_file.empty()) trace.emplace(s.trace_file);
  // Made durable (per-update durability), then traced, then published.
  options.before_publish = [&](const diloco::update_event& e) {
    if (store && s.durability_seconds == 0) write_checkpoint();
    if (trace) trace->merged(e.fragment, e.revision, e.contributions);
  };
  if (trace) options.on_contribution = [&](const diloco::contribution_event& e) { trace->contribution(e); };
  if (trace) options.on_drop = [&](const diloco::drop_event& e) { trace->dropped(e); };
  if (!s.quiet)
    options.on_update = [](const diloco::update_event& e) {
      char line[160];
      std::snprintf(line, sizeof line, "%s update fragment=%u revision=%llu contributors=%u staleness=%llu scale=%.3f",
                    stamp().c_str(), e.fragment, static_cast<unsigned long long>(e.revision), e.contributors,
                    static_cast<unsigned long long>(e.max_staleness), e.scale);
      sink().write(line);
    };
  syncer_type sync(from.layout, from.initial, server, options, std::move(outer), std::move(merge));
  self = &sync;
  if (!from.state.empty()) {
    std::istringstream in(from.state);
    sync.load(in);  // throws corrupt_state with the reason
    log("resumed at revisions " + revisions(sync) + "; learners rejoin by themselves");
  }
  if (trace) {
    std::string fields = ",\"pid\":";
    fields.append(std::to_string(::getpid())).append(",\"restored\":").append(from.state.empty() ? "false" : "true");
    trace->write("syncer", "start", fields.append(",\"revisions\":[").append(revisions(sync)).append("]"));
  }
  const auto started = std::chrono::steady_clock::now();
  for (auto& join : from.joins) sync.handle(std::move(join), diloco::clock::now());
  auto last_checkpoint = std::chrono::steady_clock::now();
  sync.run_until(stop, [&] {
    if (store && s.durability_seconds > 0 &&
        std::chrono::steady_clock::now() - last_checkpoint > std::chrono::duration<double>(s.durability_seconds)) {
      write_checkpoint();
      last_checkpoint = std::chrono::steady_clock::now();
    }
    return s.learners > 0 && sync.metrics().leaves >= s.learners && sync.live_learners() == 0;
  });
  if (store) write_checkpoint();  // after the final flush
  if (trace) trace->write("syncer", "stop");

  const auto& m = sync.metrics();
  if (!s.save_file.empty()) {
    const auto params = sync.parameters();
    std::ofstream out(s.save_file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size() * sizeof(float)));
    if (!out) log("error: cannot write " + s.save_file);
  }
  std::ostringstream rejected;
  for (std::size_t r = 0; r < diloco::reject_reason_count; ++r)
    if (m.rejected[r])
      rejected << (rejected.tellp() > 0 ? "," : "") << '"' << diloco::to_string(static_cast<diloco::reject_reason>(r))
               << "\":" << m.rejected[r];
  char line[4096];  // 25 reasons at most: well under 4 KiB
  std::snprintf(line, sizeof line,
      "{\"outer_updates\":%llu,\"contributions_accepted\":%llu,\"contributions_merged\":%llu,"
      "\"contributions_dropped\":%llu,\"rounds_dropped\":%llu,\"contributions_clipped\":%llu,\"weights_clipped\":%llu,"
      "\"quarantines\":%llu,\"learners_forgotten\":%llu,\"log_lines_dropped\":%llu,\"rejected\":{%s},"
      "\"joins\":%llu,\"rejoins\":%llu,\"reconnects\":%llu,\"leaves\":%llu,\"declared_dead\":%llu,\"revived\":%llu,"
      "\"staleness_max\":%llu,\"curve_admitted\":%llu,\"curve_denied\":%llu,\"seconds\":%.3f}\n",
      static_cast<unsigned long long>(m.outer_updates), static_cast<unsigned long long>(m.contributions_accepted),
      static_cast<unsigned long long>(m.contributions_merged), static_cast<unsigned long long>(m.contributions_dropped),
      static_cast<unsigned long long>(m.rounds_dropped), static_cast<unsigned long long>(m.contributions_clipped),
      static_cast<unsigned long long>(m.weights_clipped), static_cast<unsigned long long>(m.quarantines),
      static_cast<unsigned long long>(m.learners_forgotten), static_cast<unsigned long long>(sink().dropped()),
      rejected.str().c_str(),
      static_cast<unsigned long long>(m.joins), static_cast<unsigned long long>(m.rejoins),
      static_cast<unsigned long long>(m.reconnects), static_cast<unsigned long long>(m.leaves), static_cast<unsigned long long>(m.declared_dead),
      static_cast<unsigned long long>(m.revived),
      static_cast<unsigned long long>(m.staleness_max), static_cast<unsigned long long>(server.admitted()),
      static_cast<unsigned long long>(server.denied()),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  std::fputs(line, stdout);
  if (!s.metrics_file.empty()) {
    std::ofstream out(s.metrics_file, std::ios::trunc);
    out << line;
    if (!out) log("error: cannot write " + s.metrics_file);
  }
  return 0;
}

template <class Merge>
int with_outer(const settings& s, diloco::zeromq::server& server, start& from, diloco::checkpoint_store* store,
               std::stop_token stop, Merge merge) {
  using namespace diloco;
  if (s.outer == "sgd")
    return serve(s, server, from, store, stop, outer::sgd<float>({.learning_rate = s.outer_lr}), merge);
  if (s.outer == "adamw")
    return serve(s, server, from, store, stop,
                 presets::data_parallel_outer<float>(inner::adamw_options{.learning_rate = s.outer_lr}), merge);
  if (s.outer == "delayed-nesterov")
    return serve(s, server, from, store, stop,
                 outer::delayed_nesterov<float>({.learning_rate = s.outer_lr, .momentum = s.outer_momentum, .delay = s.delay}),
                 merge);
  return serve(s, server, from, store, stop,
               outer::nesterov<float>({.learning_rate = s.outer_lr, .momentum = s.outer_momentum}), merge);
}

}  // namespace

int main(int argc, char** argv) {
  settings s;
  try {
    s = parse(argc, argv);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "diloco_syncer: %s\n\n%s", e.what(), usage);
    return 2;
  }

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

    ::zmq::context_t context;
    diloco::zeromq::server server(context, s.endpoint, {}, security);
    log("listening on " + server.endpoint() + ", P=" + std::to_string(s.options.training.fragments) +
        " H=" + std::to_string(s.options.training.sync_period) + " tau=" + std::to_string(s.options.training.overlap) +
        " K=" + std::to_string(s.options.quorum));
    std::optional<diloco::checkpoint_store> store;
    std::optional<start> from;
    if (!s.checkpoint_dir.empty()) {
      store.emplace(s.checkpoint_dir);
      std::vector<std::string> skipped;
      const auto latest = store->latest(&skipped);
      for (const auto& line : skipped) log("skipping checkpoint " + line);
      if (latest) {
        from = from_checkpoint(latest->body);
        if (!from) throw std::runtime_error("checkpoint " + std::to_string(latest->sequence) + " has no usable layout");
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
      using namespace diloco;
      auto* st = store ? &*store : nullptr;
      if (s.merge == "average") status = with_outer(s, server, *from, st, stop.get_token(), merge::average{});
      else if (s.merge == "rda") status = with_outer(s, server, *from, st, stop.get_token(), merge::radial_directional<>{});
      else status = with_outer(s, server, *from, st, stop.get_token(), merge::token_weighted{});
    }
  } catch (const usage_error& e) {
    std::fprintf(stderr, "diloco_syncer: %s\n", e.what());
    status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_syncer: error: %s\n", e.what());
    status = 1;
  }
  // Wake the signal thread if no signal came.
  if (!stop.stop_requested()) pthread_kill(waiter.native_handle(), SIGTERM);
  return status;
}
