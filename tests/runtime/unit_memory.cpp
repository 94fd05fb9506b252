// ctest-labels: unit threads
// A learner unit whose model keeps its parameters in memory of its own (a
// GPU model, `memory()`), as a GPU unit runs: two collectives, one on the
// model's memory for the gradients and the fragments (NCCL's part), one on
// the host for the unit's votes, losses and resume (MPI's part). The model's
// memory is fenced (PROT_NONE outside its memory space's passes, its
// forward and backward pass and the inner step: support/fenced_memory.hpp),
// so the unit touching it anywhere else dies of SIGSEGV. Both collectives
// are thread units, each fenced too: the one on the model's memory refuses
// any span outside the model's parameters and gradients (a host pointer
// would be an illegal address to NCCL) and opens the fence while it runs,
// the host one refuses any span inside them (a device pointer would be to
// MPI).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/runtime/unit.hpp>
#include <diloco/transport/shards.hpp>

#include "support/fenced_memory.hpp"
#include "support/toy_model.hpp"
#include "support/unit_rank.hpp"

namespace runtime_unit_memory_test {

using namespace diloco;
using T = double;
constexpr std::size_t features = 6;
constexpr std::uint32_t fragments = 4;

/// A rank's model: the toy model with its parameters and gradients on
/// pages the host cannot touch outside the memory space's passes, the
/// forward and backward pass and the inner step (support/fenced_memory.hpp),
/// as a GPU model's are in device memory.
using model_type = fenced::linear_regression<T>;
using inner_type = fenced::inner_step<inner::sgd<T>>;

/// One rank of a thread unit that admits only spans inside (`inside`) or
/// only spans outside the model's parameters and gradients, and counts what
/// it was asked. A refused span fails the call (`std::errc::bad_address`)
/// and is counted, as a violation. The one inside opens the model's fence
/// while it runs, as NCCL's kernels reach device memory.
class fenced_ranks {
 public:
  fenced_ranks(threads::communicator& ranks, model_type& model, bool inside)
      : ranks_(ranks), inside_(inside), model_(model) {}

  std::size_t rank() const noexcept { return ranks_.rank(); }
  std::size_t size() const noexcept { return ranks_.size(); }

  template <class V>
  std::error_code all_reduce(std::span<const std::type_identity_t<V>> in, std::span<V> out, reduce_op op,
                             time_point deadline) {
    ++all_reduces;
    if (!admits(in) || !admits(std::span<const V>(out))) return refused();
    return run([&] { return ranks_.all_reduce(in, out, op, deadline); });
  }
  template <class V>
  std::error_code reduce_scatter(std::span<const std::type_identity_t<V>> in, std::span<V> out, reduce_op op,
                                 time_point deadline) {
    if (!admits(in) || !admits(std::span<const V>(out))) return refused();
    return run([&] { return ranks_.reduce_scatter(in, out, op, deadline); });
  }
  template <class V>
  std::error_code all_gather(std::span<const std::type_identity_t<V>> in, std::span<V> out, time_point deadline) {
    if (!admits(in) || !admits(std::span<const V>(out))) return refused();
    return run([&] { return ranks_.all_gather(in, out, deadline); });
  }
  template <class V>
  std::error_code broadcast(std::span<V> data, std::size_t root, time_point deadline) {
    ++broadcasts;
    if (!admits(std::span<const V>(data))) return refused();
    return run([&] { return ranks_.broadcast(data, root, deadline); });
  }
  std::error_code barrier(time_point deadline) { return ranks_.barrier(deadline); }

  std::size_t all_reduces = 0, broadcasts = 0, violations = 0;

 private:
  template <class Call>
  std::error_code run(Call call) {
    if (!inside_) return call();
    auto open = model_.fence().open();
    return call();
  }

  template <class V>
  bool admits(std::span<const V> s) const {
    const auto within = [&](auto region) {
      const auto* begin = reinterpret_cast<const std::byte*>(region.data());
      const auto* end = begin + region.size_bytes();
      const auto* b = reinterpret_cast<const std::byte*>(s.data());
      return !s.empty() && b >= begin && b + s.size_bytes() <= end;
    };
    const bool in_model = within(model_.parameters()) || within(model_.mutable_gradients());
    return s.empty() || in_model == inside_;
  }
  std::error_code refused() {
    ++violations;
    return std::make_error_code(std::errc::bad_address);
  }

