// The inner loops of the fused codec passes of kernels.hpp: one thread's
// share of an encode (outer gradient, optional error feedback, block scale,
// codes) or of a decode-accumulate, per format, with software prefetch and
// the chunking that keeps each block's second read in cache.
#pragma once

#include <atomic>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "diloco/codec/block_math.hpp"
#include "diloco/codec/blocks.hpp"
#include "diloco/codec/element.hpp"
#include "diloco/detail/config.hpp"
#include "diloco/detail/isa.hpp"
#include "diloco/detail/parallel.hpp"
#include "diloco/detail/prefetch.hpp"

namespace diloco::codec {

namespace detail {

/// Value `i` of the outer gradient of `base` and `theta`: with error feedback
/// `residual[i]` is added, without it `residual` is not read.
template <bool Feedback>
inline float outer_gradient_at(const float* base, const float* theta, [[maybe_unused]] const float* residual,
                               std::size_t i) {
  if constexpr (Feedback)
    return outer_gradient{}(base[i], theta[i], residual[i]);
  else
    return outer_gradient{}(base[i], theta[i]);
}

/// Values `[0, n)` of the outer gradient into `to`, and their magnitude maximum.
template <bool Feedback>
magnitude_max outer_gradient_into(std::size_t n, const float* __restrict base, const float* __restrict theta,
                                  const float* __restrict residual, float* __restrict to) {
  magnitude_max m;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = outer_gradient_at<Feedback>(base, theta, residual, i);
    to[i] = v;
    m(v);
  }
  return m;
}

/// Values per chunk for fp32 and bf16, which have no blocks: 16 KiB of fp32.
inline constexpr std::size_t unscaled_chunk = 4096;

/// A thread gets at least this many values (256 KiB of fp32): below that,
/// starting it costs more than it saves.
inline constexpr std::size_t min_values_per_thread = std::size_t{1} << 16;

/// How the fused passes cut `n` values into chunks that own disjoint bytes of
/// the encoding: the codec's blocks for the block-scaled formats, runs of
/// `unscaled_chunk` values otherwise. Chunk k starts at value `k · values` and
/// byte `k · bytes`; the last one may be shorter.
struct chunking {
  std::size_t values, bytes, count;
  chunking(codec_id f, std::size_t n, std::size_t block)
      : values(block_scaled(f) ? block : unscaled_chunk),
        bytes(block_scaled(f) ? 4 + code_bytes(f, values) : code_bytes(f, values)),
        count((n + values - 1) / values) {}
};

/// How far past a block the block-scaled encoders prefetch each input
/// stream: a little over the distance memory latency covers at the rate one
/// core encodes (about 100 ns at 0.3 ns a value; bench/codecs/README.md).
inline constexpr std::size_t prefetch_reach = 3072;

/// Asks the cache for the lines of `[p + from, p + from + bytes)` of a
/// stream the caller reads later (`detail::prefetch_line`: a hint, never a
/// fault, even past the end of the stream's memory).
inline void prefetch(const float* p, std::size_t from, std::size_t bytes) {
  for (std::size_t offset = from; offset < from + bytes; offset += 64) ::diloco::detail::prefetch_line(p, offset);
}

/// A run of a fragment's θ in a larger buffer: packed values
/// `[packed_offset, packed_offset + size)` are `theta[flat_offset …]` (the
/// members `encode_delta` reads of a `Run`, as `diloco::fragment_slice` has).
struct theta_run {
  std::size_t flat_offset = 0;
  std::size_t packed_offset = 0;
  std::size_t size = 0;
};

/// θ of packed values `[first, first + len)` of a fragment whose values lie
/// in runs of `theta` (`Run`: `flat_offset`, `packed_offset`, `size`; in
/// packed order, covering the fragment without gaps): a pointer into `theta`
/// when they lie in one run, else a copy in `scratch`. One per thread; calls
/// come with increasing `first`.
template <class Run>
struct theta_runs {
  std::span<const Run> runs;
  const float* theta;
  std::size_t k = 0;
  std::vector<float> scratch;

