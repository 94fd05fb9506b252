// The payloads of the float codecs (docs/protocol.md, "Codecs"): fp32,
// bf16, and the block-scaled int8, fp8 (E4M3) and int4. Encoding reads each
// value once through a callable, so that the outer gradient `base − θ` can be
// computed and encoded in one pass; decoding hands each value to a callable,
// so that it can be weighted and accumulated in one pass.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "diloco/codec/codec_id.hpp"
#include "diloco/codec/element.hpp"

namespace diloco::codec {

/// Values per scaled block unless the configuration says otherwise. At 256,
/// int8 and fp8 send 1024/260 = 3.94× and int4 1024/132 = 7.76× fewer bytes
/// than fp32.
inline constexpr std::size_t default_block = 256;

/// Bytes of a block of `n` codes (not counting its scale); for the codecs
/// without blocks, of `n` values.
constexpr std::size_t code_bytes(codec_id f, std::size_t n) noexcept {
  switch (f) {
    case codec_id::f32: return 4 * n;
    case codec_id::bf16: return 2 * n;
    case codec_id::int8:
    case codec_id::fp8: return n;
    case codec_id::int4: return (n + 1) / 2;
    case codec_id::f64: return 8 * n;
    case codec_id::bytes: return n;
    case codec_id::none: break;
  }
  return 0;
}

/// Bytes of `n` values in codec `f` with blocks of `block` values (`block`
/// ≥ 1 for a block-scaled codec; ignored by the others). 0 for `none`.
constexpr std::size_t encoded_size(codec_id f, std::size_t n, std::size_t block) noexcept {
  if (!block_scaled(f)) return code_bytes(f, n);
  const std::size_t whole = n / block, tail = n % block;
  return whole * (4 + code_bytes(f, block)) + (tail ? 4 + code_bytes(f, tail) : 0);
}

/// The largest error `decode(encode(x))` may make on a value `x` of a block
/// whose largest magnitude is `absmax`: half a quantization step, plus the
/// float rounding of the scaling (4 units of roundoff of absmax) and, where
/// results are subnormal, half the smallest subnormal step.
inline double error_bound(codec_id f, double x, double absmax) noexcept {
  constexpr double eps = 0x1p-24;         // the unit roundoff of binary32
  constexpr double subnormal = 0x1p-149;  // the smallest positive binary32
  switch (f) {
    case codec_id::f32: return 0.0;
    case codec_id::bf16: return std::fmax(std::fabs(x) * 0x1p-8, 0x1p-134);  // half an ulp of 8 significant bits
    case codec_id::int8: return absmax * (0.5 / 127 + 4 * eps) + subnormal;
    case codec_id::int4: return absmax * (0.5 / 7 + 4 * eps) + subnormal;
    case codec_id::fp8:  // relative 2^-4 for normal E4M3, absolute 2^-10 (half the subnormal step) in units of
                         // absmax/448
      return std::fmax(std::fabs(x) * 0x1p-4, absmax / 448 * 0x1p-10) + absmax * 4 * eps + subnormal;
    case codec_id::f64:
    case codec_id::bytes:
    case codec_id::none: break;
  }
  return 0.0;
}

namespace detail {

inline void put_f32(std::byte* out, float v) noexcept { std::memcpy(out, &v, 4); }
inline float get_f32(const std::byte* in) noexcept {
  float v;
  std::memcpy(&v, in, 4);
  return v;
}

/// Encodes values `first` … `first + n − 1` of `get` as one block at `out`;
/// false if one is not finite.
template <class Get>
bool encode_block(codec_id f, std::size_t first, std::size_t n, Get& get, std::byte* out) {
  float absmax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = get(first + i);
    if (!std::isfinite(v)) return false;
    absmax = std::fmax(absmax, std::fabs(v));
  }
  put_f32(out, absmax);
  std::byte* codes = out + 4;
  // x/absmax lies in [−1, 1] whatever the magnitudes (subnormal, huge); an
  // all-zero block has absmax 0 and zero codes.
  // A multiplication by 1/absmax where that is a normal float (it keeps its
  // 24 bits), a division where absmax is so small or so large that it is not.
  const float inverse = absmax > 0.0f ? 1.0f / absmax : 0.0f;
  const bool by_inverse = std::isnormal(inverse);
  auto unit = [&](float v) { return absmax > 0.0f ? (by_inverse ? v * inverse : v / absmax) : 0.0f; };
  switch (f) {
    case codec_id::int8:
      for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::byte>(to_int8(unit(get(first + i))));
      return true;
    case codec_id::fp8:
      for (std::size_t i = 0; i < n; ++i) codes[i] = static_cast<std::byte>(to_fp8(unit(get(first + i))));
      return true;
    case codec_id::int4:
      for (std::size_t i = 0; i < n; i += 2) {
        auto nibble = [&](std::size_t k) { return k < n ? to_int4(unit(get(first + k))) : 0u; };
        codes[i / 2] = static_cast<std::byte>(nibble(i) | (nibble(i + 1) << 4));
      }
      return true;
    default: return false;
  }
}

}  // namespace detail

