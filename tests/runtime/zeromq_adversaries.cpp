// ctest-labels: zeromq slow threads
// ctest-timeout: 300
// One bad peer against a syncer over real ZeroMQ TCP loopback sockets, while
// an honest learner — the real `diloco::learner` on the toy linear
// regression, inner AdamW — trains against it (issue 8: a syncer that one
// learner cannot poison, freeze or lock out). Each case runs the same honest
// learner with and without the attack and checks that (i) the honest learner
// is still served: it finishes its steps and keeps adopting new revisions
// while the attack is under way; (ii) the global model stays finite and as
// good as without the attack; (iii) the defence is counted under its own
// counter or reason; (iv) the test process's memory and the syncer thread's
// CPU time stay bounded.
//
// Why the comparison can be strict: the honest learner runs in lock-step
// with τ = 0 (it waits for the answer to each contribution before its next
// inner step) and alone, so every round merges its contribution only and the
// run does not depend on timing: two clean runs give the same global
// parameters to the bit (checked first): the clean run's spread is zero.
// Attacks whose messages are all refused must therefore leave the global
// bit-identical to the clean run. The one attack whose contributions are
// merged (clipped), case 1, is held to a bound instead: it may cost at most
// 1 % of what training achieves.
#include <boost/test/unit_test.hpp>

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/runtime/bootstrap.hpp>
#include <diloco/transport/zeromq.hpp>

#include "support/toy_model.hpp"

namespace {

using namespace std::chrono_literals;
using namespace diloco;
using T = float;
using model_type = toy::linear_regression<T>;
using honest_learner = learner<model_type, inner::adamw<T>, zeromq::client>;
using test_syncer = syncer<outer::nesterov<T>, merge::token_weighted, zeromq::server>;
using steady = std::chrono::steady_clock;

constexpr std::size_t features = 8;
constexpr std::uint64_t model_seed = 1, data_seed = 11, eval_seed = 999;
constexpr std::uint32_t honest_id = 1, honest_incarnation = 1;
constexpr std::uint32_t period = 10;           // H
constexpr std::uint64_t inner_steps = 600;     // 60 rounds
constexpr std::size_t batch_size = 16;         // tokens per inner step
constexpr auto default_step_pause = 1ms;      // simulated compute per inner step

training_config config() {
  return {.fragments = 1, .sync_period = period, .overlap = 0, .mixing = 0.0, .lock_step = true};
}

/// Short timeouts so that liveness changes happen within a test: heartbeat
/// every 100 ms, dead after 1 s of silence.
timeouts test_timeouts() { return {100ms, 100ms, 1s, 3s, 5s}; }

// --- measurements --------------------------------------------------------

/// A line of /proc/self/status in KiB ("VmRSS", "VmHWM"), 0 if unreadable.
long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return 0;
}

/// Resets VmHWM to the current RSS (Linux ≥ 4.0); false where refused.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return bool(out);
}

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0.0;
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double seconds_since(steady::time_point t) { return std::chrono::duration<double>(steady::now() - t).count(); }

/// Loss ½·mean((w·x + b − y)²) of `parameters` on 4096 held-out examples.
double evaluation_loss(std::span<const T> parameters) {
  model_type model(features, model_seed);
  std::copy(parameters.begin(), parameters.end(), model.parameters().begin());
  toy::teacher<T> data(features, eval_seed);
  return model.compute_gradients(data.next(4096)).loss;
}

std::vector<T> initial_parameters() {
  model_type model(features, model_seed);
  return {model.parameters().begin(), model.parameters().end()};
}

bool all_finite(std::span<const T> v) {
  return std::all_of(v.begin(), v.end(), [](T x) { return std::isfinite(x); });
}

// --- scripted peers -------------------------------------------------------

/// Sockets of attackers close at once: nothing of theirs is worth a linger.
zeromq::socket_options quick_close() {
  zeromq::socket_options o;
  o.linger = 0ms;
  return o;
}

message make(message_kind kind, std::uint32_t learner, std::uint32_t incarnation, std::uint64_t sequence) {
  message m;
  m.header.kind = kind;
  m.header.learner = learner;
  m.header.incarnation = incarnation;
  m.header.sequence = sequence;
  return m;
}

/// A contribution to fragment 0 (the only one) carrying `values`.
message contribution_of(std::uint32_t learner, std::uint32_t incarnation, std::uint64_t sequence,
                        std::uint64_t base_revision, std::uint64_t tokens, std::uint64_t steps,
                        std::uint64_t local_step, const std::vector<T>& values) {
  message m = make(message_kind::contribution, learner, incarnation, sequence);
  m.header.codec = codec_id::f32;
  m.header.base_revision = base_revision;
  m.header.tokens = tokens;
  m.header.steps = steps;
  m.header.revision = local_step;
  m.header.element_count = values.size();
  m.payload = byte_buffer(values.size() * sizeof(T));
  std::memcpy(m.payload.data(), values.data(), m.payload.size());
  return m;
}

/// A scripted client: one DEALER connection (the library's client) that may
/// speak for several learner ids, sending hand-made messages and counting
/// what comes back.
/// CURVE keys for the runs that use it: the syncer's, the honest learner's
/// (bound to `honest_id`) and an intruder's (bound to learner 9 only).
struct curve_keys {
  zeromq::curve_keypair syncer = zeromq::generate_keypair();
  zeromq::curve_keypair honest = zeromq::generate_keypair();
  zeromq::curve_keypair intruder = zeromq::generate_keypair();
  static constexpr std::uint32_t intruder_id = 9;

  zeromq::server_security server() const {
    return {syncer,
            {{honest.public_key, zeromq::learner_ids().add(honest_id, honest_id)},
             {intruder.public_key, zeromq::learner_ids().add(intruder_id, intruder_id)}}};
  }
  zeromq::client_security client(const zeromq::curve_keypair& own) const { return {own, syncer.public_key}; }
};

const curve_keys& keys() {
  static const curve_keys k;
  return k;
}

struct peer {
  zeromq::client socket;
  std::map<std::uint32_t, std::uint64_t> sequences;  ///< per learner id
  std::uint64_t revision = 0;                          ///< newest revision of fragment 0 received
  std::uint64_t welcomes = 0, state_requests = 0, updates = 0, acks = 0;
  std::array<std::uint64_t, reject_reason_count + 1> rejects{};

  peer(::zmq::context_t& c, const std::string& endpoint) : socket(c, endpoint, 0, 0, quick_close()) {}
  peer(::zmq::context_t& c, const std::string& endpoint, const zeromq::client_security& security)
      : socket(c, endpoint, 0, 0, quick_close(), security) {}

  message next(message_kind kind, std::uint32_t id, std::uint32_t incarnation) {
    return make(kind, id, incarnation, ++sequences[id]);
  }

  message join(std::uint32_t id, std::uint32_t incarnation) {
    const model_type model(features, model_seed);
    message m = next(message_kind::join, id, incarnation);
    m.header.layout = model.layout().fingerprint();
    m.header.element_count = model.layout().size();
    return m;
  }

  /// Sends within `limit` (a fresh connection refuses until it is up).
  bool send(message m, std::chrono::milliseconds limit = 2000ms) {
    const auto end = steady::now() + limit;
    for (;;) {
      if (!socket.try_send(syncer_peer, m)) return true;
      if (steady::now() >= end) return false;
      read();
      std::this_thread::sleep_for(1ms);
    }
  }