  threads::communicator& ranks_;
  bool inside_;
  model_type& model_;
};

static_assert(check_collective<fenced_ranks>() && collective<fenced_ranks>);

using unit_type = unit_learner<model_type, inner_type, sharded<inproc::endpoint>, fenced_ranks, fenced_ranks>;
using shard_type = decltype(presets::decoupled_diloco<T>(8, fragments))::syncer_type<inproc::endpoint>;

/// ½·‖θ − θ*‖², θ* the teacher's weights and bias (toy_model.hpp).
double distance_to_teacher(std::span<const T> params) { return toy::teacher<T>(features, 0).distance(params); }

BOOST_AUTO_TEST_SUITE(runtime_unit_memory)

BOOST_AUTO_TEST_CASE(two_ranks_on_two_collectives_train_as_one_process_at_twice_the_batch) {
  // Data parallel alone (unit_model, plain SGD steps, no syncer): the mean
  // of two ranks' gradients on their batches of 8 is the gradient of the 16
  // examples together, so 50 steps end where one model at batch 16 ends, up
  // to the rounding of the summation order.
  constexpr std::uint64_t steps = 50;
  constexpr std::size_t batch = 8;
  constexpr T rate = 0.1;
  auto host = threads::make_unit(2), data = threads::make_unit(2);
  std::vector<std::unique_ptr<fenced::arena>> fences;  // a "device" per rank
  std::vector<std::unique_ptr<model_type>> models;
  std::vector<std::unique_ptr<fenced_ranks>> on_host, on_model;
  for (std::uint32_t r = 0; r < 2; ++r) {
    fences.push_back(std::make_unique<fenced::arena>());
    models.push_back(std::make_unique<model_type>(*fences[r], features, 1000 + r));
    on_host.push_back(std::make_unique<fenced_ranks>(host[r], *models[r], false));
    on_model.push_back(std::make_unique<fenced_ranks>(data[r], *models[r], true));
  }
  // The batches: 16 per step from one teacher; rank r takes rows 8r..8r+7.
  toy::teacher<T> teacher(features, 5);
  std::vector<toy::batch<T>> whole, halves[2];
  for (std::uint64_t s = 0; s < steps; ++s) {
    whole.push_back(teacher.next(2 * batch));
    for (std::uint32_t r = 0; r < 2; ++r) {
      toy::batch<T> h;
      h.x.assign(whole.back().x.begin() + r * batch * features, whole.back().x.begin() + (r + 1) * batch * features);
      h.y.assign(whole.back().y.begin() + r * batch, whole.back().y.begin() + (r + 1) * batch);
      halves[r].push_back(std::move(h));
    }
  }
  std::vector<std::string> errors(2);
  std::vector<double> losses(2);
  {
    std::vector<std::jthread> threads;
    for (std::uint32_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          unit_model<model_type, fenced_ranks, fenced_ranks> unit(*models[r], *on_host[r], *on_model[r]);
          inner_type sgd(*fences[r], inner::sgd<T>({.learning_rate = rate}));
          for (std::uint64_t s = 0; s < steps; ++s) {
            losses[r] = unit.compute_gradients(halves[r][s]).loss;
            sgd.step(unit.parameters(), unit.gradients());
          }
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
  }
  for (const auto& e : errors) BOOST_TEST(e == "");
  // The reference: rank 0's initialization (the unit broadcasts it), batch 16.
  toy::linear_regression<T> one(features, 1000);
  double last_loss = 0;
  for (std::uint64_t s = 0; s < steps; ++s) {
    last_loss = one.compute_gradients(whole[s]).loss;
    const auto g = one.gradients();
    auto p = one.parameters();
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= rate * g[i];
  }
  for (std::uint32_t r = 0; r < 2; ++r) {
    const auto p = models[r]->values();
    for (std::size_t i = 0; i < p.size(); ++i) BOOST_TEST(std::abs(p[i] - one.parameters()[i]) < 1e-12);
    // The unit's loss is the mean of the halves' mean losses: the whole's.
    BOOST_TEST(std::abs(losses[r] - last_loss) < 1e-12);
    BOOST_TEST(on_host[r]->violations == 0u);
    BOOST_TEST(on_model[r]->violations == 0u);
    // Every gradient mean on the model's collective, every loss on the host's.
    BOOST_TEST(on_model[r]->all_reduces == steps);
    BOOST_TEST(on_host[r]->all_reduces == steps);
    BOOST_TEST(on_model[r]->broadcasts == 1u);  // rank 0's parameters
  }
}

BOOST_AUTO_TEST_CASE(a_unit_on_two_collectives_trains_against_a_sharded_syncer) {
  // The whole unit_learner: votes, adoptions, the final exchange. Every
  // fragment taken in is broadcast on the model's collective, every vote
  // on the host's; the unit learns and ends with one model on both ranks.
  constexpr std::uint64_t steps = 200;
  toy::linear_regression<T> initial(features, 7);
  std::vector<std::unique_ptr<inproc::hub>> hubs;
  std::vector<std::unique_ptr<shard_type>> shards;
  for (std::uint32_t s = 0; s < 2; ++s) {
    auto options = presets::decoupled_diloco<T>(/*H=*/8, fragments, /*quorum=*/1, /*overlap=*/2);
    options.shard = {s, 2};
    options.log = [](const std::string&) {};
    hubs.push_back(std::make_unique<inproc::hub>());
    shards.push_back(std::make_unique<shard_type>(initial.layout(), initial.parameters(),
                                                  hubs.back()->attach(syncer_peer), options, options.outer,
                                                  options.merge));
  }
  auto host = threads::make_unit(2), data = threads::make_unit(2);
  std::vector<std::unique_ptr<fenced::arena>> fences;
  std::vector<std::unique_ptr<model_type>> models;
  std::vector<std::unique_ptr<fenced_ranks>> on_host, on_model;
  std::vector<std::unique_ptr<sharded<inproc::endpoint>>> links;
  std::vector<std::unique_ptr<unit_type>> unit(2);
  for (std::uint32_t r = 0; r < 2; ++r) {
    fences.push_back(std::make_unique<fenced::arena>());
    models.push_back(std::make_unique<model_type>(*fences[r], features, 1000 + r));
    on_host.push_back(std::make_unique<fenced_ranks>(host[r], *models[r], false));
    on_model.push_back(std::make_unique<fenced_ranks>(data[r], *models[r], true));
    links.push_back(std::make_unique<sharded<inproc::endpoint>>(std::vector{&hubs[r]->attach(0)}, 2));
  }
  std::vector<std::string> errors(2);
  std::vector<std::vector<T>> finals(2);
  std::vector<std::uint64_t> adopted(2, 0);
  {
    std::vector<std::jthread> servers;
    for (auto& s : shards) servers.emplace_back([&s](std::stop_token stop) { s->run(stop); });
    {
      std::vector<std::jthread> threads;
      for (std::uint32_t r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          learner_options options{.id = 0};
          options.on_event = [&adopted, r](const learner_event& e) {
            if (e.what == learner_event::kind::adopted) ++adopted[r];
          };
          unit[r] = std::make_unique<unit_type>(*models[r], *on_host[r], *on_model[r], *links[r], options,
                                                inner_type(*fences[r], inner::sgd<T>({.learning_rate = 0.1})));
          toy::teacher<T> teacher(features, 100 + r);
          errors[r] = unit_test_support::train_then_finish(*unit[r], teacher, steps, 8);
          finals[r] = models[r]->values();
        });
    }
    for (auto& s : servers) s.request_stop();
  }
  for (const auto& e : errors) BOOST_TEST(e == "");
  BOOST_TEST(finals[0] == finals[1], boost::test_tools::per_element());
  BOOST_TEST(distance_to_teacher(finals[0]) < 0.01 * distance_to_teacher(initial.parameters()));
  for (std::uint32_t r = 0; r < 2; ++r) {
    BOOST_TEST(on_host[r]->violations == 0u);
    BOOST_TEST(on_model[r]->violations == 0u);
    BOOST_TEST(adopted[r] > 0u);
    // The gradients of every step, and more: the fragments taken in.
    BOOST_TEST(on_model[r]->all_reduces == steps);
    BOOST_TEST(on_model[r]->broadcasts > 1u);
    // Votes before every step, losses after: well above the steps.
    BOOST_TEST(on_host[r]->all_reduces > 2 * steps);
  }
}

BOOST_AUTO_TEST_CASE(a_data_collective_of_other_ranks_is_refused) {
  // Rank 0 of the host unit with rank 1 of the model's: refused before any
  // collective runs (the broadcast would otherwise pair the wrong ranks).
  auto host = threads::make_unit(2), data = threads::make_unit(2);
  fenced::arena fence;
  model_type model(fence, features, 1);
  fenced_ranks on_host(host[0], model, false), on_model(data[1], model, true);
  BOOST_CHECK_EXCEPTION((unit_model<model_type, fenced_ranks, fenced_ranks>(model, on_host, on_model)),
                        std::invalid_argument, [](const std::invalid_argument& e) {
                          return std::string(e.what()).find("rank 1 of 2, the unit's rank 0 of 2") != std::string::npos;
                        });
  BOOST_TEST(on_model.broadcasts == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_unit_memory_test
