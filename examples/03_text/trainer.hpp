// char_lm's trainer: data parallel, DiLoCo and Decoupled DiLoCo as
// configurations of one diloco runtime, with a LibTorch transformer that
// reaches the learners through diloco::torch (adapters/torch.hpp); on
// threads, on the simulator, or as a syncer or learner process over ZeroMQ.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <diloco/adapters/torch.hpp>
#include <diloco/diloco.hpp>
#include <diloco/transport/shards.hpp>
#include <diloco/transport/zeromq.hpp>
#include <example_trainer/outcome.hpp>
#include <example_trainer/processes.hpp>
#include <example_trainer/progress.hpp>
#include <example_trainer/settings.hpp>
#include <example_trainer/threads.hpp>

#include "corpus.hpp"
#include "transformer.hpp"

namespace text {

using example_trainer::mode;
using example_trainer::role;
using example_trainer::transport;
enum class merge_rule { token_weighted, average, radial_directional };
/// DiLoCo's inner AdamW: LibTorch's `torch::optim::AdamW` through the
/// adapter, or the library's `inner::adamw` on the flat buffer.
enum class inner_optimizer { torch, library };
/// The learning rate over the steps: constant, or a linear warm-up over the
/// first 5 % of the steps followed by a cosine decay to a tenth of it.
enum class schedule { constant, cosine };

/// The run (mode, learners, steps, H, P, K, τ, α, speeds, codecs,
/// processes: diloco_tools/trainer/settings.hpp) and this trainer's own.
struct settings : example_trainer::run_settings {
  // H = 20: at 1500 steps with uneven speeds 0.4 % behind data parallel,
  // where H = 50 is 2.7 % behind (docs/text.md, Quality).
  settings() {
    steps = 600;
    sync_period = 20;
  }

  std::uint32_t batch = 16;  ///< windows per inner step
  double lr = 3e-3;
  schedule lr_schedule = schedule::cosine;
  double weight_decay = 0.01;
  merge_rule merge = merge_rule::token_weighted;
  inner_optimizer inner = inner_optimizer::torch;
  shape dimensions{};
  std::string text_path;                   ///< empty: the King James Bible
  data_split data = data_split::shuffled;  ///< how the training text is dealt out
  std::uint32_t validation_windows = 256;
  int threads = 1;                   ///< LibTorch threads per process
  std::uint32_t ranks_per_unit = 1;  ///< role learner: the MPI ranks of this learner unit (unit.hpp)
  std::uint64_t eval_every = 0;      ///< validation loss of the global model every N outer updates, 0: never
  std::chrono::milliseconds sim_step_time{100};
};

/// The run's counters (diloco_tools/trainer/outcome.hpp) and this
/// trainer's own figures.
struct outcome : example_trainer::run_outcome {
  std::uint64_t parameters = 0;  ///< the model's trainable parameters
  double val_loss = 0.0;
};

/// The transformer as a diloco model: it owns the module (a base made before
/// the adapter) and hands it to `diloco::torch::module_model`, whose forward
/// pass is the module's own loss.
struct owns_transformer {
  transformer net;
};
class lm_model : private owns_transformer, public diloco::torch::module_model<batch> {
 public:
  lm_model(const shape& s, std::uint64_t seed)
      : owns_transformer{transformer(s, seed)}, module_model<batch>(*net, [m = net.get()](const batch& b) {
          return diloco::torch::forward_result{m->loss(b), std::uint64_t(b.rows) * b.context};
        }) {}
  transformer_impl& module() noexcept { return *net; }
};

/// The learning rate at step `step` (from 0) of `s.steps`: `s.lr`, or with
/// the cosine schedule a linear warm-up over the first 5 % of the steps, then
/// a cosine decay to `s.lr / 10` at the last (Loshchilov & Hutter 2017, the
/// schedule DiLoCo's inner optimizer follows; arXiv 2311.08105).
inline double learning_rate(const settings& s, std::uint64_t step) {
  if (s.lr_schedule == schedule::constant) return s.lr;
  const double total = double(s.steps), t = double(std::min(step, s.steps - 1));
  const double warmup = std::max(1.0, std::floor(0.05 * total));
  if (t < warmup) return s.lr * (t + 1) / warmup;
  const double progress = total > warmup + 1 ? (t - warmup) / (total - warmup - 1) : 1.0;
  return s.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(std::acos(-1.0) * progress)));
}

