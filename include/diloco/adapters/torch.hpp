// LibTorch adapter: any `torch::nn::Module` as a diloco Model, and any
// `torch::optim` optimizer as an InnerStep.
//
// The module's trainable parameters are moved into one flat buffer and each
// parameter is made a view into it (`Tensor::set_data`, the same tensor
// object, so every reference the user holds stays valid), and likewise each
// gradient into a second flat buffer. Autograd accumulates into a defined
// gradient in place, so a backward pass writes the flat gradient buffer
// directly and the learner reads and writes the model's state with no copy
// per step. Component `diloco::torch` (LibTorch 1.13+, Debian: libtorch-dev).
//
// The namespace is `diloco::torch`; LibTorch's own is spelled `::torch` here.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "diloco/concepts/model.hpp"
#include "diloco/error.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/runtime/host_memory.hpp"
#include "diloco/serialize.hpp"

namespace diloco::torch {

/// How `flat_parameters` names and classifies a module's tensors.
struct module_options {
  /// Tensors to treat as embedding tables (`tensor_role::embedding`: merged
  /// directly by radial-directional averaging), by their name in
  /// `named_parameters()`, besides the `weight` of every `torch::nn::Embedding`
  /// submodule, which is found by itself.
  std::vector<std::string> embeddings{};
};

/// A module's trainable parameters (those with `requires_grad`), each made a
/// view into one flat fp32 buffer, and their gradients into another, in
/// `named_parameters()` order. A parameter registered under two names (tied
/// weights) appears once, under its first name. Frozen parameters and buffers
/// (e.g. batch-norm statistics) are not part of the layout: they are neither
/// trained nor exchanged.
///
/// Keep the module alive and do not re-register its parameters while this
/// object exists. Adapt a module once: a second `flat_parameters` over it
/// takes its parameters over, and the first one's buffers are no longer the
/// module's. Not thread-safe.
class flat_parameters {
 public:
  /// Throws `std::invalid_argument` if the module has no trainable parameter,
  /// a parameter is not fp32, not dense, or the parameters are not all on one
  /// device; the module is unchanged then.
  explicit flat_parameters(::torch::nn::Module& module, const module_options& options = {}) {
    std::unordered_set<const void*> seen;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
      const ::torch::Tensor& p = item.value();
      if (!p.requires_grad()) continue;
      if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;  // tied: already placed
      if (p.scalar_type() != ::torch::kFloat32)
        throw std::invalid_argument("diloco::torch: parameter '" + item.key() + "' is " +
                                    std::string(c10::toString(p.scalar_type())) + "; the adapter trains fp32 only");
      if (p.layout() != ::torch::kStrided)
        throw std::invalid_argument("diloco::torch: parameter '" + item.key() + "' is not a dense tensor");
      if (!entries_.empty() && p.device() != entries_.front().param.device())
        throw std::invalid_argument("diloco::torch: parameter '" + item.key() + "' is on " + p.device().str() +
                                    ", the others on " + entries_.front().param.device().str());
      if (p.numel() == 0) continue;  // nothing to train; a layout tensor may not be empty
      entries_.push_back({p, 0, static_cast<std::size_t>(p.numel())});
      names_.push_back(item.key());
    }
    if (entries_.empty())
      throw std::invalid_argument("diloco::torch: the module has no trainable parameter (requires_grad)");

    std::unordered_set<const void*> embedding_tables;
    find_embeddings(module, embedding_tables);
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      bool embedding = embedding_tables.contains(entries_[i].param.unsafeGetTensorImpl());
      for (const auto& name : options.embeddings) embedding = embedding || name == names_[i];
      const auto index =
          layout_.add(names_[i], entries_[i].size, embedding ? tensor_role::embedding : tensor_role::dense);
      entries_[i].offset = layout_[index].offset;
    }
    for (const auto& name : options.embeddings)
      if (layout_.find(name) == nullptr)
        throw std::invalid_argument("diloco::torch: module_options::embeddings names '" + name +
                                    "', which is not a trainable parameter of the module");

