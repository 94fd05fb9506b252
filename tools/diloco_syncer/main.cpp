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
#include <functional>
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
#include <diloco/runtime/replication.hpp>
#include <diloco/runtime/syncer/checkpoint.hpp>
#include <diloco/transport/zeromq.hpp>
#include <diloco/transport/zeromq/replication.hpp>
#include <diloco_tools/cli.hpp>
#include <diloco_tools/json.hpp>
#include <nlohmann/json.hpp>

#include "command_line.hpp"
#include "log_sink.hpp"
#include "metrics_server.hpp"
#if DILOCO_SYNCER_WITH_ETCD
#include "leadership.hpp"
#endif

namespace {

/// A command line that makes no sense, found after parsing (exit status 2).
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using diloco_syncer::settings;

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
    throw std::runtime_error(path + ":" + std::to_string(line) + ": size must be a positive integer, got '" + text +
                             "'");
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
    if (!(fields >> size))
      throw std::runtime_error(path + ":" + std::to_string(number) + ": expected 'name size [role]'");
    fields >> role;
    if (role != "dense" && role != "embedding")
      throw std::runtime_error(path + ":" + std::to_string(number) + ": role must be dense or embedding");
    layout.add(name, number_of(size, path, number),
               role == "embedding" ? diloco::tensor_role::embedding : diloco::tensor_role::dense);
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
  line["time"] =
      std::round(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() * 1000) /
      1000;
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

/// With --etcd, renews the shard's leadership when due, and ends the process
/// (status 4) the moment it is not surely held; nothing without --etcd.
std::function<void()>& keep_leadership() {
  static std::function<void()> keep = [] {};
  return keep;
}

/// With --replication-endpoint, the stream this leader serves its standbys:
/// every checkpoint and journal record goes to it after the disk.
std::optional<diloco::zeromq::replication_source>& replication() {
  static std::optional<diloco::zeromq::replication_source> instance;
  return instance;
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
    auto body = diloco::checkpoint_body(*self);
    store->write(body);
    journal->clear();  // the checkpoint holds all of it now: merged, or in an open round
    if (replication()) replication()->snapshot(std::move(body));
  };
  // A syncer that may have been replaced acknowledges and publishes nothing.
  options.before_ack = [&](const diloco::message& m) {
    keep_leadership()();
    if (journal) journal->append(m);
    if (replication()) {
      replication()->journal(m);  // synchronous: returns once the standbys have it, or dropped them
      // The wait may have outlasted the lease (a leader cut off from its
      // standby and etcd): a successor may lead now, and this ack must not leave.
      keep_leadership()();
    }
  };
  std::optional<diloco::trace_writer> trace;
  if (!s.trace_file.empty()) trace.emplace(s.trace_file);
  // Traced, then made durable (per-update durability), then published. A
  // SIGKILL between the two leaves a merge traced but not saved: the journal
  // still holds its contributions, which the restarted syncer merges again
  // (traced again), so the trace accounts for every one. The other order
  // could save a merge the trace never shows, and an auditor of the trace
  // (diloco_chaos) would count its contributions as lost.
  options.before_publish = [&](const diloco::update_event& e) {
    keep_leadership()();
    if (trace) trace->merged(e.fragment, e.revision, e.contributions, options.epoch);
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
    if (sync.options().epoch != 0) fields["epoch"] = sync.options().epoch;
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
  const auto since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  auto write_jsonl = [&] {
    *jsonl << counters_json(sync, since_start()).dump() << '\n' << std::flush;
    if (!*jsonl) log("error: cannot write " + s.metrics_jsonl);
  };
  auto last_published = started, last_jsonl = started;
  for (auto& join : from.joins) sync.handle(std::move(join), diloco::clock::now());
  auto last_checkpoint = std::chrono::steady_clock::now();
  sync.run_until(stop, [&] {
    keep_leadership()();
    if (replication()) replication()->poll();
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
    out.write(reinterpret_cast<const char*>(params.data()),
              static_cast<std::streamsize>(params.size() * sizeof(float)));
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
    return serve(
        s, server, from, store, stop,
        outer::delayed_nesterov<float>({.learning_rate = *s.outer_lr, .momentum = *s.outer_momentum, .delay = s.delay}),
        merge);
  return serve(
      s, server, from, store, stop,
      outer::nesterov<float>({.learning_rate = *s.outer_lr, .momentum = *s.outer_momentum, .threads = s.threads}),
      merge);
}

diloco::zeromq::replication_options replication_options(const settings& s) {
  diloco::zeromq::replication_options o;
  o.mode = s.replication_async ? diloco::zeromq::replication_mode::asynchronous
                               : diloco::zeromq::replication_mode::synchronous;
  o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(s.replication_timeout * 1000)));
  return o;
}

#if DILOCO_SYNCER_WITH_ETCD
/// What a standby does between campaigns: with --replication-endpoint,
/// follows the leader's stream into its checkpoint directory; else waits.
diloco_syncer::leadership::standby_wait standby(const settings& s, ::zmq::context_t& context) {
  if (s.replication_endpoint.empty())
    return [](const diloco_syncer::leader*, std::chrono::milliseconds period) { std::this_thread::sleep_for(period); };
  struct copy {
    diloco::checkpoint_store store;
    diloco::contribution_journal journal;
    diloco::replica replica;
    diloco::zeromq::replication_follower<diloco::replica> follower;
    copy(const settings& s, ::zmq::context_t& context)
        : store(s.checkpoint_dir),
          journal(store.directory() / "journal.bin", s.journal_sync),
          replica(store, journal, s.sockets.max_payload_bytes),
          follower(context, replica, s.endpoint, replication_options(s), [](const std::string& l) { log(l); }) {}
  };
  auto state = std::make_shared<copy>(s, context);
  return [state](const diloco_syncer::leader* who, std::chrono::milliseconds period) {
    if (who && !who->replication.empty())
      state->follower.follow(who->replication, who->epoch);
    else
      state->follower.stop();
    state->follower.pump_for(period);
    if (!who || who->replication.empty()) std::this_thread::sleep_for(period);
  };
}
#endif

}  // namespace

