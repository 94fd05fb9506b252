// bfloat16 and FP8 E4M3 element conversions, checked against references
// written from the formats' definitions: a brute-force nearest search over
// the representable values, not the bit tricks of the code under test.
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <diloco/codec/element.hpp>

namespace codec_element_test {

using namespace diloco::codec;

/// bfloat16 of `x` by definition: of the two bfloat16 values around x (x
/// truncated, and the next one away from zero), the nearer in exact
/// arithmetic; a tie goes to the one whose last mantissa bit is 0; beyond
/// the largest finite one, that one (saturation).
std::uint16_t bf16_reference(float x) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint16_t lo = static_cast<std::uint16_t>(bits >> 16);
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);
  const double vx = x, vlo = std::bit_cast<float>(std::uint32_t(lo) << 16);
  if ((hi & 0x7F80u) == 0x7F80u) return lo;  // lo is the largest finite: nearest or not, saturated there
  const double vhi = std::bit_cast<float>(std::uint32_t(hi) << 16);
  const double dlo = std::fabs(vx - vlo), dhi = std::fabs(vx - vhi);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) == 0 ? lo : hi;
}

/// The value of E4M3 code c by the OCP definition: (−1)^s · 2^(e−7) · (1 + m/8),
/// or (−1)^s · 2^−6 · m/8 when e = 0; S.1111.111 is NaN.
double e4m3_reference_value(unsigned c) {
  const unsigned e = (c >> 3) & 15u, m = c & 7u;
  const double sign = (c & 0x80u) ? -1.0 : 1.0;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::pow(2.0, -6) * (m / 8.0);
  return sign * std::pow(2.0, int(e) - 7) * (1.0 + m / 8.0);
}

/// The E4M3 code nearest to x among the finite codes of x's sign, ties to
/// the even code; beyond 448, 448.
unsigned e4m3_reference_code(float x) {
  const unsigned sign = std::signbit(x) ? 0x80u : 0u;
  unsigned best = sign;
  double best_distance = std::numeric_limits<double>::infinity();
  for (unsigned c = sign; c < sign + 0x80u; ++c) {
    const double v = e4m3_reference_value(c);
    if (std::isnan(v)) continue;
    const double d = std::fabs(double(x) - v);
    if (d < best_distance || (d == best_distance && (c & 1u) == 0)) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

BOOST_AUTO_TEST_SUITE(codec_element)

BOOST_AUTO_TEST_CASE(bf16_rounds_to_nearest_even_and_saturates) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> any;
  std::vector<float> xs{0.0f,
                        -0.0f,
                        1.0f,
                        -1.0f,
                        std::numeric_limits<float>::max(),
                        -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(),
                        1e-40f,
                        3.3895e38f};
  // Exact ties: a bfloat16 value plus half its ulp, with even and odd last bits.
  for (std::uint32_t top : {0x3F80u, 0x3F81u, 0xC2F7u, 0x0001u, 0x7F7Eu})
    xs.push_back(std::bit_cast<float>((top << 16) | 0x8000u));
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(any(gen));
    if (std::isfinite(x)) xs.push_back(x);
  }
  for (const float x : xs) {
    const std::uint16_t got = to_bf16(x);
    BOOST_TEST_REQUIRE(got == bf16_reference(x),
                       "x = " << x << " (bits " << std::hex << std::bit_cast<std::uint32_t>(x) << ")");
    BOOST_TEST_REQUIRE(std::isfinite(from_bf16(got)));
  }
  BOOST_TEST(from_bf16(to_bf16(1.0f + 0x1p-8f)) == 1.0f);                // a tie, to even: down
  BOOST_TEST(from_bf16(to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);  // a tie, to even: up
}

BOOST_AUTO_TEST_CASE(every_e4m3_code_decodes_to_its_defined_value) {
  for (unsigned c = 0; c < 256; ++c) {
    const double want = e4m3_reference_value(c);
    const float got = from_e4m3(static_cast<std::uint8_t>(c));
    if (std::isnan(want))
      BOOST_TEST(std::isnan(got), "code " << c);
    else
      BOOST_TEST(double(got) == want, "code " << c);
  }
  BOOST_TEST(from_e4m3(0x7E) == 448.0f);
  BOOST_TEST(from_e4m3(0x01) == 0x1p-9f);
}

BOOST_AUTO_TEST_CASE(e4m3_encoding_is_the_nearest_code_ties_to_even_saturating) {
  std::vector<float> xs{0.0f,    -0.0f,    448.0f,   -448.0f, 449.0f, 464.0f, 1e30f, -std::numeric_limits<float>::max(),
                        0x1p-9f, 0x1p-10f, 0x1p-11f, 0x1p-6f, 1e-30f};
  // Every code's value, and every midpoint between neighbours (ties).
  std::vector<double> values;
  for (unsigned c = 0; c < 0x7F; ++c) values.push_back(e4m3_reference_value(c));
  for (std::size_t i = 0; i < values.size(); ++i) {
    xs.push_back(float(values[i]));
    xs.push_back(-float(values[i]));
    if (i + 1 < values.size()) {
      xs.push_back(float((values[i] + values[i + 1]) / 2));
      xs.push_back(-float((values[i] + values[i + 1]) / 2));
    }
  }
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-14, 10);
  for (int i = 0; i < 100000; ++i) xs.push_back(std::ldexp(unit(gen), scale(gen)));
  for (const float x : xs) {
    const unsigned want = e4m3_reference_code(x);
    BOOST_TEST_REQUIRE(unsigned(to_e4m3(x)) == want, "x = " << x);
    // The value that comes with the code is that code's value, to the bit
    // (the sign of a zero included).
    const e4m3_rounding got = round_to_e4m3(x);
    BOOST_TEST_REQUIRE(unsigned(got.code) == want, "x = " << x);
    BOOST_TEST_REQUIRE(
        std::bit_cast<std::uint32_t>(got.value) == std::bit_cast<std::uint32_t>(float(e4m3_reference_value(want))),
        "x = " << x << ": value " << got.value << ", code " << want);
  }
}

