// Archetypes: for each concept, a type that provides exactly the documented
// requirements and nothing more (asio's archetypes). Code that compiles with
// an archetype relies on nothing the concept does not promise.
//
// Where a requirement is "convertible to", the archetype returns a type that
// is only convertible (`gradient_view`, `weight_value`). No archetype is
// default-constructible or copyable, since no concept asks for that; the
// policies (inner, outer, merge) are movable because the learner and the
// syncer take them by value.
//
// Each archetype also behaves, in the simplest way, so that a learner and a
// syncer built from archetypes can run a round whose result is known by hand.
//
// Below them, for each concept, `X_lacking<r>`: a declaration-only type with
// every requirement of concept X except `r` (`X_lacking<none>` has them all),
// and `X_with_integer_scalar` where the concept has a `scalar_type`. The
// concepts only look at declarations, so none of them is defined.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <diloco/concepts/checkpointable.hpp>
#include <diloco/concepts/collective.hpp>
#include <diloco/concepts/inner_step.hpp>
#include <diloco/concepts/merge_policy.hpp>
#include <diloco/concepts/model.hpp>
#include <diloco/concepts/outer_optimizer.hpp>
#include <diloco/concepts/transport.hpp>
#include <diloco/error.hpp>
#include <diloco/params/fragments.hpp>
#include <diloco/params/layout.hpp>
#include <diloco/protocol/message.hpp>
#include <diloco/serialize.hpp>

namespace archetypes {

/// Constructs an archetype that has no settings.
struct construct_t {
  explicit construct_t() = default;
};
inline constexpr construct_t construct{};

/// Convertible to `std::span<const float>`, and nothing else.
class gradient_view {
 public:
  explicit gradient_view(std::span<const float> values) : values_(values) {}
  operator std::span<const float>() const { return values_; }

 private:
  std::span<const float> values_;
};

/// Convertible to `double`, and nothing else.
class weight_value {
 public:
  explicit weight_value(double w) : w_(w) {}
  operator double() const { return w_; }

 private:
  double w_;
};

/// Model (`diloco::model`): `scalar_type`, `batch_type`, `layout()` on a
/// const model, `parameters()`, `gradients()` (only convertible to a span),
/// `compute_gradients(const batch_type&)`. Neither copyable nor movable.
///
/// Behaviour: a batch sets every gradient to its `gradient` and counts its
/// `tokens`.
class model_archetype {
 public:
  using scalar_type = float;

  /// Neither default-constructible nor copyable: the runtime only passes it on.
  class batch_type {
   public:
    batch_type(float gradient, std::uint64_t tokens) : gradient_(gradient), tokens_(tokens) {}
    batch_type(const batch_type&) = delete;
    batch_type& operator=(const batch_type&) = delete;

   private:
    friend class model_archetype;
    float gradient_;
    std::uint64_t tokens_;
  };

  model_archetype(diloco::parameter_layout layout, std::vector<float> initial)
      : layout_(std::move(layout)), parameters_(std::move(initial)), gradients_(parameters_.size(), 0.0f) {}
  model_archetype(const model_archetype&) = delete;
  model_archetype& operator=(const model_archetype&) = delete;

  const diloco::parameter_layout& layout() const { return layout_; }
  std::span<float> parameters() { return parameters_; }
  gradient_view gradients() { return gradient_view(gradients_); }
  diloco::step_stats compute_gradients(const batch_type& batch) {
    for (float& g : gradients_) g = batch.gradient_;
    return diloco::step_stats{0.0, batch.tokens_};
  }

 private:
  diloco::parameter_layout layout_;
  std::vector<float> parameters_;
  std::vector<float> gradients_;
};

/// InnerStep (`diloco::inner_step`): `scalar_type`, `options_type`,
/// `step(params, grads)` returning void, `options()` returning
/// `options_type&`. Move-only.
///
/// Behaviour: plain SGD, `θ ← θ − lr·g`.
class inner_archetype {
 public:
  using scalar_type = float;
  struct options_type {
    float learning_rate = 0.5f;
  };

  explicit inner_archetype(options_type options) : options_(options) {}
  inner_archetype(inner_archetype&&) = default;
  inner_archetype& operator=(inner_archetype&&) = default;

  void step(std::span<float> params, std::span<const float> grads) {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= options_.learning_rate * grads[i];
  }
  options_type& options() { return options_; }

