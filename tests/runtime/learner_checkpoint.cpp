// Learner checkpoints (runtime/learner/state.hpp, runtime/learner/checkpoint.hpp
// and learner::save/load): a learner trained against a real syncer on the
// in-process transport, saved, and a new learner with a new incarnation
// restored from it — its AdamW moments bit for bit, fragments resumed or
// overwritten by what the syncer did meanwhile, the lock-step phase — and
// every corrupt or foreign state refused without a trace.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/runtime/learner/checkpoint.hpp>

#include "support/toy_model.hpp"

namespace runtime_learner_checkpoint_test {

using namespace std::chrono_literals;
using namespace diloco;

using model_type = toy::linear_regression<float>;
using learner_type = learner<model_type, inner::adamw<float>, inproc::endpoint>;
using syncer_type = syncer<outer::sgd<float>, merge::average, inproc::endpoint>;

constexpr std::size_t features = 6;  // 7 parameters
constexpr std::size_t batch_size = 8;

std::string bytes_of(const inner::adamw<float>& a) {
  std::ostringstream out;
  a.save(out);
  return std::move(out).str();
}

std::string state_of(const learner_type& l) {
  std::ostringstream out;
  l.save(out);
  return std::move(out).str();
}

std::vector<float> params_of(model_type& m) { return {m.parameters().begin(), m.parameters().end()}; }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Fragment p of the flat parameters `flat`, packed.
std::vector<float> fragment_of(const fragment_plan& plan, std::size_t p, const std::vector<float>& flat) {
  std::vector<float> packed(plan[p].size());
  plan.gather<float>(p, flat, packed);
  return packed;
}

inner::adamw<float> adamw() { return inner::adamw<float>({.learning_rate = 0.01}); }

/// A syncer (outer SGD η = 1, averaging, quorum 1, no grace) and the test's
/// clock; learners step one at a time on this thread.
struct world {
  model_type initial{features, 1};
  inproc::hub hub;
  inproc::endpoint& syncer_end = hub.attach(syncer_peer);
  syncer_type sync;
  time_point now{};
  std::vector<message_header> contributions;  ///< every contribution the syncer was handed

  explicit world(training_config training = {.fragments = 2, .sync_period = 4, .overlap = 1})
      : sync(initial.layout(), initial.parameters(), syncer_end, options(training)) {}

  static syncer_options options(training_config training) {
    syncer_options o;
    o.training = training;
    o.quorum = 1;
    o.grace_factor = 0.0;
    o.log = [](const std::string&) {};
    return o;
  }

  /// The syncer handles what has arrived and its timed work.
  void serve() {
    while (auto e = syncer_end.try_receive()) {
      if (e->msg.header.kind == message_kind::contribution) contributions.push_back(e->msg.header);
      sync.handle(std::move(*e), now);
    }
    sync.poll(now);
  }

  /// What reached the syncer is lost (the sender crashed before it went out).
  void lose() {
    while (syncer_end.try_receive()) {
    }
  }

  /// Polls `l` (and serves) until it may step.
  void ready(learner_type& l) {
    for (int i = 0; i < 200; ++i) {
      if (l.poll(now)) return;
      serve();
      now += 1ms;
    }
    BOOST_FAIL("the learner never got ready");
  }

  void step(learner_type& l, const toy::batch<float>& b) {
    ready(l);
    l.train_step(b, now);
    serve();
    now += 1ms;
  }
};

/// A learner's model, endpoint and learner together.
struct unit {
  std::unique_ptr<model_type> model;
  std::unique_ptr<learner_type> l;