/// Sets an inner step's learning rate: LibTorch's AdamW, the library's; the
/// SGD of data parallel learners keeps its rate of 1 (their syncer's AdamW
/// follows the schedule instead: `follow_schedule`).
inline void set_learning_rate(diloco::torch::optimizer<::torch::optim::AdamW>& step, double lr) {
  step.options().lr(lr);
}
inline void set_learning_rate(diloco::inner::adamw<float>& step, double lr) { step.options().learning_rate = lr; }
inline void set_learning_rate(diloco::inner::sgd<float>&, double) {}

/// Data parallel: the syncer's AdamW takes outer update N at the rate of
/// step N; other outer optimizers keep theirs (the learners' follow the
/// schedule). Call from the syncer's `on_update`, on its thread.
template <class Outer>
void follow_schedule(Outer& outer, const settings& s, std::uint64_t outer_updates) {
  if constexpr (std::is_same_v<Outer, diloco::outer::from_inner<diloco::inner::adamw<float>>>)
    outer.options().learning_rate = learning_rate(s, outer_updates);
}

/// Mean validation loss, nats per character, of the flat parameters
/// `params` on `windows`.
inline double validation_loss(std::span<const float> params, const shape& s, const batch& windows) {
  lm_model model(s, 0);
  const auto theta = model.parameters();
  if (params.size() != theta.size()) throw std::logic_error("validation_loss: parameters of another model");
  std::copy(params.begin(), params.end(), theta.begin());
  ::torch::NoGradGuard no_grad;
  constexpr std::uint32_t chunk = 64;
  double sum = 0;
  for (std::uint32_t first = 0; first < windows.rows; first += chunk) {
    const std::uint32_t rows = std::min(chunk, windows.rows - first);
    batch part{rows, windows.context, {}};
    const auto from = windows.tokens.begin() + std::ptrdiff_t(first) * (windows.context + 1);
    part.tokens.assign(from, from + std::ptrdiff_t(rows) * (windows.context + 1));
    sum += model.module().loss(part).item<double>() * rows;
  }
  return sum / windows.rows;
}

using example_trainer::progress;

