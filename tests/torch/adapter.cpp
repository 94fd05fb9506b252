// The LibTorch adapter (diloco/adapters/torch.hpp): a torch::nn::Module's
// parameters as views into one flat buffer, its gradients written there by
// autograd, a torch::optim optimizer as the inner step, and training through
// learners and a syncer compared with a model written by hand here (its
// gradients derived on paper, no LibTorch) trained by the library's AdamW.
#define BOOST_TEST_MODULE diloco_torch
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <diloco/adapters/torch.hpp>
#include <diloco/collective/threads.hpp>
#include <diloco/collective/unit_model.hpp>
#include <diloco/diloco.hpp>

namespace {

namespace F = ::torch::nn::functional;
using diloco::torch::forward_result;
using diloco::torch::module_model;

constexpr std::int64_t in = 6, hidden = 8, classes = 3;

/// A batch: `x` is n × in row-major, `y` the classes.
struct batch {
  std::vector<float> x;
  std::vector<std::int64_t> y;
};

/// Learner `i`'s batches: a fixed linear teacher on uniform features.
class teacher {
 public:
  explicit teacher(std::uint64_t seed) : rng_(seed) {}
  batch next(std::size_t n) {
    batch b;
    for (std::size_t r = 0; r < n; ++r) {
      float score[classes] = {};
      for (std::int64_t k = 0; k < in; ++k) {
        const float v = float(rng_.uniform() * 2 - 1);
        b.x.push_back(v);
        for (std::int64_t c = 0; c < classes; ++c) score[c] += v * float((k + 2 * c) % 3 - 1);
      }
      b.y.push_back(std::max_element(score, score + classes) - score);
    }
    return b;
  }

 private:
  diloco::splitmix64 rng_;
};

/// Linear(6, 8) → tanh → Linear(8, 3), cross-entropy; seeded initialization.
std::shared_ptr<::torch::nn::SequentialImpl> make_net(std::uint64_t seed) {
  ::torch::manual_seed(seed);
  return ::torch::nn::Sequential(::torch::nn::Linear(in, hidden), ::torch::nn::Tanh(),
                                 ::torch::nn::Linear(hidden, classes))
      .ptr();
}

::torch::Tensor features(const batch& b) {
  return ::torch::from_blob(const_cast<float*>(b.x.data()), {std::int64_t(b.y.size()), in}).clone();
}
::torch::Tensor labels(const batch& b) {
  return ::torch::from_blob(const_cast<std::int64_t*>(b.y.data()), {std::int64_t(b.y.size())}, ::torch::kInt64).clone();
}

/// The net as a diloco model that owns its module (the module is made before
/// the adapter, as a base).
struct owns_net {
  std::shared_ptr<::torch::nn::SequentialImpl> net;
};
struct net_model : owns_net, module_model<batch> {
  explicit net_model(std::uint64_t seed)
      : owns_net{make_net(seed)}, module_model<batch>(*net, [n = net.get()](const batch& b) {
          return forward_result{F::cross_entropy(n->forward(features(b)), labels(b)), b.y.size()};
        }) {}
};

/// The same network written out by hand: parameters in the order and shapes
/// of `make_net` (weights out × in, row-major), gradients derived on paper:
/// with h = tanh(W1 x + b1), z = W2 h + b2 and p = softmax(z),
/// dL/dz = (p − onehot(y)) / n, dL/dW2 = dz hᵀ, dL/dh = W2ᵀ dz,
/// dL/da = dL/dh ⊙ (1 − h²), dL/dW1 = da xᵀ.
class hand_written {
 public:
  using scalar_type = float;
  using batch_type = batch;

  hand_written() {
    layout_.add("0.weight", hidden * in);
    layout_.add("0.bias", hidden);
    layout_.add("2.weight", classes * hidden);
    layout_.add("2.bias", classes);
    params_.assign(layout_.size(), 0.0f);
    grads_.assign(layout_.size(), 0.0f);
  }

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return params_; }
  std::span<const float> gradients() const { return grads_; }

