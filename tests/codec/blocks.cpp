// The codecs' payload formats: exact sizes, round trips within each stated
// bound on random, zero, subnormal, huge and all-equal blocks, non-finite
// input refused, malformed bytes refused, decoding as weighted accumulation.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <diloco/codec/blocks.hpp>

namespace codec_blocks_test {

using namespace diloco::codec;
using diloco::codec_id;

std::vector<std::byte> encoded(codec_id f, const std::vector<float>& x, std::size_t block = default_block) {
  std::vector<std::byte> out(encoded_size(f, x.size(), block));
  const bool ok = encode(
      f, x.size(), block, [&](std::size_t i) { return x[i]; }, out);
  BOOST_TEST_REQUIRE(ok, name(f) << ": a finite input was refused");
  return out;
}

std::vector<float> decoded(codec_id f, std::size_t n, const std::vector<std::byte>& bytes,
                           std::size_t block = default_block) {
  BOOST_TEST_REQUIRE(valid(f, n, block, bytes), name(f) << ": its own encoding is not valid");
  std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
  decode(f, n, block, bytes, [&](std::size_t i, float v) { out[i] = v; });
  return out;
}

/// Checks every value of `x` against the bound of its format, with the
/// block's largest magnitude computed here.
void check_round_trip(codec_id f, const std::vector<float>& x, std::size_t block, const char* what) {
  const auto y = decoded(f, x.size(), encoded(f, x, block), block);
  for (std::size_t first = 0; first < x.size(); first += block) {
    const std::size_t last = std::min(x.size(), first + block);
    double absmax = 0;
    for (std::size_t i = first; i < last; ++i) absmax = std::max(absmax, std::fabs(double(x[i])));
    for (std::size_t i = first; i < last; ++i) {
      BOOST_TEST_REQUIRE(std::isfinite(y[i]), name(f) << " " << what << ": value " << i << " decoded to " << y[i]);
      const double error = std::fabs(double(y[i]) - double(x[i]));
      BOOST_TEST_REQUIRE(error <= error_bound(f, x[i], absmax),
                         name(f) << " " << what << ": value " << i << " = " << x[i] << " came back " << y[i]
                                 << " (error " << error << " > bound " << error_bound(f, x[i], absmax) << ")");
    }
  }
}

std::vector<std::vector<float>> cases_named(std::vector<const char*>& names) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> cases;
  auto add = [&](const char* what, std::vector<float> v) {
    names.push_back(what);
    cases.push_back(std::move(v));
  };
  std::vector<float> random(1000);
  for (auto& v : random) v = normal(gen) * 0.01f;
  add("random", random);
  std::vector<float> scales(1000);  // blocks of very different magnitudes side by side
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = normal(gen) * std::ldexp(1.0f, int(i / 256) * 20 - 30);
  add("mixed scales", scales);
  add("zero", std::vector<float>(700, 0.0f));
  std::vector<float> subnormal(300);
  for (auto& v : subnormal) v = normal(gen) * 1e-40f;
  add("subnormal", subnormal);
  std::vector<float> huge(300);
  for (auto& v : huge) v = std::clamp(normal(gen), -1.0f, 1.0f) * std::numeric_limits<float>::max();
  huge[7] = std::numeric_limits<float>::max();
  huge[8] = -std::numeric_limits<float>::max();
  add("huge", huge);
  add("all equal", std::vector<float>(513, -0.3f));
  add("one value", std::vector<float>{2.5f});
  return cases;
}

BOOST_AUTO_TEST_SUITE(codec_blocks)