    // Move the values in, then make each parameter and its gradient views.
    const auto on = ::torch::TensorOptions().dtype(::torch::kFloat32).device(entries_.front().param.device());
    values_ = ::torch::empty({static_cast<std::int64_t>(layout_.size())}, on);
    gradients_ = ::torch::zeros({static_cast<std::int64_t>(layout_.size())}, on);
    ::torch::NoGradGuard no_grad;
    for (auto& e : entries_) {
      auto view = slice(values_, e).view(e.param.sizes());
      view.copy_(e.param.detach());
      e.param.set_data(view);
      e.param.mutable_grad() = slice(gradients_, e).view(e.param.sizes());
    }
  }

  flat_parameters(const flat_parameters&) = delete;
  flat_parameters& operator=(const flat_parameters&) = delete;

  const parameter_layout& layout() const noexcept { return layout_; }

  /// The flat parameters and gradients, 1-D fp32 tensors on the parameters'
  /// device.
  const ::torch::Tensor& values() const noexcept { return values_; }
  const ::torch::Tensor& gradients() const noexcept { return gradients_; }
  ::torch::Device device() const { return values_.device(); }

  /// The module's parameter tensors, in layout order (what an optimizer over
  /// them takes).
  std::vector<::torch::Tensor> tensors() const {
    std::vector<::torch::Tensor> out;
    out.reserve(entries_.size());
    for (const auto& e : entries_) out.push_back(e.param);
    return out;
  }

  /// The same memory as spans (device memory if the parameters are on a GPU).
  std::span<float> value_span() noexcept { return {values_.data_ptr<float>(), layout_.size()}; }
  std::span<float> gradient_span() noexcept { return {gradients_.data_ptr<float>(), layout_.size()}; }

  /// Zeroes the flat gradients and makes each parameter's `.grad()` its view
  /// again (a `zero_grad(set_to_none)` in between reset it).
  void zero_gradients() {
    ::torch::NoGradGuard no_grad;
    gradients_.zero_();
    for (auto& e : entries_)
      if (!is_view(e)) e.param.mutable_grad() = slice(gradients_, e).view(e.param.sizes());
  }

  /// After a backward pass: a gradient that autograd did not write into its
  /// view (the user's code replaced or reset `.grad()`) is copied in, and the
  /// view restored; an undefined one (the parameter took no part in the loss)
  /// is zero. Returns how many were copied: 0 in the usual case.
  std::size_t collect_gradients() {
    ::torch::NoGradGuard no_grad;
    std::size_t copied = 0;
    for (auto& e : entries_) {
      if (is_view(e)) continue;
      auto view = slice(gradients_, e).view(e.param.sizes());
      const auto& g = e.param.grad();
      if (g.defined())
        view.copy_(g);
      else
        view.zero_();
      e.param.mutable_grad() = view;
      ++copied;
    }
    return copied;
  }

 private:
  struct entry {
    ::torch::Tensor param;
    std::size_t offset = 0;
    std::size_t size = 0;
  };

  /// The `weight` of every `torch::nn::Embedding` in `m` and its descendants
  /// (walked through `children()`: `modules()` needs `m` held by a shared_ptr).
  static void find_embeddings(::torch::nn::Module& m, std::unordered_set<const void*>& out) {
    if (const auto* e = m.as<::torch::nn::Embedding>()) out.insert(e->weight.unsafeGetTensorImpl());
    for (const auto& child : m.children()) find_embeddings(*child, out);
  }
  static ::torch::Tensor slice(const ::torch::Tensor& flat, const entry& e) {
    return flat.narrow(0, static_cast<std::int64_t>(e.offset), static_cast<std::int64_t>(e.size));
  }
  bool is_view(const entry& e) const {
    const auto& g = e.param.grad();
    return g.defined() && g.data_ptr() == static_cast<void*>(gradients_.data_ptr<float>() + e.offset) &&
           g.is_contiguous() && g.sizes() == e.param.sizes();
  }

  parameter_layout layout_;
  std::vector<entry> entries_;
  std::vector<std::string> names_;
  ::torch::Tensor values_;
  ::torch::Tensor gradients_;
};

/// What the user's forward function returns for one batch: the scalar loss to
/// back-propagate and how many tokens (examples) it covered, which weights
/// the learner's contribution.
struct forward_result {
  ::torch::Tensor loss;
  std::uint64_t tokens = 0;
};

/// A `torch::nn::Module` as a diloco Model (concepts/model.hpp): its layout
/// and flat parameters and gradients are those of `flat_parameters`, and
/// `compute_gradients(batch)` zeroes the gradients, calls the user's
/// `forward(batch)` with autograd on and back-propagates the loss it returns.
///
/// `Memory` is where the parameters live: `host_memory` for CPU tensors, or
/// e.g. `diloco::cuda::device_memory` for CUDA tensors (the learner then
/// keeps its bases there and runs its outer-loop passes as kernels).
///
///     auto net = std::make_shared<my_net>();
///     diloco::torch::module_model<my_batch> model(*net, [&](const my_batch& b) {
///       return diloco::torch::forward_result{
///           ::torch::nn::functional::cross_entropy(net->forward(b.x), b.y), std::uint64_t(b.y.numel())};
///     });
///     diloco::learner<decltype(model), diloco::inner::adamw<float>, Transport> l(model, transport);
template <class Batch, class Memory = host_memory>
class module_model {
 public:
  using scalar_type = float;
  using batch_type = Batch;
  using forward_function = std::function<forward_result(const Batch&)>;