  diloco::step_stats compute_gradients(const batch& b) {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    const float* w1 = params_.data();
    const float* b1 = w1 + hidden * in;
    const float* w2 = b1 + hidden;
    const float* b2 = w2 + classes * hidden;
    float* gw1 = grads_.data();
    float* gb1 = gw1 + hidden * in;
    float* gw2 = gb1 + hidden;
    float* gb2 = gw2 + classes * hidden;
    const std::size_t n = b.y.size();
    double loss = 0;
    for (std::size_t r = 0; r < n; ++r) {
      const float* x = b.x.data() + r * in;
      float h[hidden], z[classes];
      for (std::int64_t j = 0; j < hidden; ++j) {
        double a = b1[j];
        for (std::int64_t k = 0; k < in; ++k) a += double(w1[j * in + k]) * x[k];
        h[j] = float(std::tanh(a));
      }
      double top = -1e300;
      for (std::int64_t c = 0; c < classes; ++c) {
        double s = b2[c];
        for (std::int64_t j = 0; j < hidden; ++j) s += double(w2[c * hidden + j]) * h[j];
        z[c] = float(s);
        top = std::max(top, s);
      }
      double sum = 0;
      for (float v : z) sum += std::exp(v - top);
      loss += -(z[b.y[r]] - top - std::log(sum));
      float dh[hidden] = {};
      for (std::int64_t c = 0; c < classes; ++c) {
        const float dz = float((std::exp(z[c] - top) / sum - (c == b.y[r] ? 1.0 : 0.0)) / double(n));
        gb2[c] += dz;
        for (std::int64_t j = 0; j < hidden; ++j) {
          gw2[c * hidden + j] += dz * h[j];
          dh[j] += w2[c * hidden + j] * dz;
        }
      }
      for (std::int64_t j = 0; j < hidden; ++j) {
        const float da = dh[j] * (1 - h[j] * h[j]);
        gb1[j] += da;
        for (std::int64_t k = 0; k < in; ++k) gw1[j * in + k] += da * x[k];
      }
    }
    return {loss / double(n), n};
  }

 private:
  diloco::parameter_layout layout_;
  std::vector<float> params_, grads_;
};

