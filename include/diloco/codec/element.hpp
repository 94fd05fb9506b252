// The element conversions of the codecs: float32 to and from bfloat16 and
// FP8 E4M3, and the rounding of block-scaled integers. One definition for
// the CPU loops and (under nvcc, DILOCO_HOST_DEVICE) the CUDA kernels.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "diloco/detail/config.hpp"
#include "diloco/detail/rounding.hpp"

namespace diloco::detail {
// The codes are specified to the bit (docs/protocol.md, "Arithmetic"): a
// program built with fast math (g++ or clang -ffast-math, nvcc
// -Xcompiler=-ffast-math) would compute others, and could not talk to a
// learner or syncer built without it.
#if defined(__FAST_MATH__)
inline constexpr bool fast_math = true;
#else
inline constexpr bool fast_math = false;
#endif
static_assert(!fast_math,
              "diloco: the codecs need IEEE arithmetic; build without -ffast-math (and nvcc without --use_fast_math or "
              "-ftz=true)");
}  // namespace diloco::detail

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

// Both conversions below are branch-free in a stronger sense than "no `if`":
// each does its floating-point operation once, unconditionally, on operands
// that no range of values makes constant. Under the default -ftrapping-math
// a compiler may not execute a floating-point operation that the source
// skips; an operation that one range needs and another does not (or that
// folds to a constant for one of them, such as `x − 0` or `NaN / 448`) is
// moved into a branch, and the loop then vectorizes only with masked
// instructions (AVX-512); with SSE2 or AVX2 such a form runs at a tenth of
// memory speed (bench/codecs/README.md).

/// The value of E4M3 code `c`, exact; a NaN for the NaN codes. A code of
/// exponent field `e` and mantissa `m` is the integer significand `8 + m`
/// (`m` when `e` is 0: subnormal) times `2^(max(e, 1) − 10)`: one int-to-float
/// conversion and one multiplication by a power of two, both exact.
DILOCO_HOST_DEVICE inline float from_e4m3(std::uint8_t c) {
  const std::uint32_t e = (c >> 3) & 0xFu;
  const std::uint32_t m = c & 0x7u;
  const std::uint32_t normal = e < 1u ? e : 1u;  // 0 for the subnormal codes
  const float significand = static_cast<float>(static_cast<int>(m + (normal << 3)));
  const float scale = std::bit_cast<float>((e + (1u - normal) + 117u) << 23);  // 2^(max(e,1) − 10)
  const std::uint32_t magnitude = std::bit_cast<std::uint32_t>(significand * scale);
  const std::uint32_t nan = (c & 0x7Fu) == 0x7Fu ? 0x7FC00000u : 0u;  // S.1111.111: exponent all ones
  return std::bit_cast<float>(magnitude | nan | (std::uint32_t(c & 0x80u) << 24));
}

/// An E4M3 code and its value.
struct e4m3_rounding {
  std::uint8_t code;  ///< the code (never a NaN code)
  float value;        ///< `from_e4m3(code)`, exactly
};

/// The E4M3 code nearest to finite `x`, ties to even, and its value
/// (`from_e4m3` of that code, exactly); magnitudes beyond 448 saturate to
/// ±448 (never NaN). `|x|` of binary32 exponent field `e` (bias
/// 127) lies in `[2^k, 2^(k+1))`, `k = e − 127`; adding `C = 2^(k+20)`,
/// whose ulp is `2^(k−3)`, rounds it in the FPU (nearest, ties to even) to
/// 3 fraction bits, and the bits of the sum above those of `C` count the
/// steps: `q = round(|x| / 2^(k−3))`, in [8, 16], and the code is
/// `8·(e − 121) + q` (a carry to 16 is the next binade's code by itself).
/// Below 2^-6 (`e` < 121) `e` is taken as 121: `C = 2^14`, whose ulp is the
/// subnormal step 2^-9, and the code is `q` itself. The value is the sum
/// less `C`, `q · 2^(k−3)`, exact (Sterbenz: the sum lies in [C, 2C]): one
/// subtraction, where `from_e4m3` of the code takes a dozen operations (an
/// encoder that keeps its error, for error feedback, needs both).
/// Saturation comes first: a magnitude above 448 (infinity and NaN too) is
/// taken as 448, an integer minimum of the bits, which order non-negative
/// floats as their values do. Then no code exceeds 448's (0x7E), since
/// below 448 nothing rounds past it, and neither code nor value needs a
/// select after the rounding: on AVX2, which compares unsigned integers
/// only through a minimum and an equality, those selects cost a third of
/// the fp8 encoder's instructions. The code is the same as the earlier
/// bit-rounding form of this function gave, and that form as the
/// frexp-based encoder before it, for every finite binary32; code and value
/// are the same as those of the form with the selects after the rounding
/// for all 2^32 bit patterns (compared exhaustively).
DILOCO_HOST_DEVICE inline e4m3_rounding round_to_e4m3(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (bits >> 24) & 0x80u;
  const std::uint32_t max_bits = std::bit_cast<std::uint32_t>(e4m3_max);
  const std::uint32_t unsaturated = bits & 0x7FFFFFFFu;
  const std::uint32_t magnitude = unsaturated < max_bits ? unsaturated : max_bits;
  const std::uint32_t e = magnitude >> 23 > 121u ? magnitude >> 23 : 121u;
  const std::uint32_t c_bits = (e + 20u) << 23;  // C = 2^(e − 107)
  const float sum = std::bit_cast<float>(magnitude) + std::bit_cast<float>(c_bits);
  const std::uint32_t q = std::bit_cast<std::uint32_t>(sum) - c_bits;
  const std::uint32_t code = q + ((e - 121u) << 3);  // at most 0x7E: 448
  const std::uint32_t value = std::bit_cast<std::uint32_t>(sum - std::bit_cast<float>(c_bits)) | (sign << 24);
  return {static_cast<std::uint8_t>(sign | code), std::bit_cast<float>(value)};
}