  const float* operator()(std::size_t first, std::size_t len) {
    while (k + 1 < runs.size() && runs[k].packed_offset + runs[k].size <= first) ++k;
    const Run& r = runs[k];
    if (first + len <= r.packed_offset + r.size) return theta + r.flat_offset + (first - r.packed_offset);
    return gather(first, len);
  }

  /// A chunk across runs (a tensor boundary): rare, copied. Out of line, so
  /// that the copies of the passes for each instruction set
  /// (`diloco::detail::with_best_isa`, which inlines all they call) do not
  /// each carry the vector's growth.
  [[gnu::noinline]] const float* gather(std::size_t first, std::size_t len) {
    scratch.resize(len);
    for (std::size_t i = 0, j = k; i < len; ++j) {
      const Run& q = runs[j];
      const std::size_t from = first + i - q.packed_offset;
      const std::size_t take = q.size - from < len - i ? q.size - from : len - i;
      std::memcpy(scratch.data() + i, theta + q.flat_offset + from, take * sizeof(float));
      i += take;
    }
    return scratch.data();
  }
};

/// The longest block the pipelined encoder takes (`encode_delta_pipelined`:
/// two blocks of values on the stack); longer ones are streams the hardware
/// prefetcher follows by itself, and go through `encode_delta_block`.
inline constexpr std::size_t pipelined_block_max = 1024;

/// One step of the pipelined encoder: the codes (and, with error feedback,
/// the encoding errors into `residual_cur`) of a block of `n` values `cur`
/// whose scale is `unit_of`, and, in the same loop when `Load`, the next
/// block's values `base − θ` (+ `residual_next`) into `next` and their
/// magnitude maximum into `m`. One loop doing both keeps loads from memory
/// (the next block) in flight while this block's codes are computed, and
/// each value is computed once.
template <codec_id F, bool Feedback, bool Load, class UnitOf>
void encode_and_load(std::size_t n, const float* __restrict cur, [[maybe_unused]] float absmax, UnitOf unit_of,
                     std::uint8_t* __restrict codes, [[maybe_unused]] float* __restrict residual_cur,
                     [[maybe_unused]] const float* __restrict base, [[maybe_unused]] const float* __restrict theta,
                     [[maybe_unused]] const float* __restrict residual_next, [[maybe_unused]] float* __restrict next,
                     [[maybe_unused]] magnitude_max& m) {
  [[maybe_unused]] magnitude_max next_max;
  [[maybe_unused]] std::uint8_t q[F == codec_id::int4 ? pipelined_block_max : 1];  // int4 levels, packed after
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (Load) {
      const float v = outer_gradient_at<Feedback>(base, theta, residual_next, i);
      next[i] = v;
      next_max(v);
    }
    const float d = cur[i];
    if constexpr (F == codec_id::int8) {
      const std::int8_t c = to_int8(unit_of(d));
      codes[i] = static_cast<std::uint8_t>(c);
      if constexpr (Feedback) residual_cur[i] = d - from_int8(c) * absmax;
    } else if constexpr (F == codec_id::fp8) {
      const fp8_rounding r = round_to_fp8(unit_of(d));
      codes[i] = r.code;
      if constexpr (Feedback) residual_cur[i] = d - r.unit * absmax;
    } else {
      static_assert(F == codec_id::int4);
      const int level = int4_level(unit_of(d));
      q[i] = static_cast<std::uint8_t>(level & 0xF);                            // to_int4
      if constexpr (Feedback) residual_cur[i] = d - int4_unit(level) * absmax;  // from_int4 of that code
    }
  }
  if constexpr (F == codec_id::int4) {
    // Packed in pairs after the loop: one loop doing both does not vectorize.
    // An odd run ends its block (it is shorter than pipelined_block_max,
    // which is even): the block's padding nibble.
    if (n % 2) q[n] = 0;
    for (std::size_t j = 0; j < (n + 1) / 2; ++j) codes[j] = static_cast<std::uint8_t>(q[2 * j] | (q[2 * j + 1] << 4));
  }
  if constexpr (Load) m = next_max;
}

