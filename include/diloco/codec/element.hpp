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
/// saturate to ±448 (never NaN).
DILOCO_HOST_DEVICE inline std::uint8_t to_e4m3(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  float a = std::fabs(x);
  if (!(a < e4m3_max)) return sign | 0x7E;  // 448 = 1.75 · 2^8: exponent 15, mantissa 6
  int exponent = 0;
  std::frexp(a, &exponent);  // a = f · 2^exponent, f in [0.5, 1)
  // The spacing of E4M3 values around a: 2^(e−3) for a in [2^e, 2^(e+1)),
  // e = exponent − 1, and 2^-9 (the subnormal step) below 2^-6.
  const int e = exponent - 1 < -6 ? -6 : exponent - 1;
  const float step = std::ldexp(1.0f, e - 3);
  float units = a / step;  // exact: a power-of-two division
  // Round to nearest, ties to even units (the code's lowest bit).
  float whole = std::floor(units);
  const float rest = units - whole;
  if (rest > 0.5f || (rest == 0.5f && std::fmod(whole, 2.0f) != 0.0f)) whole += 1.0f;
  units = whole;
  const float rounded = units * step;  // may reach the next binade: the encoding below handles it
  if (!(rounded < e4m3_max)) return sign | 0x7E;
  if (rounded < 0.015625f) return sign | static_cast<std::uint8_t>(rounded / 0.001953125f);  // subnormal: units of 2^-9
  int re = 0;
  const float f = std::frexp(rounded, &re);  // rounded = f · 2^re, f in [0.5, 1)
  const int biased = re - 1 + 7;
  const int m = static_cast<int>(f * 16.0f) - 8;  // (2f − 1) · 8
  return sign | static_cast<std::uint8_t>((biased << 3) | m);
}

/// `y` rounded to the nearest integer, halves away from zero.
DILOCO_HOST_DEVICE inline float round_half_away(float y) {
  return std::copysign(std::floor(std::fabs(y) + 0.5f), y);
}

/// `a · b` rounded once, to nearest even, and never fused with a following
/// addition: nvcc contracts `a·b + c` into one FMA by default, which would
/// make a kernel's codes differ from the CPU loop's. On the host it is the
/// plain product.
DILOCO_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// The scale of one block of a block-scaled format: values are divided by
/// the block's largest magnitude `absmax`, so that `unit(x)` lies in [−1, 1]
/// whatever the magnitudes (subnormal, huge). It multiplies by 1/absmax
/// where that is a normal float (it keeps its 24 bits) and divides where
/// absmax is so small or so large that it is not; an all-zero block
/// (absmax 0) has all-zero units.
struct block_scale {
  float absmax, inverse;
  bool by_inverse;
  DILOCO_HOST_DEVICE explicit block_scale(float largest)
      : absmax(largest), inverse(largest > 0.0f ? 1.0f / largest : 0.0f), by_inverse(std::isnormal(inverse)) {}
  DILOCO_HOST_DEVICE float unit(float x) const {
    return absmax > 0.0f ? (by_inverse ? x * inverse : x / absmax) : 0.0f;
  }
};

/// The int8 level, in [−127, 127], of a unit value `u` in [−1, 1]
/// (x ≈ level/127 · absmax).
DILOCO_HOST_DEVICE inline float int8_level(float u) {
  return std::fmin(127.0f, std::fmax(-127.0f, round_half_away(mul_rn(u, 127.0f))));
}

/// The int4 level, in [−7, 7], of a unit value `u` in [−1, 1]
/// (x ≈ level/7 · absmax).
DILOCO_HOST_DEVICE inline float int4_level(float u) {
  return std::fmin(7.0f, std::fmax(-7.0f, round_half_away(mul_rn(u, 7.0f))));
}

/// The E4M3 code of a unit value `u` in [−1, 1] (x ≈ e4m3(code)/448 · absmax).
DILOCO_HOST_DEVICE inline std::uint8_t fp8_code(float u) { return to_e4m3(mul_rn(u, e4m3_max)); }

/// The unit values of the codes: `int8` code `c` (two's complement), `int4`
/// nibble `c` (two's complement, low 4 bits), E4M3 code `c`. A decoded value
/// is `mul_rn(unit, absmax)`.
DILOCO_HOST_DEVICE inline float int8_unit(std::uint8_t c) { return float(static_cast<std::int8_t>(c)) / 127.0f; }
DILOCO_HOST_DEVICE inline float int4_unit(unsigned c) {
  return float(c & 0x8u ? int(c & 0xFu) - 16 : int(c & 0xFu)) / 7.0f;
}
DILOCO_HOST_DEVICE inline float fp8_unit(std::uint8_t c) { return from_e4m3(c) / e4m3_max; }

}  // namespace diloco::codec
