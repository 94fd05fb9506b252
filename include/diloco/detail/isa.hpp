// The instruction set of the fused codec passes, chosen when they run: a
// program compiled for the x86-64 baseline (SSE2: what g++ and clang emit
// without -march, and what distributions build with) still encodes and
// decodes with AVX2, or AVX-512, on a CPU that has it.
#pragma once

#include <atomic>

/// 1 where the fused passes carry a copy compiled for AVX2, picked when they
/// run: g++ or clang on x86-64, a translation unit not compiled for AVX2
/// already (with -mavx2 or -march=x86-64-v3 and above the baseline copy is
/// AVX2 code), not under nvcc. Define DILOCO_NO_ISA_DISPATCH for one copy.
#if !defined(DILOCO_NO_ISA_DISPATCH) && !defined(__CUDACC__) && defined(__x86_64__) && \
    (defined(__GNUC__) || defined(__clang__)) && !defined(__AVX2__)
#define DILOCO_ISA_AVX2_COPY 1
#else
#define DILOCO_ISA_AVX2_COPY 0
#endif

/// 1 where they also carry a copy compiled for AVX-512 (F, BW, DQ and VL:
/// the x86-64-v4 set): as above, with g++ only, in a translation unit not
/// compiled for AVX-512BW already. Not with clang: its AVX-512F implies FMA,
/// and clang fuses `a·b + c` written as one expression wherever the target
/// has FMA (-ffp-contract=on), which would give that copy other bits.
#if !defined(DILOCO_NO_ISA_DISPATCH) && !defined(__CUDACC__) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__) && !defined(__AVX512BW__)
#define DILOCO_ISA_AVX512_COPY 1
#else
#define DILOCO_ISA_AVX512_COPY 0
#endif

/// 1 where `with_best_isa` picks a copy when it runs.
#define DILOCO_ISA_DISPATCH (DILOCO_ISA_AVX2_COPY || DILOCO_ISA_AVX512_COPY)

namespace diloco::detail {

/// The copies of the fused passes, narrowest first. `baseline` is the code
/// of the translation unit's own flags. All give the same bits: each is the
/// same source compiled for another target, never with a product fused into
/// a sum (the AVX2 target has no FMA; the AVX-512 one has, in AVX-512F, and
/// is compiled with -ffp-contract=off), and IEEE operations give the same
/// result however wide the vector. Tests compare them through `isa_ceiling`.
enum class isa_copy { baseline, avx2, avx512 };

/// The widest copy `with_best_isa` may run: `avx512` by default, that is the
/// best there is; tests and bench_codecs lower it.
inline std::atomic<isa_copy>& isa_ceiling() noexcept {
  static std::atomic<isa_copy> ceiling{isa_copy::avx512};
  return ceiling;
}

/// True where copy `c` exists in this build and this CPU (and its OS, which
/// must save the wider registers: `__builtin_cpu_supports` checks) can run
/// it. Read once.
inline bool isa_copy_available(isa_copy c) noexcept {
  switch (c) {
    case isa_copy::baseline: return true;
    case isa_copy::avx2: {
#if DILOCO_ISA_AVX2_COPY
      static const bool available = __builtin_cpu_supports("avx2") != 0;
      return available;
#else
      return false;
#endif
    }
    case isa_copy::avx512: {
#if DILOCO_ISA_AVX512_COPY
      static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
      return available;
#else
      return false;
#endif
    }
  }
  return false;
}

/// The copy `with_best_isa` runs now: the widest that exists, that this CPU
/// can run and that `isa_ceiling()` allows.
inline isa_copy isa_in_use() noexcept {
  const isa_copy ceiling = isa_ceiling().load(std::memory_order_relaxed);
  if (ceiling >= isa_copy::avx512 && isa_copy_available(isa_copy::avx512)) return isa_copy::avx512;
  if (ceiling >= isa_copy::avx2 && isa_copy_available(isa_copy::avx2)) return isa_copy::avx2;
  return isa_copy::baseline;
}

// `f()` compiled for a wider target: `flatten` inlines every call it makes (a
// function of the baseline ISA may be inlined into one with more), so the
// loops under it are vectorized for that target. Compilers do not inline in
// the other direction, so nothing compiled here leaks into baseline code.
#if DILOCO_ISA_AVX2_COPY
template <class F>
[[gnu::target("avx2"), gnu::flatten]] inline void run_avx2(F& f) {
  f();
}
#endif
#if DILOCO_ISA_AVX512_COPY
// g++ contracts `a·b + c` into an FMA wherever the target has one, and
// AVX-512F has (-ffp-contract=fast, g++'s default for C++ even with
// -std=c++20): this copy turns that off for itself and all it inlines
// (contraction happens after inlining, under the caller's options). 512-bit
// vectors: g++'s generic tuning prefers 256 with AVX-512, which left fp8
// encoding at 0.53-0.66x triad on one core where 512 bits reached
// 0.85-0.91x in the same runs (bench/codecs/README.md).
template <class F>
[[gnu::target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512"), gnu::flatten,
  gnu::optimize("fp-contract=off")]] inline void
run_avx512(F& f) {
  f();
}
#endif

/// Runs `f()` through the copy `isa_in_use()` names. Call it inside each
/// thread's share of a pass, on a callable whose work is visible to the
/// compiler (templates, inline functions): what it calls out of line stays
/// baseline code.
template <class F>
void with_best_isa(F&& f) {
#if DILOCO_ISA_DISPATCH
  switch (isa_in_use()) {
#if DILOCO_ISA_AVX512_COPY
    case isa_copy::avx512: run_avx512(f); return;
#endif
#if DILOCO_ISA_AVX2_COPY
    case isa_copy::avx2: run_avx2(f); return;
#endif
    default: break;
  }
#endif
  f();
}

}  // namespace diloco::detail
