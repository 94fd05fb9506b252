// The device codecs against the CPU's: encode_delta writes the bytes and the
// residual codec::encode_delta (codec/kernels.hpp) writes (codec::encode's
// bytes for the same outer gradient), bit for bit, and zeroes the residual
// when it refuses, as the CPU does; decode_accumulate accumulates what
// codec::decode_accumulate and the CPU loop accumulate, bit for bit (the kernels round every product
// and sum on their own, as the CPU does: no FMA). Every format, block sizes
// that do and do not divide n, one-value blocks, zero blocks, subnormal and
// huge magnitudes; non-finite input refused.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "diloco/codec/blocks.hpp"
#include "diloco/codec/kernels.hpp"
#include "diloco/cuda/codec.cuh"
#include "harness.hpp"

namespace {

namespace codec = diloco::codec;
using diloco::codec_id;
namespace dc = diloco::cuda;
namespace t = diloco::test::cuda;

struct inputs {
  std::vector<float> base, theta, residual;
};

/// Values around `scale` with a block of zeros, a few values near the
/// bottom of the float range, and one near the top (so blocks' scales span
/// subnormal to huge).
inputs make_inputs(std::size_t n, float scale, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  inputs in{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    in.base[i] = scale * normal(rng);
    in.theta[i] = in.base[i] - scale * normal(rng);
    in.residual[i] = 0.01f * scale * normal(rng);
  }
  for (std::size_t i = n / 3; i < n / 3 + n / 10 && i < n; ++i) in.theta[i] = in.base[i], in.residual[i] = 0.0f;
  if (n > 40) {
    in.base[n - 7] = 1e-39f, in.theta[n - 7] = 0.0f, in.residual[n - 7] = 0.0f;  // alone, a block scaled by division
    in.base[n - 3] = 3e38f, in.theta[n - 3] = 1e37f, in.residual[n - 3] = 0.0f;
  }
  return in;
}

void check_encode(codec_id f, std::size_t n, std::size_t block, float scale, bool feedback) {
  const std::string what = std::string(codec::name(f)) + " n=" + std::to_string(n) + " block=" + std::to_string(block) +
                           " scale=" + std::to_string(scale) + (feedback ? " with residual" : "");
  const inputs in = make_inputs(n, scale, static_cast<std::uint32_t>(n * 31 + block));
  std::vector<std::byte> expected(codec::encoded_size(f, n, block));
  std::vector<float> expected_residual = in.residual;
  const bool ok = codec::encode_delta(f, block, in.base, in.theta,
                                      feedback ? std::span<float>(expected_residual) : std::span<float>(), expected, 1);
  CUDA_TEST_CHECK(ok, what + ": the CPU refused a finite input");

  auto base = t::upload(in.base), theta = t::upload(in.theta), residual = t::upload(in.residual);
  dc::device_buffer<std::byte> out(expected.size());
  auto refused = t::upload(std::vector<unsigned>{0u});
  CUDA_TEST_REQUIRE_SUCCESS(
      dc::encode_delta(f, block, std::span<const float>(base.span()), std::span<const float>(theta.span()),
                       feedback ? residual.span() : std::span<float>(), out.span(), refused.data(), nullptr));
  const auto bytes = t::download(out);
  CUDA_TEST_CHECK(t::download(refused)[0] == 0u, what + ": the kernel refused a finite input");
  std::size_t differing = 0, first = bytes.size();
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] != expected[i]) ++differing, first = first < i ? first : i;
  CUDA_TEST_CHECK(differing == 0,
                  what + ": " + std::to_string(differing) + " bytes differ, the first at " + std::to_string(first));
  if (feedback) {
    const auto r = t::download(residual);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += !t::same_bits(r[i], expected_residual[i]);
    CUDA_TEST_CHECK(wrong == 0, what + ": " + std::to_string(wrong) + " residuals differ");
  }
}

DILOCO_CUDA_TEST(codec, encode_delta_matches_codec_encode) {
  for (const codec_id f : codec::float_codecs)
    for (const std::size_t n : {1u, 7u, 255u, 256u, 257u, 1000u, 4099u, 70001u})
      for (const std::size_t block : {1u, 3u, 32u, 256u, 300u})
        for (const float scale : {1.0f, 3e-36f, 1e30f})
          for (const bool feedback : {false, true}) check_encode(f, n, block, scale, feedback);
}

