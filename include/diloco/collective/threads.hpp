// A learner unit whose ranks are threads of one process: the `collective`
// backend of the tests and the simulator, and of a unit that data-parallels
// over the cores of one machine.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <system_error>
#include <type_traits>
#include <vector>

#include "diloco/clock.hpp"
#include "diloco/concepts/collective.hpp"
#include "diloco/error.hpp"
#include "diloco/scalar.hpp"

namespace diloco::threads {

namespace detail {

enum class call_kind : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, barrier };

/// What one rank passes to a collective: the kind, element type and sizes
/// must agree across the ranks.
struct call {
  call_kind kind{};
  std::size_t element_size = 0;
  reduce_op op{};
  std::size_t in_count = 0, out_count = 0, root = 0;
  const void* in = nullptr;
  void* out = nullptr;

  bool agrees_with(const call& o) const noexcept {
    return kind == o.kind && element_size == o.element_size && op == o.op && in_count == o.in_count &&
           out_count == o.out_count && root == o.root;
  }
};

/// The state the ranks of one unit share. The last rank to arrive at a
/// collective computes it for all of them, summing in rank order, so every
/// rank gets the same bits and a rerun gets them again.
struct unit_state {
  explicit unit_state(std::size_t size) : calls(size) {}

  std::mutex mutex;
  std::condition_variable done;
  std::vector<call> calls;
  call current;  ///< the first arrived rank's call of the collective under way
  std::size_t arrived = 0;
  std::uint64_t generation = 0;  ///< collectives completed
  bool broken = false;

  void break_unit() {
    broken = true;
    done.notify_all();
  }
};

template <class T>
void compute(std::vector<call>& calls) {
  const std::size_t ranks = calls.size();
  const call& first = calls.front();
  auto in = [&](std::size_t k) { return static_cast<const T*>(calls[k].in); };
  auto out = [&](std::size_t k) { return static_cast<T*>(calls[k].out); };
  auto reduce = [&](std::size_t i) {
    T acc = in(0)[i];
    for (std::size_t k = 1; k < ranks; ++k) acc += in(k)[i];
    return first.op == reduce_op::mean ? acc / static_cast<T>(ranks) : acc;
  };
  switch (first.kind) {
    case call_kind::all_reduce:
      // Element by element: `out` may be `in` itself on every rank.
      for (std::size_t i = 0; i < first.in_count; ++i) {
        const T value = reduce(i);
        for (std::size_t k = 0; k < ranks; ++k) out(k)[i] = value;
      }
      break;
    case call_kind::reduce_scatter:
      for (std::size_t r = 0; r < ranks; ++r)
        for (std::size_t i = 0; i < first.out_count; ++i) out(r)[i] = reduce(r * first.out_count + i);
      break;
    case call_kind::all_gather:
      for (std::size_t r = 0; r < ranks; ++r)
        for (std::size_t k = 0; k < ranks; ++k)
          for (std::size_t i = 0; i < first.in_count; ++i) out(r)[k * first.in_count + i] = in(k)[i];
      break;
    case call_kind::broadcast:
      for (std::size_t r = 0; r < ranks; ++r)
        if (r != first.root)
          for (std::size_t i = 0; i < first.out_count; ++i) out(r)[i] = out(first.root)[i];
      break;
    case call_kind::barrier: break;
  }
}

}  // namespace detail

