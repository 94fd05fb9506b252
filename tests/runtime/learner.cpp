// The learner driven step by step, with the test playing the syncer: joining,
// the staggered schedule, outer gradients, the τ-step hold on answers, the
// adoption rules (rebase, lazy, overwrite and mixing) with parameters worked
// out by hand, lock-step waits and the final flush.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>

namespace runtime_learner_test {

using namespace std::chrono_literals;
using namespace diloco;

/// Every gradient is 1, so inner SGD with learning rate 0.5 moves every
/// parameter by −0.5 per step; each step counts 8 tokens.
struct constant_gradient_model {
  using scalar_type = double;
  using batch_type = int;
  parameter_layout layout_;
  std::vector<double> params = std::vector<double>(8, 0.0);
  std::vector<double> grads = std::vector<double>(8, 1.0);
  double loss = 0.0;  ///< what the next step reports

  constant_gradient_model() {
    layout_.add("a", 4);
    layout_.add("b", 4);
  }
  const parameter_layout& layout() const { return layout_; }
  std::span<double> parameters() { return params; }
  std::span<const double> gradients() const { return grads; }
  step_stats compute_gradients(const int&) { return {loss, 8}; }
};

using test_learner = learner<constant_gradient_model, inner::sgd<double>, inproc::endpoint>;

/// The learner with the default adoption rule (`rebase`), or another.
struct fixture {
  inproc::hub hub;
  inproc::endpoint& syncer_end = hub.attach(syncer_peer);
  inproc::endpoint& learner_end = hub.attach(0);
  constant_gradient_model model;
  test_learner l;
  time_point now{};

  explicit fixture(adoption_rule rule = learner_options{}.adopt, std::chrono::nanoseconds answer_timeout = 10s)
      : l{model, learner_end, learner_options{.id = 0, .answer_timeout = answer_timeout, .adopt = rule},
          inner::sgd<double>({.learning_rate = 0.5})} {}

  std::vector<message> received() {
    std::vector<message> got;
    while (auto e = syncer_end.try_receive()) got.push_back(std::move(e->msg));
    return got;
  }

  void send(message m) { BOOST_TEST_REQUIRE(!syncer_end.try_send(0, m)); }

  /// The blocking `finish()` on a thread, with the test answering its leave
  /// as the syncer does: returns everything the learner sent, in order.
  std::vector<message> finish_with_the_leave_answered() {
    std::thread finishing([this] { l.finish(); });
    std::vector<message> got;
    // Bounded: the learner stops waiting for answers after answer_timeout.
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (got.empty() || got.back().header.kind != message_kind::leave) {
      if (std::chrono::steady_clock::now() > give_up) break;
      if (auto e = syncer_end.receive_for(100ms)) got.push_back(std::move(e->msg));
    }
    if (!got.empty() && got.back().header.kind == message_kind::leave) {
      message ack;
      ack.header.kind = message_kind::ack;
      ack.header.learner = 0;
      ack.header.incarnation = 1;
      ack.header.answers = got.back().header.sequence;
      send(std::move(ack));
    }
    finishing.join();
    return got;
  }

  message welcome(std::uint32_t fragments, std::uint32_t period, std::uint32_t overlap, double mixing = 0.0,
                  bool lock_step = false) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::welcome;
    h.learner = 0;
    h.incarnation = 1;
    h.layout = model.layout().fingerprint();
    h.element_count = 8;
    h.fragment_count = fragments;
    h.sync_period = period;
    h.overlap = overlap;
    h.mixing = mixing;
    h.lock_step = lock_step ? 1 : 0;
    return m;
  }

  message update(std::uint32_t fragment, std::uint64_t revision, std::vector<double> values,
                 std::uint64_t answers = 0) {
    message m;
    auto& h = m.header;
    h.kind = message_kind::update;
    h.codec = codec_id::f64;
    h.learner = 0;
    h.incarnation = 1;
    h.fragment = fragment;
    h.revision = revision;
    h.answers = answers;
    h.element_count = values.size();
    m.payload = byte_buffer(values.size() * sizeof(double));
    std::copy(values.begin(), values.end(), m.payload.as<double>().begin());
    return m;
  }

  /// Joins with P fragments of 4 elements, all starting at `start`.
  void join(std::uint32_t fragments, std::uint32_t period, std::uint32_t overlap, double mixing = 0.0,
            bool lock_step = false, double start = 10.0) {
    BOOST_TEST(!l.poll(now));
    const auto sent = received();
    BOOST_TEST_REQUIRE(sent.size() == 1u);
    BOOST_TEST(int(sent[0].header.kind) == int(message_kind::join));
    BOOST_TEST(sent[0].header.layout == model.layout().fingerprint());
    send(welcome(fragments, period, overlap, mixing, lock_step));
    BOOST_TEST(!l.poll(now));  // welcomed, but no state yet
    for (std::uint32_t p = 0; p < fragments; ++p) send(update(p, 0, std::vector<double>(8 / fragments, start)));
    BOOST_TEST(l.poll(now));
    BOOST_TEST(l.joined());
  }

  void step() {
    BOOST_TEST_REQUIRE(l.poll(now));
    l.train_step(0, now);
    now += 1s;
  }

