// ctest-labels: unit threads
// A learner unit of two ranks (`unit_learner`, ranks that are threads)
// against a syncer of two shards, beside a one-process learner: each rank
// speaks for its half of the fragments to its own shard, keeps the outer
// state of that half only, and the unit trains, is counted once and ends
// with every rank holding the same model.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/runtime/learner/checkpoint.hpp>
#include <diloco/runtime/unit.hpp>
#include <diloco/runtime/unit_checkpoint.hpp>
#include <diloco/transport/shards.hpp>

#include "support/toy_model.hpp"
#include "support/unit_rank.hpp"

namespace runtime_unit_test {

using namespace diloco;
using T = double;
constexpr std::size_t features = 6;
constexpr std::uint32_t fragments = 4;  // rank 0 speaks for 0 and 2, rank 1 for 1 and 3
constexpr std::uint64_t steps = 200;
constexpr std::size_t rank_batch = 8;

using model_type = toy::linear_regression<T>;
/// Every rank reaches its shards through `sharded`, here over one or two of
/// them: one instantiation of the learner for all the cases.
using unit_type = unit_learner<model_type, inner::sgd<T>, sharded<inproc::endpoint>, threads::communicator>;
using plain_type = learner<model_type, inner::sgd<T>, sharded<inproc::endpoint>>;
using shard_type = decltype(presets::decoupled_diloco<T>(8, fragments))::syncer_type<inproc::endpoint>;

/// ½·‖θ − θ*‖², θ* the teacher's weights and bias (toy_model.hpp).
double distance_to_teacher(std::span<const T> params) { return toy::teacher<T>(features, 0).distance(params); }

/// The fragment records of a learner's saved state: how many elements of
/// outer state (bases) it keeps, and for which fragments.
struct outer_state {
  std::size_t elements = 0;
  std::vector<std::uint32_t> fragments;
};

template <class Learner>
outer_state outer_state_of(Learner& l) {
  std::ostringstream out;
  l.save(out);
  std::istringstream in(out.str());
  const auto s = read_learner_state<T>(in, l.model().layout(), l.options().id);
  outer_state o;
  for (std::uint32_t p = 0; p < s.fragments.size(); ++p)
    if (!s.fragments[p].base.empty()) {
      o.elements += s.fragments[p].base.size();
      o.fragments.push_back(p);
    }
  return o;
}

/// A syncer of `count` shards (Decoupled DiLoCo, H = 8, quorum 1, τ = 2),
/// each on an in-process hub of its own.
struct shard_world {
  std::vector<std::unique_ptr<inproc::hub>> hubs;
  std::vector<std::unique_ptr<shard_type>> shards;

  shard_world(std::uint32_t count, model_type& initial) {
    for (std::uint32_t s = 0; s < count; ++s) {
      auto options = presets::decoupled_diloco<T>(/*H=*/8, fragments, /*quorum=*/1, /*overlap=*/2);
      options.shard = {s, count};
      options.log = [](const std::string&) {};
      hubs.push_back(std::make_unique<inproc::hub>());
      shards.push_back(std::make_unique<shard_type>(initial.layout(), initial.parameters(),
                                                    hubs.back()->attach(syncer_peer), options, options.outer,
                                                    options.merge));
    }
  }