/// Prints the validation loss of the global model every `eval_every` outer
/// updates (the syncer's evaluation hook, on its thread).
inline void evaluate_during_training(diloco::syncer_options& options, const settings& s, const batch& windows) {
  if (s.eval_every == 0) return;
  options.evaluate_every = s.eval_every;
  options.on_evaluate = [&s, &windows,
                         started = std::chrono::steady_clock::now()](const diloco::evaluation_context& c) {
    const double loss = validation_loss(c.parameters_as<float>(), s.dimensions, windows);
    std::fprintf(stderr, "[%.1fs] evaluation at outer update %llu: validation loss %.4f (%.4f bits per character)\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                 static_cast<unsigned long long>(c.outer_updates), loss, loss / std::log(2.0));
  };
}

/// Runs learner `i` for `s.steps` steps on a blocking transport, emulating its
/// speed (a learner at speed v sleeps so that a step takes 1/v as long),
/// then finishes it. Returns an error message, or nothing.
template <class Learner>
std::string drive(Learner& l, lm_model& model, sampler& data, double speed, std::uint32_t i, const settings& s,
                  progress& report) {
  for (std::uint64_t step = l.local_step(); step < s.steps; ++step) {
    set_learning_rate(l.inner(), learning_rate(s, step));
    const auto r = l.step(data.next(s.batch));
    if (!r && l.ended()) return {};  // the syncer ended the run
    if (!r) return "learner " + std::to_string(i) + ": " + r.error().message();
    report.stepped(i, r->loss);
    if (speed < 1.0) std::this_thread::sleep_for(model.last_compute() * (1.0 / speed - 1.0));
  }
  l.finish();
  return {};
}

/// The learners' and syncer's run in this process: threads over the
/// in-process transport, or the deterministic simulator.
template <class MakeInner, class Outer, class Merge>
outcome train(const settings& s, const corpus& text, MakeInner make_inner, Outer outer, Merge merge,
              diloco::syncer_options options) {
  using namespace diloco;
  using inner_type = std::invoke_result_t<MakeInner&, lm_model&>;
  const batch windows = validation_windows(text, std::uint32_t(s.dimensions.context), s.validation_windows);
  lm_model initial(s.dimensions, s.seed);
  progress report(s.learners, s.steps, s.progress_seconds);
  outcome out;
  out.parameters = initial.layout().size();
  options.log = [](const std::string& line) { std::fprintf(stderr, "char_lm syncer: %s\n", line.c_str()); };
  Outer* schedule_outer = nullptr;  // the syncer's, once it exists
  std::uint64_t updates = 0;
  options.on_update = [&](const update_event& e) {
    report.updated();
    out.train_loss = e.training_loss;
    if (schedule_outer) follow_schedule(*schedule_outer, s, ++updates);
  };
  follow_schedule(outer, s, 0);
  evaluate_during_training(options, s, windows);
  std::vector<sampler> samplers;
  for (std::uint32_t i = 0; i < s.learners; ++i)
    samplers.emplace_back(text, s.learners, i, std::uint32_t(s.dimensions.context), s.seed, s.data);
  std::vector<std::unique_ptr<lm_model>> models;
  for (std::uint32_t i = 0; i < s.learners; ++i)
    models.push_back(std::make_unique<lm_model>(s.dimensions, s.seed + 1000 + i));  // overwritten on join
  const auto options_of = [&](std::uint32_t i) { return example_trainer::learner_options_for(s, i); };

  const auto started = std::chrono::steady_clock::now();
  std::vector<float> final_params;
  if (s.via == transport::simulated) {
    sim::network net(s.seed, sim::link_options{std::chrono::milliseconds(1), 1e9});
    syncer<Outer, Merge, sim::endpoint> sync(initial.layout(), initial.parameters(), net.attach(syncer_peer), options,
                                             outer, merge);
    schedule_outer = &sync.outer();
    std::vector<std::unique_ptr<learner<lm_model, inner_type, sim::endpoint>>> learners;
    std::vector<sim::learner_plan> plans;
    for (std::uint32_t i = 0; i < s.learners; ++i) {
      learners.push_back(std::make_unique<learner<lm_model, inner_type, sim::endpoint>>(
          *models[i], net.attach(i), options_of(i), make_inner(*models[i])));
      plans.push_back({s.speed_of(i), s.steps, {}});
    }
    const auto start = net.now();
    const auto result = sim::run(
        net, sync, learners, plans,
        [&](std::size_t i) {
          set_learning_rate(learners[i]->inner(), learning_rate(s, learners[i]->local_step()));
          return samplers[i].next(s.batch);
        },
        [&](std::size_t i, const step_stats& st, time_point now) {
          report.stepped(std::uint32_t(i), st.loss);
          report.maybe_print(false, std::chrono::duration<double>(now - start).count());
        },
        sim::run_options{.step_time = s.sim_step_time});
    out.completed = result.completed;
    out.virtual_seconds = std::chrono::duration<double>(result.end - start).count();
    out.take(sync);
    out.take_learner_work(learners);
    for (const auto& l : learners) out.inner_steps += l->local_step();
    final_params = sync.parameters();
  } else {
    inproc::hub hub;
    syncer<Outer, Merge, inproc::endpoint> sync(initial.layout(), initial.parameters(), hub.attach(syncer_peer),
                                                options, outer, merge);
    schedule_outer = &sync.outer();
    std::vector<std::unique_ptr<learner<lm_model, inner_type, inproc::endpoint>>> learners;
    for (std::uint32_t i = 0; i < s.learners; ++i)
      learners.push_back(std::make_unique<learner<lm_model, inner_type, inproc::endpoint>>(
          *models[i], hub.attach(i), options_of(i), make_inner(*models[i])));
    out.error = example_trainer::run_on_threads(
        sync, s.learners,
        [&](std::uint32_t i) { return drive(*learners[i], *models[i], samplers[i], s.speed_of(i), i, s, report); },
        report);
    out.completed = out.error.empty();
    out.take(sync);
    out.take_learner_work(learners);
    for (const auto& l : learners) out.inner_steps += l->local_step();
    final_params = sync.parameters();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  report.maybe_print(true);
  out.val_loss = validation_loss(final_params, s.dimensions, windows);
  return out;
}

/// Role `syncer`: serves `s.learners` learner processes over ZeroMQ until
/// every one has left, then evaluates the global model.
template <class Outer, class Merge>
outcome serve(const settings& s, const corpus& text, Outer outer, Merge merge, diloco::syncer_options options) {
  using namespace diloco;
  const batch windows = validation_windows(text, std::uint32_t(s.dimensions.context), s.validation_windows);
  lm_model initial(s.dimensions, s.seed);
  const auto started = std::chrono::steady_clock::now();
  auto last = started;
  outcome out;
  out.parameters = initial.layout().size();
  options.log = [](const std::string& line) { std::fprintf(stderr, "char_lm syncer: %s\n", line.c_str()); };
  if (!options.end.when_all_gone) options.end.when_all_gone = std::chrono::seconds(30);
  if (!options.end.expected_learners) options.end.expected_learners = s.learners;
  evaluate_during_training(options, s, windows);
  std::uint64_t updates = 0;
  Outer* schedule_outer = nullptr;  // the syncer's, once it exists
  follow_schedule(outer, s, 0);
  options.on_update = [&](const update_event& e) {
    ++updates;
    out.train_loss = e.training_loss;
    if (schedule_outer) follow_schedule(*schedule_outer, s, updates);
    const auto now = std::chrono::steady_clock::now();
    if (s.progress_seconds <= 0 || now - last < std::chrono::duration<double>(s.progress_seconds)) return;
    last = now;
    std::fprintf(stderr, "[%.1fs] outer updates %llu | train loss %.4f\n",
                 std::chrono::duration<double>(now - started).count(), static_cast<unsigned long long>(updates),
                 e.training_loss.value_or(std::nan("")));
  };
  const auto security = example_trainer::server_security_for(s, "char_lm");
  zeromq::keep_large_blocks();
  ::zmq::context_t context;
  zeromq::server server(context, s.endpoint, {}, security);
  syncer<Outer, Merge, zeromq::server> sync(initial.layout(), initial.parameters(), server, options, outer, merge);
  schedule_outer = &sync.outer();
  std::fprintf(stderr, "char_lm syncer: listening on %s for %u learners\n", server.endpoint().c_str(), s.learners);
  std::stop_source never;
  sync.run_until(never.get_token(), [&] { return sync.metrics().leaves >= s.learners && sync.live_learners() == 0; });
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  out.take(sync);
  if (sync.failure()) {
    out.completed = false;
    out.error = "syncer: " + *sync.failure();
  }
  out.val_loss = validation_loss(sync.parameters(), s.dimensions, windows);
  return out;
}

/// Role `learner`: learner `s.learner_id` of `s.learners` over ZeroMQ, to a
/// syncer or to every shard of a sharded one.
template <class MakeInner>
outcome learn(const settings& s, const corpus& text, MakeInner make_inner) {
  using namespace diloco;
  using inner_type = std::invoke_result_t<MakeInner&, lm_model&>;
  example_trainer::shard_links links(s);  // every shard `--endpoint` lists
  lm_model model(s.dimensions, s.seed + 1000 + s.learner_id);
  sampler data(text, s.learners, s.learner_id, std::uint32_t(s.dimensions.context), s.seed, s.data);
  learner<lm_model, inner_type, example_trainer::shard_transport> l(
      model, links.transport(), example_trainer::learner_options_for(s, s.learner_id), make_inner(model));
  progress report(s.learners, s.steps, 0);  // counts only: the syncer prints the run's progress
  const double speed = s.speed_of(s.learner_id);
  const auto started = std::chrono::steady_clock::now();
  outcome out;
  try {
    out.error = drive(l, model, data, speed, s.learner_id, s, report);
  } catch (const std::exception& e) {
    out.error = "learner " + std::to_string(s.learner_id) + ": " + e.what();
  }
  out.completed = out.error.empty();
  out.inner_steps = l.local_step();
  out.steps_computed = l.metrics().steps_computed;
  out.take_learner_work(l.metrics());
  out.bytes_sent = l.metrics().bytes_sent;
  out.bytes_received = l.metrics().bytes_received;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace text