DILOCO_CUDA_TEST(codec, non_finite_delta_is_refused) {
  for (const codec_id f : codec::float_codecs)
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      inputs in = make_inputs(1000, 1.0f, 5);
      in.theta[613] = bad;
      std::vector<std::byte> cpu(codec::encoded_size(f, 1000, 256));
      CUDA_TEST_CHECK(!codec::encode_delta(f, 256, in.base, in.theta, {}, cpu, 1), "the CPU took a non-finite value");
      auto base = t::upload(in.base), theta = t::upload(in.theta), residual = t::upload(in.residual);
      dc::device_buffer<std::byte> out(cpu.size());
      for (const bool feedback : {false, true}) {
        auto refused = t::upload(std::vector<unsigned>{0u});
        CUDA_TEST_REQUIRE_SUCCESS(
            dc::encode_delta(f, 256, std::span<const float>(base.span()), std::span<const float>(theta.span()),
                             feedback ? residual.span() : std::span<float>(), out.span(), refused.data(), nullptr));
        CUDA_TEST_CHECK(t::download(refused)[0] == 1u,
                        std::string(codec::name(f)) + ": a non-finite value was encoded");
      }
      // With error feedback the residual restarts from zero, as the CPU's does.
      std::size_t nonzero = 0;
      for (const float r : t::download(residual)) nonzero += r != 0.0f;
      CUDA_TEST_CHECK(nonzero == 0, std::string(codec::name(f)) + ": " + std::to_string(nonzero) +
                                        " residual values survived a refusal");
    }
}

DILOCO_CUDA_TEST(codec, encode_delta_rejects_bad_arguments) {
  dc::device_buffer<float> x(10);
  dc::device_buffer<std::byte> out(codec::encoded_size(codec_id::int8, 10, 4));
  dc::device_buffer<unsigned> refused(1);
  const std::span<const float> v(x.span());
  CUDA_TEST_CHECK(dc::encode_delta(codec_id::int8, 4, v, v.first(9), {}, out.span(), refused.data(), nullptr) ==
                      cudaErrorInvalidValue,
                  "θ of another size");
  CUDA_TEST_CHECK(dc::encode_delta(codec_id::int8, 4, v, v, {}, out.span().first(5), refused.data(), nullptr) ==
                      cudaErrorInvalidValue,
                  "an output of the wrong size");
  CUDA_TEST_CHECK(
      dc::encode_delta(codec_id::int8, 0, v, v, {}, out.span(), refused.data(), nullptr) == cudaErrorInvalidValue,
      "a zero block");
  CUDA_TEST_CHECK(dc::encode_delta(codec_id::int8, 4, v, v, {}, out.span(), nullptr, nullptr) == cudaErrorInvalidValue,
                  "no refusal flag");
  dc::device_buffer<std::byte> dense(4 * 10 + 1);
  CUDA_TEST_CHECK(dc::encode_delta(codec_id::f32, 4, v, v, {}, dense.span().subspan(1), refused.data(), nullptr) ==
                      cudaErrorInvalidValue,
                  "a misaligned fp32 output");
}

template <class T>
void check_decode(codec_id f, std::size_t n, std::size_t block, T weight) {
  const std::string what = std::string(codec::name(f)) + " n=" + std::to_string(n) + " block=" + std::to_string(block) +
                           (sizeof(T) == 8 ? " double" : " float");
  const inputs in = make_inputs(n, 2.5f, static_cast<std::uint32_t>(n + 17 * block));
  std::vector<std::byte> bytes(codec::encoded_size(f, n, block));
  const bool encoded = codec::encode(
      f, n, block, [&](std::size_t i) { return in.base[i] - in.theta[i]; }, bytes);
  CUDA_TEST_CHECK(encoded && codec::valid(f, n, block, bytes), what + ": no valid CPU encoding");
  std::vector<T> expected(n);
  for (std::size_t i = 0; i < n; ++i) expected[i] = T(in.residual[i]) * T(40);
  std::vector<T> start = expected;
  codec::decode(f, n, block, bytes, [&](std::size_t i, float v) { expected[i] += weight * v; });

  auto acc = t::upload(start);
  auto device_bytes = t::upload(bytes);
  CUDA_TEST_REQUIRE_SUCCESS(
      dc::decode_accumulate<T>(f, block, std::span<const std::byte>(device_bytes.span()), weight, acc.span(), nullptr));
  const auto got = t::download(acc);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += !t::same_bits(got[i], expected[i]);
  CUDA_TEST_CHECK(wrong == 0, what + ": " + std::to_string(wrong) + " sums differ from the CPU loop");
  if constexpr (std::is_same_v<T, float>) {  // the CPU's fused pass takes float accumulators
    std::vector<float> fused = start;
    codec::decode_accumulate(f, block, bytes, weight, fused, 1);
    wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += !t::same_bits(got[i], fused[i]);
    CUDA_TEST_CHECK(wrong == 0, what + ": " + std::to_string(wrong) + " sums differ from codec::decode_accumulate");
  }
}

DILOCO_CUDA_TEST(codec, decode_accumulate_matches_the_cpu_loop) {
  for (const codec_id f : codec::float_codecs)
    for (const std::size_t n : {1u, 255u, 257u, 4099u, 70001u})
      for (const std::size_t block : {1u, 3u, 256u, 300u}) {
        check_decode<float>(f, n, block, 0.37f);
        check_decode<double>(f, n, block, 0.37);
      }
}

}  // namespace