  void read() {
    while (auto e = socket.try_receive()) {
      if (e->error != wire_error::none) continue;
      const auto& h = e->msg.header;
      switch (h.kind) {
        case message_kind::welcome: (h.flags & state_wanted) ? ++state_requests : ++welcomes; break;
        case message_kind::update:
          ++updates;
          revision = std::max(revision, h.revision);
          break;
        case message_kind::ack: ++acks; break;
        case message_kind::reject: ++rejects[std::min<std::size_t>(h.reason, reject_reason_count)]; break;
        default: break;
      }
    }
  }

  std::uint64_t rejected(reject_reason r) const { return rejects[static_cast<std::size_t>(r)]; }
};

/// A raw DEALER socket (not the library's client): any bytes, any routing id.
struct raw_dealer {
  ::zmq::socket_t socket;

  raw_dealer(::zmq::context_t& c, const std::string& endpoint, const std::string& routing_id = {})
      : socket(c, ::zmq::socket_type::dealer) {
    socket.set(::zmq::sockopt::linger, 0);
    socket.set(::zmq::sockopt::sndtimeo, 2000);  // a blocked send gives up: no test hangs
    socket.set(::zmq::sockopt::sndhwm, 100000);
    if (!routing_id.empty()) socket.set(::zmq::sockopt::routing_id, ::zmq::buffer(routing_id));
    socket.connect(endpoint);
  }

  /// Sends `frames` as one multipart message; false if it timed out.
  bool send(std::initializer_list<std::span<const std::byte>> frames) {
    std::size_t i = 0;
    for (auto f : frames) {
      const bool more = ++i < frames.size();
      if (!socket.send(::zmq::buffer(f.data(), f.size()), more ? ::zmq::send_flags::sndmore : ::zmq::send_flags::none))
        return false;
    }
    return true;
  }

  bool send(const message& m) {
    const auto header = wire::encode_header(m.header, m.payload.bytes());
    if (m.payload.empty()) return send({std::span<const std::byte>(header)});
    return send({std::span<const std::byte>(header), m.payload.bytes()});
  }

  /// Messages received without blocking, counted by kind: those that are a
  /// header frame and the payload frame it announces, both intact
  /// (docs/protocol.md, "Framing").
  std::map<message_kind, std::uint64_t> drain() {
    std::map<message_kind, std::uint64_t> kinds;
    const auto bytes_of = [](const ::zmq::message_t& f) {
      return std::span<const std::byte>(static_cast<const std::byte*>(f.data()), f.size());
    };
    for (;;) {
      std::vector<::zmq::message_t> frames(1);
      if (!socket.recv(frames.front(), ::zmq::recv_flags::dontwait)) break;
      while (frames.back().more()) (void)socket.recv(frames.emplace_back(), ::zmq::recv_flags::none);
      if (frames.size() > 2) continue;
      const auto d = wire::decode_header(bytes_of(frames.front()), std::uint64_t{1} << 20);
      const auto payload = frames.size() == 2 ? bytes_of(frames.back()) : std::span<const std::byte>();
      if (d.error == wire_error::none && wire::check_payload(d, payload) == wire_error::none) ++kinds[d.header.kind];
    }
    return kinds;
  }
};

// --- the harness: a syncer thread, an honest learner thread, an attack ----

struct run_settings {
  std::uint32_t quorum = 1;
  std::uint32_t max_learners = 4096;
  bool bootstrap = false;                 ///< start without a model, as tools/diloco_syncer does
  std::chrono::nanoseconds bootstrap_patience = 300ms;  ///< the service's default is 10 s
  std::uint64_t leaves_expected = 1;      ///< leaves the syncer must see before it is stopped
  std::chrono::milliseconds step_pause = default_step_pause;
  bool curve = false;                     ///< CURVE with `keys()`: each key speaks for its own learner id only
};

struct round_record {
  std::uint64_t revision;
  std::uint32_t contributors;
  double scale;
};

struct outcome {
  // The syncer's side.
  std::vector<T> global;
  double loss = std::numeric_limits<double>::quiet_NaN();
  syncer_metrics metrics;
  std::vector<round_record> rounds;
  std::vector<std::string> log_lines;
  bool bootstrapped = false;
  std::uint64_t bootstrap_refused = 0;
  std::vector<T> bootstrap_initial;
  // The honest learner's side.
  learner_metrics honest;
  std::error_code honest_error;
  std::uint64_t honest_steps = 0;
  std::uint64_t adopted_at_attack_start = 0, adopted_at_attack_end = 0;
  double attack_s = 0;
  // Costs.
  double wall_s = 0, syncer_cpu_s = 0, quiet_window_s = 0, quiet_cpu_s = 0;
  long rss_before_kib = 0, rss_after_kib = 0, rss_peak_kib = 0;
  bool peak_measured = false;
};

/// Runs a syncer on its own thread and, when the scenario says so, the honest
/// learner on another; the scenario itself (the attack) runs on the calling
/// thread. Every wait has a deadline and every thread is joined on every path
/// (`std::jthread`s, stopped before the context they use is destroyed).
class harness {
 public:
  explicit harness(run_settings settings = {}) : settings_(settings) {}

  const std::string& endpoint() const { return endpoint_; }
  ::zmq::context_t& context() { return *context_; }
  const run_settings& settings() const { return settings_; }

  void start_learner() { start_learner_(); }
  std::uint64_t honest_steps() const { return honest_steps_.load(); }
  std::uint64_t honest_adopted() const { return honest_adopted_.load(); }
  bool honest_done() const { return honest_done_.load(); }

  /// What the syncer thread has counted so far (published after each message).
  std::uint64_t syncer_joins() const { return joins_.load(); }
  std::uint64_t syncer_leaves() const { return leaves_.load(); }
  std::uint64_t syncer_rejected() const { return rejected_.load(); }
  std::uint64_t syncer_declared_dead() const { return declared_dead_.load(); }
  std::uint64_t syncer_quarantines() const { return quarantines_.load(); }
  bool syncer_serving() const { return serving_.load(); }

  /// The leaves the syncer must have seen before it is stopped (all messages
  /// of the leaving learners are then handled).
  void expect_leaves(std::uint64_t n) { settings_.leaves_expected = n; }

  void attack_began() {
    out_.adopted_at_attack_start = honest_adopted();
    attack_began_ = steady::now();
  }
  void attack_ended() {
    out_.adopted_at_attack_end = honest_adopted();
    out_.attack_s = seconds_since(attack_began_);
  }

