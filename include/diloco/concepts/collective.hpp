// The Collective concept: how the ranks of one learner unit compute together.
//
// A learner unit is an island of R ranks (processes or GPUs) that trains as
// one learner: data parallel inside, one contribution to the syncer outside.
// Its ranks talk through a communicator that models `collective`; the
// backends wrap existing engines (`diloco::mpi` on MPI, `diloco::nccl` on
// NCCL, `diloco::threads` for ranks that are threads of one process).
#pragma once

#include <concepts>
#include <cstddef>
#include <span>
#include <system_error>

#include "diloco/clock.hpp"
#include "diloco/concepts/check.hpp"

namespace diloco {

/// How `all_reduce` and `reduce_scatter` combine the ranks' elements.
enum class reduce_op {
  sum,   ///< the sum over the ranks
  mean,  ///< the sum over the ranks, divided by `size()` (as DDP averages gradients)
};

/// The requirements of `collective`, one named concept each, numbered as
/// `check_collective` walks them. Every collective is called by every rank of
/// the unit, in the same order, with the same sizes (and the same `root`);
/// each takes a `deadline` (`diloco::time_point`, the steady clock) and
/// returns a `std::error_code`:
///
/// - success: the result is in `out` on every rank;
/// - `errc::timed_out`: not every rank took part before `deadline`;
/// - `errc::rank_lost`: another rank failed, left or gave up, or an earlier
///   collective of this communicator failed;
/// - `std::errc::invalid_argument`: the sizes do not fit (see each
///   requirement).
///
/// Any failure ends the unit: the communicator is broken for good, every
/// other rank's current or next collective fails too (within its deadline, or
/// sooner), and nothing ever waits past a deadline. The unit then exits and is
/// started again as a whole; it never goes on with fewer ranks.
///
/// Element types: `float` and `double` (`diloco::scalar`). `out` must not
/// overlap `in` except where a requirement allows it to be the same span.
namespace requirements::collective {

/// 1. `c.rank()` and `c.size()` on a `const C`, both `std::size_t`: this
///    rank's index in `[0, size())` and the number of ranks (at least 1),
///    constant for the communicator's lifetime.
template <class C>
concept rank_and_size = requires(const C& c) {
  { c.rank() } -> std::same_as<std::size_t>;
  { c.size() } -> std::same_as<std::size_t>;
};

/// 2. `c.all_reduce(in, out, op, deadline)` with `std::span<const T> in`,
///    `std::span<T> out` of the same size (or `in` the very elements of
///    `out`: in place) and a `reduce_op`: every rank's `out[i]` becomes the
///    reduction over the ranks of their `in[i]`, the same value on every
///    rank.
template <class C>
concept all_reduce = requires(C& c, std::span<const float> fin, std::span<float> fout, std::span<const double> din,
                              std::span<double> dout, reduce_op op, time_point deadline) {
  { c.all_reduce(fin, fout, op, deadline) } -> std::same_as<std::error_code>;
  { c.all_reduce(din, dout, op, deadline) } -> std::same_as<std::error_code>;
};

/// 3. `c.reduce_scatter(in, out, op, deadline)` with `in.size() ==
///    size() * out.size()`: rank r's `out[i]` becomes the reduction over the
///    ranks of their `in[r * out.size() + i]` (rank r keeps block r).
template <class C>
concept reduce_scatter = requires(C& c, std::span<const float> fin, std::span<float> fout, std::span<const double> din,
                                  std::span<double> dout, reduce_op op, time_point deadline) {
  { c.reduce_scatter(fin, fout, op, deadline) } -> std::same_as<std::error_code>;
  { c.reduce_scatter(din, dout, op, deadline) } -> std::same_as<std::error_code>;
};

/// 4. `c.all_gather(in, out, deadline)` with `out.size() == size() *
///    in.size()`: block k of every rank's `out` becomes rank k's `in`.
template <class C>
concept all_gather = requires(C& c, std::span<const float> fin, std::span<float> fout, std::span<const double> din,
                              std::span<double> dout, time_point deadline) {
  { c.all_gather(fin, fout, deadline) } -> std::same_as<std::error_code>;
  { c.all_gather(din, dout, deadline) } -> std::same_as<std::error_code>;
};

/// 5. `c.broadcast(data, root, deadline)` with `std::span<T> data` and a
///    `std::size_t root < size()`: every rank's `data` becomes rank `root`'s.
template <class C>
concept broadcast = requires(C& c, std::span<float> f, std::span<double> d, std::size_t root, time_point deadline) {
  { c.broadcast(f, root, deadline) } -> std::same_as<std::error_code>;
  { c.broadcast(d, root, deadline) } -> std::same_as<std::error_code>;
};

/// 6. `c.barrier(deadline)`: returns once every rank has called it.
template <class C>
concept barrier = requires(C& c, time_point deadline) {
  { c.barrier(deadline) } -> std::same_as<std::error_code>;
};

}  // namespace requirements::collective

/// Requirements on a communicator type `C` of a learner unit's ranks:
/// requirements 1 to 6 above (examples: `threads::communicator`,
/// `mpi::communicator`).
template <class C>
concept collective = requirements::collective::rank_and_size<C> && requirements::collective::all_reduce<C> &&
    requirements::collective::reduce_scatter<C> && requirements::collective::all_gather<C> &&
    requirements::collective::broadcast<C> && requirements::collective::barrier<C>;

/// Returns true if `C` is a collective; otherwise, with `on_unmet::fail`,
/// stops compilation naming the first requirement `C` misses.
template <class C, on_unmet Unmet = on_unmet::fail>
consteval bool check_collective() {
  namespace r = requirements::collective;
  constexpr bool quiet = Unmet == on_unmet::return_false;
  if constexpr (!r::rank_and_size<C>) {
    static_assert(r::rank_and_size<C> || quiet,
                  "diloco::collective: missing members `std::size_t rank() const` and `std::size_t size() const`");
    return !quiet;
  } else if constexpr (!r::all_reduce<C>) {
    static_assert(r::all_reduce<C> || quiet,
                  "diloco::collective: missing member `std::error_code all_reduce(std::span<const T> in, "
                  "std::span<T> out, reduce_op, time_point deadline)` for T float and double");
    return !quiet;
  } else if constexpr (!r::reduce_scatter<C>) {
    static_assert(r::reduce_scatter<C> || quiet,
                  "diloco::collective: missing member `std::error_code reduce_scatter(std::span<const T> in, "
                  "std::span<T> out, reduce_op, time_point deadline)` for T float and double");
    return !quiet;
  } else if constexpr (!r::all_gather<C>) {
    static_assert(r::all_gather<C> || quiet,
                  "diloco::collective: missing member `std::error_code all_gather(std::span<const T> in, "
                  "std::span<T> out, time_point deadline)` for T float and double");
    return !quiet;
  } else if constexpr (!r::broadcast<C>) {
    static_assert(r::broadcast<C> || quiet,
                  "diloco::collective: missing member `std::error_code broadcast(std::span<T> data, "
                  "std::size_t root, time_point deadline)` for T float and double");
    return !quiet;
  } else if constexpr (!r::barrier<C>) {
    static_assert(r::barrier<C> || quiet,
                  "diloco::collective: missing member `std::error_code barrier(time_point deadline)`");
    return !quiet;
  } else {
    return true;
  }
}

}  // namespace diloco