  std::vector<message> contributions() {
    std::vector<message> got;
    for (auto& m : received())
      if (m.header.kind == message_kind::contribution) got.push_back(std::move(m));
    return got;
  }
};

std::vector<double> values(const message& m) {
  const auto v = m.payload.as<const double>();
  return {v.begin(), v.end()};
}

/// Today's overwrite rule, kept to compare against: adoption resets θ_p.
struct overwrite_fixture : fixture {
  overwrite_fixture() : fixture(adoption_rule::overwrite) {}
};
struct lazy_fixture : fixture {
  lazy_fixture() : fixture(adoption_rule::lazy) {}
};

BOOST_AUTO_TEST_SUITE(runtime_learner)

BOOST_FIXTURE_TEST_CASE(joins_and_adopts_the_global_state, fixture) {
  join(2, 4, 1);
  BOOST_TEST(l.plan().count() == 2u);
  BOOST_TEST(l.config().sync_period == 4u);
  BOOST_TEST(model.params == std::vector<double>(8, 10.0), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(fragments_leave_on_the_staggered_schedule_with_their_outer_gradient, fixture) {
  join(2, 4, 1);  // offsets 0 and 2: fragment 1 after steps 2, 6, ...; fragment 0 after 4, 8, ...
  step();
  BOOST_TEST(contributions().empty());
  step();
  auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.fragment == 1u);
  BOOST_TEST(sent[0].header.base_revision == 0u);
  BOOST_TEST(sent[0].header.steps == 2u);
  BOOST_TEST(sent[0].header.tokens == 16u);
  BOOST_TEST(int(sent[0].header.codec) == int(codec_id::f64));
  // Δ = Θ(base) − θ = 10 − (10 − 2 · 0.5)
  BOOST_TEST(values(sent[0]) == std::vector<double>(4, 1.0), boost::test_tools::per_element());
  step();
  step();
  sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.fragment == 0u);
  BOOST_TEST(sent[0].header.steps == 4u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(4, 2.0), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_heartbeat_carries_the_mean_loss_of_the_steps_since_the_last_one, fixture) {
  join(1, 100, 0);
  auto heartbeats = [this] {
    std::vector<message> got;
    for (auto& m : received())
      if (m.header.kind == message_kind::heartbeat) got.push_back(std::move(m));
    return got;
  };
  auto first = heartbeats();  // sent on joining, before any step: no loss
  BOOST_TEST_REQUIRE(first.size() == 1u);
  BOOST_TEST(!first[0].header.loss.has_value());
  for (const double loss : {1.0, 2.0, 6.0}) {
    model.loss = loss;
    BOOST_TEST_REQUIRE(l.poll(now));
    l.train_step(0, now);
  }
  BOOST_TEST(heartbeats().empty());  // within the heartbeat interval
  now += 1s;
  BOOST_TEST(l.poll(now));
  auto second = heartbeats();
  BOOST_TEST_REQUIRE(second.size() == 1u);
  BOOST_TEST_REQUIRE(second[0].header.loss.has_value());
  BOOST_TEST(*second[0].header.loss == 3.0);  // (1 + 2 + 6) / 3
  now += 1s;
  BOOST_TEST(l.poll(now));  // no step since: a heartbeat without a loss
  auto third = heartbeats();
  BOOST_TEST_REQUIRE(third.size() == 1u);
  BOOST_TEST(!third[0].header.loss.has_value());
}

BOOST_FIXTURE_TEST_CASE(overwrite_adopts_an_answer_tau_steps_after_its_send, overwrite_fixture) {
  join(2, 4, 2);
  step();
  step();  // fragment 1 sent after step 2
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  send(update(1, 1, std::vector<double>(4, 20.0), sent[0].header.sequence));
  step();  // step 3: the answer is here but τ = 2 steps have not passed
  step();  // step 4: still held at its start
  BOOST_TEST(l.revision(1) == 0u);
  BOOST_TEST(model.params[4] == 8.0);  // 10 − 4 · 0.5
  BOOST_TEST(l.poll(now));             // the boundary after step 4: used now
  BOOST_TEST(l.revision(1) == 1u);
  BOOST_TEST(model.params[4] == 20.0);
  BOOST_TEST(l.metrics().steps_overwritten == 2u);  // steps 3 and 4 of fragment 1, never sent
  contributions();                                  // fragment 0, due after step 4
  step();
  step();  // fragment 1 again after step 6: 2 steps since adoption, against revision 1
  const auto next = contributions();
  BOOST_TEST_REQUIRE(next.size() == 1u);
  BOOST_TEST(next[0].header.fragment == 1u);
  BOOST_TEST(next[0].header.base_revision == 1u);
  BOOST_TEST(next[0].header.steps == 2u);
  BOOST_TEST(values(next[0]) == std::vector<double>(4, 1.0), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(overwrite_adopts_other_updates_at_the_next_boundary_and_ignores_old_ones, overwrite_fixture) {
  join(2, 4, 2);
  step();
  send(update(0, 3, std::vector<double>(4, 30.0)));
  step();
  BOOST_TEST(l.revision(0) == 3u);
  BOOST_TEST(model.params[0] == 29.5);
  send(update(0, 2, std::vector<double>(4, -1.0)));
  step();
  BOOST_TEST(l.revision(0) == 3u);
  BOOST_TEST(model.params[0] == 29.0);
  BOOST_TEST(l.metrics().updates_ignored == 1u);
}

BOOST_FIXTURE_TEST_CASE(what_a_replaced_syncer_sends_is_dropped_unread, overwrite_fixture) {
  join(2, 4, 2);  // a syncer without leadership: epoch 0
  step();
  // A standby took over with epoch 12: its revisions are taken in.
  auto taken = update(0, 3, std::vector<double>(4, 30.0));
  taken.header.epoch = 12;
  send(std::move(taken));
  step();
  BOOST_TEST(l.revision(0) == 3u);
  BOOST_TEST(model.params[0] == 29.5);
  // The old primary, paused past its lease, wakes and publishes revision 4
  // under epoch 5: dropped, whatever it says; so is its ack.
  auto stale = update(0, 4, std::vector<double>(4, -1.0));
  stale.header.epoch = 5;
  send(std::move(stale));
  const auto ack_of_epoch = [](std::uint64_t epoch) {
    message ack;
    ack.header.kind = message_kind::ack;
    ack.header.learner = 0;
    ack.header.incarnation = 1;
    ack.header.epoch = epoch;
    return ack;
  };
  send(ack_of_epoch(5));
  step();
  BOOST_TEST(l.revision(0) == 3u);
  BOOST_TEST(model.params[0] == 29.0);
  BOOST_TEST(l.metrics().stale_epochs == 2u);
  BOOST_TEST(l.metrics().updates_ignored == 0u);
  BOOST_TEST(l.metrics().contributions_acked == 0u);
  // An update of the old leader received before the new one spoke, still
  // waiting for its step boundary: dropped once epoch 13 is heard.
  auto waiting = update(0, 4, std::vector<double>(4, -2.0));
  waiting.header.epoch = 12;
  send(std::move(waiting));
  send(ack_of_epoch(13));
  step();
  BOOST_TEST(l.revision(0) == 3u);
  BOOST_TEST(l.metrics().stale_epochs == 3u);
  // The new leader's next revision, same epoch: taken (within τ steps of
  // the send of fragment 0 due meanwhile).
  auto next = update(0, 4, std::vector<double>(4, 40.0));
  next.header.epoch = 13;
  send(std::move(next));
  for (int k = 0; k < 3; ++k) step();
  BOOST_TEST(l.revision(0) == 4u);
  BOOST_TEST(l.metrics().stale_epochs == 3u);
}

BOOST_AUTO_TEST_CASE(epochs_are_fenced_per_syncer_shard) {
  detail::epoch_fence fence;
  const auto header = [](message_kind kind, std::uint32_t fragment, std::uint64_t epoch, std::uint64_t shards = 0) {
    message_header h;
    h.kind = kind, h.fragment = fragment, h.epoch = epoch, h.steps = shards;
    return h;
  };
  // Before a welcome names S, whose shard a message is cannot be told: a
  // refusal from shard 1 (epoch 9) must not fence shard 0 (epoch 3) off.
  BOOST_TEST(fence.admit(header(message_kind::reject, 0, 9)));
  BOOST_TEST(fence.newest(0) == 0u);
  // Two shards: shard 1 failed over (epoch 9), shard 0 did not (epoch 3).
  BOOST_TEST(fence.admit(header(message_kind::welcome, 1, 9, 2)));
  BOOST_TEST(fence.admit(header(message_kind::welcome, 0, 3, 2)));
  BOOST_TEST(fence.newest(0) == 3u);
  BOOST_TEST(fence.newest(1) == 9u);
  BOOST_TEST(fence.admit(header(message_kind::update, 2, 3)));   // fragment 2: shard 0's
  BOOST_TEST(!fence.admit(header(message_kind::update, 3, 3)));  // fragment 3: shard 1's, older epoch
  BOOST_TEST(!fence.admit(header(message_kind::reject, 1, 8)));
  BOOST_TEST(fence.admit(header(message_kind::ack, 1, 10)));  // shard 1 failed over again
  BOOST_TEST(fence.newest(1) == 10u);
  BOOST_TEST(!fence.admit(header(message_kind::end, 3, 9)));
  BOOST_TEST(!fence.raised());
  BOOST_TEST(fence.admit(header(message_kind::update, 3, 11)));
  BOOST_TEST((fence.raised() == std::optional<std::uint32_t>(1)));
  // A bootstrap's welcome names no shard and carries no epoch: read.
  auto bootstrap = header(message_kind::welcome, 0, 0);
  bootstrap.flags = state_wanted;
  BOOST_TEST(fence.admit(bootstrap));
  BOOST_TEST(fence.newest(0) == 3u);
  // A learner's kinds carry no epoch: nothing to fence.
  BOOST_TEST(fence.admit(header(message_kind::contribution, 1, 0)));
}

BOOST_FIXTURE_TEST_CASE(a_resync_answering_the_latest_send_is_adopted_even_when_older, overwrite_fixture) {
  join(1, 2, 0);
  send(update(0, 5, std::vector<double>(8, 3.0)));
  step();
  step();  // a contribution against revision 5 goes out
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(l.revision(0) == 5u);
  // A late duplicate of the initial state (a resync answering nothing) is ignored.
  auto late = update(0, 0, std::vector<double>(8, 10.0));
  late.header.status = update_status::resync;
  send(std::move(late));
  step();
  BOOST_TEST(l.revision(0) == 5u);
  BOOST_TEST(l.metrics().updates_ignored == 1u);
  // A syncer restored from an older checkpoint refuses the send and answers
  // it with its revision 2: taken, once.
  auto resync = update(0, 2, std::vector<double>(8, 1.0), sent[0].header.sequence);
  resync.header.status = update_status::resync;
  message copy;
  copy.header = resync.header;
  copy.payload = byte_buffer(resync.payload.size());
  std::memcpy(copy.payload.data(), resync.payload.data(), resync.payload.size());
  send(std::move(resync));
  step();
  BOOST_TEST(l.revision(0) == 2u);
  BOOST_TEST(model.params[0] == 0.5);  // 1.0, then one step
  send(std::move(copy));               // its duplicate is not taken again
  step();
  BOOST_TEST(model.params[0] == 0.0);
}

BOOST_FIXTURE_TEST_CASE(mixing_keeps_part_of_the_local_parameters, overwrite_fixture) {
  join(1, 4, 0, 0.25);  // the first state overwrites the local initialization (0)
  BOOST_TEST(model.params[3] == 10.0);
  step();  // θ = 9.5
  send(update(0, 1, std::vector<double>(8, 1.5)));
  step();  // adopt 0.25 · 9.5 + 0.75 · 1.5 = 3.5, then step: 3.0
  BOOST_TEST(model.params[3] == 3.0);
  auto resync = update(0, 2, std::vector<double>(8, 7.0));
  resync.header.status = update_status::resync;
  send(std::move(resync));
  BOOST_TEST(l.poll(now));  // a resync overwrites
  BOOST_TEST(model.params[3] == 7.0);
}

// The default rule, worked out by hand. Each step moves θ by −0.5 and counts
// 8 tokens; a fragment's contributions must carry, between them, every step
// the learner took (P per step), and an answer must not apply the work it
// already holds a second time.

BOOST_FIXTURE_TEST_CASE(rebase_keeps_the_steps_between_a_send_and_its_answer, fixture) {
  join(2, 4, 2);  // fragment 1 due after steps 2, 6; fragment 0 after 4, 8
  step();
  step();  // θ = 9: fragment 1 sends Δ = 10 − 9 = 1 (2 steps); its base moves to 9
  auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.steps == 2u);
  send(update(1, 1, std::vector<double>(4, 20.0), sent[0].header.sequence));  // Θ holds that Δ, merged
  step();
  step();           // θ = 8; held for τ = 2 steps, the answer is taken at the next boundary
  contributions();  // fragment 0
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.revision(1) == 1u);
  BOOST_TEST(model.params[4] == 19.0);  // Θ + (θ − base) = 20 + (8 − 9): steps 3 and 4 kept
  BOOST_TEST(l.metrics().steps_overwritten == 0u);
  step();
  step();  // θ = 18: fragment 1 sends 20 − 18 = 2, the work of steps 3 to 6
  sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.fragment == 1u);
  BOOST_TEST(sent[0].header.base_revision == 1u);
  BOOST_TEST(sent[0].header.steps == 4u);
  BOOST_TEST(sent[0].header.tokens == 32u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(4, 2.0), boost::test_tools::per_element());
  // 6 steps, each once per fragment: 2 + 4 of fragment 1, 4 of fragment 0.
  BOOST_TEST(l.metrics().steps_sent == 10u);
}

