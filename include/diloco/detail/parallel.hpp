// A loop over chunks split across a bounded number of threads: the CPU side of
// the fused passes and the outer step uses every core with it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace diloco::detail {

/// `threads`, with 0 meaning `std::thread::hardware_concurrency()` (1 where
/// that is unknown).
inline unsigned resolve_threads(unsigned threads) noexcept {
  if (threads != 0) return threads;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores != 0 ? cores : 1;
}

/// How many threads to give `units` units of work when each thread should get
/// at least `min_units` of them: `resolve_threads(threads)`, fewer where a
/// thread would get less than `min_units`, never less than 1.
inline unsigned threads_for(std::size_t units, unsigned threads, std::size_t min_units) noexcept {
  const std::size_t most = std::max<std::size_t>(1, units / std::max<std::size_t>(1, min_units));
  return static_cast<unsigned>(std::min<std::size_t>(resolve_threads(threads), most));
}

/// A callable `f(first, last)` seen through one signature, so that the
/// loop of `parallel_for` (its threads, its exception handling) is compiled
/// once per program instead of once per callable.
struct chunk_ranges {
  void* callable;
  void (*call)(void* callable, std::size_t first, std::size_t last);
};

/// `parallel_for` on a `chunk_ranges`.
inline void parallel_for_ranges(std::size_t chunks, unsigned threads, chunk_ranges f) {
  if (chunks == 0) return;
  const std::size_t t = std::min<std::size_t>(resolve_threads(threads), chunks);
  if (t == 1) {
    f.call(f.callable, std::size_t{0}, chunks);
    return;
  }
  auto first_of = [&](std::size_t k) { return chunks / t * k + std::min(k, chunks % t); };
  std::vector<std::exception_ptr> errors(t);
  {
    std::vector<std::jthread> workers;
    workers.reserve(t - 1);
    for (std::size_t k = 1; k < t; ++k)
      workers.emplace_back([f, &errors, k, first = first_of(k), last = first_of(k + 1)] {
        try {
          f.call(f.callable, first, last);
        } catch (...) {
          errors[k] = std::current_exception();
        }
      });
    try {
      f.call(f.callable, std::size_t{0}, first_of(1));
    } catch (...) {
      errors[0] = std::current_exception();
    }
  }  // joins the workers
  for (auto& e : errors)
    if (e) std::rethrow_exception(std::move(e));
}

/// Calls `f(first, last)` on contiguous ranges that together cover the chunks
/// `[0, chunks)` exactly once: `min(resolve_threads(threads), chunks)` ranges
/// of ⌊chunks/t⌋ or ⌈chunks/t⌉ chunks each, one per thread. The calling thread
/// runs the first range itself and waits for the others (a `std::jthread`
/// each, started for this call and joined before it returns), so one thread
/// runs everything inline and starts no thread. Callers make each chunk touch
/// bytes no other chunk touches (the fused passes split on codec blocks); then
/// the result does not depend on the number of threads.
///
/// An exception thrown by `f` is rethrown here once every range has finished;
/// where several ranges throw, the one of the lowest range. Cost: starting and
/// joining a thread, some tens of microseconds each, and one indirect call
/// per range.
template <class F>
void parallel_for(std::size_t chunks, unsigned threads, F&& f) {
  using callable = std::remove_reference_t<F>;
  parallel_for_ranges(
      chunks, threads,
      chunk_ranges{const_cast<void*>(static_cast<const void*>(std::addressof(f))),
                   [](void* c, std::size_t first, std::size_t last) { (*static_cast<callable*>(c))(first, last); }});
}

}  // namespace diloco::detail