/// Encodes the `n` values `get(0)` … `get(n − 1)` (each a `float`, read
/// exactly once per pass: twice for the block-scaled formats, whose block is
/// read once for its scale and once for its codes) into `out`, which holds
/// `encoded_size(f, n, block)` bytes. Returns false if a value is not finite:
/// nothing is ever sent for it (`out` is then partly written; discard it).
/// Returns false having written nothing for a codec not in `float_codecs`.
template <class Get>
bool encode(codec_id f, std::size_t n, std::size_t block, Get&& get, std::span<std::byte> out) {
  if (!float_codec(f) || (block_scaled(f) && block == 0) || out.size() != encoded_size(f, n, block)) return false;
  std::byte* o = out.data();
  switch (f) {
    case codec_id::f32:
      for (std::size_t i = 0; i < n; ++i) {
        const float v = get(i);
        if (!std::isfinite(v)) return false;
        detail::put_f32(o + 4 * i, v);
      }
      return true;
    case codec_id::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        const float v = get(i);
        if (!std::isfinite(v)) return false;
        const std::uint16_t b = to_bf16(v);
        std::memcpy(o + 2 * i, &b, 2);
      }
      return true;
    default:
      for (std::size_t first = 0; first < n; first += block) {
        const std::size_t len = n - first < block ? n - first : block;
        if (!detail::encode_block(f, first, len, get, o)) return false;
        o += 4 + code_bytes(f, len);
      }
      return true;
  }
}

/// Whether `in` is a well-formed encoding of `n` values: the exact size,
/// every scale finite and not negative, every value finite (no NaN E4M3
/// code, no int8 −128 or int4 −8, no non-finite fp32 or bf16). Bytes from
/// the network are checked before they are decoded. False for a codec not
/// in `float_codecs`.
inline bool valid(codec_id f, std::size_t n, std::size_t block, std::span<const std::byte> in) {
  if (!float_codec(f) || (block_scaled(f) && block == 0) || in.size() != encoded_size(f, n, block)) return false;
  const std::byte* p = in.data();
  switch (f) {
    case codec_id::f32:
      for (std::size_t i = 0; i < n; ++i)
        if (!std::isfinite(detail::get_f32(p + 4 * i))) return false;
      return true;
    case codec_id::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        if ((b & 0x7F80u) == 0x7F80u) return false;
      }
      return true;
    default:
      for (std::size_t first = 0; first < n; first += block) {
        const std::size_t len = n - first < block ? n - first : block;
        const float absmax = detail::get_f32(p);
        if (!(absmax >= 0.0f) || !std::isfinite(absmax)) return false;
        const std::byte* codes = p + 4;
        for (std::size_t i = 0; i < code_bytes(f, len); ++i) {
          const auto c = std::to_integer<unsigned>(codes[i]);
          if (f == codec_id::int8 && c == 0x80u) return false;
          if (f == codec_id::fp8 && (c & 0x7Fu) == 0x7Fu) return false;
          if (f == codec_id::int4 && ((c & 0xFu) == 0x8u || (c >> 4) == 0x8u)) return false;
          if (f == codec_id::int4 && 2 * i + 1 == len && (c >> 4) != 0) return false;  // the odd tail's padding
        }
        p += 4 + code_bytes(f, len);
      }
      return true;
  }
}

/// Decodes `n` values from `in` (checked with `valid`), calling
/// `put(i, value)` for each in order: `acc[i] += w * value` makes it the
/// weighted accumulation of a merge.
template <class Put>
void decode(codec_id f, std::size_t n, std::size_t block, std::span<const std::byte> in, Put&& put) {
  const std::byte* p = in.data();
  switch (f) {
    case codec_id::f32:
      for (std::size_t i = 0; i < n; ++i) put(i, detail::get_f32(p + 4 * i));
      return;
    case codec_id::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        put(i, from_bf16(b));
      }
      return;
    default:
      for (std::size_t first = 0; first < n; first += block) {
        const std::size_t len = n - first < block ? n - first : block;
        const float absmax = detail::get_f32(p);
        const std::byte* codes = p + 4;
        for (std::size_t i = 0; i < len; ++i) {
          float unit = 0.0f;
          if (f == codec_id::int8)
            unit = from_int8(static_cast<std::int8_t>(std::to_integer<std::uint8_t>(codes[i])));
          else if (f == codec_id::fp8)
            unit = from_fp8(std::to_integer<std::uint8_t>(codes[i]));
          else
            unit = from_int4(std::to_integer<unsigned>(codes[i / 2]) >> (4 * (i % 2)));
          put(first + i, mul_rn(unit, absmax));  // |unit| ≤ 1: never beyond absmax, never overflowing
        }
        p += 4 + code_bytes(f, len);
      }
      return;
  }
}

}  // namespace diloco::codec