BOOST_FIXTURE_TEST_CASE(rebase_moves_local_work_onto_another_learners_revision, fixture) {
  join(1, 4, 0);
  step();                                                // θ = 9.5
  send(update(0, 3, std::vector<double>(4 * 2, 30.0)));  // another learner's round
  step();                                                // rebased first: 30 + (9.5 − 10) = 29.5, then the step: 29
  BOOST_TEST(l.revision(0) == 3u);
  BOOST_TEST(model.params[0] == 29.0);
  step();
  step();  // θ = 28: all four steps go out against revision 3
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.base_revision == 3u);
  BOOST_TEST(sent[0].header.steps == 4u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(8, 2.0), boost::test_tools::per_element());
  BOOST_TEST(l.metrics().steps_overwritten == 0u);
}

BOOST_FIXTURE_TEST_CASE(rebase_with_mixing_follows_part_of_the_global_move_and_keeps_every_step, fixture) {
  join(1, 4, 0, 0.5);  // α = 0.5
  step();              // θ = 9.5
  send(update(0, 3, std::vector<double>(8, 30.0)));
  step();  // θ + (1 − α)(Θ − base) = 9.5 + 0.5 · (30 − 10) = 19.5, then the step: 19
  BOOST_TEST(model.params[0] == 19.0);
  step();
  step();  // θ = 18: Δ = 30 − 18 = 12, the 4 steps' work (2) and half the move it did not follow (10)
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.steps == 4u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(8, 12.0), boost::test_tools::per_element());
  BOOST_TEST(l.metrics().steps_overwritten == 0u);
}