 private:
  options_type options_;
};

/// OuterOptimizer (`diloco::outer_optimizer`): `scalar_type`, `options_type`,
/// `step(fragment, global, delta)`, `reset(fragment)`, `save(std::ostream&)
/// const`, `load(std::istream&)`, all returning void. Move-only.
///
/// Behaviour: stateless SGD, `Θ ← Θ − lr·Δ`; `reset`, `save` and `load` have
/// no state to touch.
class outer_archetype {
 public:
  using scalar_type = float;
  struct options_type {
    float learning_rate = 1.0f;
  };

  explicit outer_archetype(options_type options) : options_(options) {}
  outer_archetype(outer_archetype&&) = default;
  outer_archetype& operator=(outer_archetype&&) = default;

  void step(std::uint32_t /*fragment*/, std::span<float> global, std::span<const float> delta) {
    for (std::size_t i = 0; i < global.size(); ++i) global[i] -= options_.learning_rate * delta[i];
  }
  void reset(std::uint32_t /*fragment*/) {}
  void save(std::ostream&) const {}
  void load(std::istream&) {}

 private:
  options_type options_;
};

/// MergePolicy for float (`diloco::merge_policy<merge_archetype, float>`):
/// `weight(tokens, steps) const` (only convertible to double) and
/// `merge(contributions, slices, out, scale) const` returning void. Move-only.
///
/// Behaviour: the weight is the token count; the merge is the weighted mean
/// times `scale`.
class merge_archetype {
 public:
  explicit merge_archetype(construct_t) {}
  merge_archetype(merge_archetype&&) = default;
  merge_archetype& operator=(merge_archetype&&) = default;

  weight_value weight(std::uint64_t tokens, std::uint64_t /*steps*/) const {
    return weight_value(static_cast<double>(tokens));
  }
  void merge(std::span<const diloco::weighted_delta<float>> contributions,
             std::span<const diloco::fragment_slice> /*slices*/, std::span<float> out, double scale) const {
    double total = 0.0;
    for (const auto& c : contributions) total += c.weight;
    for (std::size_t i = 0; i < out.size(); ++i) {
      double sum = 0.0;
      for (const auto& c : contributions) sum += c.weight * static_cast<double>(c.delta[i]);
      out[i] = static_cast<float>(scale * sum / total);
    }
  }
};

/// Transport (`diloco::transport`): `try_send(peer_id, message&)` returning
/// `std::error_code`, `try_receive()` returning `std::optional<envelope>`.
/// Neither copyable nor movable (the runtime holds a reference).
///
/// Behaviour: two endpoints joined by `connect` deliver to each other at once,
/// in order, without loss; any other destination is `errc::unknown_peer`.
class transport_archetype {
 public:
  explicit transport_archetype(diloco::peer_id self) : self_(self) {}
  transport_archetype(const transport_archetype&) = delete;
  transport_archetype& operator=(const transport_archetype&) = delete;

  friend void connect(transport_archetype& a, transport_archetype& b) {
    a.peer_ = &b;
    b.peer_ = &a;
  }

  std::error_code try_send(diloco::peer_id to, diloco::message& m) {
    if (peer_ == nullptr || to != peer_->self_) return diloco::errc::unknown_peer;
    peer_->inbox_.push_back(diloco::envelope{self_, std::move(m)});
    return {};
  }

  std::optional<diloco::envelope> try_receive() {
    if (inbox_.empty()) return std::nullopt;
    diloco::envelope e = std::move(inbox_.front());
    inbox_.pop_front();
    return e;
  }

 private:
  diloco::peer_id self_;
  transport_archetype* peer_ = nullptr;
  std::deque<diloco::envelope> inbox_;
};

/// A `diloco::blocking_transport`: a Transport plus
/// `receive_for(std::chrono::nanoseconds)`.
///
/// Behaviour: the peer runs on the same thread, so nothing arrives during a
/// wait: it returns what has arrived, or sleeps `timeout` and returns nothing.
class blocking_transport_archetype : public transport_archetype {
 public:
  using transport_archetype::transport_archetype;

  std::optional<diloco::envelope> receive_for(std::chrono::nanoseconds timeout) {
    if (auto e = try_receive()) return e;
    std::this_thread::sleep_for(timeout);
    return std::nullopt;
  }
};

/// Collective (`diloco::collective`): `rank()` and `size()`, and
/// `all_reduce`, `reduce_scatter`, `all_gather`, `broadcast` for `float` and
/// `double` and `barrier`, each taking a deadline and returning
/// `std::error_code`. Neither copyable nor movable (a unit holds a reference).
///
/// Behaviour: a unit of one rank, so every collective copies `in` to `out`
/// (the mean over one rank is the value itself); a deadline already passed
/// is `errc::timed_out`.
class collective_archetype {
 public:
  explicit collective_archetype(construct_t) {}
  collective_archetype(const collective_archetype&) = delete;
  collective_archetype& operator=(const collective_archetype&) = delete;