BOOST_AUTO_TEST_CASE(sizes_are_exact_and_the_ratios_reach_the_targets) {
  // By hand: 1000 values = 3 blocks of 256 and one of 232.
  BOOST_TEST(encoded_size(codec_id::f32, 1000, 256) == 4000u);
  BOOST_TEST(encoded_size(codec_id::bf16, 1000, 256) == 2000u);
  BOOST_TEST(encoded_size(codec_id::int8, 1000, 256) == 3 * (4 + 256) + (4 + 232));
  BOOST_TEST(encoded_size(codec_id::fp8, 1000, 256) == 3 * (4 + 256) + (4 + 232));
  BOOST_TEST(encoded_size(codec_id::int4, 1000, 256) == 3 * (4 + 128) + (4 + 116));
  BOOST_TEST(encoded_size(codec_id::int4, 3, 256) == 4 + 2u);
  const std::size_t n = std::size_t{1} << 20;
  const double fp32 = double(encoded_size(codec_id::f32, n, default_block));
  BOOST_TEST(fp32 / encoded_size(codec_id::int8, n, default_block) >= 3.9);
  BOOST_TEST(fp32 / encoded_size(codec_id::fp8, n, default_block) >= 3.9);
  BOOST_TEST(fp32 / encoded_size(codec_id::int4, n, default_block) >= 7.5);
  BOOST_TEST(fp32 / encoded_size(codec_id::bf16, n, default_block) == 2.0);
}

BOOST_AUTO_TEST_CASE(every_format_round_trips_within_its_bound) {
  std::vector<const char*> names;
  const auto cases = cases_named(names);
  for (const codec_id f : float_codecs)
    for (std::size_t c = 0; c < cases.size(); ++c)
      for (const std::size_t block : {std::size_t{256}, std::size_t{32}, std::size_t{7}})
        check_round_trip(f, cases[c], block, names[c]);
}

BOOST_AUTO_TEST_CASE(fp32_is_exact_and_all_equal_blocks_are_exact_up_to_rounding) {
  const std::vector<float> x{1.0f, -3.5f, 1e-40f, 3e38f};
  BOOST_TEST(decoded(codec_id::f32, x.size(), encoded(codec_id::f32, x)) == x);
  // An all-equal block is its own absmax: codes ±127 or ±7, value (±1)·absmax.
  for (const codec_id f : {codec_id::int8, codec_id::int4, codec_id::fp8}) {
    const std::vector<float> same(300, -0.3f);
    for (const float v : decoded(f, same.size(), encoded(f, same))) BOOST_TEST(v == -0.3f, name(f));
  }
  for (const codec_id f : float_codecs)
    for (const float v : decoded(f, 5, encoded(f, std::vector<float>(5, 0.0f)))) BOOST_TEST(v == 0.0f, name(f));
}

BOOST_AUTO_TEST_CASE(non_finite_input_is_refused) {
  for (const codec_id f : float_codecs)
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()})
      for (const std::size_t at : {std::size_t{0}, std::size_t{299}}) {
        std::vector<float> x(300, 1.0f);
        x[at] = bad;
        std::vector<std::byte> out(encoded_size(f, x.size(), default_block));
        BOOST_TEST(!encode(
                       f, x.size(), default_block, [&](std::size_t i) { return x[i]; }, out),
                   name(f) << " accepted " << bad << " at " << at);
      }
  // The wrong output size is refused too.
  std::vector<std::byte> short_out(10);
  BOOST_TEST(!encode(
      codec_id::int8, 300, default_block, [](std::size_t) { return 1.0f; }, short_out));
  // So is a block of 0 values (checked before any size is computed from it).
  BOOST_TEST(!encode(
      codec_id::int8, 300, 0, [](std::size_t) { return 1.0f; }, short_out));
  BOOST_TEST(!valid(codec_id::int4, 300, 0, short_out));
}