BOOST_FIXTURE_TEST_CASE(work_in_flight_is_neither_lost_nor_applied_twice, fixture) {
  join(1, 2, 1);
  step();
  step();  // θ = 9: Δ = 1 sent against revision 0, base ← 9
  const auto first = contributions();
  BOOST_TEST_REQUIRE(first.size() == 1u);
  // Another learner's round, without this learner's Δ: held for τ steps
  // after the send, like the answer (which, newer, will hold both).
  send(update(0, 1, std::vector<double>(8, 5.0)));
  step();  // θ = 8.5
  BOOST_TEST(l.revision(0) == 0u);
  BOOST_TEST(model.params[0] == 8.5);
  // The answer: the syncer merged Δ into revision 2. Only the step taken
  // since the send is added to it; Δ is in Θ already.
  send(update(0, 2, std::vector<double>(8, 4.0), first[0].header.sequence));
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.revision(0) == 2u);
  BOOST_TEST(model.params[0] == 3.5);  // 4 + (8.5 − 9)
  l.train_step(0, now);                // θ = 3, step 4: Δ = 4 − 3 = 1, steps 3 and 4
  const auto second = contributions();
  BOOST_TEST_REQUIRE(second.size() == 1u);
  BOOST_TEST(second[0].header.base_revision == 2u);
  BOOST_TEST(second[0].header.steps == 2u);
  BOOST_TEST(values(second[0]) == std::vector<double>(8, 1.0), boost::test_tools::per_element());
  BOOST_TEST(first[0].header.steps + second[0].header.steps == l.metrics().steps_computed);
}

