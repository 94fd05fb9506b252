// The end of a run: the syncer ends it by itself at the first limit of
// `end_options` reached (outer updates, tokens, steps, a deadline, every
// learner gone), merges what is open, tells the learners, and answers every
// later message with `end`; a learner that is told stops with errc::ended.
#include <boost/test/unit_test.hpp>

#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "support/syncer_fixture.hpp"
#include "support/toy_model.hpp"

namespace runtime_end_test {

using namespace syncer_test;

/// Δ = 1 everywhere from learner `id` against the current revision.
void contribute(fixture& f, test_syncer& s, std::uint32_t id, std::uint64_t sequence) {
  f.send(id, f.contribution(id, std::vector<double>(6, 1.0), s.revision(0), 1, sequence));
  f.deliver(s);
}

bool told_to_end(fixture& f, std::uint32_t id) {
  for (const auto& m : f.inbox(id))
    if (m.header.kind == message_kind::end) return true;
  return false;
}

bool contains(const std::optional<std::string>& text, const std::string& part) {
  return text && text->find(part) != std::string::npos;
}

BOOST_AUTO_TEST_SUITE(runtime_end)

BOOST_FIXTURE_TEST_CASE(a_run_without_limits_never_ends_by_itself, fixture) {
  test_syncer s(layout, initial, syncer_end, options());
  join_all(s, 2);
  for (std::uint64_t q = 1; q <= 5; ++q) contribute(*this, s, 0, q);
  send(1, leave(1));
  deliver(s);
  now += 10h;
  (void)s.poll(now);
  BOOST_TEST(!s.ended());
}

BOOST_FIXTURE_TEST_CASE(the_outer_update_budget_ends_the_run_and_later_messages_are_answered_with_end, fixture) {
  auto o = options();
  o.end.max_outer_updates = 2;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  contribute(*this, s, 0, 1);
  (void)s.poll(now);
  BOOST_TEST(!s.ended());
  contribute(*this, s, 0, 2);
  (void)s.poll(now);
  BOOST_TEST(contains(s.ended(), "2 outer updates"), s.ended().value_or("(not ended)"));
  BOOST_TEST(told_to_end(*this, 0));
  BOOST_TEST(told_to_end(*this, 1));
  // After the end nothing is taken: a contribution or a join is answered with `end`.
  const auto accepted = s.metrics().contributions_accepted;
  contribute(*this, s, 1, 1);
  BOOST_TEST(s.metrics().contributions_accepted == accepted);
  BOOST_TEST(told_to_end(*this, 1));
  send(3, join(3));
  deliver(s);
  BOOST_TEST(told_to_end(*this, 3));
  BOOST_TEST(s.metrics().joins == 2u);
}

BOOST_FIXTURE_TEST_CASE(the_token_and_step_budgets_count_merged_work, fixture) {
  auto tokens = options();
  tokens.end.max_tokens = 3 * 640;  // every contribution of the fixture carries 640 tokens, 10 steps
  test_syncer a(layout, initial, syncer_end, tokens);
  join_all(a, 1);
  contribute(*this, a, 0, 1);
  contribute(*this, a, 0, 2);
  (void)a.poll(now);
  BOOST_TEST(!a.ended());
  contribute(*this, a, 0, 3);
  (void)a.poll(now);
  BOOST_TEST(contains(a.ended(), "1920 tokens trained"), a.ended().value_or("(not ended)"));
  BOOST_TEST(a.metrics().tokens_merged == 1920u);
  BOOST_TEST(a.metrics().steps_merged == 30u);

  fixture g;
  auto steps = options();
  steps.end.max_steps = 20;
  test_syncer b(g.layout, g.initial, g.syncer_end, steps);
  g.join_all(b, 1);
  contribute(g, b, 0, 1);
  (void)b.poll(g.now);
  BOOST_TEST(!b.ended());
  contribute(g, b, 0, 2);
  (void)b.poll(g.now);
  BOOST_TEST(contains(b.ended(), "20 inner steps trained"), b.ended().value_or("(not ended)"));
}

BOOST_FIXTURE_TEST_CASE(the_deadline_counts_from_the_first_message, fixture) {
  auto o = options();
  o.end.deadline = 30s;
  test_syncer s(layout, initial, syncer_end, o);
  now += 100s;  // time before the first message does not count
  join_all(s, 1);
  now += 29s;
  (void)s.poll(now);
  BOOST_TEST(!s.ended());
  now += 1s;
  const auto next = s.poll(now);
  BOOST_TEST(contains(s.ended(), "deadline"), s.ended().value_or("(not ended)"));
  (void)next;
}

BOOST_FIXTURE_TEST_CASE(the_run_ends_when_every_learner_left_or_stayed_dead_past_the_limit, fixture) {
  auto o = options();
  o.heartbeat_timeout = 10s;
  o.end.when_all_gone = 60s;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 2);
  send(0, leave(0));
  deliver(s);
  // Learner 1 goes silent: dead at 10 s, gone long enough at 70 s.
  now += 10s;
  (void)s.poll(now);
  BOOST_TEST(s.metrics().declared_dead == 1u);
  now += 59s;
  const auto wake = s.poll(now);
  BOOST_TEST(!s.ended());
  BOOST_TEST_REQUIRE(wake.has_value());
  BOOST_TEST((*wake - now == 1s));  // the syncer asks to be polled when the limit falls due
  now += 1s;
  (void)s.poll(now);
  BOOST_TEST(contains(s.ended(), "1 left, 1 dead"), s.ended().value_or("(not ended)"));
}