  std::size_t rank() const { return 0; }
  std::size_t size() const { return 1; }
  std::error_code all_reduce(std::span<const float> in, std::span<float> out, diloco::reduce_op, diloco::time_point d) {
    return copy(in, out, d);
  }
  std::error_code all_reduce(std::span<const double> in, std::span<double> out, diloco::reduce_op,
                             diloco::time_point d) {
    return copy(in, out, d);
  }
  std::error_code reduce_scatter(std::span<const float> in, std::span<float> out, diloco::reduce_op,
                                 diloco::time_point d) {
    return copy(in, out, d);
  }
  std::error_code reduce_scatter(std::span<const double> in, std::span<double> out, diloco::reduce_op,
                                 diloco::time_point d) {
    return copy(in, out, d);
  }
  std::error_code all_gather(std::span<const float> in, std::span<float> out, diloco::time_point d) {
    return copy(in, out, d);
  }
  std::error_code all_gather(std::span<const double> in, std::span<double> out, diloco::time_point d) {
    return copy(in, out, d);
  }
  std::error_code broadcast(std::span<float>, std::size_t root, diloco::time_point d) { return check(root, d); }
  std::error_code broadcast(std::span<double>, std::size_t root, diloco::time_point d) { return check(root, d); }
  std::error_code barrier(diloco::time_point d) { return check(0, d); }

 private:
  static std::error_code check(std::size_t root, diloco::time_point d) {
    if (root != 0) return std::make_error_code(std::errc::invalid_argument);
    if (diloco::clock::now() > d) return diloco::errc::timed_out;
    return {};
  }
  template <class T>
  static std::error_code copy(std::span<const T> in, std::span<T> out, diloco::time_point d) {
    if (in.size() != out.size()) return std::make_error_code(std::errc::invalid_argument);
    if (auto e = check(0, d)) return e;
    std::copy(in.begin(), in.end(), out.begin());
    return {};
  }
};

/// Checkpointable (`diloco::checkpointable`): `save(std::ostream&) const` and
/// `load(std::istream&)`, both returning void. Neither default-constructible,
/// copyable nor movable (the concept asks for neither).
///
/// Behaviour: holds one integer, saved as a decimal line; `load` throws
/// `diloco::corrupt_state` on anything else and then keeps its value.
class checkpointable_archetype {
 public:
  explicit checkpointable_archetype(long value) : value_(value) {}
  checkpointable_archetype(const checkpointable_archetype&) = delete;
  checkpointable_archetype& operator=(const checkpointable_archetype&) = delete;

  long value() const { return value_; }

  void save(std::ostream& out) const { out << value_ << '\n'; }
  void load(std::istream& in) {
    std::string line;
    if (!std::getline(in, line) || line.empty()) throw diloco::corrupt_state("checkpointable_archetype: no value");
    char* end = nullptr;
    const long v = std::strtol(line.c_str(), &end, 10);
    if (*end != '\0') throw diloco::corrupt_state("checkpointable_archetype: not a number");
    value_ = v;
  }