  /// Polls `done` every millisecond for at most `limit`; its last value.
  template <class Done>
  static bool wait_until(Done&& done, std::chrono::milliseconds limit) {
    const auto end = steady::now() + limit;
    while (!done()) {
      if (steady::now() >= end) return done();
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

  outcome run(const std::function<void(harness&)>& scenario) {
    out_ = outcome{};
    out_.peak_measured = reset_peak_rss();
    out_.rss_before_kib = status_kib("VmRSS");
    const auto began = steady::now();
    {
      ::zmq::context_t context;
      context_ = &context;
      std::optional<zeromq::server_security> security;
      if (settings_.curve) security = keys().server();
      zeromq::server server(context, "tcp://127.0.0.1:*", quick_close(), security);
      endpoint_ = server.endpoint();
      std::jthread syncer_thread([&](std::stop_token stop) { serve(server, stop); });
      clockid_t syncer_clock{};
      BOOST_TEST_REQUIRE(pthread_getcpuclockid(syncer_thread.native_handle(), &syncer_clock) == 0);
      std::jthread learner_thread;  // destroyed (stopped, joined) before the syncer thread
      start_learner_ = [&] { learner_thread = std::jthread([this](std::stop_token stop) { train(stop); }); };

      scenario(*this);

      if (learner_thread.joinable())
        BOOST_TEST(wait_until([&] { return honest_done(); }, 60s), "the honest learner did not end within 60 s");
      BOOST_TEST(wait_until([&] { return syncer_leaves() >= settings_.leaves_expected; }, 10s),
                 "the syncer saw " << syncer_leaves() << " leaves of " << settings_.leaves_expected);
      // A quiet window: nothing arrives, the syncer must sleep (a spin shows here).
      const double cpu_before_quiet = cpu_seconds(syncer_clock);
      const auto quiet_began = steady::now();
      std::this_thread::sleep_for(300ms);
      out_.quiet_cpu_s = cpu_seconds(syncer_clock) - cpu_before_quiet;
      out_.quiet_window_s = seconds_since(quiet_began);
      out_.syncer_cpu_s = cpu_seconds(syncer_clock);
      if (learner_thread.joinable()) {
        learner_thread.request_stop();
        learner_thread.join();
      }
      syncer_thread.request_stop();
      syncer_thread.join();
      start_learner_ = [] {};
    }
    context_ = nullptr;
    out_.wall_s = seconds_since(began);
    out_.rss_after_kib = status_kib("VmRSS");
    out_.rss_peak_kib = status_kib("VmHWM");
    if (!out_.global.empty()) out_.loss = evaluation_loss(out_.global);
    return std::move(out_);
  }

 private:
  /// The syncer thread: optionally a bootstrap (as tools/diloco_syncer does),
  /// then `run_until` with a `done` that publishes the counters.
  void serve(zeromq::server& server, std::stop_token stop) {
    syncer_options o;
    o.training = config();
    o = o.with(test_timeouts());
    o.quorum = settings_.quorum;
    o.max_grace = 100ms;
    o.max_learners = settings_.max_learners;
    o.log = [this](const std::string& line) { out_.log_lines.push_back(line); };
    o.on_update = [this](const update_event& e) { out_.rounds.push_back({e.revision, e.contributors, e.scale}); };
    const model_type model(features, model_seed);
    std::optional<test_syncer> s;
    if (settings_.bootstrap) {
      bootstrap<T, zeromq::server> boot(server, config(), std::nullopt, settings_.bootstrap_patience);
      while (!stop.stop_requested() && !boot.ready())
        if (auto e = server.receive_for(50ms)) boot.handle(std::move(*e), clock::now());
      out_.bootstrap_refused = boot.refused();
      if (!boot.ready()) return;
      out_.bootstrapped = true;
      out_.bootstrap_initial.assign(boot.initial().begin(), boot.initial().end());
      s.emplace(boot.layout(), boot.initial(), server, o);
      for (auto& join : boot.take_joins()) s->handle(std::move(join), clock::now());
    } else {
      const auto initial = initial_parameters();
      s.emplace(model.layout(), std::span<const T>(initial), server, o);
    }
    serving_ = true;
    s->run_until(stop, [&] {
      const auto& m = s->metrics();
      joins_ = m.joins;
      leaves_ = m.leaves;
      rejected_ = m.rejected_total();
      declared_dead_ = m.declared_dead;
      quarantines_ = m.quarantines;
      return false;
    });
    out_.global = s->parameters();
    out_.metrics = s->metrics();
  }

  /// The honest learner thread: `inner_steps` lock-step inner steps, then
  /// `finish` (final contributions, leave).
  void train(std::stop_token stop) {
    model_type model(features, model_seed);
    toy::teacher<T> data(features, data_seed);
    std::optional<zeromq::client_security> security;
    if (settings_.curve) security = keys().client(keys().honest);
    zeromq::client socket(*context_, endpoint_, honest_id, honest_incarnation, {}, security);  // lingers: the leave goes out
    auto options = learner_options{.id = honest_id, .incarnation = honest_incarnation}.with(test_timeouts());
    options.join_timeout = 20s;
    honest_learner l(model, socket, options, inner::adamw<T>({.learning_rate = 0.02}));
    for (std::uint64_t k = 0; k < inner_steps && !stop.stop_requested(); ++k) {
      const auto r = l.step(data.next(batch_size));
      if (!r) {
        out_.honest_error = r.error();
        break;
      }
      honest_steps_ = l.local_step();
      honest_adopted_ = l.metrics().updates_adopted;
      std::this_thread::sleep_for(settings_.step_pause);
    }
    if (!out_.honest_error && !stop.stop_requested()) l.finish(clock::now());
    out_.honest = l.metrics();
    out_.honest_steps = l.local_step();
    honest_adopted_ = l.metrics().updates_adopted;
    honest_done_ = true;
  }

  run_settings settings_;
  outcome out_;
  std::string endpoint_;
  ::zmq::context_t* context_ = nullptr;
  std::function<void()> start_learner_ = [] {};
  steady::time_point attack_began_{};
  std::atomic<std::uint64_t> honest_steps_{0}, honest_adopted_{0};
  std::atomic<bool> honest_done_{false}, serving_{false};
  std::atomic<std::uint64_t> joins_{0}, leaves_{0}, rejected_{0}, declared_dead_{0}, quarantines_{0};
};

void report(const std::string& name, const outcome& o) {
  BOOST_TEST_MESSAGE(name << ": final loss " << o.loss << ", " << o.metrics.outer_updates << " outer updates; honest "
                          << o.honest_steps << " steps, " << o.honest.updates_adopted << " revisions adopted ("
                          << o.adopted_at_attack_start << " -> " << o.adopted_at_attack_end << " during the "
                          << o.attack_s << " s attack); " << o.metrics.rejected_total() << " refused; wall "
                          << o.wall_s << " s, syncer cpu " << o.syncer_cpu_s << " s ("
                          << 100.0 * o.syncer_cpu_s / o.wall_s << " %), quiet-window cpu " << o.quiet_cpu_s
                          << " s of " << o.quiet_window_s << " s; rss " << o.rss_before_kib << " -> "
                          << o.rss_after_kib << " KiB (peak " << o.rss_peak_kib << "); " << o.log_lines.size()
                          << " log lines");
}

/// (iv) Bounded costs. Measured on a 2-core machine, in brackets; the bounds
/// leave a margin of 7x or more, yet a leak of ~1 kB per refused message (the
/// floods send 30 000) or a busy-waiting syncer thread (≈ 100 % of a core)
/// would exceed them.
/// - the process's RSS after the run, and its peak during it, above the RSS
///   before it: < 32 MiB [≤ 2.5 MiB, mostly the 200 silent members' sockets];
/// - the syncer thread's CPU time: < 50 % of the run's wall time [≤ 7 %, the
///   join/leave flood];
/// - the same in a 300 ms quiet window after the run: < 10 % [≤ 0.3 %].
void check_costs(const outcome& o) {
  constexpr long bound_kib = 32 * 1024;
  BOOST_TEST(o.rss_after_kib - o.rss_before_kib < bound_kib);
  if (o.peak_measured) BOOST_TEST(o.rss_peak_kib - o.rss_before_kib < bound_kib);
  BOOST_TEST(o.syncer_cpu_s < 0.5 * o.wall_s);
  BOOST_TEST(o.quiet_cpu_s < 0.10 * o.quiet_window_s);
}

/// (i) The honest learner did all its steps, without error, and adopted new
/// revisions while the attack was under way.
void check_served(const outcome& o, std::uint64_t adopted_during_attack) {
  BOOST_TEST(!o.honest_error, o.honest_error.message());
  BOOST_TEST(o.honest_steps == inner_steps);
  BOOST_TEST(o.adopted_at_attack_end - o.adopted_at_attack_start >= adopted_during_attack);
}

/// The run without any attacker, once per process (deterministic: see the
/// first test case).
const outcome& clean_run() {
  static const outcome clean = [] {
    harness h;
    auto o = h.run([](harness& x) { x.start_learner(); });
    report("clean", o);
    return o;
  }();
  return clean;
}

/// The global parameters of an attacked run whose attack was entirely
/// refused: exactly those of the clean run.
void check_unchanged(const outcome& o) {
  const auto& clean = clean_run();
  BOOST_TEST_REQUIRE(o.global.size() == clean.global.size());
  BOOST_TEST(o.global == clean.global, boost::test_tools::per_element());
  BOOST_TEST(o.rounds.size() == clean.rounds.size());
}

/// Case 1's attacker: a learner that joins properly and then, at every new
/// revision it hears of, contributes ±3e38 in every element (finite f32,
/// valid CRC, plausible counters: 160 tokens in 10 steps) from the honest
/// learner's step `from_step` until its step 400, at most 40 times.
struct huge_values {
  outcome run;
  std::uint64_t sent = 0;
};

huge_values huge_values_run(std::uint64_t from_step) {
  huge_values result;
  harness h;
  result.run = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    constexpr std::uint32_t id = 66;
    BOOST_TEST_REQUIRE(bad.send(bad.join(id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { bad.read(); return bad.welcomes == 1 && bad.updates >= 1; }, 5s));
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= from_step; }, 20s));
    x.attack_began();
    std::vector<T> huge(features + 1);
    for (std::size_t k = 0; k < huge.size(); ++k) huge[k] = k % 2 ? -3e38f : 3e38f;
    std::uint64_t base = std::numeric_limits<std::uint64_t>::max();
    const auto end = steady::now() + 20s;
    while (result.sent < 40 && x.honest_steps() < 400 && !x.honest_done() && steady::now() < end) {
      bad.read();
      if (bad.revision == base) {
        std::this_thread::sleep_for(1ms);
        continue;
      }
      base = bad.revision;
      ++result.sent;
      BOOST_TEST_REQUIRE(bad.send(contribution_of(id, 1, ++bad.sequences[id], base, 160, 10, 10 * result.sent, huge)));
    }
    x.attack_ended();
  });
  report("huge values from step " + std::to_string(from_step), result.run);
  const auto& m = result.run.metrics;
  BOOST_TEST_MESSAGE("  sent " << result.sent << ", clipped " << m.contributions_clipped << ", weights clipped "
                               << m.weights_clipped << ", rounds dropped " << m.rounds_dropped << ", quarantines "
                               << m.quarantines << ", refused as quarantined "
                               << m.rejected_for(reject_reason::quarantined) << ", merged " << m.contributions_merged
                               << "; loss " << result.run.loss / clean_run().loss << " x the clean run's");
  return result;
}