/// `encode_and_load` of a block scaled by a division: the way of a block whose
/// `1/absmax` is not a normal float (`block_unit`), that is whose absmax is
/// above 2^126. Out of line and so in the baseline instruction set only:
/// `with_best_isa`'s copies then carry one loop per step instead of two, and
/// compile in about half the time, for blocks no training meets.
template <codec_id F, bool Feedback, bool Load>
[[gnu::noinline]] void encode_and_load_dividing(std::size_t n, const float* cur, float absmax, std::uint8_t* codes,
                                                float* residual_cur, const float* base, const float* theta,
                                                const float* residual_next, float* next, magnitude_max& m) {
  encode_and_load<F, Feedback, Load>(
      n, cur, absmax, [absmax](float d) { return d / absmax; }, codes, residual_cur, base, theta, residual_next, next,
      m);
}

/// Encodes the `n` values of `base − θ` (+ `residual`) as one block of a
/// block-scaled format `F` at `out`, however long (`encode_delta_pipelined`
/// takes blocks of up to `pipelined_block_max` values): a first read for the
/// scale, a second (from cache, in pieces of `pipelined_block_max` values
/// gathered into a buffer) for the codes and, with error feedback,
/// `residual ← Δ − decoded`. False if a value is not finite.
template <codec_id F, bool Feedback>
bool encode_delta_block(const float* __restrict base, const float* __restrict theta, float* __restrict residual,
                        std::size_t n, std::byte* out) {
  auto value = [&](std::size_t i) { return outer_gradient_at<Feedback>(base, theta, residual, i); };
  magnitude_max m;
  for (std::size_t i = 0; i < n; ++i) m(value(i));
  if (!m.finite()) return false;
  const block_unit scale(m.value());
  put_f32(out, scale.absmax);
  auto* codes = reinterpret_cast<std::uint8_t*>(out + 4);
  if (scale.absmax == 0.0f) {
    std::memset(codes, 0, code_bytes(F, n));
    if constexpr (Feedback)
      for (std::size_t i = 0; i < n; ++i) residual[i] = value(i) - 0.0f;
    return true;
  }
  // The next block's first lines, while this one's codes are computed (a
  // long block's stream is one the hardware prefetcher follows by itself).
  prefetch(base + n, prefetch_reach - 2048, 2048);
  prefetch(theta + n, prefetch_reach - 2048, 2048);
  alignas(64) float values[pipelined_block_max];
  for (std::size_t start = 0; start < n; start += pipelined_block_max) {
    const std::size_t len = n - start < pipelined_block_max ? n - start : pipelined_block_max;
    outer_gradient_into<Feedback>(len, base + start, theta + start, Feedback ? residual + start : nullptr, values);
    std::uint8_t* piece_codes = codes + code_bytes(F, start);
    float* piece_residual = Feedback ? residual + start : nullptr;
    if (scale.by_inverse)
      encode_and_load<F, Feedback, false>(
          len, values, scale.absmax, [inverse = scale.inverse](float d) { return d * inverse; }, piece_codes,
          piece_residual, nullptr, nullptr, nullptr, nullptr, m);
    else
      encode_and_load_dividing<F, Feedback, false>(len, values, scale.absmax, piece_codes, piece_residual, nullptr,
                                                   nullptr, nullptr, nullptr, m);
  }
  return true;
}

/// Encodes the `n` values of `base − θ` (+ `residual`) in an unscaled
/// format `F` (fp32, bf16) at `out`. False if a value is not finite.
template <codec_id F, bool Feedback>
bool encode_delta_run(const float* __restrict base, const float* __restrict theta, float* __restrict residual,
                      std::size_t n, std::byte* out) {
  magnitude_max m;
  for (std::size_t i = 0; i < n; ++i) {
    const float d = outer_gradient_at<Feedback>(base, theta, residual, i);
    m(d);
    if constexpr (F == codec_id::f32) {
      std::memcpy(out + 4 * i, &d, 4);
      if constexpr (Feedback) residual[i] = d - d;  // fp32 is exact: the error is 0
    } else {
      static_assert(F == codec_id::bf16);
      const std::uint16_t b = to_bf16(d);
      std::memcpy(out + 2 * i, &b, 2);
      if constexpr (Feedback) residual[i] = d - from_bf16(b);
    }
  }
  return m.finite();
}