BOOST_FIXTURE_TEST_CASE(learners_that_finish_early_do_not_end_a_run_that_expects_more, fixture) {
  auto o = options();
  o.heartbeat_timeout = 10s;
  o.end.when_all_gone = 60s;
  o.end.expected_learners = 2;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  send(0, leave(0));  // learner 0 is done before learner 1 has even joined
  deliver(s);
  now += 600s;
  (void)s.poll(now);
  BOOST_TEST(!s.ended());
  join_all(s, 2);  // the late one, then it leaves too
  send(1, leave(1));
  deliver(s);
  (void)s.poll(now);
  BOOST_TEST(contains(s.ended(), "2 left"), s.ended().value_or("(not ended)"));
}

BOOST_FIXTURE_TEST_CASE(a_learner_heard_from_again_keeps_the_run_going, fixture) {
  auto o = options();
  o.heartbeat_timeout = 10s;
  o.end.when_all_gone = 60s;
  test_syncer s(layout, initial, syncer_end, o);
  join_all(s, 1);
  now += 10s;
  (void)s.poll(now);
  now += 50s;
  send(0, heartbeat(0));  // revived
  deliver(s);
  now += 20s;
  (void)s.poll(now);
  BOOST_TEST(!s.ended());
}

BOOST_FIXTURE_TEST_CASE(the_end_merges_the_open_rounds, fixture) {
  test_syncer s(layout, initial, syncer_end, options(/*quorum=*/2));
  join_all(s, 2);
  contribute(*this, s, 0, 1);
  BOOST_TEST(s.revision(0) == 0u);  // waiting for learner 1
  s.end_run("asked", now);
  BOOST_TEST(s.revision(0) == 1u);
  BOOST_TEST(s.metrics().contributions_merged == 1u);
  BOOST_TEST(contains(s.ended(), "asked"));
}

BOOST_AUTO_TEST_CASE(a_learner_told_of_the_end_stops_with_errc_ended) {
  // A real learner against a syncer whose budget is one outer update.
  struct constant_model {
    using scalar_type = double;
    using batch_type = int;
    parameter_layout layout_ = [] {
      parameter_layout l;
      l.add("w", 4);
      return l;
    }();
    std::vector<double> params = std::vector<double>(4, 0.0), grads = std::vector<double>(4, 1.0);
    const parameter_layout& layout() const { return layout_; }
    std::span<double> parameters() { return params; }
    std::span<const double> gradients() const { return grads; }
    step_stats compute_gradients(const int&) { return {0.0, 8}; }
  };
  constant_model model;
  inproc::hub hub;
  auto& syncer_end = hub.attach(syncer_peer);
  auto& learner_end = hub.attach(0);
  syncer_options o = fixture::options();
  o.training.sync_period = 2;
  o.end.max_outer_updates = 1;
  test_syncer s(model.layout(), std::vector<double>(4, 0.0), syncer_end, o);
  learner<constant_model, inner::sgd<double>, inproc::endpoint> l(model, learner_end, learner_options{.id = 0},
                                                                  inner::sgd<double>({.learning_rate = 0.5}));
  time_point now{};
  auto serve = [&] {
    while (auto e = syncer_end.try_receive()) s.handle(std::move(*e), now);
    (void)s.poll(now);
  };
  int steps = 0;
  for (int i = 0; i < 20 && !l.error(); ++i) {
    now += 100ms;
    if (l.poll(now)) {
      l.train_step(0, now);
      ++steps;
    }
    serve();
  }
  BOOST_TEST(contains(s.ended(), "1 outer updates"), s.ended().value_or("(not ended)"));
  BOOST_TEST(l.ended());
  BOOST_TEST(l.error() == make_error_code(errc::ended));
  BOOST_TEST(l.error().message() == "the syncer ended the run");
  BOOST_TEST(steps >= 2);
  BOOST_TEST(!l.poll(now + 1s));  // no more steps
  // finish() after the end sends nothing: the syncer takes nothing more.
  l.finish(now);
  BOOST_TEST(!syncer_end.try_receive().has_value());
}

BOOST_AUTO_TEST_CASE(bad_end_settings_are_refused) {
  end_options e;
  e.deadline = -1s;
  BOOST_CHECK_THROW(e.check(), std::invalid_argument);
  e.deadline = 0s;
  e.when_all_gone = -1s;
  BOOST_CHECK_THROW(e.check(), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_blocking_step_returns_when_its_stop_token_is_triggered) {
  // No syncer answers: without the token, step() would wait for its join
  // until join_timeout (here an hour). The token ends the wait, trains
  // nothing, and the learner stays usable (a second call waits again). Each
  // call is stopped once a join of its own has reached the syncer's end (the
  // second call's is the retry, a second later): step() is waiting then.
  inproc::hub hub;
  auto& silent_syncer = hub.attach(syncer_peer);
  toy::linear_regression<double> model(4, 1);
  learner<toy::linear_regression<double>, inner::sgd<double>, inproc::endpoint> l(
      model, hub.attach(0), {.id = 0, .join_timeout = std::chrono::hours(1)});
  toy::teacher<double> data(4, 3);
  const auto batch = data.next(8);
  const auto before = std::vector<double>(model.parameters().begin(), model.parameters().end());
  for (int call = 0; call < 2; ++call) {
    std::stop_source stop;
    std::jthread stopper([&] {
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < end)
        if (auto e = silent_syncer.receive_for(std::chrono::milliseconds(100));
            e && e->msg.header.kind == message_kind::join)
          break;
      stop.request_stop();
    });
    const auto r = l.step(batch, stop.get_token());
    BOOST_TEST_REQUIRE(!r);
    BOOST_TEST((r.error() == make_error_code(errc::cancelled)));
  }
  BOOST_TEST(l.local_step() == 0u);
  BOOST_TEST(std::vector<double>(model.parameters().begin(), model.parameters().end()) == before);
  BOOST_TEST(l.metrics().joins_sent >= 1u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_end_test