  /// Throws `std::invalid_argument` as `flat_parameters` does, for an empty
  /// `forward`, or for parameters on a device `Memory` does not serve.
  module_model(::torch::nn::Module& module, forward_function forward, const module_options& options = {},
               Memory memory = Memory())
      : module_(&module), forward_(checked(std::move(forward))), flat_(module, options), memory_(std::move(memory)) {
    constexpr bool host = std::is_same_v<Memory, host_memory>;
    if (host != flat_.device().is_cpu())
      throw std::invalid_argument("diloco::torch::module_model: the parameters are on " + flat_.device().str() +
                                  (host ? ", but the memory space is host memory (pass a device memory space)"
                                        : ", but the memory space is not host memory"));
  }

  module_model(const module_model&) = delete;
  module_model& operator=(const module_model&) = delete;

  const parameter_layout& layout() const noexcept { return flat_.layout(); }
  std::span<float> parameters() noexcept { return flat_.value_span(); }
  std::span<const float> gradients() noexcept { return flat_.gradient_span(); }
  /// The same gradients, writable: the `.grad()` of every parameter is a
  /// view into them, so a `unit_model` averages them here in place, as DDP
  /// does, and a `torch::optim` optimizer (`optimizer`) steps on the mean.
  std::span<float> mutable_gradients() noexcept { return flat_.gradient_span(); }

  /// One forward and backward pass. Throws `std::invalid_argument` if the
  /// forward function returns no loss, a loss of more than one element or
  /// one that does not require grad (computed under `NoGradGuard`, or from
  /// no parameter); whatever `forward` or autograd throw passes through.
  step_stats compute_gradients(const Batch& batch) {
    const auto began = std::chrono::steady_clock::now();
    flat_.zero_gradients();
    ::torch::AutoGradMode grad_on(true);  // the caller may be under NoGradGuard
    forward_result r = forward_(batch);
    if (!r.loss.defined()) throw std::invalid_argument("diloco::torch::module_model: forward returned no loss");
    if (r.loss.numel() != 1)
      throw std::invalid_argument("diloco::torch::module_model: forward returned a loss of " +
                                  std::to_string(r.loss.numel()) + " elements; it must be a scalar");
    if (!r.loss.requires_grad())
      throw std::invalid_argument(
          "diloco::torch::module_model: the loss does not require grad (computed under NoGradGuard, or from no "
          "trainable parameter)");
    r.loss.backward();
    copied_gradients_ += flat_.collect_gradients();
    last_compute_ = std::chrono::steady_clock::now() - began;
    return {r.loss.item<double>(), r.tokens};
  }

  /// Requirement 7 of `model`, for a module whose tensors are not host memory.
  Memory& memory() noexcept requires(!std::is_same_v<Memory, host_memory>) { return memory_; }

  ::torch::nn::Module& module() noexcept { return *module_; }
  flat_parameters& flat() noexcept { return flat_; }
  /// Wall time of the last `compute_gradients`.
  std::chrono::steady_clock::duration last_compute() const noexcept { return last_compute_; }
  /// Gradients `compute_gradients` had to copy into the flat buffer because
  /// the forward function replaced them (0 unless it calls `zero_grad` or
  /// assigns `.grad()`).
  std::uint64_t copied_gradients() const noexcept { return copied_gradients_; }

 private:
  static forward_function checked(forward_function f) {
    if (!f) throw std::invalid_argument("diloco::torch::module_model: forward function is empty");
    return f;
  }

  ::torch::nn::Module* module_;
  forward_function forward_;
  flat_parameters flat_;
  Memory memory_;
  std::chrono::steady_clock::duration last_compute_{};
  std::uint64_t copied_gradients_ = 0;
};