/// Log lines per category: the refusal reason that ends a refusal line, or
/// "summary" for the limiter's "held back ..." lines.
std::map<std::string, std::size_t> log_categories(const std::vector<std::string>& lines) {
  std::map<std::string, std::size_t> n;
  for (const auto& line : lines) {
    if (line.rfind("held back", 0) == 0)
      ++n["summary"];
    else if (const auto colon = line.rfind(": "); line.rfind("refused", 0) == 0 && colon != std::string::npos)
      ++n[line.substr(colon + 2)];
    else
      ++n["other"];
  }
  return n;
}

}  // namespace

/// Bad contributions in a row before a learner is quarantined (the default).
const std::uint64_t quarantine_after = screening_options{}.quarantine_after;

BOOST_AUTO_TEST_SUITE(runtime_zeromq_adversaries)

// The reference for every case. Lock-step with τ = 0 makes the honest run
// independent of timing: two clean runs end with the same parameters to the
// bit, so the spread of the clean run is zero and refused attacks must leave
// the global bit-identical to it.
BOOST_AUTO_TEST_CASE(clean_runs_are_deterministic_and_learn) {
  const auto& a = clean_run();
  harness h;
  const auto b = h.run([](harness& x) { x.start_learner(); });
  report("clean, again", b);
  for (const auto* o : {&a, &b}) {
    check_served(*o, 0);
    check_costs(*o);
    BOOST_TEST(o->metrics.rejected_total() == 0u);
    // One round per H = 10 steps, each merging the honest learner alone at
    // full scale (w / w = 1).
    BOOST_TEST(o->rounds.size() == inner_steps / period);
    for (const auto& r : o->rounds) BOOST_TEST((r.contributors == 1u && r.scale == 1.0));
  }
  BOOST_TEST(a.global == b.global, boost::test_tools::per_element());
  const double initial = evaluation_loss(initial_parameters());
  BOOST_TEST_MESSAGE("initial loss " << initial << ", clean final loss " << a.loss);
  // It learns: the teacher is linear, so the loss falls by orders of
  // magnitude [0.77 -> 8.9e-5].
  BOOST_TEST(a.loss < 0.01 * initial);
}

// Case 1. The huge contributions arrive once the fragment has a history of
// honest outer-gradient norms (from step 100: 10 rounds). Each is an outlier
// (beyond `clip_factor` x the lower median norm) and is cut to the median
// norm, merged at half scale (equal token weights), and counts as a strike;
// after `quarantine_after` (3) in a row the learner is quarantined and
// everything else it sends is refused. The attack may cost at most 1 % of
// what training achieves: final loss <= clean + 0.01 x (initial − clean)
// [bound 0.0078; measured 5.0e-4 against the clean run's 8.9e-5. With
// outliers cut to 8x the median instead of to the median, and quarantine
// after 8, the eight pushes, integrated by the outer Nesterov momentum, left
// the loss at 0.27 — this test's first version found it].
BOOST_AUTO_TEST_CASE(finite_but_huge_contributions_are_clipped_then_quarantined) {
  const auto [o, sent] = huge_values_run(100);
  check_served(o, 10);
  check_costs(o);
  BOOST_TEST(all_finite(o.global));
  BOOST_TEST(sent > quarantine_after);
  BOOST_TEST(o.metrics.contributions_clipped == quarantine_after);  // each push, and no honest one
  BOOST_TEST(o.metrics.weights_clipped == 0u);        // equal tokens: nothing to cut
  BOOST_TEST(o.metrics.rounds_dropped == 0u);         // clipped, the results are finite
  BOOST_TEST(o.metrics.quarantines == 1u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::quarantined) == sent - quarantine_after);
  BOOST_TEST(o.metrics.contributions_merged == inner_steps / period + quarantine_after);
  BOOST_TEST(o.metrics.rejected_total() == sent - quarantine_after);
  const auto& clean = clean_run();
  const double initial = evaluation_loss(initial_parameters());
  BOOST_TEST(o.loss <= clean.loss + 0.01 * (initial - clean.loss));
}