BOOST_AUTO_TEST_CASE(malformed_bytes_are_not_valid) {
  const std::vector<float> x{1.0f, -2.0f, 0.5f};  // one block of 3: an odd int4 tail
  auto flip = [&](codec_id f, std::size_t at, std::byte value) {
    auto bytes = encoded(f, x);
    bytes[at] = value;
    return valid(f, x.size(), default_block, bytes);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), negative = -1.0f;
  for (const codec_id f : {codec_id::int8, codec_id::fp8, codec_id::int4}) {
    auto bytes = encoded(f, x);
    std::memcpy(bytes.data(), &nan, 4);
    BOOST_TEST(!valid(f, x.size(), default_block, bytes), name(f) << ": a NaN scale");
    std::memcpy(bytes.data(), &negative, 4);
    BOOST_TEST(!valid(f, x.size(), default_block, bytes), name(f) << ": a negative scale");
    bytes.pop_back();
    BOOST_TEST(!valid(f, x.size(), default_block, bytes), name(f) << ": one byte short");
  }
  BOOST_TEST(!flip(codec_id::int8, 4, std::byte{0x80}));  // −128 is no code
  BOOST_TEST(!flip(codec_id::fp8, 4, std::byte{0x7F}));   // NaN
  BOOST_TEST(!flip(codec_id::fp8, 4, std::byte{0xFF}));   // −NaN
  BOOST_TEST(!flip(codec_id::int4, 4, std::byte{0x08}));  // −8 is no code
  BOOST_TEST(!flip(codec_id::int4, 5, std::byte{0x13}));  // the odd tail's padding nibble is not 0
  BOOST_TEST(flip(codec_id::int4, 5, std::byte{0x03}));   // … while a valid code there is fine
  auto bf16 = encoded(codec_id::bf16, x);
  bf16[1] = std::byte{0x7F};
  bf16[0] = std::byte{0x80};  // +infinity
  BOOST_TEST(!valid(codec_id::bf16, x.size(), default_block, bf16));
  auto fp32 = encoded(codec_id::f32, x);
  std::memcpy(fp32.data(), &nan, 4);
  BOOST_TEST(!valid(codec_id::f32, x.size(), default_block, fp32));
}

BOOST_AUTO_TEST_CASE(decoding_accumulates_with_a_weight) {
  const std::vector<float> x{1.0f, -2.0f, 0.25f, 0.0f};
  for (const codec_id f : float_codecs) {
    const auto bytes = encoded(f, x);
    const auto plain = decoded(f, x.size(), bytes);
    std::vector<float> acc(x.size(), 1.0f);
    decode(f, x.size(), default_block, bytes, [&](std::size_t i, float v) { acc[i] += 0.5f * v; });
    for (std::size_t i = 0; i < x.size(); ++i) BOOST_TEST(acc[i] == 1.0f + 0.5f * plain[i], name(f) << " " << i);
  }
}

BOOST_AUTO_TEST_CASE(names_parse_back) {
  for (const codec_id f : float_codecs) BOOST_TEST((parse(name(f)) == f));
  BOOST_TEST(!parse("int2"));
  BOOST_TEST(!parse("fp64"));  // a name, but not a codec a float model's values travel in
}

BOOST_AUTO_TEST_CASE(codecs_other_than_the_float_codecs_are_refused) {
  const std::vector<float> x{1.0f, -2.0f, 3.0f};
  for (const codec_id c : {codec_id::none, codec_id::f64, codec_id::bytes}) {
    BOOST_TEST(!float_codec(c), name(c));
    std::vector<std::byte> out(encoded_size(c, x.size(), default_block), std::byte{0x5A});
    BOOST_TEST(!encode(
                   c, x.size(), default_block, [&](std::size_t i) { return x[i]; }, out),
               name(c));
    BOOST_TEST(std::ranges::count(out, std::byte{0x5A}) == std::ptrdiff_t(out.size()), name(c) << " wrote bytes");
    BOOST_TEST(!valid(c, x.size(), default_block, out), name(c));
  }
  // The sizes of the codecs without blocks, from the wire's element sizes
  // (docs/protocol.md, "Codecs"): 8 bytes a binary64, 1 a byte, none for none.
  BOOST_TEST(encoded_size(codec_id::f64, 3, default_block) == 24u);
  BOOST_TEST(encoded_size(codec_id::bytes, 3, default_block) == 3u);
  BOOST_TEST(encoded_size(codec_id::none, 3, default_block) == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace codec_blocks_test