/// The module's parameters, flattened in `named_parameters()` order by
/// LibTorch itself (not by the adapter).
std::vector<float> flattened(::torch::nn::Module& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters()) {
    const auto t = p.detach().contiguous().reshape(-1);
    out.insert(out.end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  return out;
}

double max_abs_difference(std::span<const float> a, std::span<const float> b) {
  BOOST_TEST_REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}

/// Two learners of `make(i)`'s models with inner steps `make_inner(model)`,
/// DiLoCo (H = 5, Nesterov, averaged) on the deterministic simulator, each
/// taking `steps` steps on its own teacher; returns the global parameters.
template <class Model, class MakeModel, class MakeInner>
std::vector<float> train_two_learners(const std::vector<float>& initial, std::uint64_t steps, MakeModel make,
                                      MakeInner make_inner) {
  using namespace diloco;
  using Inner = std::invoke_result_t<MakeInner, Model&>;
  constexpr std::uint32_t M = 2;
  auto config = presets::diloco<float>(M, 5);
  config.log = [](const std::string&) {};
  hand_written shape;
  sim::network net(1, sim::link_options{std::chrono::milliseconds(2), 1e8});
  syncer<outer::nesterov<float>, merge::average, sim::endpoint> s(shape.layout(), initial, net.attach(syncer_peer),
                                                                  config, config.outer, config.merge);
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::unique_ptr<learner<Model, Inner, sim::endpoint>>> learners;
  std::vector<teacher> teachers;
  for (std::uint32_t i = 0; i < M; ++i) {
    models.push_back(make(i));
    learners.push_back(std::make_unique<learner<Model, Inner, sim::endpoint>>(
        *models.back(), net.attach(i), learner_options{.id = i}, make_inner(*models.back())));
    teachers.emplace_back(100 + i);
  }
  std::vector<sim::learner_plan> plans(M, sim::learner_plan{1.0, steps, {}});
  const auto report = sim::run(
      net, s, learners, plans, [&](std::size_t i) { return teachers[i].next(16); },
      [](std::size_t, const step_stats&, time_point) {});
  BOOST_TEST_REQUIRE(report.completed);
  return s.parameters();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(torch_adapter)

BOOST_AUTO_TEST_CASE(parameters_become_views_into_one_flat_buffer_in_named_order) {
  auto net = make_net(3);
  const auto before = flattened(*net);
  module_model<batch> m(*net, [&](const batch& b) {
    return forward_result{F::cross_entropy(net->forward(features(b)), labels(b)), b.y.size()};
  });
  static_assert(diloco::check_model<module_model<batch>>());

  const auto& layout = m.layout();
  BOOST_TEST_REQUIRE(layout.tensor_count() == 4u);
  BOOST_TEST(layout[0].name == "0.weight");
  BOOST_TEST(layout[3].name == "2.bias");
  BOOST_TEST(layout.size() == std::size_t(hidden * in + hidden + classes * hidden + classes));
  // The values moved in unchanged, in LibTorch's own order.
  const auto span = m.parameters();
  BOOST_TEST(max_abs_difference(span, before) == 0.0);
  // Each parameter is its slice of the flat buffer: a write through the span
  // is the module's parameter, with no copy.
  std::size_t k = 0;
  for (const auto& p : net->parameters()) {
    BOOST_TEST(p.data_ptr<float>() == span.data() + layout[k].offset);
    ++k;
  }
  span[layout[2].offset + 1] = 42.0f;
  BOOST_TEST(net->parameters()[2].view(-1)[1].item<float>() == 42.0f);
}

BOOST_AUTO_TEST_CASE(gradients_are_autograds_written_into_the_flat_buffer) {
  auto net = make_net(4);
  auto reference = std::dynamic_pointer_cast<::torch::nn::SequentialImpl>(net->clone());
  module_model<batch> m(*net, [&](const batch& b) {
    return forward_result{F::cross_entropy(net->forward(features(b)), labels(b)), b.y.size()};
  });
  teacher data(7);
  for (int round = 0; round < 2; ++round) {  // the second pass must not add to the first
    const auto b = data.next(32);
    const auto stats = m.compute_gradients(b);
    // The same pass on an untouched copy of the module, gradients as LibTorch keeps them.
    reference->zero_grad();
    const auto loss = F::cross_entropy(reference->forward(features(b)), labels(b));
    loss.backward();
    std::vector<float> expected;
    for (const auto& p : reference->parameters()) {
      const auto g = p.grad().contiguous().reshape(-1);
      expected.insert(expected.end(), g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    }
    BOOST_TEST(max_abs_difference(m.gradients(), expected) < 1e-7);
    BOOST_TEST(std::abs(stats.loss - loss.item<double>()) < 1e-6);
    BOOST_TEST(stats.tokens == 32u);
  }
  BOOST_TEST(m.copied_gradients() == 0u);  // autograd wrote the views themselves
}

BOOST_AUTO_TEST_CASE(the_hand_written_model_has_autograds_gradients) {
  // The reference of the training test below, checked against autograd.
  auto net = make_net(5);
  hand_written h;
  const auto initial = flattened(*net);
  std::copy(initial.begin(), initial.end(), h.parameters().begin());
  module_model<batch> m(*net, [&](const batch& b) {
    return forward_result{F::cross_entropy(net->forward(features(b)), labels(b)), b.y.size()};
  });
  const auto b = teacher(9).next(16);
  const auto ours = h.compute_gradients(b);
  const auto theirs = m.compute_gradients(b);
  BOOST_TEST(max_abs_difference(h.gradients(), m.gradients()) < 1e-6);
  BOOST_TEST(std::abs(ours.loss - theirs.loss) < 1e-5);
}

BOOST_AUTO_TEST_CASE(a_forward_that_resets_the_gradients_still_yields_them) {
  auto net = make_net(6);
  auto reference = std::dynamic_pointer_cast<::torch::nn::SequentialImpl>(net->clone());
  module_model<batch> m(*net, [&](const batch& b) {
    net->zero_grad(/*set_to_none=*/true);  // as torch.optim's zero_grad does in recent versions
    return forward_result{F::cross_entropy(net->forward(features(b)), labels(b)), b.y.size()};
  });
  const auto b = teacher(3).next(8);
  m.compute_gradients(b);
  F::cross_entropy(reference->forward(features(b)), labels(b)).backward();
  std::vector<float> expected;
  for (const auto& p : reference->parameters()) {
    const auto g = p.grad().contiguous().reshape(-1);
    expected.insert(expected.end(), g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
  }
  BOOST_TEST(max_abs_difference(m.gradients(), expected) < 1e-7);
  BOOST_TEST(m.copied_gradients() == 4u);
  // ... and the views are back: the next pass needs no copy.
  m.flat().zero_gradients();
  F::cross_entropy(net->forward(features(b)), labels(b)).backward();
  BOOST_TEST(m.flat().collect_gradients() == 0u);
}

BOOST_AUTO_TEST_CASE(tied_frozen_and_embedding_parameters) {
  struct tied : ::torch::nn::Module {
    tied() {
      a = register_parameter("a", ::torch::randn({5, 3}));
      register_parameter("b", a);  // one tensor under two names
      bias = register_parameter("bias", ::torch::zeros({5}));
      frozen = register_parameter("frozen", ::torch::ones({2}), /*requires_grad=*/false);
      embed = register_module("embed", ::torch::nn::Embedding(4, 2));
    }
    ::torch::Tensor a, bias, frozen;
    ::torch::nn::Embedding embed{nullptr};
  };
  tied net;
  diloco::torch::flat_parameters flat(net);
  const auto& layout = flat.layout();
  // `a` once (tied), `bias`, the embedding table; not the frozen tensor.
  BOOST_TEST_REQUIRE(layout.tensor_count() == 3u);
  BOOST_TEST(layout[0].name == "a");
  BOOST_TEST(layout[1].name == "bias");
  BOOST_TEST(layout[2].name == "embed.weight");
  BOOST_TEST((layout[0].role == diloco::tensor_role::dense));
  BOOST_TEST((layout[2].role == diloco::tensor_role::embedding));
  BOOST_TEST(layout.size() == 15u + 5u + 8u);
  BOOST_TEST(net.named_parameters()["b"].data_ptr<float>() == flat.value_span().data());
  BOOST_TEST(net.frozen.data_ptr<float>()[0] == 1.0f);

  tied other;
  diloco::torch::flat_parameters named(other, {.embeddings = {"bias"}});
  BOOST_TEST((named.layout()[1].role == diloco::tensor_role::embedding));
}

BOOST_AUTO_TEST_CASE(bad_modules_and_losses_are_refused_and_leave_the_module_alone) {
  auto check = [](auto&& f, const std::string& says) {
    BOOST_CHECK_EXCEPTION(f(), std::invalid_argument, [&](const std::invalid_argument& e) {
      BOOST_TEST_MESSAGE(e.what());
      return std::string(e.what()).find(says) != std::string::npos;
    });
  };
  ::torch::nn::Sequential empty{::torch::nn::Tanh()};
  check([&] { diloco::torch::flat_parameters f(*empty); }, "no trainable parameter");

  auto doubles = ::torch::nn::Linear(2, 2);
  doubles->to(::torch::kFloat64);
  check([&] { diloco::torch::flat_parameters f(*doubles); }, "fp32 only");

  auto net = make_net(1);
  void* const where = net->parameters()[0].data_ptr();
  check([&] { diloco::torch::flat_parameters f(*net, {.embeddings = {"no.such"}}); }, "no.such");
  BOOST_TEST(net->parameters()[0].data_ptr() == where);  // not rebound
  check([&] { module_model<batch> m(*net, {}); }, "forward function is empty");

  module_model<batch> vector_loss(*net, [&](const batch& b) {
    return forward_result{
        F::cross_entropy(net->forward(features(b)), labels(b), F::CrossEntropyFuncOptions().reduction(::torch::kNone)),
        b.y.size()};
  });
  check([&] { vector_loss.compute_gradients(teacher(1).next(4)); }, "must be a scalar");

  auto net2 = make_net(2);
  module_model<batch> detached(*net2, [&](const batch& b) {
    ::torch::NoGradGuard off;
    return forward_result{F::cross_entropy(net2->forward(features(b)), labels(b)), b.y.size()};
  });
  check([&] { detached.compute_gradients(teacher(1).next(4)); }, "does not require grad");
}

BOOST_AUTO_TEST_CASE(a_torch_optimizer_is_an_inner_step_of_the_module_only) {
  using opt = diloco::torch::optimizer<::torch::optim::AdamW>;
  static_assert(diloco::check_inner_step<opt>());
  static_assert(diloco::checkpointable<opt>);
  net_model a(1), b(1);
  opt step(a, ::torch::optim::AdamWOptions(0.01));
  std::vector<float> elsewhere(a.parameters().size());
  BOOST_CHECK_THROW(step.step(elsewhere, a.gradients()), std::invalid_argument);
  BOOST_CHECK_THROW(step.step(b.parameters(), b.gradients()), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(the_optimizer_state_round_trips_through_save_and_load) {
  using opt = diloco::torch::optimizer<::torch::optim::AdamW>;
  net_model a(11);
  opt step(a, ::torch::optim::AdamWOptions(0.05));
  teacher data(2);
  std::vector<batch> batches;
  for (int i = 0; i < 6; ++i) batches.push_back(data.next(16));
  for (int i = 0; i < 3; ++i) {
    a.compute_gradients(batches[i]);
    step.step(a.parameters(), a.gradients());
  }
  std::stringstream saved;
  step.save(saved);
  const std::vector<float> at_save(a.parameters().begin(), a.parameters().end());
  auto go_on = [&](opt& s) {
    for (int i = 3; i < 6; ++i) {
      a.compute_gradients(batches[i]);
      s.step(a.parameters(), a.gradients());
    }
    return std::vector<float>(a.parameters().begin(), a.parameters().end());
  };
  const auto straight = go_on(step);

  // A fresh optimizer that loads the state continues exactly as the first did.
  std::copy(at_save.begin(), at_save.end(), a.parameters().begin());
  opt resumed(a, ::torch::optim::AdamWOptions(0.5));  // options come from the state
  resumed.load(saved);
  BOOST_TEST(resumed.options().lr() == 0.05);
  BOOST_TEST(max_abs_difference(go_on(resumed), straight) == 0.0);

  // A damaged archive is refused, and the optimizer keeps its state.
  std::string bytes = saved.str();
  bytes[bytes.size() / 2] = char(bytes[bytes.size() / 2] ^ 0x5a);
  bytes.resize(bytes.size() - 40);
  std::istringstream damaged(bytes);
  BOOST_CHECK_THROW(resumed.load(damaged), diloco::corrupt_state);
  BOOST_TEST(resumed.options().lr() == 0.05);
}

BOOST_AUTO_TEST_CASE(two_learners_through_the_adapter_train_as_the_hand_written_model_does) {
  // The same DiLoCo run three ways: the module through the adapter with
  // torch::optim::AdamW, the module through the adapter with the library's
  // AdamW, and the hand-written model with the library's AdamW. Same initial
  // global model, same data; each learner's own model starts elsewhere (it
  // is overwritten when it joins).
  const auto initial = flattened(*make_net(21));
  constexpr std::uint64_t steps = 40;
  const diloco::inner::adamw_options adamw{.learning_rate = 0.02, .weight_decay = 0.01};

  const auto by_hand = train_two_learners<hand_written>(
      initial, steps, [](std::uint32_t) { return std::make_unique<hand_written>(); },
      [&](hand_written&) { return diloco::inner::adamw<float>(adamw); });
  const auto adapter_library_adamw = train_two_learners<net_model>(
      initial, steps, [](std::uint32_t i) { return std::make_unique<net_model>(50 + i); },
      [&](net_model&) { return diloco::inner::adamw<float>(adamw); });
  BOOST_TEST_MESSAGE("adapter + library AdamW vs by hand: " << max_abs_difference(adapter_library_adamw, by_hand));
  BOOST_TEST(max_abs_difference(adapter_library_adamw, by_hand) < 1e-4);  // float rounding; training moves them by ~1.8
  const auto adapter_torch_adamw = train_two_learners<net_model>(
      initial, steps, [](std::uint32_t i) { return std::make_unique<net_model>(50 + i); },
      [&](net_model& m) {
        return diloco::torch::optimizer<::torch::optim::AdamW>(
            m, ::torch::optim::AdamWOptions(adamw.learning_rate).weight_decay(adamw.weight_decay));
      });
  BOOST_TEST_MESSAGE("adapter + torch::optim::AdamW vs by hand: " << max_abs_difference(adapter_torch_adamw, by_hand));
  BOOST_TEST(max_abs_difference(adapter_torch_adamw, by_hand) < 1e-4);  // float rounding; training moves them by ~1.8
  // Training moved the model: the comparison is not of untouched copies.
  BOOST_TEST_MESSAGE("moved by training: " << max_abs_difference(by_hand, initial));
  BOOST_TEST(max_abs_difference(by_hand, initial) > 0.05);
}

BOOST_AUTO_TEST_CASE(a_unit_of_two_ranks_trains_the_module_as_one_process_at_twice_the_batch) {
  // DDP's arithmetic through the adapter: two ranks (threads) at batch 16,
  // each with torch::optim::AdamW stepping on the parameters' .grad(), which
  // unit_model averages in place; against one process at batch 32 on the
  // same examples. Each rank's module starts elsewhere: the unit takes rank 0's.
  constexpr std::uint64_t steps = 30;
  constexpr std::size_t half = 16;
  const ::torch::optim::AdamWOptions adamw = ::torch::optim::AdamWOptions(0.02).weight_decay(0.01);
  using opt = diloco::torch::optimizer<::torch::optim::AdamW>;
  auto two_halves = [](std::uint64_t step) {
    teacher data(1000 + step);
    return std::array<batch, 2>{data.next(half), data.next(half)};
  };
  net_model whole(7);
  opt whole_step(whole, adamw);
  for (std::uint64_t s = 0; s < steps; ++s) {
    auto halves = two_halves(s);
    batch both = halves[0];
    both.x.insert(both.x.end(), halves[1].x.begin(), halves[1].x.end());
    both.y.insert(both.y.end(), halves[1].y.begin(), halves[1].y.end());
    whole.compute_gradients(both);
    whole_step.step(whole.parameters(), whole.gradients());
  }

  auto ranks = diloco::threads::make_unit(2);
  std::vector<std::vector<float>> finals(2);
  std::vector<std::string> errors(2);
  {
    std::vector<std::jthread> threads;
    for (std::size_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        try {
          net_model mine(r == 0 ? 7 : 99);
          diloco::unit_model<net_model, diloco::threads::communicator> unit(mine, ranks[r]);
          opt step(mine, adamw);
          for (std::uint64_t s = 0; s < steps; ++s) {
            const auto stats = unit.compute_gradients(two_halves(s)[r]);
            if (stats.tokens != 2 * half) throw std::runtime_error("tokens: the unit's, both ranks' examples");
            // The spans the optimizer was made for: the averaging was in place.
            step.step(unit.parameters(), unit.gradients());
          }
          finals[r].assign(mine.parameters().begin(), mine.parameters().end());
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
  }
  BOOST_TEST(errors[0] == "");
  BOOST_TEST(errors[1] == "");
  BOOST_TEST(finals[0] == finals[1], boost::test_tools::per_element());  // the ranks never part
  const std::vector<float> one(whole.parameters().begin(), whole.parameters().end());
  BOOST_TEST_MESSAGE("unit of 2 at batch 16 vs one process at batch 32: " << max_abs_difference(finals[0], one));
  BOOST_TEST(max_abs_difference(finals[0], one) < 1e-5);  // the rounding of two half-batch means
  // One rank alone at batch 16 is another model: the comparison can fail.
  net_model alone(7);
  opt alone_step(alone, adamw);
  for (std::uint64_t s = 0; s < steps; ++s) {
    alone.compute_gradients(two_halves(s)[0]);
    alone_step.step(alone.parameters(), alone.gradients());
  }
  const std::vector<float> solo(alone.parameters().begin(), alone.parameters().end());
  BOOST_TEST_MESSAGE("one rank alone at batch 16: " << max_abs_difference(solo, one));
  BOOST_TEST(max_abs_difference(solo, one) > 1e-3);
}

BOOST_AUTO_TEST_SUITE_END()