// Case 2a. 200 learners join (distinct ids, over 8 connections) and never
// contribute; half heartbeat every 100 ms, half go silent and are declared
// dead after 1 s. A learner that never contributed has expected weight 0, so
// the honest learner's rounds keep scale w / (w + 200 x 0) = 1 exactly — not
// 1/201 — and the run is the clean one to the bit.
BOOST_AUTO_TEST_CASE(silent_members_do_not_shrink_the_honest_rounds) {
  constexpr std::uint32_t silent = 200, first_id = 1000, sockets = 8;
  harness h(run_settings{.step_pause = 2ms});  // ~1.5 s of training: the silent half dies during it
  const auto o = h.run([&](harness& x) {
    std::vector<std::unique_ptr<peer>> peers;
    for (std::uint32_t k = 0; k < sockets; ++k) peers.push_back(std::make_unique<peer>(x.context(), x.endpoint()));
    for (std::uint32_t i = 0; i < silent; ++i)
      BOOST_TEST_REQUIRE(peers[i % sockets]->send(peers[i % sockets]->join(first_id + i, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.syncer_joins() >= silent; }, 10s));
    x.start_learner();
    x.attack_began();
    auto next_beat = steady::now();
    const auto end = steady::now() + 30s;
    while (!x.honest_done() && steady::now() < end) {
      if (steady::now() >= next_beat) {
        for (std::uint32_t i = 0; i < silent; i += 2) {
          auto& p = *peers[i % sockets];
          BOOST_TEST_REQUIRE(p.send(p.next(message_kind::heartbeat, first_id + i, 1)));
        }
        next_beat += 100ms;
      }
      for (auto& p : peers) p->read();
      std::this_thread::sleep_for(5ms);
    }
    x.attack_ended();
  });
  report("200 silent members", o);
  BOOST_TEST_MESSAGE("  declared dead " << o.metrics.declared_dead << ", updates sent " << o.metrics.updates_sent
                                        << ", send failures " << o.metrics.send_failures);
  check_served(o, 50);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(o.metrics.joins == silent + 1);
  BOOST_TEST(o.metrics.declared_dead >= silent / 2);
  for (const auto& r : o.rounds)
    BOOST_TEST((r.contributors == 1u && r.scale == 1.0), "revision " << r.revision << " scale " << r.scale);
}

// Case 2b. With room for 64 learners, thousands of learners join and leave
// at once, over one connection, before and while a new honest learner joins
// and trains. Each departed place is freed for the next joiner (the longest
// gone first), so the honest learner is never refused `too_many_learners`.
BOOST_AUTO_TEST_CASE(join_leave_flood_does_not_lock_out_a_new_learner) {
  constexpr std::uint32_t table = 64, first_id = 20000;
  harness h(run_settings{.max_learners = table});
  std::uint32_t flood = 0;
  const auto o = h.run([&](harness& x) {
    raw_dealer joiner(x.context(), x.endpoint());
    const model_type model(features, model_seed);
    const auto end = steady::now() + 30s;
    // At least 4096 pairs, and on until the honest learner is half way.
    for (; (flood < 4096 || (x.honest_steps() < inner_steps / 2 && !x.honest_done())) && flood < 20000 &&
           steady::now() < end;
         ++flood) {
      message j = make(message_kind::join, first_id + flood, 1, 1);
      j.header.layout = model.layout().fingerprint();
      j.header.element_count = model.layout().size();
      BOOST_TEST_REQUIRE(joiner.send(j));
      BOOST_TEST_REQUIRE(joiner.send(make(message_kind::leave, first_id + flood, 1, 2)));
      if (flood == 2048) {
        x.start_learner();
        x.attack_began();
      }
      if (flood % 64 == 63) {
        // Paced (64 pairs per 2 ms, at most 512 ahead of the syncer), so
        // that the flood lasts while the honest learner trains.
        (void)joiner.drain();
        std::this_thread::sleep_for(2ms);
        BOOST_TEST_REQUIRE(harness::wait_until([&] { return flood < x.syncer_leaves() + 512; }, 10s));
      }
    }
    x.attack_ended();
    x.expect_leaves(flood + 1);
    BOOST_TEST_REQUIRE(harness::wait_until([&] { (void)joiner.drain(); return x.syncer_leaves() >= flood; }, 10s));
  });
  report("join/leave flood of " + std::to_string(flood), o);
  BOOST_TEST_MESSAGE("  too_many_learners " << o.metrics.rejected_for(reject_reason::too_many_learners)
                                            << ", learners forgotten " << o.metrics.learners_forgotten << ", joins "
                                            << o.metrics.joins << ", send failures " << o.metrics.send_failures);
  check_served(o, 5);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(flood >= 4096u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::too_many_learners) == 0u);
  BOOST_TEST(o.metrics.joins == flood + 1);
  BOOST_TEST(o.metrics.leaves == flood + 1);
  BOOST_TEST(o.metrics.learners_forgotten >= flood + 1 - table);
}

// Case 3. Quorum 2: the honest learner and a bad one that claims
// 2^64 − 201 tokens in 10 steps (far above `max_tokens_per_step` = 2^24 per
// step): refused as `bad_counts`, a strike each.
//
// How the honest rounds can close: `advance_round` requires
// min(K, possible) distinct contributors, where `possible` counts every
// learner that has not left and is not quarantined — a joined learner that
// never had a contribution accepted still counts (being declared dead does
// not remove it either). So the honest learner's first round waits (it stays
// at step H in lock-step) until the bad learner's eighth refusal quarantines
// it; from then on `possible` = 1 and every honest round closes alone. The
// bad learner never contributed, so it weighs nothing in the scale: the run
// is the clean one to the bit.
BOOST_AUTO_TEST_CASE(overflowing_counters_are_refused) {
  harness h(run_settings{.quorum = 2});
  std::uint64_t sent = 0, blocked_at = 0;
  const auto o = h.run([&](harness& x) {
    peer bad(x.context(), x.endpoint());
    constexpr std::uint32_t id = 77;
    BOOST_TEST_REQUIRE(bad.send(bad.join(id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { bad.read(); return bad.welcomes == 1; }, 5s));
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= period; }, 20s));
    std::this_thread::sleep_for(200ms);
    blocked_at = x.honest_steps();
    x.attack_began();
    const std::vector<T> small(features + 1, T(0.01));
    const auto end = steady::now() + 30s;
    while (x.honest_steps() < 300 && !x.honest_done() && sent < 200 && steady::now() < end) {
      bad.read();
      ++sent;
      constexpr std::uint64_t tokens = std::numeric_limits<std::uint64_t>::max() - 200;  // 2^64 − 201
      BOOST_TEST_REQUIRE(
          bad.send(contribution_of(id, 1, ++bad.sequences[id], bad.revision, tokens, 10, 10 * sent, small)));
      std::this_thread::sleep_for(10ms);
    }
    x.attack_ended();
  });
  report("overflowing counters", o);
  BOOST_TEST_MESSAGE("  honest at step " << blocked_at << " 200 ms after its first send; sent " << sent
                                         << ", bad_counts "
                                         << o.metrics.rejected_for(reject_reason::bad_counts) << ", quarantined "
                                         << o.metrics.rejected_for(reject_reason::quarantined));
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(blocked_at == period);
  BOOST_TEST(sent > quarantine_after);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::bad_counts) == quarantine_after);
  BOOST_TEST(o.metrics.quarantines == 1u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::quarantined) == sent - quarantine_after);
  BOOST_TEST(o.metrics.rejected_total() == sent);
}