 private:
  long value_;
};

// ---------------------------------------------------------------------------
// Variants that lack one requirement.

enum class model_req { none, scalar_type, batch_type, layout, parameters, gradients, compute_gradients };

struct batch {};

template <model_req R>
struct model_types {
  using scalar_type = float;
  using batch_type = batch;
};
template <>
struct model_types<model_req::scalar_type> {
  using batch_type = batch;
};
template <>
struct model_types<model_req::batch_type> {
  using scalar_type = float;
};

template <model_req R>
struct model_lacking : model_types<R> {
  const diloco::parameter_layout& layout() const requires(R != model_req::layout);
  std::span<float> parameters() requires(R != model_req::parameters);
  std::span<const float> gradients() requires(R != model_req::gradients);
  diloco::step_stats compute_gradients(const batch&) requires(R != model_req::compute_gradients);
};

/// Every member there, but on `int`s: requirement 1 asks for float or double.
struct model_with_integer_scalar {
  using scalar_type = int;
  using batch_type = batch;
  const diloco::parameter_layout& layout() const;
  std::span<int> parameters();
  std::span<const int> gradients();
  diloco::step_stats compute_gradients(const batch&);
};

/// Movable unless `Movable` is false: the base of the variants that lack
/// move-constructibility.
template <bool Movable>
struct movable_if {};
template <>
struct movable_if<false> {
  movable_if() = default;
  movable_if(movable_if&&) = delete;
};

enum class inner_req { none, scalar_type, options_type, step, options, move_constructible };

struct inner_options {};

template <inner_req R>
struct inner_types {
  using scalar_type = float;
  using options_type = inner_options;
};
template <>
struct inner_types<inner_req::scalar_type> {
  using options_type = inner_options;
};
template <>
struct inner_types<inner_req::options_type> {
  using scalar_type = float;
};

template <inner_req R>
struct inner_lacking : inner_types<R>, movable_if<R != inner_req::move_constructible> {
  void step(std::span<float>, std::span<const float>) requires(R != inner_req::step);
  inner_options& options() requires(R != inner_req::options);
};

/// Every member there, but on `int`s: requirement 1 asks for float or double.
struct inner_with_integer_scalar {
  using scalar_type = int;
  using options_type = inner_options;
  void step(std::span<int>, std::span<const int>);
  inner_options& options();
};

enum class outer_req { none, scalar_type, options_type, step, reset, save, load, move_constructible };

struct outer_options {};

template <outer_req R>
struct outer_types {
  using scalar_type = float;
  using options_type = outer_options;
};
template <>
struct outer_types<outer_req::scalar_type> {
  using options_type = outer_options;
};
template <>
struct outer_types<outer_req::options_type> {
  using scalar_type = float;
};

template <outer_req R>
struct outer_lacking : outer_types<R>, movable_if<R != outer_req::move_constructible> {
  void step(std::uint32_t, std::span<float>, std::span<const float>) requires(R != outer_req::step);
  void reset(std::uint32_t) requires(R != outer_req::reset);
  void save(std::ostream&) const requires(R != outer_req::save);
  void load(std::istream&) requires(R != outer_req::load);
};

/// Every member there, but on `int`s: requirement 1 asks for float or double.
struct outer_with_integer_scalar {
  using scalar_type = int;
  using options_type = outer_options;
  void step(std::uint32_t, std::span<int>, std::span<const int>);
  void reset(std::uint32_t);
  void save(std::ostream&) const;
  void load(std::istream&);
};

enum class merge_req { none, weight, merge, move_constructible };

template <merge_req R>
struct merge_lacking : movable_if<R != merge_req::move_constructible> {
  double weight(std::uint64_t, std::uint64_t) const requires(R != merge_req::weight);
  void merge(std::span<const diloco::weighted_delta<float>>, std::span<const diloco::fragment_slice>, std::span<float>,
             double) const requires(R != merge_req::merge);
};

enum class transport_req { none, try_send, try_receive, receive_for };

template <transport_req R>
struct transport_lacking {
  std::error_code try_send(diloco::peer_id, diloco::message&) requires(R != transport_req::try_send);
  std::optional<diloco::envelope> try_receive() requires(R != transport_req::try_receive);
  std::optional<diloco::envelope> receive_for(std::chrono::nanoseconds) requires(R != transport_req::receive_for);
};

enum class collective_req { none, rank_and_size, all_reduce, reduce_scatter, all_gather, broadcast, barrier };

template <collective_req R>
struct collective_lacking {
  std::size_t rank() const requires(R != collective_req::rank_and_size);
  std::size_t size() const requires(R != collective_req::rank_and_size);
  template <class T>
  std::error_code all_reduce(std::span<const T>, std::span<T>, diloco::reduce_op,
                             diloco::time_point) requires(R != collective_req::all_reduce);
  template <class T>
  std::error_code reduce_scatter(std::span<const T>, std::span<T>, diloco::reduce_op,
                                 diloco::time_point) requires(R != collective_req::reduce_scatter);
  template <class T>
  std::error_code all_gather(std::span<const T>, std::span<T>,
                             diloco::time_point) requires(R != collective_req::all_gather);
  template <class T>
  std::error_code broadcast(std::span<T>, std::size_t, diloco::time_point) requires(R != collective_req::broadcast);
  std::error_code barrier(diloco::time_point) requires(R != collective_req::barrier);
};

enum class checkpointable_req { none, save, load };

template <checkpointable_req R>
struct checkpointable_lacking {
  void save(std::ostream&) const requires(R != checkpointable_req::save);
  void load(std::istream&) requires(R != checkpointable_req::load);
};

}  // namespace archetypes