  unit(world& w, std::uint32_t peer, learner_options o, std::uint64_t seed, inner::adamw<float> inner = adamw())
      : model(std::make_unique<model_type>(features, seed)),
        l(std::make_unique<learner_type>(*model, w.hub.attach(peer), o, std::move(inner))) {}
};

BOOST_AUTO_TEST_SUITE(runtime_learner_checkpoint)

BOOST_AUTO_TEST_CASE(a_restored_learner_keeps_its_adamw_moments_bit_for_bit) {
  world w;
  unit a(w, 0, {.id = 0, .incarnation = 1}, 2);
  toy::teacher<float> data(features, 5);
  for (int s = 0; s < 11; ++s) w.step(*a.l, data.next(batch_size));
  w.ready(*a.l);  // step 11 done and the answers due adopted: nothing in flight
  BOOST_TEST_REQUIRE(a.l->inner().steps() == 11u);
  const std::string saved = state_of(*a.l);
  const std::string moments = bytes_of(a.l->inner());
  const auto theta = params_of(*a.model);
  const auto revisions = std::vector<std::uint64_t>{a.l->revision(0), a.l->revision(1)};

  // The original's next step on batch X, then it crashes: what it sent is lost.
  const auto x = data.next(batch_size);
  a.l->train_step(x, w.now);
  const auto original_next = params_of(*a.model);
  w.lose();

  unit b(w, 7, {.id = 0, .incarnation = 2}, 99);  // another initialization
  BOOST_TEST_REQUIRE(!same_bits(params_of(*b.model), theta));
  std::istringstream in(saved);
  b.l->load(in);
  BOOST_TEST(bytes_of(b.l->inner()) == moments);  // moments and step count, bit for bit
  BOOST_TEST(b.l->inner().steps() == 11u);
  BOOST_TEST(same_bits(params_of(*b.model), theta));
  BOOST_TEST(b.l->local_step() == 11u);
  BOOST_TEST(b.l->metrics().steps == 11u);
  BOOST_TEST(b.l->metrics().tokens == 11u * batch_size);

  w.ready(*b.l);  // joins with incarnation 2 and adopts the global fragments
  BOOST_TEST(b.l->joined());
  BOOST_TEST(b.l->revision(0) == revisions[0]);
  BOOST_TEST(b.l->revision(1) == revisions[1]);
  BOOST_TEST(b.l->metrics().fragments_resumed == 2u);
  BOOST_TEST(bytes_of(b.l->inner()) == moments);
  BOOST_TEST(same_bits(params_of(*b.model), theta));

  b.l->train_step(x, w.now);
  BOOST_TEST(same_bits(params_of(*b.model), original_next));  // the very step the original took

  // With fresh moments the same step lands elsewhere: the comparison above
  // could fail.
  model_type fresh(features, 99);
  std::copy(theta.begin(), theta.end(), fresh.parameters().begin());
  auto cold = adamw();
  fresh.compute_gradients(x);
  cold.step(fresh.parameters(), fresh.gradients());
  BOOST_TEST(!same_bits(params_of(fresh), original_next));
}

BOOST_AUTO_TEST_CASE(an_unchanged_fragment_is_resumed_and_a_moved_one_overwritten) {
  world w;  // P = 2, H = 4, τ = 1: fragment 0 due after steps 4, 8, 12; fragment 1 after 2, 6, 10
  unit a(w, 0, {.id = 0, .incarnation = 1}, 2);
  toy::teacher<float> data(features, 5);
  for (int s = 0; s < 11; ++s) w.step(*a.l, data.next(batch_size));
  // After step 11 both answers are adopted (τ = 1 step after their sends):
  // fragment 0's was taken in after step 9 and its counters hold the work
  // of steps 9 to 11 (the step between its send and its answer is kept);
  // fragment 1's came just now.
  w.ready(*a.l);
  const std::string saved = state_of(*a.l);
  const auto theta = params_of(*a.model);
  const std::uint64_t rev0 = a.l->revision(0), rev1 = a.l->revision(1);
  BOOST_TEST_REQUIRE(rev0 == 2u);
  BOOST_TEST_REQUIRE(rev1 == 3u);
  a.l.reset();  // crashes

  // Meanwhile another learner moves fragment 1 (it is due after its step 2).
  unit c(w, 1, {.id = 1, .incarnation = 1}, 3);
  toy::teacher<float> other(features, 6);
  w.step(*c.l, other.next(batch_size));
  w.step(*c.l, other.next(batch_size));
  w.serve();
  BOOST_TEST_REQUIRE(w.sync.revision(0) == rev0);
  BOOST_TEST_REQUIRE(w.sync.revision(1) > rev1);

  unit b(w, 7, {.id = 0, .incarnation = 2}, 99);
  std::istringstream in(saved);
  b.l->load(in);
  w.ready(*b.l);
  BOOST_TEST(b.l->metrics().fragments_resumed == 1u);
  BOOST_TEST(b.l->revision(0) == rev0);
  BOOST_TEST(b.l->revision(1) == w.sync.revision(1));
  const auto plan = fragment_plan::balanced(w.initial.layout(), 2);
  const auto now_theta = params_of(*b.model);
  BOOST_TEST(same_bits(fragment_of(plan, 0, now_theta), fragment_of(plan, 0, theta)));                // kept
  BOOST_TEST(same_bits(fragment_of(plan, 1, now_theta), fragment_of(plan, 1, w.sync.parameters())));  // global
  BOOST_TEST(!same_bits(fragment_of(plan, 1, now_theta), fragment_of(plan, 1, theta)));

  // Its next contribution of fragment 0, after step 12, carries steps 9 to
  // 12: three before the crash, one after.
  w.contributions.clear();
  w.step(*b.l, data.next(batch_size));
  BOOST_TEST_REQUIRE(b.l->local_step() == 12u);
  const message_header* sent = nullptr;
  for (const auto& h : w.contributions)
    if (h.learner == 0 && h.fragment == 0) sent = &h;
  BOOST_TEST_REQUIRE(sent != nullptr);
  BOOST_TEST(sent->incarnation == 2u);
  BOOST_TEST(sent->base_revision == rev0);
  BOOST_TEST(sent->steps == 4u);
  BOOST_TEST(sent->tokens == 4u * batch_size);
}

BOOST_AUTO_TEST_CASE(a_restored_learner_sends_its_error_feedback_residual_as_if_it_had_not_stopped) {
  // int4 in blocks of 2 values rounds coarsely: every send leaves a residual.
  const training_config training{
      .fragments = 2, .sync_period = 4, .overlap = 1, .codecs = {.contributions = codec_id::int4, .block = 2}};
  world w(training);
  unit a(w, 0, {.id = 0, .incarnation = 1, .error_feedback = true}, 2);
  toy::teacher<float> data(features, 5);
  for (int s = 0; s < 11; ++s) w.step(*a.l, data.next(batch_size));
  w.ready(*a.l);  // nothing in flight: both fragments resumable
  const std::string saved = state_of(*a.l);

  // The state holds a residual for each fragment, and not a zero one.
  const auto plan = fragment_plan::balanced(w.initial.layout(), 2);
  {
    std::istringstream in(saved);
    const auto state = read_learner_state<float>(in, w.initial.layout(), 0);
    BOOST_TEST_REQUIRE(state.fragments.size() == 2u);
    for (std::size_t p = 0; p < 2; ++p) {
      BOOST_TEST_REQUIRE(state.fragments[p].residual.size() == plan[p].size());
      BOOST_TEST(std::any_of(state.fragments[p].residual.begin(), state.fragments[p].residual.end(),
                             [](float e) { return e != 0.0f; }));
    }
  }

  // Step 12 on batch x, after which fragment 0 is due: the encoded outer
  // gradient `l` sends, which never reaches the syncer (lost in a crash).
  const auto x = data.next(batch_size);
  const auto next_send = [&](learner_type& l) {
    l.train_step(x, w.now);
    std::vector<std::byte> sent;
    while (auto e = w.syncer_end.try_receive())
      if (e->msg.header.kind == message_kind::contribution && e->msg.header.fragment == 0) {
        const auto bytes = e->msg.payload.bytes();
        sent.assign(bytes.begin(), bytes.end());
      }
    return sent;
  };
  const auto original = next_send(*a.l);
  BOOST_TEST_REQUIRE(!original.empty());
  a.l.reset();

  // Restored from the state: the same bytes, the residual included.
  unit b(w, 7, {.id = 0, .incarnation = 2, .error_feedback = true}, 99);
  std::istringstream in(saved);
  b.l->load(in);
  w.ready(*b.l);
  BOOST_TEST_REQUIRE(b.l->metrics().fragments_resumed == 2u);
  BOOST_TEST(next_send(*b.l) == original);
  b.l.reset();

  // Restored from the same state with its residuals dropped, the same step
  // sends other bytes: the comparison above could fail.
  std::ostringstream without;
  {
    std::istringstream state_in(saved);
    auto state = read_learner_state<float>(state_in, w.initial.layout(), 0);
    for (auto& f : state.fragments) f.residual.clear();
    write_learner_state(without, state, w.initial.layout());
  }
  unit c(w, 8, {.id = 0, .incarnation = 3, .error_feedback = true}, 99);
  std::istringstream in_without(std::move(without).str());
  c.l->load(in_without);
  w.ready(*c.l);
  BOOST_TEST_REQUIRE(c.l->metrics().fragments_resumed == 2u);
  const auto forgetful = next_send(*c.l);
  BOOST_TEST_REQUIRE(!forgetful.empty());
  BOOST_TEST(forgetful != original);
}

BOOST_AUTO_TEST_CASE(lock_step_resumes_in_phase_or_starts_afresh_when_the_round_moved) {
  const training_config lock_step{.fragments = 1, .sync_period = 4, .overlap = 0, .lock_step = true};
  toy::teacher<float> data(features, 5);
  std::string saved;
  {
    world w(lock_step);
    unit a(w, 0, {.id = 0, .incarnation = 1}, 2);
    for (int s = 0; s < 6; ++s) w.step(*a.l, data.next(batch_size));
    w.ready(*a.l);
    BOOST_TEST_REQUIRE(a.l->revision(0) == 1u);  // round 1 merged after step 4
    saved = state_of(*a.l);

    // The round has not moved: resumed at step 6, in phase; the next send
    // (after step 8) carries steps 5 to 8.
    unit b(w, 7, {.id = 0, .incarnation = 2}, 99);
    std::istringstream in(saved);
    b.l->load(in);
    w.ready(*b.l);
    BOOST_TEST(b.l->local_step() == 6u);
    BOOST_TEST(b.l->metrics().fragments_resumed == 1u);
    w.contributions.clear();
    w.step(*b.l, data.next(batch_size));
    w.step(*b.l, data.next(batch_size));
    BOOST_TEST_REQUIRE(w.contributions.size() == 1u);
    BOOST_TEST(w.contributions[0].steps == 4u);
    BOOST_TEST(w.contributions[0].revision == 8u);
  }
  {
    // The round moved (another learner completed round 2): the loaded
    // learner starts in phase with the run, at 2 × H, from the global state.
    world w(lock_step);
    unit c(w, 1, {.id = 1, .incarnation = 1}, 3);
    for (int s = 0; s < 8; ++s) w.step(*c.l, data.next(batch_size));
    w.serve();
    BOOST_TEST_REQUIRE(w.sync.revision(0) == 2u);
    unit b(w, 7, {.id = 0, .incarnation = 2}, 99);
    std::istringstream in(saved);
    b.l->load(in);
    BOOST_TEST(b.l->local_step() == 6u);
    w.ready(*b.l);
    BOOST_TEST(b.l->local_step() == 8u);
    BOOST_TEST(b.l->metrics().fragments_resumed == 0u);
    BOOST_TEST(same_bits(params_of(*b.model), w.sync.parameters()));
  }
}

BOOST_AUTO_TEST_CASE(a_corrupt_or_foreign_state_is_refused_and_changes_nothing) {
  world w(training_config{.fragments = 1, .sync_period = 2, .overlap = 0});
  unit a(w, 0, {.id = 0, .incarnation = 1}, 2);
  toy::teacher<float> data(features, 5);
  for (int s = 0; s < 3; ++s) w.step(*a.l, data.next(batch_size));
  w.ready(*a.l);
  const std::string saved = state_of(*a.l);
  // The envelope, read independently: "LRNR", version 2, the body's length,
  // the body, its CRC-32C.
  BOOST_TEST_REQUIRE(saved.size() > 24u);
  BOOST_TEST(saved.substr(0, 4) == "LRNR");
  std::uint32_t version = 0;
  std::uint64_t length = 0;
  std::memcpy(&version, saved.data() + 4, 4);
  std::memcpy(&length, saved.data() + 8, 8);
  BOOST_TEST(version == 2u);
  BOOST_TEST(length + 4 + 4 + 8 + 4 == saved.size());
  {
    std::string older = saved;  // version 1 had no residuals: refused, not misread
    const std::uint32_t one = 1;
    std::memcpy(older.data() + 4, &one, 4);
    std::istringstream in(older);
    BOOST_CHECK_THROW((void)read_learner_state<float>(in, w.initial.layout(), 0), corrupt_state);
  }

  // The target: a learner with a state of its own (moments of one step).
  model_type model(features, 42);
  auto busy = adamw();
  model.compute_gradients(data.next(batch_size));
  busy.step(model.parameters(), model.gradients());
  learner_type target(model, w.hub.attach(7), {.id = 0, .incarnation = 2}, busy);
  const auto theta = params_of(model);
  const std::string moments = bytes_of(target.inner());
  auto unchanged = [&] {
    return same_bits(params_of(model), theta) && bytes_of(target.inner()) == moments && target.local_step() == 0u &&
           target.metrics().steps == 0u && target.metrics().tokens == 0u;
  };
  auto refused = [&](const std::string& state) {
    std::istringstream in(state);
    try {
      target.load(in);
    } catch (const corrupt_state&) {
      return unchanged();
    }
    return false;
  };

  std::size_t truncations = 0, flips = 0;
  for (std::size_t n = 0; n < saved.size(); ++n) truncations += refused(saved.substr(0, n));
  BOOST_TEST(truncations == saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    std::string bad = saved;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    flips += refused(bad);
  }
  BOOST_TEST(flips == saved.size());

  // Another learner's state, and one of another model.
  {
    model_type m(features, 42);
    learner_type other(m, w.hub.attach(8), {.id = 1, .incarnation = 2}, adamw());
    std::istringstream in(saved);
    BOOST_CHECK_THROW(other.load(in), corrupt_state);
    model_type untouched(features, 42);
    BOOST_TEST(same_bits(params_of(m), params_of(untouched)));
  }
  {
    model_type m(features + 1, 42);
    learner_type other(m, w.hub.attach(9), {.id = 0, .incarnation = 2}, adamw());
    std::istringstream in(saved);
    BOOST_CHECK_THROW(other.load(in), corrupt_state);
  }
  // A state of the same or a later incarnation: the syncer has seen it.
  {
    model_type m(features, 42);
    learner_type same(m, w.hub.attach(10), {.id = 0, .incarnation = 1}, adamw());
    std::istringstream in(saved);
    BOOST_CHECK_THROW(same.load(in), std::invalid_argument);
    BOOST_TEST(same.local_step() == 0u);
  }
  // After all that, the intact state still loads.
  std::istringstream in(saved);
  target.load(in);
  BOOST_TEST(target.local_step() == 3u);
  BOOST_TEST(bytes_of(target.inner()) == bytes_of(a.l->inner()));
}

BOOST_AUTO_TEST_CASE(load_after_joining_throws) {
  world w;
  unit a(w, 0, {.id = 0, .incarnation = 1}, 2);
  toy::teacher<float> data(features, 5);
  w.step(*a.l, data.next(batch_size));
  const std::string saved = state_of(*a.l);
  unit b(w, 7, {.id = 0, .incarnation = 2}, 3);
  w.ready(*b.l);
  const auto theta = params_of(*b.model);
  std::istringstream in(saved);
  BOOST_CHECK_THROW(b.l->load(in), std::logic_error);
  BOOST_TEST(same_bits(params_of(*b.model), theta));
  BOOST_TEST(b.l->local_step() == 0u);
}

BOOST_AUTO_TEST_CASE(checkpoints_in_a_store_come_back_newest_intact_first) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("diloco_learner_checkpoint_" + std::to_string(std::random_device{}()));
  std::filesystem::remove_all(dir);
  world w;
  unit a(w, 0, {.id = 0, .incarnation = 1}, 2);
  toy::teacher<float> data(features, 5);
  checkpoint_store store(dir);
  w.step(*a.l, data.next(batch_size));
  const auto first = save_learner_checkpoint(*a.l, store);
  w.step(*a.l, data.next(batch_size));
  const auto second = save_learner_checkpoint(*a.l, store);
  BOOST_TEST(second == first + 1);
  {
    unit b(w, 7, {.id = 0, .incarnation = 2}, 3);
    BOOST_TEST((load_latest_learner_checkpoint(*b.l, store) == std::optional<std::uint64_t>(second)));
    BOOST_TEST(b.l->local_step() == 2u);
  }
  // The newest file torn: the one before it is taken.
  std::filesystem::path newest;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (newest.empty() || e.path() > newest) newest = e.path();
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) - 3);
  unit c(w, 8, {.id = 0, .incarnation = 3}, 3);
  std::vector<std::string> skipped;
  BOOST_TEST((load_latest_learner_checkpoint(*c.l, store, &skipped) == std::optional<std::uint64_t>(first)));
  BOOST_TEST(skipped.size() == 1u);
  BOOST_TEST(c.l->local_step() == 1u);
  // An empty store: nothing to load, the learner starts fresh.
  std::filesystem::remove_all(dir);
  checkpoint_store empty(dir);
  unit d(w, 9, {.id = 0, .incarnation = 4}, 3);
  BOOST_TEST(!load_latest_learner_checkpoint(*d.l, empty).has_value());
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_learner_checkpoint_test