// Case 4. A syncer without a model (bootstrap, as tools/diloco_syncer runs
// it; patience 300 ms here, the service's is 10 s). The first learner to
// join is asked for the model and answers with a valid layout and states
// holding a NaN and an infinity: both refused. Once its patience is over the
// next joiner, the honest learner, is asked; the model is its own initial
// parameters, bit for bit, and the run is the clean one.
BOOST_AUTO_TEST_CASE(poisoned_start_is_refused) {
  harness h(run_settings{.bootstrap = true});
  std::uint64_t asked = 0;
  const auto o = h.run([&](harness& x) {
    peer poisoner(x.context(), x.endpoint());
    constexpr std::uint32_t id = 5;
    BOOST_TEST_REQUIRE(poisoner.send(poisoner.join(id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { poisoner.read(); return poisoner.state_requests >= 1; }, 5s));
    const model_type model(features, model_seed);
    const auto description = wire::encode_layout(model.layout());
    message l = poisoner.next(message_kind::layout, id, 1);
    l.header.codec = codec_id::bytes;
    l.header.element_count = description.size();
    l.header.layout = model.layout().fingerprint();
    l.payload = byte_buffer(description.size());
    std::memcpy(l.payload.data(), description.data(), description.size());
    BOOST_TEST_REQUIRE(poisoner.send(std::move(l)));
    for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
      std::vector<T> values(features + 1, T(0.5));
      values[3] = bad;
      message st = contribution_of(id, 1, ++poisoner.sequences[id], 0, 0, 0, 0, values);
      st.header.kind = message_kind::state;
      BOOST_TEST_REQUIRE(poisoner.send(std::move(st)));
    }
    x.attack_began();
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.syncer_serving(); }, 10s));
    x.attack_ended();
    poisoner.read();
    asked = poisoner.state_requests;
  });
  report("poisoned start", o);
  BOOST_TEST_MESSAGE("  bootstrap refused " << o.bootstrap_refused << ", poisoner asked " << asked
                                            << " time(s), honest states sent " << o.honest.states_sent);
  check_served(o, 0);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(o.bootstrapped);
  BOOST_TEST(o.bootstrap_refused == 2u);
  BOOST_TEST(asked == 1u);
  BOOST_TEST(o.honest.states_sent == 1u);
  BOOST_TEST(o.bootstrap_initial == initial_parameters(), boost::test_tools::per_element());
}

// Case 5 (a) and (b), without CURVE. (a) A raw DEALER announces the
// old-style routing id of the honest learner (u32 learner, u32 incarnation,
// little-endian) and speaks in its name: the ROUTER names connections itself,
// the honest learner's connection is bound, so every message is refused as
// `wrong_peer` (answered to the spoofer, which receives nothing else).
// (b) A client joins claiming the honest learner's id and incarnation:
// refused `peer_conflict`, never welcomed, the honest learner is told (one
// `peer_conflict` notice per claim), and contributions in its name are
// `wrong_peer`. Nothing changes: the run is the clean one to the bit.
BOOST_AUTO_TEST_CASE(impersonation_without_curve_is_refused) {
  harness h;
  std::uint64_t spoofed = 0, claims = 0, claimed_contributions = 0;
  std::map<message_kind, std::uint64_t> spoof_got;
  std::uint64_t claimant_welcomes = 0, claimant_updates = 0, claimant_conflicts = 0, claimant_wrong_peer = 0;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 50; }, 20s));
    x.attack_began();
    std::string routing_id(8, '\0');
    const std::uint32_t words[2] = {honest_id, honest_incarnation};
    std::memcpy(routing_id.data(), words, sizeof words);
    raw_dealer spoof(x.context(), x.endpoint(), routing_id);
    peer claimant(x.context(), x.endpoint());
    const std::vector<T> small(features + 1, T(0.01));
    const auto end = steady::now() + 30s;
    std::uint64_t sequence = 1000000;
    for (int i = 0; x.honest_steps() < 400 && !x.honest_done() && steady::now() < end; ++i) {
      BOOST_TEST_REQUIRE(spoof.send(make(message_kind::heartbeat, honest_id, honest_incarnation, ++sequence)));
      BOOST_TEST_REQUIRE(spoof.send(
          contribution_of(honest_id, honest_incarnation, ++sequence, claimant.revision, 160, 10, 1000, small)));
      spoofed += 2;
      if (i % 5 == 0) {
        BOOST_TEST_REQUIRE(claimant.send(claimant.join(honest_id, honest_incarnation)));
        ++claims;
        BOOST_TEST_REQUIRE(claimant.send(contribution_of(honest_id, honest_incarnation,
                                                         ++claimant.sequences[honest_id], claimant.revision, 160, 10,
                                                         1000, small)));
        ++claimed_contributions;
      }
      for (const auto& [kind, n] : spoof.drain()) spoof_got[kind] += n;
      claimant.read();
      std::this_thread::sleep_for(10ms);
    }
    x.attack_ended();
    BOOST_TEST(harness::wait_until(
        [&] {
          for (const auto& [kind, n] : spoof.drain()) spoof_got[kind] += n;
          claimant.read();
          return spoof_got[message_kind::reject] >= spoofed &&
                 claimant.rejected(reject_reason::wrong_peer) + claimant.rejected(reject_reason::peer_conflict) >=
                     claims + claimed_contributions;
        },
        5s));
    claimant_welcomes = claimant.welcomes;
    claimant_updates = claimant.updates;
    claimant_conflicts = claimant.rejected(reject_reason::peer_conflict);
    claimant_wrong_peer = claimant.rejected(reject_reason::wrong_peer);
  });
  report("impersonation without CURVE", o);
  BOOST_TEST_MESSAGE("  spoofed " << spoofed << ", claims " << claims << " (+" << claimed_contributions
                                  << " contributions); wrong_peer " << o.metrics.rejected_for(reject_reason::wrong_peer)
                                  << ", peer_conflict " << o.metrics.rejected_for(reject_reason::peer_conflict)
                                  << ", honest learner told " << o.honest.identity_conflicts << " time(s)");
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::wrong_peer) == spoofed + claimed_contributions);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::peer_conflict) == claims);
  BOOST_TEST(o.metrics.rejected_total() == spoofed + claims + claimed_contributions);
  BOOST_TEST(o.honest.identity_conflicts == claims);
  // (a) got its refusals and nothing meant for the honest learner.
  BOOST_TEST(spoof_got[message_kind::reject] == spoofed);
  BOOST_TEST(spoof_got[message_kind::update] == 0u);
  BOOST_TEST(spoof_got[message_kind::welcome] == 0u);
  // (b) likewise.
  BOOST_TEST(claimant_welcomes == 0u);
  BOOST_TEST(claimant_updates == 0u);
  BOOST_TEST(claimant_conflicts == claims);
  BOOST_TEST(claimant_wrong_peer == claimed_contributions);
}