/// The options type of a `torch::optim` optimizer, for `optimizer<O>`;
/// specialize it for an optimizer of your own.
template <class Optimizer>
struct options_of;
template <>
struct options_of<::torch::optim::SGD> {
  using type = ::torch::optim::SGDOptions;
};
template <>
struct options_of<::torch::optim::Adam> {
  using type = ::torch::optim::AdamOptions;
};
template <>
struct options_of<::torch::optim::AdamW> {
  using type = ::torch::optim::AdamWOptions;
};
template <>
struct options_of<::torch::optim::Adagrad> {
  using type = ::torch::optim::AdagradOptions;
};
template <>
struct options_of<::torch::optim::RMSprop> {
  using type = ::torch::optim::RMSpropOptions;
};

/// A `torch::optim` optimizer as an InnerStep (concepts/inner_step.hpp),
/// over the parameters of a `flat_parameters` (or a `module_model`): its
/// `step(params, grads)` calls the optimizer's `step()` on those tensors,
/// whose data and gradients are the spans the learner passes. Its options
/// apply at the next step when changed through `options()` (one parameter
/// group). Checkpointable: `save` and `load` write and read the optimizer's
/// own archive (`torch::save`) inside a tagged block.
///
/// Optimizers whose `step` needs a closure (LBFGS) do not fit.
template <class Optimizer, class Options = typename options_of<Optimizer>::type>
class optimizer {
 public:
  using scalar_type = float;
  using options_type = Options;

  optimizer(flat_parameters& params, Options options)
      : params_(params.tensors()),
        options_(std::move(options)),
        values_(params.values().data_ptr<float>()),
        gradients_(params.gradients().data_ptr<float>()),
        size_(params.layout().size()),
        optimizer_(std::make_unique<Optimizer>(params_, options_)) {}

  template <class Batch, class Memory>
  optimizer(module_model<Batch, Memory>& model, Options options) : optimizer(model.flat(), std::move(options)) {}

  /// Throws `std::invalid_argument` if `params` and `grads` are not the
  /// flat buffers this optimizer was made for.
  void step(std::span<float> params, std::span<const float> grads) {
    if (params.data() != values_ || grads.data() != gradients_ || params.size() != size_ || grads.size() != size_)
      throw std::invalid_argument(
          "diloco::torch::optimizer: step() was given other parameters than those of the module it was made for");
    for (auto& group : optimizer_->param_groups()) static_cast<Options&>(group.options()) = options_;
    optimizer_->step();
  }

  Options& options() noexcept { return options_; }
  const Options& options() const noexcept { return options_; }
  Optimizer& torch_optimizer() noexcept { return *optimizer_; }

  /// Writes the options and the optimizer's state (LibTorch's archive of an
  /// optimizer holds the state but restores no options, so both are kept).
  void save(std::ostream& out) const {
    ::torch::serialize::OutputArchive options;
    options_.serialize(options);
    std::ostringstream options_bytes, state_bytes;
    options.save_to(options_bytes);
    ::torch::save(*optimizer_, state_bytes);
    serial::write_tag(out, "TOPT", 1);
    write_blob(out, options_bytes.str());
    write_blob(out, state_bytes.str());
  }

  /// Throws `corrupt_state` on a bad block; the state is unchanged then.
  void load(std::istream& in) {
    serial::expect_tag(in, "TOPT", 1);
    const auto options_bytes = read_blob(in, "torch optimizer options");
    const auto state_bytes = read_blob(in, "torch optimizer state");
    Options options = options_;
    std::unique_ptr<Optimizer> fresh;
    try {
      ::torch::serialize::InputArchive archive;
      std::istringstream options_in(options_bytes);
      archive.load_from(options_in);
      options.serialize(archive);
      fresh = std::make_unique<Optimizer>(params_, options);
      std::istringstream state_in(state_bytes);
      ::torch::load(*fresh, state_in);
    } catch (const c10::Error& e) {
      throw corrupt_state(std::string("diloco::torch::optimizer: unreadable optimizer archive: ") +
                          e.what_without_backtrace());
    }
    optimizer_ = std::move(fresh);
    options_ = std::move(options);
  }

 private:
  static void write_blob(std::ostream& out, const std::string& bytes) {
    serial::write_array(out, std::span<const char>(bytes.data(), bytes.size()));
  }
  static std::string read_blob(std::istream& in, const char* what) {
    const auto bytes = serial::read_array<char>(in, serial::max_state_elements, what);
    return {bytes.begin(), bytes.end()};
  }

  std::vector<::torch::Tensor> params_;
  Options options_;
  const float* values_;
  const float* gradients_;
  std::size_t size_;
  std::unique_ptr<Optimizer> optimizer_;
};

}  // namespace diloco::torch
