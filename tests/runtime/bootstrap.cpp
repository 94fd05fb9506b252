// A syncer service that starts without a model learns the layout and the
// initial parameters from the first learner, and ignores everyone else's
// attempts to provide them.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <limits>
#include <memory>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/toy_model.hpp"

namespace runtime_bootstrap_test {

using namespace std::chrono_literals;
using namespace diloco;
using T = float;
using model_type = toy::linear_regression<T>;
using learner_type = learner<model_type, inner::adamw<T>, inproc::endpoint>;

training_config config() { return {.fragments = 2, .sync_period = 4, .overlap = 1, .mixing = 0.0, .lock_step = false}; }

message join_message(std::uint32_t id, std::uint64_t fingerprint, std::uint64_t elements) {
  message m;
  m.header.kind = message_kind::join;
  m.header.learner = id;
  m.header.incarnation = 1;
  m.header.layout = fingerprint;
  m.header.element_count = elements;
  return m;
}

message layout_message(std::uint32_t id, const parameter_layout& l) {
  message m;
  m.header.kind = message_kind::layout;
  m.header.codec = codec_id::bytes;
  m.header.learner = id;
  m.header.incarnation = 1;
  const auto bytes = wire::encode_layout(l);
  m.header.element_count = bytes.size();
  m.payload = byte_buffer(bytes.size());
  std::copy(bytes.begin(), bytes.end(), m.payload.data());
  return m;
}

/// Requests for the model (`state_wanted` welcomes) waiting at `e`.
std::size_t state_requests(inproc::endpoint& e) {
  std::size_t n = 0;
  while (auto m = e.try_receive()) n += (m->msg.header.flags & state_wanted) != 0;
  return n;
}

BOOST_AUTO_TEST_SUITE(runtime_bootstrap)

BOOST_AUTO_TEST_CASE(the_first_learner_provides_the_model_and_everyone_then_trains) {
  inproc::hub hub;
  auto& service = hub.attach(syncer_peer);
  bootstrap<T, inproc::endpoint> boot(service, config());
  std::vector<std::unique_ptr<model_type>> models;
  std::vector<std::unique_ptr<learner_type>> learners;
  for (std::uint32_t i = 0; i < 2; ++i) {
    models.push_back(std::make_unique<model_type>(6, 100 + i));  // different initial parameters
    learners.push_back(std::make_unique<learner_type>(*models.back(), hub.attach(i), learner_options{.id = i}));
  }
  const std::vector<T> first(models[0]->parameters().begin(), models[0]->parameters().end());
  time_point now{};
  for (int round = 0; round < 3 && !boot.ready(); ++round) {
    for (auto& l : learners) BOOST_TEST(!l->poll(now));
    while (auto e = service.try_receive()) boot.handle(std::move(*e), now);
  }
  BOOST_TEST_REQUIRE(boot.ready());
  BOOST_TEST((boot.layout() == models[0]->layout()));
  BOOST_TEST(std::vector<T>(boot.initial().begin(), boot.initial().end()) == first, boost::test_tools::per_element());
  BOOST_TEST(learners[0]->metrics().states_sent == 1u);
  BOOST_TEST(learners[1]->metrics().states_sent == 0u);

  auto options = presets::decoupled_diloco(4, 2, 1, 1);
  options.log = [](const std::string&) {};
  syncer<outer::nesterov<T>, merge::token_weighted, inproc::endpoint> s(boot.layout(), boot.initial(), service,
                                                                        options);
  for (auto& j : boot.take_joins()) s.handle(std::move(j), now);
  // Both learners now hold the first learner's parameters and can train.
  for (auto& l : learners) BOOST_TEST_REQUIRE(l->poll(now));
  for (std::uint32_t i = 0; i < 2; ++i)
    BOOST_TEST(std::vector<T>(models[i]->parameters().begin(), models[i]->parameters().end()) == first,
               boost::test_tools::per_element());
  toy::teacher<T> teacher(6, 1);
  for (int step = 0; step < 8; ++step) {
    for (auto& l : learners) {
      BOOST_TEST_REQUIRE(l->poll(now));
      l->train_step(teacher.next(4), now);
    }
    while (auto e = service.try_receive()) s.handle(std::move(*e), now);
    s.poll(now);
    now += 1s;
  }
  BOOST_TEST(s.metrics().outer_updates >= 4u);
  BOOST_TEST(s.metrics().rejected_total() == 0u);
}

BOOST_AUTO_TEST_CASE(only_the_chosen_learner_may_provide_it_and_only_if_it_is_well_formed) {
  inproc::hub hub;
  auto& service = hub.attach(syncer_peer);
  auto& chosen = hub.attach(1);
  auto& other = hub.attach(2);
  model_type model(6, 7);
  parameter_layout expected = model.layout();
  bootstrap<T, inproc::endpoint> boot(service, config(), expected);
  time_point now{};
  auto deliver = [&] {
    while (auto e = service.try_receive()) boot.handle(std::move(*e), now);
  };
  auto join = [&](std::uint32_t id, std::uint64_t layout) { return join_message(id, layout, model.layout().size()); };

  auto stranger = join(2, expected.fingerprint() ^ 1);  // another model
  (void)other.try_send(syncer_peer, stranger);
  deliver();
  BOOST_TEST(boot.refused() == 1u);
  // Not asked for its model, but told which model this syncer serves.
  auto told = other.try_receive();
  BOOST_TEST_REQUIRE(told.has_value());
  BOOST_TEST(int(told->msg.header.kind) == int(message_kind::welcome));
  BOOST_TEST((told->msg.header.flags & state_wanted) == 0);
  BOOST_TEST(told->msg.header.layout == expected.fingerprint());

  auto j = join(1, expected.fingerprint());
  (void)chosen.try_send(syncer_peer, j);
  deliver();
  auto asked = chosen.try_receive();
  BOOST_TEST_REQUIRE(asked.has_value());
  BOOST_TEST((asked->msg.header.flags & state_wanted) != 0);

  auto impostor = layout_message(2, expected);  // right layout, wrong learner
  (void)other.try_send(syncer_peer, impostor);
  parameter_layout wrong;
  wrong.add("weight", 5);
  wrong.add("bias", 2);
  auto mismatched = layout_message(1, wrong);  // chosen learner, but not the layout it joined with
  (void)chosen.try_send(syncer_peer, mismatched);
  auto garbage = layout_message(1, expected);
  garbage.payload.data()[0] = std::byte{0};  // name length 0
  garbage.payload.data()[1] = std::byte{0};
  (void)chosen.try_send(syncer_peer, garbage);
  deliver();
  BOOST_TEST(boot.refused() == 4u);
  BOOST_TEST(!boot.ready());
  BOOST_TEST(boot.take_joins().size() == 1u);  // the chosen learner's join is held
}

BOOST_AUTO_TEST_CASE(a_poisoned_initial_state_is_refused_and_its_sender_not_asked_again) {
  inproc::hub hub;
  auto& service = hub.attach(syncer_peer);
  auto& poisoner = hub.attach(1);
  auto& honest = hub.attach(2);
  model_type model(6, 7);
  const auto& layout = model.layout();
  training_config one = config();
  one.fragments = 1;
  bootstrap<T, inproc::endpoint> boot(service, one);
  const time_point now{};
  auto deliver = [&] {
    while (auto e = service.try_receive()) boot.handle(std::move(*e), now);
  };
  auto send = [&](inproc::endpoint& from, message m) { BOOST_TEST_REQUIRE(!from.try_send(syncer_peer, m)); };
  auto join = [&](std::uint32_t id) { return join_message(id, layout.fingerprint(), layout.size()); };
  auto layout_of = [&](std::uint32_t id) { return layout_message(id, layout); };
  auto state = [&](std::uint32_t id, T fill, T poison) {
    message m;
    m.header.kind = message_kind::state;
    m.header.codec = codec_of<T>;
    m.header.learner = id;
    m.header.incarnation = 1;
    m.header.element_count = layout.size();
    m.payload = byte_buffer(layout.size() * sizeof(T));
    auto v = m.payload.as<T>();
    std::fill(v.begin(), v.end(), fill);
    v[3] = poison;
    return m;
  };
  const auto asked = state_requests;

  send(poisoner, join(1));  // the first to join is asked for the model
  deliver();
  BOOST_TEST(asked(poisoner) == 1u);
  send(poisoner, layout_of(1));
  send(poisoner, state(1, T(0.5), std::numeric_limits<T>::quiet_NaN()));
  deliver();
  BOOST_TEST(boot.refused() == 1u);
  BOOST_TEST(!boot.ready());
  send(poisoner, state(1, T(0.5), T(0.5)));  // too late: it is no longer asked
  send(poisoner, join(1));                   // and rejoining first does not make it asked again
  deliver();
  BOOST_TEST(asked(poisoner) == 0u);
  BOOST_TEST(boot.refused() == 2u);

  send(honest, join(2));
  deliver();
  BOOST_TEST(asked(honest) == 1u);
  send(honest, layout_of(2));
  send(honest, state(2, T(2), std::numeric_limits<T>::infinity()));  // an infinity is refused as well
  deliver();
  BOOST_TEST(!boot.ready());
  BOOST_TEST(boot.refused() == 3u);
}

BOOST_AUTO_TEST_CASE(a_silent_source_gives_way_to_a_learner_that_waits) {
  inproc::hub hub;
  auto& service = hub.attach(syncer_peer);
  auto& silent = hub.attach(1);
  auto& honest = hub.attach(2);
  model_type model(6, 7);
  const auto& layout = model.layout();
  bootstrap<T, inproc::endpoint> boot(service, config(), std::nullopt, 10s);
  time_point now{};
  auto join = [&](inproc::endpoint& from, std::uint32_t id) {
    message m = join_message(id, layout.fingerprint(), layout.size());
    BOOST_TEST_REQUIRE(!from.try_send(syncer_peer, m));
    while (auto e = service.try_receive()) boot.handle(std::move(*e), now);
  };
  const auto asked = state_requests;
  join(silent, 1);
  join(honest, 2);
  BOOST_TEST(asked(silent) == 1u);
  BOOST_TEST(asked(honest) == 0u);
  now += 11s;
  join(silent, 1);  // the silent source rejoins first once its patience ran out
  BOOST_TEST(asked(silent) == 0u);
  BOOST_TEST(asked(honest) == 1u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_bootstrap_test