/// The E4M3 code nearest to finite `x` (`round_to_e4m3(x).code`).
DILOCO_HOST_DEVICE inline std::uint8_t to_e4m3(float x) { return round_to_e4m3(x).code; }

/// `y` rounded to the nearest integer, halves away from zero.
DILOCO_HOST_DEVICE inline float round_half_away(float y) { return std::copysign(std::floor(std::fabs(y) + 0.5f), y); }

/// `a · b` rounded once, to nearest even, and never fused with a neighbouring
/// addition (`detail::mul_rn`): nvcc contracts `a·b + c` into one FMA by
/// default (`-fmad=true`), which would make a kernel's codes and decoded
/// values differ from the CPU loop's. On the host it is the plain product.
DILOCO_HOST_DEVICE inline float mul_rn(float a, float b) { return diloco::detail::mul_rn(a, b); }

// The codes of the block-scaled formats. A value `x` of a block whose largest
// magnitude is `absmax` travels as the code of its unit `x / absmax` (in
// [−1, 1]) and comes back as `unit(code) · absmax`, that product rounded once
// (`mul_rn(unit, absmax)`): docs/protocol.md, "Arithmetic".

/// `round_half_away(y)` for |y| < 2^30, as an int: `y ± ½` truncated, which
/// is ±⌊|y| + ½⌋ (IEEE addition is symmetric in sign, and truncation is ⌊⌋
/// for positive values), and which, unlike `std::floor` under the default
/// -ftrapping-math, vectorizes.
DILOCO_HOST_DEVICE inline int round_half_away_to_int(float y) { return static_cast<int>(y + std::copysign(0.5f, y)); }

/// The int8 code of a unit (|unit| ≤ 2^20): `round_half_away(unit · 127)`
/// clamped to [−127, 127].
DILOCO_HOST_DEVICE inline std::int8_t to_int8(float unit) {
  const int q = round_half_away_to_int(mul_rn(unit, 127.0f));
  return static_cast<std::int8_t>(q < -127 ? -127 : (q > 127 ? 127 : q));
}

/// The unit of int8 code `q`: `q / 127`.
DILOCO_HOST_DEVICE inline float from_int8(std::int8_t q) { return diloco::detail::div_rn(float(q), 127.0f); }

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
DILOCO_HOST_DEVICE inline float int4_unit(int level) { return diloco::detail::div_rn(float(level), 7.0f); }
DILOCO_HOST_DEVICE inline float from_int4(unsigned nibble) { return int4_unit(int((nibble & 0xFu) ^ 0x8u) - 8); }

/// The fp8 code of a unit: the E4M3 code nearest `unit · 448`.
DILOCO_HOST_DEVICE inline std::uint8_t to_fp8(float unit) { return to_e4m3(mul_rn(unit, e4m3_max)); }

/// The unit of fp8 code `c`: `e4m3(c) / 448`.
DILOCO_HOST_DEVICE inline float from_fp8(std::uint8_t c) { return diloco::detail::div_rn(from_e4m3(c), e4m3_max); }

/// The fp8 code of a unit and the unit that code decodes to: `to_fp8(unit)`
/// and `from_fp8` of it, from one rounding (`round_to_e4m3`).
struct fp8_rounding {
  std::uint8_t code;
  float unit;
};
DILOCO_HOST_DEVICE inline fp8_rounding round_to_fp8(float unit) {
  const e4m3_rounding r = round_to_e4m3(mul_rn(unit, e4m3_max));
  return {r.code, diloco::detail::div_rn(r.value, e4m3_max)};
}

}  // namespace diloco::codec