// Case 5 (c), without CURVE. A client joins as (honest id, incarnation + 1)
// and then leaves. Without CURVE nothing tells it from the honest learner
// restarted elsewhere, so this is an accepted takeover: it is welcomed (a
// rejoin), and the honest learner's next message (a heartbeat within 100 ms,
// or its contribution) is refused `dead_incarnation`, answered to its
// connection. The honest learner is TOLD: it stops with `errc::superseded`
// instead of idling. (With CURVE, an allow-list entry that does not own the
// id refuses the takeover as `unauthorized`.)
BOOST_AUTO_TEST_CASE(takeover_without_curve_is_told_to_the_displaced_learner) {
  harness h;  // the usurper's leave is the one the syncer must see
  double told_after_s = -1;
  std::uint64_t usurper_welcomes = 0, usurper_updates = 0;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 100; }, 20s));
    x.attack_began();
    peer usurper(x.context(), x.endpoint());
    BOOST_TEST_REQUIRE(usurper.send(usurper.join(honest_id, honest_incarnation + 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { usurper.read(); return usurper.welcomes >= 1; }, 5s));
    BOOST_TEST_REQUIRE(usurper.send(usurper.next(message_kind::leave, honest_id, honest_incarnation + 1)));
    const auto left = steady::now();
    BOOST_TEST(harness::wait_until([&] { return x.honest_done(); }, 5s));
    told_after_s = seconds_since(left);
    x.attack_ended();
    usurper.read();
    usurper_welcomes = usurper.welcomes;
    usurper_updates = usurper.updates;
  });
  report("takeover without CURVE", o);
  BOOST_TEST_MESSAGE("  honest learner stopped (" << o.honest_error.message() << ") " << told_after_s
                                                  << " s after the takeover, at step " << o.honest_steps);
  check_costs(o);
  BOOST_TEST(o.honest_error == make_error_code(errc::superseded));
  BOOST_TEST(told_after_s < 1.0);  // a heartbeat is due every 100 ms [measured 0.01 s]
  BOOST_TEST(o.honest_steps < inner_steps);
  BOOST_TEST(o.metrics.rejoins == 1u);
  BOOST_TEST(o.metrics.leaves == 1u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::dead_incarnation) >= 1u);
  BOOST_TEST(usurper_welcomes == 1u);
  BOOST_TEST(usurper_updates >= 1u);
  BOOST_TEST(all_finite(o.global));
}

// Case 5 with CURVE. An intruder holds a key on the allow-list, bound to
// learner 9 only. It joins as 9 (welcomed: it owns that id), then claims the
// honest learner in every way (c) and (b) did without CURVE — a join of the
// next incarnation, its current one, a contribution, a leave: every message
// naming the honest learner is refused as `unauthorized`, none displaces it,
// and the run is the clean one to the bit.
BOOST_AUTO_TEST_CASE(with_curve_a_key_speaks_only_for_its_own_learners) {
  harness h(run_settings{.curve = true});
  std::uint64_t claims = 0, intruder_welcomes = 0;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 50; }, 20s));
    x.attack_began();
    peer intruder(x.context(), x.endpoint(), keys().client(keys().intruder));
    BOOST_TEST_REQUIRE(intruder.send(intruder.join(curve_keys::intruder_id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { intruder.read(); return intruder.welcomes >= 1; }, 5s));
    const std::vector<T> small(features + 1, T(0.01));
    const auto end = steady::now() + 30s;
    for (int i = 0; x.honest_steps() < 400 && !x.honest_done() && steady::now() < end; ++i) {
      BOOST_TEST_REQUIRE(intruder.send(intruder.join(honest_id, honest_incarnation + 1 + i)));
      BOOST_TEST_REQUIRE(intruder.send(intruder.join(honest_id, honest_incarnation)));
      BOOST_TEST_REQUIRE(intruder.send(contribution_of(honest_id, honest_incarnation, ++intruder.sequences[honest_id],
                                                       intruder.revision, 160, 10, 1000, small)));
      BOOST_TEST_REQUIRE(intruder.send(intruder.next(message_kind::leave, honest_id, honest_incarnation + 1 + i)));
      claims += 4;
      intruder.read();
      std::this_thread::sleep_for(20ms);
    }
    x.attack_ended();
    intruder.read();
    intruder_welcomes = intruder.welcomes;
  });
  report("impersonation with CURVE", o);
  BOOST_TEST_MESSAGE("  " << claims << " messages claiming the honest learner, "
                          << o.metrics.rejected_for(reject_reason::unauthorized) << " refused unauthorized");
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(claims > 0u);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::unauthorized) == claims);
  BOOST_TEST(o.metrics.rejoins == 0u);
  BOOST_TEST(intruder_welcomes == 1u);  // as itself, learner 9
}

// Case 6. A stranger sends 30 000 messages while the honest learner trains:
// 6 000 each of one-frame junk (1..143 bytes), three-frame messages, a wrong
// magic, a wrong header CRC, and well-formed contributions from a learner that
// never joined. Every one is refused and counted under its reason; the log
// gets at most 5 lines per reason plus 5 per 10 s of refill, and a summary
// line per 10 s; the run is the clean one to the bit.
BOOST_AUTO_TEST_CASE(log_flood_is_counted_not_written) {
  harness h;
  constexpr std::uint64_t flood = 30000;
  const auto o = h.run([&](harness& x) {
    x.start_learner();
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.honest_steps() >= 100; }, 20s));
    x.attack_began();
    raw_dealer stranger(x.context(), x.endpoint());
    splitmix64 rng(7);
    const std::vector<T> small(features + 1, T(0.01));
    const auto heartbeat = wire::encode_header(make(message_kind::heartbeat, 4242, 1, 1).header, {});
    std::vector<std::byte> junk(143);
    for (std::uint64_t i = 0; i < flood; ++i) {
      for (auto& b : junk) b = std::byte(rng.next() & 0xff);
      bool ok = true;
      switch (i % 5) {
        case 0:  // truncated: one frame of 1..143 random bytes
          ok = stranger.send({std::span<const std::byte>(junk).first(1 + rng.next() % 143)});
          break;
        case 1:  // truncated: three frames
          ok = stranger.send({std::span<const std::byte>(heartbeat), std::span<const std::byte>(junk).first(8),
                              std::span<const std::byte>(junk).first(16)});
          break;
        case 2: {  // bad_magic
          auto bytes = heartbeat;
          bytes[0] = std::byte{'X'};
          ok = stranger.send({std::span<const std::byte>(bytes)});
          break;
        }
        case 3: {  // bad_checksum: one bit of the header CRC flipped
          const auto c = contribution_of(4242, 1, i, 0, 160, 10, 10, small);
          auto bytes = wire::encode_header(c.header, c.payload.bytes());
          bytes[wire::offset::header_crc] ^= std::byte{1};
          ok = stranger.send({std::span<const std::byte>(bytes), c.payload.bytes()});
          break;
        }
        default:  // unknown_learner: well-formed, from a learner that never joined
          ok = stranger.send(contribution_of(4242, 1, i, 0, 160, 10, 10, small));
          break;
      }
      BOOST_TEST_REQUIRE(ok);
      if (i % 1000 == 999) {
        (void)stranger.drain();
        std::this_thread::sleep_for(15ms);  // spread over ~0.5 s of the honest run
      }
    }
    BOOST_TEST(harness::wait_until([&] { (void)stranger.drain(); return x.syncer_rejected() >= flood; }, 20s));
    x.attack_ended();
  });
  report("log flood", o);
  const auto lines = log_categories(o.log_lines);
  for (const auto& [category, n] : lines) BOOST_TEST_MESSAGE("  log lines " << category << ": " << n);
  check_served(o, 10);
  check_costs(o);
  check_unchanged(o);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::truncated) == 2 * flood / 5);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::bad_magic) == flood / 5);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::bad_checksum) == flood / 5);
  BOOST_TEST(o.metrics.rejected_for(reject_reason::unknown_learner) == flood / 5);
  BOOST_TEST(o.metrics.rejected_total() == flood);
  // The limiter: a burst of 5 per category, refilled at 5 per 10 s.
  const auto per_category = std::size_t(5 + 0.5 * o.wall_s);
  for (const char* reason : {"truncated", "bad_magic", "bad_checksum", "unknown_learner"}) {
    BOOST_TEST(lines.count(reason) == 1u, reason);  // visible in the log...
    if (lines.count(reason)) BOOST_TEST(lines.at(reason) <= per_category, reason);  // ...but not flooded
  }
  BOOST_TEST(lines.count("summary") == 1u);
  if (lines.count("summary")) BOOST_TEST(lines.at("summary") <= std::size_t(1 + o.wall_s / 10));
  BOOST_TEST(lines.count("other") == 0u);
  BOOST_TEST(o.log_lines.size() <= 200u);
  BOOST_TEST(o.syncer_cpu_s / double(flood) < 50e-6);  // per refused message [~1.2 µs]
}