  /// Each shard serving on a thread of its own, until the result is destroyed.
  std::vector<std::jthread> serve() {
    std::vector<std::jthread> servers;
    for (auto& s : shards) servers.emplace_back([&s](std::stop_token stop) { s->run(stop); });
    return servers;
  }
};

BOOST_AUTO_TEST_SUITE(runtime_unit)

BOOST_AUTO_TEST_CASE(a_unit_of_two_ranks_speaks_once_for_each_fragment) {
  model_type initial(features, 7);
  shard_world world(2, initial);
  auto& hubs = world.hubs;
  auto& shards = world.shards;

  // The unit, id 0: rank r on shard r. Each rank starts from its own
  // initialization; the unit takes rank 0's, and the join the syncer's.
  auto ranks = threads::make_unit(2);
  std::vector<std::unique_ptr<model_type>> models;
  std::vector<std::unique_ptr<unit_type>> unit(2);
  std::vector<std::unique_ptr<sharded<inproc::endpoint>>> links;
  for (std::uint32_t r = 0; r < 2; ++r) {
    models.push_back(std::make_unique<model_type>(features, 1000 + r));
    links.push_back(std::make_unique<sharded<inproc::endpoint>>(std::vector{&hubs[r]->attach(0)}, 2));
  }
  std::vector<std::string> errors(3);
  std::vector<std::vector<T>> finals(2);
  // The sequence number of every contribution each rank sent.
  std::vector<std::vector<std::uint64_t>> sent(2);
  // A one-process learner, id 1, connected to both shards.
  model_type plain_model(features, 2000);
  sharded<inproc::endpoint> plain_link({&hubs[0]->attach(1), &hubs[1]->attach(1)});
  plain_type plain(plain_model, plain_link, learner_options{.id = 1}, inner::sgd<T>({.learning_rate = 0.1}));
  {
    auto servers = world.serve();
    {
      std::vector<std::jthread> threads;
      for (std::uint32_t r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          // Constructing is collective (rank 0's parameters to both).
          learner_options options{.id = 0};
          options.on_event = [&sent, r](const learner_event& e) {
            if (e.what == learner_event::kind::sent) sent[r].push_back(e.sequence);
          };
          unit[r] = std::make_unique<unit_type>(*models[r], ranks[r], *links[r], options,
                                                inner::sgd<T>({.learning_rate = 0.1}));
          toy::teacher<T> data(features, 100 + r);
          errors[r] = unit_test_support::train_then_finish(*unit[r], data, steps, rank_batch);
          finals[r].assign(models[r]->parameters().begin(), models[r]->parameters().end());
        });
      threads.emplace_back([&] {
        toy::teacher<T> data(features, 300);
        for (std::uint64_t s = 0; s < steps; ++s) {
          if (auto result = plain.step(data.next(2 * rank_batch)); !result) {
            errors[2] = result.error().message();
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        plain.finish();
      });
    }
    for (auto& s : servers) s.request_stop();
  }

  for (const auto& e : errors) BOOST_TEST(e == "");
  // Both ranks hold the same model, and it learned.
  BOOST_TEST(finals[0] == finals[1], boost::test_tools::per_element());
  BOOST_TEST(distance_to_teacher(finals[0]) < 0.01 * distance_to_teacher(initial.parameters()));

  for (std::uint32_t r = 0; r < 2; ++r) {
    auto& l = unit[r]->rank_learner();
    // Every rank stepped the unit's steps, on the unit's tokens (both ranks' batches).
    BOOST_TEST(l.metrics().steps == steps);
    BOOST_TEST(l.metrics().tokens == steps * 2 * rank_batch);
    BOOST_TEST(l.metrics().contributions_sent > 0u);
    // Outer state: only the fragments of its share, half the model here.
    const outer_state o = outer_state_of(l);
    BOOST_TEST(o.fragments == (std::vector<std::uint32_t>{r, r + 2}), boost::test_tools::per_element());
    const auto& plan = l.plan();
    BOOST_TEST(o.elements == plan[r].size() + plan[r + 2].size());
  }
  BOOST_TEST(outer_state_of(plain).elements == initial.parameters().size());

  // The ranks number their messages apart (rank r of 2: r + 1, r + 3, ...),
  // so that (learner, incarnation, sequence) names one contribution of the
  // unit: a trace or an idempotency key never confuses two ranks' sends.
  for (std::uint32_t r = 0; r < 2; ++r) {
    BOOST_TEST(!sent[r].empty());
    BOOST_TEST(std::is_sorted(sent[r].begin(), sent[r].end()));
    BOOST_TEST((std::adjacent_find(sent[r].begin(), sent[r].end()) == sent[r].end()));
    for (const std::uint64_t q : sent[r]) BOOST_TEST((q - 1) % 2 == r, "rank " << r << " sent sequence " << q);
  }

  // Each shard saw two learners, the unit once: one join, one leave, and
  // the steps its leave reported are the unit's, not twice them.
  for (std::uint32_t s = 0; s < 2; ++s) {
    const auto m = shards[s]->metrics();
    BOOST_TEST(m.joins == 2u);
    BOOST_TEST(m.leaves == 2u);
    BOOST_TEST(shards[s]->steps_computed() == 2 * steps);
    // Tokens merged: at most each learner's tokens once per fragment of the shard.
    BOOST_TEST(m.tokens_merged <= 2 * (steps * 2 * rank_batch) * 2);
    BOOST_TEST(m.tokens_merged > 0u);
  }
}

BOOST_AUTO_TEST_CASE(each_rank_keeps_a_1_over_R_share_of_the_outer_state) {
  // Four shards of one fragment each and units of R = 1, 2 and 4 ranks:
  // rank r connects to the shards s with s mod R = r (`sharded` over 4/R of
  // the four), speaks for their fragments and keeps their outer state only.
  for (std::uint32_t size : {1u, 2u, 4u}) {
    BOOST_TEST_CONTEXT("R = " << size) {
      model_type initial(features, 7);
      shard_world world(4, initial);
      auto ranks = threads::make_unit(size);
      std::vector<std::unique_ptr<model_type>> models;
      std::vector<std::unique_ptr<sharded<inproc::endpoint>>> links;
      for (std::uint32_t r = 0; r < size; ++r) {
        models.push_back(std::make_unique<model_type>(features, 1000 + r));
        std::vector<inproc::endpoint*> mine;
        for (std::uint32_t shard = r; shard < 4; shard += size) mine.push_back(&world.hubs[shard]->attach(0));
        links.push_back(std::make_unique<sharded<inproc::endpoint>>(mine, 4));
      }
      std::vector<std::string> errors(size);
      std::vector<outer_state> kept(size);
      std::vector<std::vector<T>> finals(size);
      std::vector<std::size_t> fragment_sizes;
      {
        auto servers = world.serve();
        std::vector<std::jthread> threads;
        for (std::uint32_t r = 0; r < size; ++r)
          threads.emplace_back([&, r] {
            unit_type unit(*models[r], ranks[r], *links[r], learner_options{.id = 0},
                           inner::sgd<T>({.learning_rate = 0.1}));
            toy::teacher<T> data(features, 100 + r);
            errors[r] = unit_test_support::train_then_finish(unit, data, steps, rank_batch);
            if (!errors[r].empty()) return;
            kept[r] = outer_state_of(unit.rank_learner());
            finals[r].assign(models[r]->parameters().begin(), models[r]->parameters().end());
            if (r == 0)
              for (std::uint32_t p = 0; p < fragments; ++p)
                fragment_sizes.push_back(unit.rank_learner().plan()[p].size());
          });
        threads.clear();  // joined: the ranks are done
      }
      for (const auto& e : errors) BOOST_TEST(e == "");
      // It learned. The ranks pause 1 ms a step, as in the first case:
      // stepping without pause, the shards' threads lagged them, the last
      // outer steps landed late, and R = 1 ended at up to 10 % of the
      // initial distance (1 run in 20, on an idle machine).
      BOOST_TEST(distance_to_teacher(finals[0]) < 0.05 * distance_to_teacher(initial.parameters()));
      const std::size_t total = initial.parameters().size();
      const std::size_t largest = *std::max_element(fragment_sizes.begin(), fragment_sizes.end());
      std::size_t kept_in_all = 0;
      for (std::uint32_t r = 0; r < size; ++r) {
        BOOST_TEST(finals[r] == finals[0], boost::test_tools::per_element());
        std::vector<std::uint32_t> share;
        for (std::uint32_t p = r; p < fragments; p += size) share.push_back(p);
        BOOST_TEST(kept[r].fragments == share, boost::test_tools::per_element());
        // Within 1/R of the one-process learner's, plus one fragment.
        BOOST_TEST(kept[r].elements <= total / size + largest);
        kept_in_all += kept[r].elements;
      }
      BOOST_TEST(kept_in_all == total);  // every fragment's state, once
      for (const auto& shard : world.shards) {
        BOOST_TEST(shard->metrics().joins == 1u);
        BOOST_TEST(shard->metrics().leaves == 1u);
        BOOST_TEST(shard->steps_computed() == steps);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_rank_that_dies_ends_its_unit) {
  // Rank 1 dies after 20 steps (its communicator destroyed, as a killed
  // process's connection would be): rank 0's next step fails with
  // rank_lost instead of waiting, and the unit has stopped.
  model_type initial(features, 7);
  shard_world world(2, initial);
  auto& hubs = world.hubs;
  auto ranks = threads::make_unit(2);
  std::vector<std::unique_ptr<model_type>> models;
  std::vector<std::unique_ptr<sharded<inproc::endpoint>>> links;
  for (std::uint32_t r = 0; r < 2; ++r) {
    models.push_back(std::make_unique<model_type>(features, 1000 + r));
    links.push_back(std::make_unique<sharded<inproc::endpoint>>(std::vector{&hubs[r]->attach(0)}, 2));
  }
  std::vector<std::uint64_t> stepped(2, 0);
  std::error_code survivor;
  {
    auto servers = world.serve();
    {
      std::vector<std::jthread> threads;
      for (std::uint32_t r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          unit_type unit(*models[r], ranks[r], *links[r], learner_options{.id = 0},
                         inner::sgd<T>({.learning_rate = 0.1}));
          toy::teacher<T> data(features, 100 + r);
          for (std::uint64_t s = 0; s < steps; ++s) {
            if (r == 1 && s == 20) {
              threads::communicator dying = std::move(ranks[1]);
              return;  // destroyed here: the unit has lost a rank
            }
            auto result = unit.step(data.next(rank_batch));
            if (!result) {
              if (r == 0) survivor = result.error();
              return;
            }
            ++stepped[r];
          }
        });
    }
    for (auto& s : servers) s.request_stop();
  }
  BOOST_TEST(stepped[1] == 20u);
  BOOST_TEST(stepped[0] == 20u);  // its 21st step needs rank 1
  BOOST_TEST((survivor == make_error_code(errc::rank_lost)));
}

/// A directory of its own under the system's temporary one, removed at the end.
struct scratch_directory {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("diloco_unit_checkpoint_" + std::to_string(std::random_device{}()));
  ~scratch_directory() { std::filesystem::remove_all(path); }
};

BOOST_AUTO_TEST_CASE(a_restarted_unit_resumes_every_rank_at_a_step_all_ranks_saved) {
  // Incarnation 1 trains 40 steps, every rank saving every 10 into its own
  // store (the newest two kept: steps 30 and 40); rank 1's step-40 file is
  // then torn, as if the unit died while rank 1 was writing it. Incarnation
  // 2 resumes both ranks at step 30, each from its own file; with rank 1's
  // files all gone, neither rank resumes.
  model_type initial(features, 7);
  shard_world world(2, initial);
  scratch_directory scratch;
  std::vector<std::unique_ptr<checkpoint_store>> stores;
  for (std::uint32_t r = 0; r < 2; ++r)
    stores.push_back(std::make_unique<checkpoint_store>(scratch.path / ("rank-" + std::to_string(r))));
  auto servers = world.serve();
  // One incarnation of the unit: each rank's body runs on its own thread.
  auto run_unit = [&](std::uint32_t incarnation, auto&& body) {
    auto ranks = threads::make_unit(2);
    std::vector<std::jthread> threads;
    for (std::uint32_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        model_type model(features, 1000 + r + 10 * incarnation);
        // A peer of its own on the shard's hub: each incarnation connects anew.
        sharded<inproc::endpoint> link(std::vector{&world.hubs[r]->attach(incarnation)}, 2);
        unit_type unit(model, ranks[r], link, learner_options{.id = 0, .incarnation = incarnation},
                       inner::sgd<T>({.learning_rate = 0.1}));
        body(r, unit, model);
      });
  };
  std::vector<std::string> errors(2);
  std::vector<std::vector<T>> saved_at_30(2);
  run_unit(1, [&](std::uint32_t r, unit_type& unit, model_type& model) {
    toy::teacher<T> data(features, 100 + r);
    for (std::uint64_t s = 1; s <= 40; ++s) {
      if (auto result = unit.step(data.next(rank_batch)); !result) {
        errors[r] = result.error().message();
        return;
      }
      if (s % 10 == 0) save_unit_checkpoint(unit, *stores[r]);
      if (s == 30) saved_at_30[r].assign(model.parameters().begin(), model.parameters().end());
    }
  });  // no finish: the unit dies here
  for (const auto& e : errors) BOOST_TEST(e == "");
  // Tear rank 1's newest file.
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(stores[1]->directory())) files.push_back(f.path());
  BOOST_TEST_REQUIRE(files.size() == 2u);
  std::sort(files.begin(), files.end());
  std::filesystem::resize_file(files.back(), std::filesystem::file_size(files.back()) / 2);

  std::vector<std::optional<std::uint64_t>> resumed(2);
  std::vector<std::uint64_t> local_steps(2);
  std::vector<std::vector<T>> loaded(2);
  std::vector<std::size_t> skipped(2);
  run_unit(2, [&](std::uint32_t r, unit_type& unit, model_type& model) {
    std::vector<std::string> why;
    resumed[r] = load_unit_checkpoint(unit, *stores[r], &why);
    skipped[r] = why.size();
    local_steps[r] = unit.rank_learner().local_step();
    loaded[r].assign(model.parameters().begin(), model.parameters().end());
  });
  for (std::uint32_t r = 0; r < 2; ++r) {
    BOOST_TEST_CONTEXT("rank " << r) {
      BOOST_TEST_REQUIRE(resumed[r].has_value());
      BOOST_TEST(*resumed[r] == 30u);
      BOOST_TEST(local_steps[r] == 30u);
      // Its own parameters as they were after step 30, bit for bit.
      BOOST_TEST(loaded[r] == saved_at_30[r], boost::test_tools::per_element());
    }
  }
  BOOST_TEST(skipped[0] == 0u);
  BOOST_TEST(skipped[1] == 1u);  // the torn file

  // Rank 1 has nothing left: no rank resumes, and neither has moved.
  for (const auto& f : std::filesystem::directory_iterator(stores[1]->directory())) std::filesystem::remove(f.path());
  run_unit(3, [&](std::uint32_t r, unit_type& unit, model_type&) {
    resumed[r] = load_unit_checkpoint(unit, *stores[r]);
    local_steps[r] = unit.rank_learner().local_step();
  });
  for (std::uint32_t r = 0; r < 2; ++r) {
    BOOST_TEST(!resumed[r].has_value());
    BOOST_TEST(local_steps[r] == 0u);
  }
  for (auto& s : servers) s.request_stop();
}

BOOST_AUTO_TEST_CASE(a_rank_refuses_a_syncer_its_share_cannot_divide) {
  // One syncer, not sharded: a unit of two ranks cannot split it.
  model_type initial(features, 7);
  inproc::hub hub;
  auto options = presets::decoupled_diloco<T>(8, fragments, 1, 2);
  options.log = [](const std::string&) {};
  auto& syncer_end = hub.attach(syncer_peer);
  shard_type sync(initial.layout(), initial.parameters(), syncer_end, options, options.outer, options.merge);
  model_type model(features, 1);
  sharded<inproc::endpoint> link({&hub.attach(0)});
  plain_type rank1(model, link, learner_options{.id = 0, .share = {1, 2}}, inner::sgd<T>({.learning_rate = 0.1}));
  time_point now{};
  for (int i = 0; i < 10 && !rank1.error(); ++i) {
    rank1.poll(now);
    while (auto e = syncer_end.try_receive()) sync.handle(std::move(*e), now);
    now += std::chrono::milliseconds(10);
  }
  BOOST_TEST((rank1.error() == make_error_code(errc::bad_config)));
  BOOST_CHECK_THROW(plain_type(model, link, learner_options{.id = 5, .share = {2, 2}}), std::invalid_argument);
  BOOST_CHECK_THROW(sharded<inproc::endpoint>({&hub.attach(6), &hub.attach(7)}, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_unit_test
