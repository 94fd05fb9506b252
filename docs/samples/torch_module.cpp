// Bring your own trainer, with LibTorch: a torch::nn::Module handed to the
// learner through diloco::torch::module_model, and torch::optim::AdamW as its
// inner step. Three learner threads and a syncer thread fit
// y = w·x + b with Decoupled DiLoCo, as hand_over_a_model.cpp does by hand.
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include <diloco/adapters/torch.hpp>
#include <diloco/diloco.hpp>

/// A batch of examples of the line to learn, y = 1.5·x0 − 2·x1 + 0.5·x2 + 3·x3 − 1, with a little noise.
struct batch {
  ::torch::Tensor x, y;
};

batch draw(std::int64_t n) {
  const auto x = ::torch::rand({n, 4}) * 2 - 1;
  const auto w = ::torch::tensor({1.5f, -2.0f, 0.5f, 3.0f});
  return {x, (x * w).sum(1, /*keepdim=*/true) - 1 + 0.01 * ::torch::randn({n, 1})};
}

/// Your module, as you would write it anyway; the adapter makes its
/// parameters views into one flat buffer the learner reads and writes.
struct line : ::torch::nn::Module {
  ::torch::nn::Linear fit = register_module("fit", ::torch::nn::Linear(4, 1));
  ::torch::Tensor forward(const ::torch::Tensor& x) { return fit(x); }
};

/// The module and its adapter, one per learner.
struct learner_model {
  std::shared_ptr<line> net = std::make_shared<line>();
  diloco::torch::module_model<batch> model{
      *net, [this](const batch& b) {
        return diloco::torch::forward_result{::torch::mse_loss(net->forward(b.x), b.y), std::uint64_t(b.x.size(0))};
      }};
};

int main() {
  using namespace diloco;
  ::torch::manual_seed(1);
  ::torch::set_num_threads(1);  // one thread per learner
  learner_model init;           // the initial global model
  const batch held_out = draw(512);
  auto loss_of = [&](std::span<const float> theta) {
    learner_model probe;
    std::copy(theta.begin(), theta.end(), probe.model.parameters().begin());
    ::torch::NoGradGuard no_grad;
    return ::torch::mse_loss(probe.net->forward(held_out.x), held_out.y).item<double>();
  };
  const double before = loss_of(init.model.parameters());

  inproc::hub hub;
  auto config = presets::decoupled_diloco(/*H=*/10, /*P=*/2, /*K=*/1);
  auto sync = config.make_syncer(init.model.layout(), init.model.parameters(), hub.attach(syncer_peer));
  std::jthread server([&](std::stop_token stop) { sync.run(stop); });

  std::vector<std::jthread> learners;
  for (std::uint32_t id = 0; id < 3; ++id)
    learners.emplace_back([&, id] {
      learner_model mine;  // replaced by the global model on joining
      // Any torch::optim optimizer over the module's parameters is an inner step.
      diloco::torch::optimizer<::torch::optim::AdamW> adamw(mine.model,
                                                            ::torch::optim::AdamWOptions(0.02).weight_decay(0));
      learner<decltype(mine.model), decltype(adamw), inproc::endpoint> unit(mine.model, hub.attach(id), {.id = id},
                                                                            std::move(adamw));
      for (int step = 0; step < 1000; ++step) {
        // A schedule: the learning rate decays linearly to a twentieth, so the model settles.
        unit.inner().options().lr(0.02 * (1.0 - 0.95 * step / 1000.0));
        unit.step(draw(16)).value();  // throws if the learner stopped
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      unit.finish();  // sends what is left, then leaves
    });
  learners.clear();
  server.request_stop();
  server.join();

  const std::vector<float> theta = sync.parameters();  // fit.weight (4), then fit.bias
  const double after = loss_of(theta);
  std::printf("held-out loss %.4f -> %.6f after %llu outer updates; w = %.3f %.3f %.3f %.3f, b = %.3f\n", before, after,
              static_cast<unsigned long long>(sync.metrics().outer_updates), theta[0], theta[1], theta[2], theta[3],
              theta[4]);
  const std::array<float, 5> truth{1.5f, -2.0f, 0.5f, 3.0f, -1.0f};
  bool ok = after < 0.01 * before;
  for (std::size_t i = 0; i < truth.size(); ++i) ok = ok && std::abs(theta[i] - truth[i]) < 0.05f;
  return ok ? 0 : 1;
}