// Case 1 before the clipping reference exists (fewer than `min_reference`
// = 3 norms in the fragment's history and round): the attack starts after
// the honest learner's first round. The huge contribution cannot be clipped
// yet; the outer step's result, ±0.7 × 1.9 × 1.5e38 ≈ ±2e38, is finite, but
// moves the fragment far beyond `max_update_ratio` × its norm, so the round
// is dropped (update_too_large) instead of published. (The first version of
// this test found it published, the honest learner's steps overflowing, and
// the honest learner quarantined.)
BOOST_AUTO_TEST_CASE(a_huge_contribution_before_the_clipping_reference_is_not_published) {
  const auto [o, sent] = huge_values_run(period);
  BOOST_TEST(o.metrics.rounds_dropped >= 1u);
  BOOST_TEST(o.metrics.quarantines == 1u);
  BOOST_TEST(!o.honest_error, o.honest_error.message());
  BOOST_TEST(o.honest_steps == inner_steps);
  BOOST_TEST(all_finite(o.global));
  BOOST_TEST(o.loss < evaluation_loss(initial_parameters()));
}

// Case 4 with a persistent poisoner: it joins every millisecond and answers
// every request for the model with a NaN state. A learner whose state was
// refused is never asked again, so the honest learner (joining every 100 ms)
// provides the model. (The first version of this test found the poisoner
// asked 27 times in 8 s and the honest learner never.)
BOOST_AUTO_TEST_CASE(a_persistent_poisoner_cannot_hold_the_bootstrap) {
  harness h(run_settings{.bootstrap = true});
  bool served = false;
  std::uint64_t asked = 0;
  const auto o = h.run([&](harness& x) {
    peer poisoner(x.context(), x.endpoint());
    constexpr std::uint32_t id = 5;
    const model_type model(features, model_seed);
    const auto description = wire::encode_layout(model.layout());
    BOOST_TEST_REQUIRE(poisoner.send(poisoner.join(id, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { poisoner.read(); return poisoner.state_requests >= 1; }, 5s));
    x.start_learner();
    const auto began = steady::now();
    for (std::uint64_t answered = 0; !x.syncer_serving() && seconds_since(began) < 8.0;) {
      BOOST_TEST_REQUIRE(poisoner.send(poisoner.join(id, 1)));
      poisoner.read();
      for (; answered < poisoner.state_requests; ++answered) {
        message l = poisoner.next(message_kind::layout, id, 1);
        l.header.codec = codec_id::bytes;
        l.header.element_count = description.size();
        l.header.layout = model.layout().fingerprint();
        l.payload = byte_buffer(description.size());
        std::memcpy(l.payload.data(), description.data(), description.size());
        BOOST_TEST_REQUIRE(poisoner.send(std::move(l)));
        message st = contribution_of(id, 1, ++poisoner.sequences[id], 0, 0, 0, 0,
                                     std::vector<T>(features + 1, std::numeric_limits<T>::quiet_NaN()));
        st.header.kind = message_kind::state;
        BOOST_TEST_REQUIRE(poisoner.send(std::move(st)));
      }
      std::this_thread::sleep_for(1ms);
    }
    served = x.syncer_serving();
    asked = poisoner.state_requests;
  });
  BOOST_TEST_MESSAGE("persistent poisoner: serving within 8 s: " << served << "; poisoner asked " << asked << " times");
  BOOST_TEST(served);
  BOOST_TEST(asked == 1u);
}

// Quorum 2: learner A contributes (its round waits for a second learner)
// and leaves; learner B joins and heartbeats but never contributes. A stays
// in the open round, so it cannot be forgotten past its forget deadline; the
// syncer must not wake for that deadline (the first version of this test
// found it returned by `poll` while already past: the syncer thread spun at
// ~100 % of a core). A's contribution reports a 1 µs step time so that
// forget_after (10 half-lives of 20 periods of H steps) is 2 ms. (That B
// alone freezes every quorum-2 round is the quorum's definition.)
BOOST_AUTO_TEST_CASE(an_open_round_past_its_forget_deadline_does_not_spin) {
  harness h(run_settings{.quorum = 2});
  const auto o = h.run([&](harness& x) {
    peer a(x.context(), x.endpoint()), b(x.context(), x.endpoint());
    BOOST_TEST_REQUIRE(a.send(a.join(41, 1)));
    BOOST_TEST_REQUIRE(b.send(b.join(42, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { a.read(); b.read(); return a.welcomes == 1 && b.welcomes == 1; }, 5s));
    auto c = contribution_of(41, 1, ++a.sequences[41], 0, 160, 10, 10, std::vector<T>(features + 1, T(0.01)));
    c.header.step_time_ns = 1000;
    BOOST_TEST_REQUIRE(a.send(std::move(c)));
    BOOST_TEST_REQUIRE(a.send(a.next(message_kind::leave, 41, 1)));
    BOOST_TEST_REQUIRE(harness::wait_until([&] { return x.syncer_leaves() >= 1; }, 5s));
    for (const auto began = steady::now(); seconds_since(began) < 1.0; std::this_thread::sleep_for(100ms)) {
      BOOST_TEST_REQUIRE(b.send(b.next(message_kind::heartbeat, 42, 1)));
      b.read();
    }
  });
  report("open round past its forget deadline", o);
  check_costs(o);
}

BOOST_AUTO_TEST_SUITE_END()