int main(int argc, char** argv) {
  settings s;
  if (const auto status = diloco_syncer::parse_command_line(argc, argv, s)) return *status;
  if (s.metrics_port && !diloco_syncer::metrics_server::available) {
    std::fprintf(stderr,
                 "diloco_syncer: --metrics-port needs a diloco_syncer built with standalone Asio "
                 "(Debian: libasio-dev)\n");
    return diloco_tools::bad_usage;
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
      log(diloco::zeromq::is_local_endpoint(s.endpoint)
              ? "no CURVE keys: serving this machine only (loopback or ipc)"
              : "no CURVE keys and --insecure: anyone who reaches " + s.endpoint + " can join");
    }
    std::optional<diloco::parameter_layout> expected;
    if (!s.layout_file.empty()) expected = read_layout(s.layout_file);

    ::zmq::context_t context;
    // The replication stream's socket closes before the context ends (its
    // destructor would wait for it).
    struct close_replication {
      ~close_replication() { replication().reset(); }
    } close_replication_first;
#if DILOCO_SYNCER_WITH_ETCD
    std::optional<diloco_syncer::leadership> lead;
    if (!s.etcd.empty()) {
      // A standby until it leads: it binds nothing before, and with
      // --replication-endpoint keeps a copy of the leader's disk in its own
      // checkpoint directory, from which it starts once it leads.
      lead.emplace(s.etcd, s.leader_key, diloco_syncer::leader{s.endpoint, s.replication_endpoint}, s.lease_ttl,
                   [](const std::string& line) { log(line); });
      if (!lead->acquire(stop.get_token(), standby(s, context))) {
        log("stopped as a standby");
        return 0;
      }
      s.options.epoch = lead->epoch();
      keep_leadership() = [&lead] { lead->keep(); };
      if (!s.replication_endpoint.empty()) {
        replication().emplace(context, s.replication_endpoint, s.options.epoch, replication_options(s),
                              [](const std::string& line) { log(line); });
        log("replication stream at " + replication()->endpoint() + (s.replication_async ? " (asynchronous)" : ""));
      }
    }
#else
    if (!s.etcd.empty()) throw usage_error("--etcd needs a diloco_syncer built with diloco::etcd (DILOCO_WITH_ETCD)");
#endif
    diloco::zeromq::keep_large_blocks();  // large fragments arrive without page faults (process-wide)
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
      while (!stop.stop_requested() && !boot.ready()) {
        keep_leadership()();
        if (replication()) replication()->poll();
        if (auto e = server.receive_for(std::chrono::milliseconds(100)))
          boot.handle(std::move(*e), diloco::clock::now());
      }
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
      if (s.merge == "average")
        status = with_outer(s, server, *from, st, stop.get_token(), average);
      else if (s.merge == "rda")
        status = with_outer(s, server, *from, st, stop.get_token(), merge::radial_directional<>{});
      else
        status = with_outer(s, server, *from, st, stop.get_token(), tokens);
    }
#if DILOCO_SYNCER_WITH_ETCD
    if (lead) lead->resign();  // ended cleanly: the standby leads without waiting for the lease to end
#endif
  } catch (const usage_error& e) {
    std::fprintf(stderr, "diloco_syncer: %s\n", e.what());
    status = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_syncer: error: %s\n", e.what());
    status = 1;
  }
  scrapes().reset();
  replication().reset();
  // Wake the signal thread if no signal came.
  if (!stop.stop_requested()) pthread_kill(waiter.native_handle(), SIGTERM);
  return status;
}