BOOST_AUTO_TEST_CASE(fp8_rounding_gives_the_unit_its_code_decodes_to) {
  std::vector<float> units{0.0f, -0.0f, 1.0f, -1.0f, 1.0f + 0x1p-23f, 0x1p-20f, -0x1p-12f, 0x1p-149f};
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-16, 0);
  for (int i = 0; i < 100000; ++i) units.push_back(std::ldexp(unit(gen), scale(gen)));
  for (const float u : units) {
    const fp8_rounding got = round_to_fp8(u);
    const unsigned want = e4m3_reference_code(u * 448.0f);  // exact or rounded once, as the codec does
    BOOST_TEST_REQUIRE(unsigned(got.code) == want, "unit " << u);
    BOOST_TEST_REQUIRE(std::bit_cast<std::uint32_t>(got.unit) ==
                           std::bit_cast<std::uint32_t>(float(float(e4m3_reference_value(want)) / 448.0f)),
                       "unit " << u);
  }
}

BOOST_AUTO_TEST_CASE(rounding_of_block_codes_is_half_away_from_zero) {
  BOOST_TEST(round_half_away(2.5f) == 3.0f);
  BOOST_TEST(round_half_away(-2.5f) == -3.0f);
  BOOST_TEST(round_half_away(2.49f) == 2.0f);
  BOOST_TEST(round_half_away(-0.4f) == 0.0f);
  BOOST_TEST(round_half_away(126.5f) == 127.0f);
}

BOOST_AUTO_TEST_CASE(block_codes_round_half_away_and_clamp) {
  // By hand: 0.5·127 = 63.5 → 64; 0.5·7 = 3.5 → 4; units just beyond 1 clamp.
  BOOST_TEST(int(to_int8(0.5f)) == 64);
  BOOST_TEST(int(to_int8(-0.5f)) == -64);
  BOOST_TEST(int(to_int8(1.0f)) == 127);
  BOOST_TEST(int(to_int8(1.01f)) == 127);
  BOOST_TEST(int(to_int8(-1.01f)) == -127);
  BOOST_TEST(int(to_int8(-0.0f)) == 0);
  BOOST_TEST(to_int4(0.5f) == 4u);
  BOOST_TEST(to_int4(-1.0f) == 0x9u);  // −7 in two's complement
  BOOST_TEST(to_int4(-1.2f) == 0x9u);
  BOOST_TEST(to_int4(0.0f) == 0u);
  BOOST_TEST(from_int4(0x9u) == -1.0f);
  BOOST_TEST(from_int4(0x7u) == 1.0f);
  BOOST_TEST(from_int4(0x8u) == -8.0f / 7.0f);
  BOOST_TEST(from_int4(0xF3u) == 3.0f / 7.0f);  // only the low nibble counts
  BOOST_TEST(from_int8(std::int8_t{-127}) == -1.0f);
  BOOST_TEST(round_half_away_to_int(-2.5f) == -3);
  BOOST_TEST(round_half_away_to_int(2.49f) == 2);
  BOOST_TEST(from_fp8(0x7E) == 1.0f);  // 448/448
  BOOST_TEST(int(to_fp8(-1.0f)) == 0xFE);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace codec_element_test