BOOST_FIXTURE_TEST_CASE(a_fragment_due_while_in_flight_goes_out_after_its_answer, fixture) {
  join(1, 2, 0);
  step();
  step();  // sent after step 2
  const auto first = contributions();
  BOOST_TEST_REQUIRE(first.size() == 1u);
  step();
  step();  // due again after step 4, but the answer has not come: owed
  BOOST_TEST(contributions().empty());
  send(update(0, 1, std::vector<double>(8, 4.0), first[0].header.sequence));
  step();  // answer taken (4 + (8 − 9) = 3), step 5: the owed send goes out with steps 3 to 5
  const auto second = contributions();
  BOOST_TEST_REQUIRE(second.size() == 1u);
  BOOST_TEST(second[0].header.steps == 3u);
  BOOST_TEST(values(second[0]) == std::vector<double>(8, 1.5), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_refused_contribution_counts_as_refused_and_later_work_is_kept, fixture) {
  join(1, 2, 0);
  step();
  step();  // Δ = 1 (2 steps) sent, base ← 9
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  step();  // θ = 8.5
  message reject;
  reject.header.kind = message_kind::reject;
  reject.header.learner = 0;
  reject.header.incarnation = 1;
  reject.header.fragment = 0;
  reject.header.answers = sent[0].header.sequence;
  reject.header.reason = static_cast<std::uint8_t>(reject_reason::stale);
  send(std::move(reject));
  auto resync = update(0, 7, std::vector<double>(8, 2.0), sent[0].header.sequence);
  resync.header.status = update_status::resync;
  send(std::move(resync));
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.metrics().steps_refused == 2u);
  BOOST_TEST(l.revision(0) == 7u);
  BOOST_TEST(model.params[0] == 1.5);  // 2 + (8.5 − 9): step 3 kept
}

BOOST_FIXTURE_TEST_CASE(a_lost_answer_holds_nothing_back_and_is_asked_for_once_a_send_waits, fixture) {
  join(1, 2, 0);
  step();
  step();  // sent at t = 1 s against revision 0
  auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  message ack;  // accepted, but its merged revision is lost on the way
  ack.header.kind = message_kind::ack;
  ack.header.learner = 0;
  ack.header.incarnation = 1;
  ack.header.answers = sent[0].header.sequence;
  send(std::move(ack));
  step();
  step();  // due again after step 4: a second send against revision 0 would be refused as a duplicate
  BOOST_TEST(contributions().empty());
  const auto deadline = l.next_deadline();
  BOOST_TEST_REQUIRE(deadline.has_value());
  BOOST_TEST((*deadline <= now + 7s));  // rejoin_after (10 s) after the send
  now += 7s;
  BOOST_TEST(l.poll(now));
  std::size_t joins = 0;
  for (const auto& m : received()) joins += m.header.kind == message_kind::join;
  BOOST_TEST(joins == 1u);
  auto resync = update(0, 4, std::vector<double>(8, 3.0));  // the current state, in place of the answer
  resync.header.status = update_status::resync;
  send(std::move(resync));
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.revision(0) == 4u);
  BOOST_TEST(model.params[0] == 2.0);  // 3 + (8 − 9): steps 3 and 4 kept
  l.train_step(0, now);                // the owed send: steps 3 to 5
  sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.base_revision == 4u);
  BOOST_TEST(sent[0].header.steps == 3u);
}

