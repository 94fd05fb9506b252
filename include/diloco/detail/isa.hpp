// The instruction set of the fused codec passes, chosen when they run: a
// program compiled for the x86-64 baseline (SSE2: what g++ and clang emit
// without -march, and what distributions build with) still encodes and
// decodes with AVX2 on a CPU that has it.
#pragma once

#include <atomic>

/// 1 where the fused passes carry a second copy compiled for AVX2 and pick
/// one when they run: g++ or clang on x86-64, a translation unit not
/// compiled for AVX2 already (with -mavx2 or -march=x86-64-v3 and above the
/// one copy is AVX2 code), not under nvcc. Define DILOCO_NO_ISA_DISPATCH to
/// keep one copy.
#if !defined(DILOCO_NO_ISA_DISPATCH) && !defined(__CUDACC__) && defined(__x86_64__) && \
    (defined(__GNUC__) || defined(__clang__)) && !defined(__AVX2__)
#define DILOCO_ISA_DISPATCH 1
#else
#define DILOCO_ISA_DISPATCH 0
#endif

namespace diloco::detail {

/// Which copy `with_best_isa` runs: `best`, the default, is the AVX2 copy
/// where there is one and the CPU has AVX2; `baseline` is always the copy of
/// the translation unit's own flags. Both give the same bits (the AVX2 copy
/// is the same source under `target("avx2")`, without FMA, so no product is
/// fused with a sum: IEEE operations give the same result however wide the
/// vector), and tests compare them through this switch.
enum class isa_choice { best, baseline };

inline std::atomic<isa_choice>& isa_policy() noexcept {
  static std::atomic<isa_choice> policy{isa_choice::best};
  return policy;
}

/// True where the AVX2 copy exists and this CPU can run it (read once).
inline bool avx2_copy_available() noexcept {
#if DILOCO_ISA_DISPATCH
  static const bool available = __builtin_cpu_supports("avx2") != 0;
  return available;
#else
  return false;
#endif
}

#if DILOCO_ISA_DISPATCH
/// `f()` compiled for AVX2: `flatten` inlines every call it makes (a
/// function of the baseline ISA may be inlined into one with more), so the
/// loops under it are vectorized with 256-bit registers. Compilers do not
/// inline in the other direction, so nothing compiled here leaks into
/// baseline code.
template <class F>
[[gnu::target("avx2"), gnu::flatten]] inline void run_avx2(F& f) {
  f();
}
#endif

/// Runs `f()`, through its AVX2 copy where `isa_policy()` is `best` and
/// `avx2_copy_available()`. Call it inside each thread's share of a pass, on
/// a callable whose work is visible to the compiler (templates, inline
/// functions): what it calls out of line stays baseline code.
template <class F>
void with_best_isa(F&& f) {
#if DILOCO_ISA_DISPATCH
  if (isa_policy().load(std::memory_order_relaxed) == isa_choice::best && avx2_copy_available()) {
    run_avx2(f);
    return;
  }
#endif
  f();
}

}  // namespace diloco::detail
