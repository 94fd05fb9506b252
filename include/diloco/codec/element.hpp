// The element conversions of the codecs: float32 to and from bfloat16 and
// FP8 E4M3, and the rounding of block-scaled integers. One definition for
// the CPU loops and (under nvcc, DILOCO_HOST_DEVICE) the CUDA kernels.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "diloco/detail/config.hpp"

namespace diloco::codec {

/// bfloat16 (the upper 16 bits of an IEEE binary32: sign, 8 exponent bits,
/// 7 mantissa bits) of a finite `x`, rounded to nearest, ties to even. A
/// finite value that would round to infinity (beyond ≈ 3.3895e38) saturates
/// to the largest finite bfloat16 instead: a codec never makes a finite
/// outer gradient infinite.
DILOCO_HOST_DEVICE inline std::uint16_t to_bf16(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  // Adding 0x7FFF plus the lowest kept bit carries into the kept bits exactly
  // when the dropped half is above one half, or equal with an odd kept part.
  const std::uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  const auto b = static_cast<std::uint16_t>(rounded >> 16);
  if ((b & 0x7F80u) == 0x7F80u) return static_cast<std::uint16_t>((b & 0x8000u) | 0x7F7Fu);
  return b;
}

/// The binary32 value of bfloat16 `b` (exact).
DILOCO_HOST_DEVICE inline float from_bf16(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

/// FP8 E4M3 as the OCP 8-bit floating point specification (v1.0, 2023)
/// defines it: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no
/// infinities; S.1111.111 is NaN; the largest finite magnitude is 448 and
/// the smallest subnormal 2^-9.
inline constexpr float e4m3_max = 448.0f;

/// The value of E4M3 code `c` (NaN codes give NaN).
DILOCO_HOST_DEVICE inline float from_e4m3(std::uint8_t c) {
  const int exponent = (c >> 3) & 0xF;
  const int mantissa = c & 0x7;
  const float sign = (c & 0x80) ? -1.0f : 1.0f;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(float(mantissa), -9);  // subnormal: m · 2^-3 · 2^-6
  return sign * std::ldexp(float(8 + mantissa), exponent - 10);      // (1 + m/8) · 2^(e−7)
}

/// The E4M3 code nearest to finite `x`, ties to even; magnitudes beyond 448
/// saturate to ±448 (never NaN). Branch-free, so that loops over it
/// vectorize: the normal range rounds the binary32 significand to 3 bits and
/// rebiases the exponent; below 2^-6, adding 2^14 (whose ulp is the
/// subnormal step 2^-9) rounds to the subnormal steps in the FPU's
/// round-to-nearest-even. It gave the same code as the frexp-based encoder it
/// replaced for every finite binary32 (all 2^32 bit patterns compared).
DILOCO_HOST_DEVICE inline std::uint8_t to_e4m3(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (bits >> 24) & 0x80u;
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  const float a = std::bit_cast<float>(magnitude);
  // Normal: add just under half of the 20 dropped bits, plus the lowest kept
  // bit (ties to even); a carry moves to the next binade by itself.
  const std::uint32_t normal = ((magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u)) >> 20) - ((127u - 7u) << 3);
  // Subnormal: 2^14 + a, in units of 2^-9 above 2^14 (bits 0x46800000).
  const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(a + 16384.0f) - 0x46800000u;
  const std::uint32_t code = a < 0.015625f ? subnormal : normal;
  return static_cast<std::uint8_t>(sign | (a < e4m3_max && code < 0x7Eu ? code : 0x7Eu));  // 0x7E: 448
}

/// `y` rounded to the nearest integer, halves away from zero.
DILOCO_HOST_DEVICE inline float round_half_away(float y) {
  return std::copysign(std::floor(std::fabs(y) + 0.5f), y);
}

// The codes of the block-scaled formats. A value `x` of a block whose largest
// magnitude is `absmax` travels as the code of its unit `x / absmax` (in
// [−1, 1]) and comes back as `unit(code) · absmax`.

/// `round_half_away(y)` for |y| < 2^30, as an int: ⌊|y| + ½⌋ by truncation,
/// which (unlike `std::floor` under the default -ftrapping-math) vectorizes.
DILOCO_HOST_DEVICE inline int round_half_away_to_int(float y) {
  return static_cast<int>(std::copysign(float(static_cast<int>(std::fabs(y) + 0.5f)), y));
}

/// The int8 code of a unit (|unit| ≤ 2^20): `round_half_away(unit · 127)`
/// clamped to [−127, 127].
DILOCO_HOST_DEVICE inline std::int8_t to_int8(float unit) {
  const int q = round_half_away_to_int(unit * 127.0f);
  return static_cast<std::int8_t>(q < -127 ? -127 : (q > 127 ? 127 : q));
}

/// The unit of int8 code `q`: `q / 127`.
DILOCO_HOST_DEVICE inline float from_int8(std::int8_t q) { return float(q) / 127.0f; }

/// The int4 code of a unit (|unit| ≤ 2^20), as the low nibble of the
/// result: `round_half_away(unit · 7)` clamped to [−7, 7], in two's
/// complement.
DILOCO_HOST_DEVICE inline unsigned to_int4(float unit) {
  const int q = round_half_away_to_int(unit * 7.0f);
  return static_cast<unsigned>(q < -7 ? -7 : (q > 7 ? 7 : q)) & 0xFu;
}

/// The unit of the int4 code in the low nibble of `nibble`: `q / 7`, the
/// nibble sign-extended as `(c ⊕ 8) − 8`.
DILOCO_HOST_DEVICE inline float from_int4(unsigned nibble) {
  return float(int((nibble & 0xFu) ^ 0x8u) - 8) / 7.0f;
}

/// The fp8 code of a unit: the E4M3 code nearest `unit · 448`.
DILOCO_HOST_DEVICE inline std::uint8_t to_fp8(float unit) { return to_e4m3(unit * e4m3_max); }

/// The unit of fp8 code `c`: `e4m3(c) / 448`.
DILOCO_HOST_DEVICE inline float from_fp8(std::uint8_t c) { return from_e4m3(c) / e4m3_max; }

}  // namespace diloco::codec