/// What `encode_delta_block` does, for chunks `[first_chunk, last_chunk)` of
/// a block-scaled format `F` whose blocks hold at most `pipelined_block_max`
/// values, software-pipelined: each block's values are computed once, into a
/// buffer, in the loop that encodes the block before it (the first in a
/// loop of its own). Block by block, a block was read from memory for its
/// scale and then again, from cache, for its codes, and memory idled while
/// the codes were computed (bench/codecs/README.md, "Pipelined encoder").
template <codec_id F, bool Feedback, class Run>
bool encode_delta_pipelined(const float* base, theta_runs<Run>& theta, float* residual, std::size_t n,
                            const chunking& c, std::size_t first_chunk, std::size_t last_chunk, std::byte* out,
                            std::atomic<bool>& failed) {
  const std::size_t block = c.values;
  auto len_of = [&](std::size_t k) { return n - k * block < block ? n - k * block : block; };
  alignas(64) float buffer[2][pipelined_block_max];
  // Block k's values into `to`, alone (the first block, a short last one,
  // one after a block of zeros), and their magnitude maximum.
  auto load = [&](std::size_t k, float* to) {
    const std::size_t first = k * block, len = len_of(k);
    return outer_gradient_into<Feedback>(len, base + first, theta(first, len), Feedback ? residual + first : nullptr,
                                         to);
  };
  magnitude_max m = load(first_chunk, buffer[0]);
  for (std::size_t k = first_chunk; k < last_chunk; ++k) {
    if (failed.load(std::memory_order_relaxed) || !m.finite()) {
      failed.store(true, std::memory_order_relaxed);
      return false;
    }
    const std::size_t first = k * block, len = len_of(k);
    const float* cur = buffer[(k - first_chunk) % 2];
    float* next = buffer[(k - first_chunk + 1) % 2];
    float* r_cur = Feedback ? residual + first : nullptr;
    const block_unit scale(m.value());
    std::byte* block_out = out + k * c.bytes;
    put_f32(block_out, scale.absmax);
    auto* codes = reinterpret_cast<std::uint8_t*>(block_out + 4);
    const bool more = k + 1 < last_chunk;
    // The next block's values come in this block's loop when both are full
    // (only the last block of the span may be short), so that one length
    // bounds both.
    const bool fuse = more && len_of(k + 1) == block && scale.absmax != 0.0f;
    const float* t_next = fuse ? theta(first + block, block) : nullptr;
    if (fuse && !Feedback) {
      // Each input stream's lines up to `prefetch_reach` past the block
      // this step reads from memory, in a window twice the block (each line
      // is asked for twice: once is not enough when the core drops a
      // prefetch) but at most 2 KiB (bench/codecs/README.md, "Prefetch").
      // θ's from that block's pointer: a hint, harmless where the block
      // after it lies in another run. Not with error feedback: its third
      // stream made the pass slower with the prefetch than without
      // (bench/codecs/README.md, "Pipelined encoder").
      const std::size_t window = 2 * block * sizeof(float) < 2048 ? 2 * block * sizeof(float) : 2048;
      prefetch(base + first + 2 * block, prefetch_reach - window, window);
      prefetch(t_next + block, prefetch_reach - window, window);
    }
    // One loop per way of scaling, so that no loop branches per value.
    const float* base_next = fuse ? base + first + block : nullptr;
    const float* residual_next = fuse && Feedback ? residual + first + block : nullptr;
    if (scale.absmax == 0.0f) {  // every value ±0: every code 0, and no error
      std::memset(codes, 0, code_bytes(F, len));
      if constexpr (Feedback)
        for (std::size_t i = 0; i < len; ++i) r_cur[i] = cur[i] - 0.0f;
    } else if (scale.by_inverse) {
      auto by_inverse = [inverse = scale.inverse](float d) { return d * inverse; };
      if (fuse)
        encode_and_load<F, Feedback, true>(len, cur, scale.absmax, by_inverse, codes, r_cur, base_next, t_next,
                                           residual_next, next, m);
      else  // the last block of the span, or the one before a short last one
        encode_and_load<F, Feedback, false>(len, cur, scale.absmax, by_inverse, codes, r_cur, nullptr, nullptr, nullptr,
                                            nullptr, m);
    } else if (fuse) {
      encode_and_load_dividing<F, Feedback, true>(len, cur, scale.absmax, codes, r_cur, base_next, t_next,
                                                  residual_next, next, m);
    } else {
      encode_and_load_dividing<F, Feedback, false>(len, cur, scale.absmax, codes, r_cur, nullptr, nullptr, nullptr,
                                                   nullptr, m);
    }
    if (more && !fuse) m = load(k + 1, next);
  }
  return true;
}