/// The default rule, waiting 30 s for an answer before giving it up.
struct patient_fixture : fixture {
  patient_fixture() : fixture(learner_options{}.adopt, 30s) {}

  /// Steps 1–2 sent against revision 0 at t = 1 s (θ 10 → 9), and acked
  /// if `acked`; steps 3–4 owed; the answer does not come, and at t = 11 s
  /// the learner joins again and gets the state still at revision 0.
  /// Returns the send.
  message rejoin_at_the_same_revision(bool acked = true) {
    join(1, 2, 0);
    step();
    step();
    auto sent = contributions();
    BOOST_TEST_REQUIRE(sent.size() == 1u);
    if (acked) {
      message ack;
      ack.header.kind = message_kind::ack;
      ack.header.learner = 0;
      ack.header.incarnation = 1;
      ack.header.fragment = 0;
      ack.header.answers = sent[0].header.sequence;
      send(std::move(ack));
    }
    step();
    step();
    now += 7s;
    BOOST_TEST(l.poll(now));
    std::size_t joins = 0;
    for (const auto& m : received()) joins += m.header.kind == message_kind::join;
    BOOST_TEST(joins == 1u);
    auto state = update(0, 0, std::vector<double>(8, 10.0));  // what a welcome sends: answers nothing
    state.header.status = update_status::resync;
    send(std::move(state));
    BOOST_TEST(l.poll(now));
    return std::move(sent[0]);
  }
};

// A syncer restarted from its journal holds the accepted send in a round
// still open: the state at the send's own base is no answer, and the learner
// waits on rather than send its later work against that base (a duplicate
// there).
BOOST_FIXTURE_TEST_CASE(a_rejoin_state_at_the_base_of_the_send_in_flight_keeps_the_wait, patient_fixture) {
  const message first = rejoin_at_the_same_revision();
  BOOST_TEST(l.revision(0) == 0u);
  BOOST_TEST(model.params[0] == 8.0);  // untouched: steps 1 to 4
  l.train_step(0, now);                // step 5; the send is still owed
  now += 1s;
  BOOST_TEST(contributions().empty());
  BOOST_TEST(l.metrics().rejoins_sent == 1u);  // asked once, not again
  // The round closes: the merged revision answers the send (Δ = 1 merged).
  send(update(0, 1, std::vector<double>(8, 9.0), first.header.sequence));
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.revision(0) == 1u);
  BOOST_TEST(model.params[0] == 7.5);  // 9 + (7.5 − 9): steps 3 to 5 kept
  l.train_step(0, now);                // step 6: the owed send, steps 3 to 6
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.base_revision == 1u);
  BOOST_TEST(sent[0].header.steps == 4u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(8, 2.0), boost::test_tools::per_element());
  BOOST_TEST(l.metrics().answers_timed_out == 0u);
}

// A syncer that lost an accepted send (it kept no journal) never answers it:
// the wait ends at answer_timeout, and the later work goes out against the
// same base.
BOOST_FIXTURE_TEST_CASE(a_send_the_syncer_lost_is_given_up_at_the_answer_timeout, patient_fixture) {
  rejoin_at_the_same_revision();
  now += 19s;  // t = 30 s: 29 s after the send
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.metrics().answers_timed_out == 0u);
  now += 1s;
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.metrics().answers_timed_out == 1u);
  l.train_step(0, now);  // step 5: steps 3 to 5 against revision 0
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.base_revision == 0u);
  BOOST_TEST(sent[0].header.steps == 3u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(8, 1.5), boost::test_tools::per_element());
}

