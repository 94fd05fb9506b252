// codec::encode_delta: the outer gradient base − θ encoded in one pass equals
// codec::encode of the same values, byte for byte; with error feedback the
// residual is Δ − decode(code), within the format's error bound, and carries
// over rounds what the codes dropped; non-finite values and sizes that do not
// match are refused.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

#include <diloco/codec/delta.hpp>

namespace {

using namespace diloco::codec;

struct inputs {
  std::vector<float> base, theta;
};

inputs random_inputs(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  inputs in{std::vector<float>(n), std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    in.base[i] = normal(rng);
    in.theta[i] = in.base[i] - 0.01f * normal(rng);
  }
  return in;
}

std::vector<float> decoded(format f, std::size_t n, std::size_t block, const std::vector<std::byte>& bytes) {
  std::vector<float> out(n);
  decode(f, n, block, bytes, [&](std::size_t i, float v) { out[i] = v; });
  return out;
}

/// The largest magnitude of the block holding element i.
float block_absmax(const std::vector<float>& x, std::size_t block, std::size_t i) {
  const std::size_t first = i / block * block, last = std::min(x.size(), first + block);
  float m = 0.0f;
  for (std::size_t k = first; k < last; ++k) m = std::max(m, std::fabs(x[k]));
  return m;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(codec_delta)

BOOST_AUTO_TEST_CASE(without_feedback_it_is_encode_of_base_minus_theta) {
  for (const format f : formats)
    for (const std::size_t n : {std::size_t(1), std::size_t(255), std::size_t(1001)}) {
      const auto in = random_inputs(n, 3);
      std::vector<float> delta(n);
      for (std::size_t i = 0; i < n; ++i) delta[i] = in.base[i] - in.theta[i];
      std::vector<std::byte> expected(encoded_size(f, n, 100)), got(expected.size());
      BOOST_TEST_REQUIRE(encode(
          f, n, 100, [&](std::size_t i) { return delta[i]; }, expected));
      BOOST_TEST_REQUIRE(encode_delta(f, 100, in.base, in.theta, {}, got));
      BOOST_TEST((got == expected), name(f) << " n=" << n);
    }
}

BOOST_AUTO_TEST_CASE(the_residual_is_what_the_code_dropped) {
  constexpr std::size_t n = 1001, block = 64;
  for (const format f : formats) {
    const auto in = random_inputs(n, 4);
    std::vector<float> residual(n);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 1e-3f);
    for (auto& r : residual) r = normal(rng);
    std::vector<float> delta(n);
    for (std::size_t i = 0; i < n; ++i) delta[i] = (in.base[i] - in.theta[i]) + residual[i];
    std::vector<std::byte> bytes(encoded_size(f, n, block)), expected(bytes.size());
    BOOST_TEST_REQUIRE(encode(
        f, n, block, [&](std::size_t i) { return delta[i]; }, expected));
    BOOST_TEST_REQUIRE(encode_delta(f, block, in.base, in.theta, residual, bytes));
    BOOST_TEST((bytes == expected), name(f) << ": the codes of Δ with the residual added");
    const auto sent = decoded(f, n, block, bytes);
    for (std::size_t i = 0; i < n; ++i) {
      BOOST_TEST(residual[i] == delta[i] - sent[i], name(f) << " element " << i);
      BOOST_TEST(std::fabs(residual[i]) <= error_bound(f, delta[i], block_absmax(delta, block, i)) * 1.0001,
                 name(f) << " element " << i);
    }
    if (f == format::fp32) BOOST_TEST(std::all_of(residual.begin(), residual.end(), [](float r) { return r == 0.0f; }));
  }
}

BOOST_AUTO_TEST_CASE(feedback_sends_over_rounds_what_one_round_drops) {
  // The same outer gradient g every round: without feedback int4 sends the
  // same rounded value each time; with it, the mean of what is sent
  // approaches g, within one quantization error over the rounds.
  constexpr std::size_t n = 256, rounds = 64;
  const auto in = random_inputs(n, 6);
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = in.base[i] - in.theta[i];
  const float absmax = block_absmax(g, n, 0);
  std::vector<float> residual(n, 0.0f);
  std::vector<double> sent_sum(n, 0.0), plain_sum(n, 0.0);
  std::vector<std::byte> bytes(encoded_size(format::int4, n, n)), plain(bytes.size());
  for (std::size_t r = 0; r < rounds; ++r) {
    BOOST_TEST_REQUIRE(encode_delta(format::int4, n, in.base, in.theta, residual, bytes));
    BOOST_TEST_REQUIRE(encode_delta(format::int4, n, in.base, in.theta, {}, plain));
    const auto sent = decoded(format::int4, n, n, bytes), once = decoded(format::int4, n, n, plain);
    for (std::size_t i = 0; i < n; ++i) sent_sum[i] += sent[i], plain_sum[i] += once[i];
  }
  double feedback_error = 0.0, plain_error = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    feedback_error = std::max(feedback_error, std::fabs(sent_sum[i] / rounds - g[i]));
    plain_error = std::max(plain_error, std::fabs(plain_sum[i] / rounds - g[i]));
  }
  // One int4 step is absmax/7; with feedback the mean is off by at most about
  // two steps over all the rounds (the scale changes with the residual).
  BOOST_TEST(feedback_error <= 2.0 * absmax / 7 / rounds);
  BOOST_TEST(plain_error > 0.2 * absmax / 7);
}

BOOST_AUTO_TEST_CASE(non_finite_values_and_wrong_sizes_are_refused) {
  const auto in = random_inputs(300, 7);
  std::vector<float> theta = in.theta, residual(300, 0.0f);
  std::vector<std::byte> out(encoded_size(format::int8, 300, 256));
  BOOST_TEST(encode_delta(format::int8, 256, in.base, theta, residual, out));
  theta[17] = std::numeric_limits<float>::infinity();
  BOOST_TEST(!encode_delta(format::int8, 256, in.base, theta, residual, out));
  theta[17] = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(!encode_delta(format::bf16, 256, in.base, theta, {}, std::span<std::byte>(out).first(600)));
  BOOST_TEST(!encode_delta(format::int8, 256, in.base, std::span<const float>(in.theta).first(299), {}, out));
  BOOST_TEST(!encode_delta(format::int8, 256, in.base, in.theta, std::span<float>(residual).first(10), out));
  BOOST_TEST(!encode_delta(format::int8, 256, in.base, in.theta, {}, std::span<std::byte>(out).first(100)));
}

BOOST_AUTO_TEST_SUITE_END()