template <codec_id F, bool Feedback, class Run>
bool encode_delta_chunks(const float* base, theta_runs<Run>& theta, float* residual, std::size_t n, const chunking& c,
                         std::size_t first_chunk, std::size_t last_chunk, std::byte* out, std::atomic<bool>& failed) {
  if constexpr (block_scaled(F))
    if (c.values <= pipelined_block_max)
      return encode_delta_pipelined<F, Feedback>(base, theta, residual, n, c, first_chunk, last_chunk, out, failed);
  for (std::size_t k = first_chunk; k < last_chunk; ++k) {
    if (failed.load(std::memory_order_relaxed)) return false;
    const std::size_t first = k * c.values;
    const std::size_t len = n - first < c.values ? n - first : c.values;
    const float* t = theta(first, len);
    float* r = Feedback ? residual + first : nullptr;
    bool ok;
    if constexpr (block_scaled(F))
      ok = encode_delta_block<F, Feedback>(base + first, t, r, len, out + k * c.bytes);
    else
      ok = encode_delta_run<F, Feedback>(base + first, t, r, len, out + k * c.bytes);
    if (!ok) {
      failed.store(true, std::memory_order_relaxed);
      return false;
    }
  }
  return true;
}

/// Adds `weight ·` the values of chunks `[first_chunk, last_chunk)` of `in`
/// to `acc`.
template <codec_id F>
void decode_accumulate_chunks(const std::byte* in, std::size_t n, const chunking& c, std::size_t first_chunk,
                              std::size_t last_chunk, float weight, float* acc_all) {
  for (std::size_t k = first_chunk; k < last_chunk; ++k) {
    const std::size_t first = k * c.values;
    const std::size_t len = n - first < c.values ? n - first : c.values;
    const std::byte* p = in + k * c.bytes;
    float* __restrict acc = acc_all + first;
    if constexpr (F == codec_id::f32) {
      for (std::size_t i = 0; i < len; ++i) acc[i] += weight * get_f32(p + 4 * i);
    } else if constexpr (F == codec_id::bf16) {
      for (std::size_t i = 0; i < len; ++i) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        acc[i] += weight * from_bf16(b);
      }
    } else {
      const float absmax = get_f32(p);
      const auto* __restrict codes = reinterpret_cast<const std::uint8_t*>(p + 4);
      if constexpr (F == codec_id::int8) {
        for (std::size_t i = 0; i < len; ++i)
          acc[i] += weight * (from_int8(static_cast<std::int8_t>(codes[i])) * absmax);
      } else if constexpr (F == codec_id::fp8) {
        for (std::size_t i = 0; i < len; ++i) acc[i] += weight * (from_fp8(codes[i]) * absmax);
      } else {
        static_assert(F == codec_id::int4);
        for (std::size_t j = 0; j < len / 2; ++j) {
          acc[2 * j] += weight * (from_int4(codes[j]) * absmax);
          acc[2 * j + 1] += weight * (from_int4(codes[j] >> 4u) * absmax);
        }
        if (len % 2) acc[len - 1] += weight * (from_int4(codes[len / 2]) * absmax);
      }
    }
  }
}

}  // namespace detail

}  // namespace diloco::codec
