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

/// The value of E4M3 code `c` (NaN codes give NaN), exact. Branch-free, so
/// that loops over it vectorize: a normal code's exponent and mantissa move
/// into binary32's fields (bias 7 → 127); a subnormal one, `m · 2^-9`, is
/// `(1 + m/8) · 2^-6 − 2^-6`, computed either way and selected.
DILOCO_HOST_DEVICE inline float from_e4m3(std::uint8_t c) {
  const std::uint32_t exponent = (c >> 3) & 0xFu;
  const std::uint32_t mantissa = c & 0x7u;
  const float normal = std::bit_cast<float>(((exponent + 120u) << 23) | (mantissa << 20));  // (1 + m/8) · 2^(e−7)
  const float subnormal = std::bit_cast<float>((121u << 23) | (mantissa << 20)) - 0x1p-6f;  // exact
  const std::uint32_t magnitude = std::bit_cast<std::uint32_t>(exponent == 0 ? subnormal : normal);
  const std::uint32_t nan = std::bit_cast<std::uint32_t>(std::numeric_limits<float>::quiet_NaN());
  return std::bit_cast<float>((c & 0x7Fu) == 0x7Fu ? nan : magnitude | (std::uint32_t(c & 0x80u) << 24));
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
  const bool in_range = (a < e4m3_max) & (code < 0x7Eu);  // `&`, not `&&`: no branch
  return static_cast<std::uint8_t>(sign | (in_range ? code : 0x7Eu));  // 0x7E: 448
}

/// `y` rounded to the nearest integer, halves away from zero.
DILOCO_HOST_DEVICE inline float round_half_away(float y) {
  return std::copysign(std::floor(std::fabs(y) + 0.5f), y);
}

/// `a · b` rounded once, to nearest even, and never fused with a neighbouring
/// addition: nvcc contracts `a·b + c` into one FMA by default (`-fmad=true`),
/// which would make a kernel's codes and decoded values differ from the CPU
/// loop's. On the host it is the plain product: the CPU code is unchanged.
DILOCO_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// The codes of the block-scaled formats. A value `x` of a block whose largest
// magnitude is `absmax` travels as the code of its unit `x / absmax` (in
// [−1, 1]) and comes back as `unit(code) · absmax`, that product rounded once
// (`mul_rn(unit, absmax)`): docs/protocol.md, "Arithmetic".

/// `round_half_away(y)` for |y| < 2^30, as an int: `y ± ½` truncated, which
/// is ±⌊|y| + ½⌋ (IEEE addition is symmetric in sign, and truncation is ⌊⌋
/// for positive values), and which, unlike `std::floor` under the default
/// -ftrapping-math, vectorizes.
DILOCO_HOST_DEVICE inline int round_half_away_to_int(float y) {
  return static_cast<int>(y + std::copysign(0.5f, y));
}

/// The int8 code of a unit (|unit| ≤ 2^20): `round_half_away(unit · 127)`
/// clamped to [−127, 127].
DILOCO_HOST_DEVICE inline std::int8_t to_int8(float unit) {
  const int q = round_half_away_to_int(mul_rn(unit, 127.0f));
  return static_cast<std::int8_t>(q < -127 ? -127 : (q > 127 ? 127 : q));
}

/// The unit of int8 code `q`: `q / 127`.
DILOCO_HOST_DEVICE inline float from_int8(std::int8_t q) { return float(q) / 127.0f; }

/// The int4 code of a unit (|unit| ≤ 2^20): its level
/// `round_half_away(unit · 7)` clamped to [−7, 7], and that level in two's
/// complement as the low nibble of `to_int4`.
DILOCO_HOST_DEVICE inline int int4_level(float unit) {
  const int q = round_half_away_to_int(mul_rn(unit, 7.0f));
  return q < -7 ? -7 : (q > 7 ? 7 : q);
}
DILOCO_HOST_DEVICE inline unsigned to_int4(float unit) { return static_cast<unsigned>(int4_level(unit)) & 0xFu; }

/// The unit of int4 level `q`, `q / 7`, and of the code in the low nibble of
/// `nibble`, sign-extended as `(c ⊕ 8) − 8`.
DILOCO_HOST_DEVICE inline float int4_unit(int level) { return float(level) / 7.0f; }
DILOCO_HOST_DEVICE inline float from_int4(unsigned nibble) { return int4_unit(int((nibble & 0xFu) ^ 0x8u) - 8); }

/// The fp8 code of a unit: the E4M3 code nearest `unit · 448`.
DILOCO_HOST_DEVICE inline std::uint8_t to_fp8(float unit) { return to_e4m3(mul_rn(unit, e4m3_max)); }

/// The unit of fp8 code `c`: `e4m3(c) / 448`.
DILOCO_HOST_DEVICE inline float from_fp8(std::uint8_t c) { return from_e4m3(c) / e4m3_max; }

}  // namespace diloco::codec