// A send that was never acknowledged may never have arrived: the state takes
// its place at once (rebased: steps 3 and 4 kept, the send's work dropped),
// and the later work goes out against revision 0.
BOOST_FIXTURE_TEST_CASE(a_rejoin_state_replaces_an_unacknowledged_send, patient_fixture) {
  rejoin_at_the_same_revision(false);
  BOOST_TEST(l.revision(0) == 0u);
  BOOST_TEST(model.params[0] == 9.0);  // 10 + (8 − 9)
  l.train_step(0, now);                // step 5: the owed send, steps 3 to 5
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.base_revision == 0u);
  BOOST_TEST(sent[0].header.steps == 3u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(8, 1.5), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(another_learners_revision_is_taken_in_tau_steps_after_a_send_even_without_its_answer, fixture) {
  join(1, 4, 2);
  for (int i = 0; i < 4; ++i) step();  // θ = 8: Δ = 2 sent against revision 0, base ← 8
  contributions();
  send(update(0, 3, std::vector<double>(8, 30.0)));  // without this learner's Δ; the answer is lost
  step();                                            // held: 1 step since the send
  BOOST_TEST(l.revision(0) == 0u);
  step();                   // held: 2 steps
  BOOST_TEST(l.poll(now));  // τ = 2 steps passed: taken in, 30 + (7 − 8)
  BOOST_TEST(l.revision(0) == 3u);
  BOOST_TEST(model.params[0] == 29.0);
  // Its Δ comes back with any later revision that merged it; until then the
  // local model lacks it, and nothing holds the next send back.
  step();
  step();  // step 8: due, against revision 3: steps 5 to 8
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.base_revision == 3u);
  BOOST_TEST(sent[0].header.steps == 4u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(8, 2.0), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(lazy_takes_another_learners_revision_just_before_its_next_send, lazy_fixture) {
  join(1, 4, 0);
  step();  // θ = 9.5
  send(update(0, 3, std::vector<double>(8, 30.0)));
  step();
  step();
  BOOST_TEST(l.revision(0) == 0u);  // waiting in the inbox
  BOOST_TEST(model.params[0] == 8.5);
  step();  // θ = 8; before the send: 30 + (8 − 10) = 28, Δ = 2 against revision 3
  BOOST_TEST(l.revision(0) == 3u);
  BOOST_TEST(model.params[0] == 28.0);
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.base_revision == 3u);
  BOOST_TEST(sent[0].header.steps == 4u);
  BOOST_TEST(values(sent[0]) == std::vector<double>(8, 2.0), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(overwrite_counts_the_steps_it_throws_away, overwrite_fixture) {
  join(1, 4, 0);
  step();
  step();  // θ = 9
  send(update(0, 3, std::vector<double>(8, 30.0)));
  BOOST_TEST(l.poll(now));
  BOOST_TEST(model.params[0] == 30.0);
  BOOST_TEST(l.metrics().steps_overwritten == 2u);
}

BOOST_FIXTURE_TEST_CASE(finish_waits_for_the_answer_in_flight_then_sends_the_rest, fixture) {
  join(1, 4, 3);
  for (int i = 0; i < 5; ++i) step();  // sent after step 4 (Δ = 2), θ = 7.5
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  // A non-blocking finish now would have to leave step 5 behind; the
  // blocking one takes the answer (without waiting τ more steps) first.
  send(update(0, 1, std::vector<double>(8, 6.0), sent[0].header.sequence));
  // On the steady clock, far past this test's clock: it also heartbeats and joins again.
  std::vector<message> rest;
  for (auto& m : finish_with_the_leave_answered())
    if (m.header.kind == message_kind::contribution || m.header.kind == message_kind::leave)
      rest.push_back(std::move(m));
  BOOST_TEST_REQUIRE(rest.size() == 2u);
  BOOST_TEST(int(rest[0].header.kind) == int(message_kind::contribution));
  BOOST_TEST((rest[0].header.flags & final_contribution) != 0);
  BOOST_TEST(rest[0].header.base_revision == 1u);
  BOOST_TEST(rest[0].header.steps == 1u);
  BOOST_TEST(values(rest[0]) == std::vector<double>(8, 0.5), boost::test_tools::per_element());
  BOOST_TEST(int(rest[1].header.kind) == int(message_kind::leave));
  BOOST_TEST(rest[1].header.steps == 5u);  // the steps this incarnation computed
  BOOST_TEST(l.metrics().steps_unsent == 0u);
  BOOST_TEST(l.leave_answered());
}

BOOST_FIXTURE_TEST_CASE(a_blocking_finish_returns_only_once_its_leave_is_answered, fixture) {
  join(1, 4, 0);
  step();
  // Were finish() to return before the answer, nothing would read the ack.
  const auto sent = finish_with_the_leave_answered();
  BOOST_TEST_REQUIRE(!sent.empty());
  BOOST_TEST(int(sent.back().header.kind) == int(message_kind::leave));
  BOOST_TEST(l.leave_answered());
  BOOST_TEST(l.metrics().contributions_acked == 0u);  // the leave's ack is not a contribution's
}

BOOST_FIXTURE_TEST_CASE(a_finish_that_cannot_wait_counts_the_work_it_leaves_behind, fixture) {
  join(1, 4, 3);
  for (int i = 0; i < 5; ++i) step();  // in flight since step 4
  contributions();
  l.finish(now);
  std::size_t final_contributions = 0;
  for (const auto& m : received()) final_contributions += m.header.kind == message_kind::contribution;
  BOOST_TEST(final_contributions == 0u);
  BOOST_TEST(l.metrics().steps_unsent == 1u);
}

BOOST_FIXTURE_TEST_CASE(lock_step_waits_for_the_answer_and_gives_up_after_the_timeout, fixture) {
  join(1, 2, 0, 0.0, true);
  step();
  step();  // sent after step 2; τ = 0: the next step needs the answer
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(!l.poll(now));
  send(update(0, 1, std::vector<double>(8, 4.0), sent[0].header.sequence));
  BOOST_TEST(l.poll(now));
  BOOST_TEST(model.params[0] == 4.0);
  step();
  step();
  BOOST_TEST(!l.poll(now));
  const auto deadline = l.next_deadline();
  BOOST_TEST_REQUIRE(deadline.has_value());
  BOOST_TEST((*deadline <= now + 10s));
  now += 10s;  // answer_timeout
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.metrics().answers_timed_out == 1u);
}

BOOST_FIXTURE_TEST_CASE(joining_a_lock_step_run_under_way_starts_in_phase, fixture) {
  BOOST_TEST(!l.poll(now));
  received();
  send(welcome(1, 4, 0, 0.0, true));
  send(update(0, 3, std::vector<double>(8, 10.0)));  // three rounds of H = 4 done
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.local_step() == 12u);
  for (int i = 0; i < 3; ++i) step();
  BOOST_TEST(contributions().empty());
  step();  // step 16: the others' fourth round
  const auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  BOOST_TEST(sent[0].header.base_revision == 3u);
  BOOST_TEST(sent[0].header.steps == 4u);
}

BOOST_FIXTURE_TEST_CASE(finish_sends_unsent_work_then_leaves, fixture) {
  join(1, 4, 0);
  step();
  step();
  step();
  l.finish(now);
  const auto sent = received();
  std::vector<message_kind> kinds;
  for (const auto& m : sent)
    if (m.header.kind != message_kind::heartbeat) kinds.push_back(m.header.kind);
  BOOST_TEST_REQUIRE(kinds.size() == 2u);
  BOOST_TEST(int(kinds[0]) == int(message_kind::contribution));
  BOOST_TEST(int(kinds[1]) == int(message_kind::leave));
  for (const auto& m : sent)
    if (m.header.kind == message_kind::contribution) {
      BOOST_TEST(m.header.steps == 3u);
      BOOST_TEST((m.header.flags & final_contribution) != 0);
      BOOST_TEST(values(m) == std::vector<double>(8, 1.5), boost::test_tools::per_element());
    }
}

BOOST_FIXTURE_TEST_CASE(a_welcome_for_another_model_stops_the_learner, fixture) {
  BOOST_TEST(!l.poll(now));
  received();
  auto w = welcome(1, 4, 0);
  w.header.layout ^= 0xff;
  send(std::move(w));
  BOOST_TEST(!l.poll(now));
  BOOST_TEST(l.error() == make_error_code(errc::layout_mismatch));
  BOOST_TEST(!l.next_deadline().has_value());
}

BOOST_FIXTURE_TEST_CASE(an_unusable_configuration_stops_the_learner, fixture) {
  BOOST_TEST(!l.poll(now));
  send(welcome(1, 4, 4));  // τ must be below H
  BOOST_TEST(!l.poll(now));
  BOOST_TEST(l.error() == make_error_code(errc::bad_config));
}

// The verdict timer alone (the overwrite rule waits for no answer).
BOOST_FIXTURE_TEST_CASE(a_contribution_without_a_verdict_makes_the_learner_join_again, overwrite_fixture) {
  join(1, 2, 0);
  step();
  step();  // a contribution goes out at t = 1 s; no ack comes back (the syncer restarted, say)
  BOOST_TEST(contributions().size() == 1u);
  now += 8s;  // t = 10 s: 9 s without a verdict
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.metrics().rejoins_sent == 0u);
  now += 2s;  // t = 12 s: past rejoin_after = 10 s
  BOOST_TEST(l.poll(now));
  std::size_t joins = 0;
  for (const auto& m : received()) joins += m.header.kind == message_kind::join;
  BOOST_TEST(joins == 1u);
  BOOST_TEST(l.metrics().rejoins_sent == 1u);
  // An ack settles it: no further join.
  step();
  step();
  auto sent = contributions();
  BOOST_TEST_REQUIRE(sent.size() == 1u);
  message ack;
  ack.header.kind = message_kind::ack;
  ack.header.learner = 0;
  ack.header.incarnation = 1;
  ack.header.answers = sent[0].header.sequence;
  send(std::move(ack));
  now += 20s;
  BOOST_TEST(l.poll(now));
  BOOST_TEST(l.metrics().rejoins_sent == 1u);
}