/// One rank's handle on a unit of threads (`make_unit`): a
/// `diloco::collective`. Move-only; each rank's thread uses its own. A
/// communicator that is destroyed ends the unit — the other ranks' current
/// and next collectives fail with `errc::rank_lost` at once — as a process
/// that dies ends an MPI unit; destroy them once training is over.
class communicator {
 public:
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      leave();
      state_ = std::move(o.state_);
      rank_ = o.rank_;
    }
    return *this;
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  ~communicator() { leave(); }

  std::size_t rank() const noexcept { return rank_; }
  std::size_t size() const noexcept { return state_ ? state_->calls.size() : 0; }

  template <scalar T>
  std::error_code all_reduce(std::span<const std::type_identity_t<T>> in, std::span<T> out, reduce_op op,
                             time_point deadline) {
    const bool fits = in.size() == out.size() && (in.data() == out.data() || !overlap(in, out));
    return run<T>({detail::call_kind::all_reduce, sizeof(T), op, in.size(), out.size(), 0, in.data(), out.data()}, fits,
                  deadline);
  }

  template <scalar T>
  std::error_code reduce_scatter(std::span<const std::type_identity_t<T>> in, std::span<T> out, reduce_op op,
                                 time_point deadline) {
    const bool fits = in.size() == out.size() * size() && !overlap(in, out);
    return run<T>({detail::call_kind::reduce_scatter, sizeof(T), op, in.size(), out.size(), 0, in.data(), out.data()},
                  fits, deadline);
  }

  template <scalar T>
  std::error_code all_gather(std::span<const std::type_identity_t<T>> in, std::span<T> out, time_point deadline) {
    const bool fits = out.size() == in.size() * size() && !overlap(in, out);
    return run<T>(
        {detail::call_kind::all_gather, sizeof(T), reduce_op::sum, in.size(), out.size(), 0, in.data(), out.data()},
        fits, deadline);
  }

  template <scalar T>
  std::error_code broadcast(std::span<T> data, std::size_t root, time_point deadline) {
    return run<T>({detail::call_kind::broadcast, sizeof(T), reduce_op::sum, 0, data.size(), root, nullptr, data.data()},
                  root < size(), deadline);
  }

  std::error_code barrier(time_point deadline) {
    return run<float>({detail::call_kind::barrier, 0, reduce_op::sum, 0, 0, 0, nullptr, nullptr}, true, deadline);
  }

 private:
  friend std::vector<communicator> make_unit(std::size_t ranks);
  communicator(std::shared_ptr<detail::unit_state> state, std::size_t rank) : state_(std::move(state)), rank_(rank) {}

  template <class T>
  static bool overlap(std::span<const T> a, std::span<T> b) noexcept {
    const auto* a0 = a.data();
    const auto* b0 = b.data();
    return !a.empty() && !b.empty() && a0 < b0 + b.size() && b0 < a0 + a.size();
  }

  void leave() {
    if (!state_) return;
    // The state outlives the lock: this may be its last owner.
    const std::shared_ptr<detail::unit_state> state = std::move(state_);
    const std::lock_guard lock(state->mutex);
    state->break_unit();
  }

  template <class T>
  std::error_code run(detail::call c, bool fits, time_point deadline) {
    if (!state_) return make_error_code(errc::rank_lost);
    auto& s = *state_;
    std::unique_lock lock(s.mutex);
    if (s.broken) return make_error_code(errc::rank_lost);
    // Sizes that do not fit here, or do not agree with a rank that arrived
    // first, end the unit: the other ranks could never complete this call.
    const bool agrees = s.arrived == 0 || c.agrees_with(s.current);
    if (!fits || !agrees) {
      s.break_unit();
      return std::make_error_code(std::errc::invalid_argument);
    }
    if (s.arrived == 0) s.current = c;
    s.calls[rank_] = c;
    if (++s.arrived == s.calls.size()) {
      detail::compute<T>(s.calls);
      s.arrived = 0;
      ++s.generation;
      s.done.notify_all();
      return {};
    }
    const std::uint64_t mine = s.generation;
    if (!s.done.wait_until(lock, deadline, [&] { return s.generation != mine || s.broken; })) {
      s.break_unit();
      return make_error_code(errc::timed_out);
    }
    // Completed before another rank broke the unit: the result is ours.
    if (s.generation != mine) return {};
    return make_error_code(errc::rank_lost);
  }

  std::shared_ptr<detail::unit_state> state_;
  std::size_t rank_ = 0;
};

/// The communicators of a unit of `ranks` threads, rank 0 first: hand one to
/// each thread. Throws `std::invalid_argument` for 0 ranks.
inline std::vector<communicator> make_unit(std::size_t ranks) {
  if (ranks == 0) throw std::invalid_argument("diloco::threads::make_unit: a unit needs at least one rank");
  auto state = std::make_shared<detail::unit_state>(ranks);
  std::vector<communicator> unit;
  unit.reserve(ranks);
  for (std::size_t r = 0; r < ranks; ++r) unit.push_back(communicator(state, r));
  return unit;
}

static_assert(check_collective<communicator>());

}  // namespace diloco::threads
