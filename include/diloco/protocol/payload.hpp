// Fragment payloads in any codec, as the learner and the syncer write and
// read them: outer gradients and global fragments of a model of `T`s, at full
// precision (`codec_of<T>`) or compressed (docs/protocol.md, "Codecs").
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "diloco/codec/blocks.hpp"
#include "diloco/protocol/message.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/scalar.hpp"

namespace diloco::payload {

/// Why a payload could not be read.
enum class verdict : std::uint8_t {
  ok,
  bad_codec,   ///< a codec a model of `T`s does not take, or a block out of range
  bad_size,    ///< not the bytes `element_count` values in that codec take
  non_finite,  ///< a value (or a block's scale) that is NaN or infinite, or an invalid code
};

/// Whether a model of `T`s reads payloads of codec `c` with blocks of
/// `block`: its own full-precision codec, or a compressed one.
template <scalar T>
constexpr bool readable(codec_id c, std::uint32_t block) noexcept {
  if (block_scaled(c)) return block >= 1 && block <= max_codec_block;
  return block == 0 && (c == codec_of<T> || c == codec_id::bf16);
}

/// Bytes of `n` values in codec `c` (`readable`).
constexpr std::size_t size(codec_id c, std::size_t n, std::uint32_t block) noexcept {
  return static_cast<std::size_t>(wire::payload_size(c, n, block));
}

/// Writes the `n` values `get(0)` … `get(n − 1)` (each a `T`, read once per
/// pass; a block-scaled codec reads each block twice) in codec `c`
/// (`readable`) into `out`, which holds `size(c, n, block)` bytes. False if
/// a value is not finite — as a `float` for the compressed codecs, so a
/// `double` beyond its range is refused too: nothing is ever sent for it.
template <scalar T, class Get>
bool encode(codec_id c, std::uint32_t block, std::size_t n, Get&& get, std::span<std::byte> out) {
  if (c == codec_of<T>) {
    if (out.size() != n * sizeof(T)) return false;
    for (std::size_t i = 0; i < n; ++i) {
      const T v = get(i);
      if (!std::isfinite(v)) return false;
      std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
    }
    return true;
  }
  return codec::encode(
      c, n, block, [&get](std::size_t i) { return static_cast<float>(get(i)); }, out);
}

/// Whether `in` holds `n` values of codec `c` that a model of `T`s reads:
/// `decode`'s checks, in one pass over the bytes, without decoding (a
/// learner checks an update where it arrives and decodes it where its
/// parameters live, `memory_space::adopt`).
template <scalar T>
verdict check(codec_id c, std::uint32_t block, std::span<const std::byte> in, std::size_t n) {
  if (!readable<T>(c, block)) return verdict::bad_codec;
  if (in.size() != size(c, n, block)) return verdict::bad_size;
  if (c == codec_of<T>) {
    for (std::size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, in.data() + i * sizeof(T), sizeof(T));
      if (!std::isfinite(v)) return verdict::non_finite;
    }
    return verdict::ok;
  }
  return codec::valid(c, n, block, in) ? verdict::ok : verdict::non_finite;
}

/// Reads `out.size()` values of codec `c` from `in` into `out`, and adds
/// the sum of their squares to `squared`. Checks before it writes anything:
/// the codec and block (`bad_codec`), the exact size (`bad_size`), then
/// every scale, code and value (`non_finite`); on a refusal `out` and
/// `squared` are as they were — except that a full-precision value found not
/// finite during the copy leaves `out` partly written.
template <scalar T>
verdict decode(codec_id c, std::uint32_t block, std::span<const std::byte> in, std::span<T> out, double& squared) {
  if (!readable<T>(c, block)) return verdict::bad_codec;
  const std::size_t n = out.size();
  if (in.size() != size(c, n, block)) return verdict::bad_size;
  double sum = 0.0;
  if (c == codec_of<T>) {
    std::memcpy(out.data(), in.data(), n * sizeof(T));
    for (const T v : out) {
      if (!std::isfinite(v)) return verdict::non_finite;
      sum += double(v) * double(v);
    }
  } else {
    if (!codec::valid(c, n, block, in)) return verdict::non_finite;
    codec::decode(c, n, block, in, [&](std::size_t i, float v) {
      out[i] = T(v);
      sum += double(v) * double(v);
    });
  }
  if (!std::isfinite(sum)) return verdict::non_finite;
  squared += sum;
  return verdict::ok;
}

}  // namespace diloco::payload