BOOST_FIXTURE_TEST_CASE(a_syncer_with_another_precision_stops_the_learner, fixture) {
  BOOST_TEST(!l.poll(now));
  auto w = welcome(1, 4, 0);
  w.header.codec = codec_id::f32;  // this learner's model is double
  send(std::move(w));
  BOOST_TEST(!l.poll(now));
  BOOST_TEST(l.error() == make_error_code(errc::bad_config));
}

BOOST_AUTO_TEST_CASE(contradictory_learner_timeouts_are_refused) {
  inproc::hub hub;
  auto& end = hub.attach(0);
  constant_gradient_model model;
  auto make = [&](learner_options o) { test_learner l(model, end, o); };
  BOOST_CHECK_THROW(make(learner_options{.answer_timeout = 5s}), std::invalid_argument);  // < rejoin_after
  BOOST_CHECK_THROW(make(learner_options{.rejoin_after = 1s}), std::invalid_argument);    // < 2 heartbeats
  BOOST_CHECK_NO_THROW(make(learner_options{}.with(timeouts::from(500ms))));
}

BOOST_FIXTURE_TEST_CASE(join_is_retried_until_welcomed, fixture) {
  BOOST_TEST(!l.poll(now));
  now += 500ms;
  BOOST_TEST(!l.poll(now));
  now += 600ms;  // join_retry = 1 s after the first
  BOOST_TEST(!l.poll(now));
  std::size_t joins = 0;
  for (const auto& m : received()) joins += m.header.kind == message_kind::join;
  BOOST_TEST(joins == 2u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_learner_test
