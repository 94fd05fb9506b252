// The learner's passes on the device (cuda::device_memory) against the same
// passes in host memory (host_memory), on a fragment of several slices of θ:
// the encoded bytes and the error-feedback residual bit for bit in every
// codec, the decoded base exactly, θ exactly after an overwrite, a rebase
// and mixing (their functors round like the CPU, params/mixing.hpp), and a
// non-finite value refused by both.
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "diloco/cuda/memory_space.cuh"
#include "diloco/runtime/host_memory.hpp"
#include "harness.hpp"

namespace {

namespace dc = diloco::cuda;
namespace t = diloco::test::cuda;
using diloco::codec_id;

/// Three tensors in two fragments: fragment 0 takes slices of more than one.
struct setting {
  diloco::parameter_layout layout;
  diloco::fragment_plan plan;
  std::vector<float> theta;
  setting() {
    layout.add("a", 3001);
    layout.add("b", 517);
    layout.add("c", 2048);
    plan = diloco::fragment_plan::balanced(layout, 2);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    theta.resize(layout.size());
    for (auto& x : theta) x = normal(rng);
  }
};

std::vector<float> near(std::span<const float> x, float spread, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> y(x.begin(), x.end());
  for (auto& v : y) v += normal(rng);
  return y;
}

const std::vector<codec_id> codecs{codec_id::f32, codec_id::bf16, codec_id::int8, codec_id::fp8, codec_id::int4};

std::uint32_t block_of(codec_id c) { return diloco::block_scaled(c) ? 64 : 0; }

DILOCO_CUDA_TEST(memory_space, encode_delta_writes_the_host_bytes_and_residual) {
  setting s;
  diloco::host_memory host;
  dc::device_memory device;
  for (std::uint32_t p = 0; p < 2; ++p) {
    const auto slices = s.plan[p].slices();
    const std::size_t n = s.plan[p].size();
    std::vector<float> packed(n);
    host.gather(slices, std::span<const float>(s.theta), std::span<float>(packed));
    const std::vector<float> base = near(packed, 0.01f, 20 + p);
    for (const codec_id c : codecs)
      for (const bool feedback : {false, true}) {
        if (feedback && c == codec_id::f32) continue;  // error feedback is for compressed codecs
        const std::uint32_t block = block_of(c);
        const std::string what = "fragment " + std::to_string(p) + " codec " + std::to_string(int(c)) +
                                 (feedback ? " with error feedback" : "");
        std::vector<float> residual_h = feedback ? near(std::vector<float>(n, 0.0f), 1e-3f, 30) : std::vector<float>{};
        std::vector<std::byte> bytes_h(diloco::payload::size(c, n, block)), bytes_d(bytes_h.size());
        const bool ok_h = host.encode_delta(c, block, slices, std::span<const float>(s.theta), base,
                                            feedback ? &residual_h : nullptr, std::span<std::byte>(bytes_h));
        auto theta_d = t::upload(s.theta);
        auto base_d = t::upload(base);
        auto residual_d = t::upload(feedback ? near(std::vector<float>(n, 0.0f), 1e-3f, 30) : std::vector<float>{});
        const bool ok_d = device.encode_delta(c, block, slices, std::span<const float>(theta_d.span()), base_d,
                                              feedback ? &residual_d : nullptr, std::span<std::byte>(bytes_d));
        CUDA_TEST_CHECK(ok_h && ok_d, what);
        CUDA_TEST_CHECK(bytes_h == bytes_d, what + ": the bytes differ");
        if (feedback) {
          const auto got = t::download(residual_d);
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < n; ++i) wrong += !t::same_bits(got[i], residual_h[i]);
          CUDA_TEST_CHECK(wrong == 0, what + ": " + std::to_string(wrong) + " residuals differ");
        }
      }
    // A NaN in θ_p: refused, nothing to send, on both.
    std::vector<float> poisoned = s.theta;
    poisoned[slices.back().flat_offset] = std::numeric_limits<float>::quiet_NaN();
    auto theta_d = t::upload(poisoned);
    auto base_d = t::upload(base);
    std::vector<std::byte> bytes(diloco::payload::size(codec_id::int4, n, 64));
    CUDA_TEST_CHECK(!host.encode_delta(codec_id::int4, 64, slices, std::span<const float>(poisoned), base,
                                       static_cast<std::vector<float>*>(nullptr), std::span<std::byte>(bytes)),
                    "host");
    CUDA_TEST_CHECK(!device.encode_delta(codec_id::int4, 64, slices, std::span<const float>(theta_d.span()), base_d,
                                         static_cast<dc::device_buffer<float>*>(nullptr), std::span<std::byte>(bytes)),
                    "device");
  }
}

DILOCO_CUDA_TEST(memory_space, adopt_decodes_the_base_and_updates_theta_as_the_host_does) {
  setting s;
  diloco::host_memory host;
  dc::device_memory device;
  for (std::uint32_t p = 0; p < 2; ++p) {
    const auto slices = s.plan[p].slices();
    const std::size_t n = s.plan[p].size();
    std::vector<float> packed(n);
    host.gather(slices, std::span<const float>(s.theta), std::span<float>(packed));
    const std::vector<float> global = near(packed, 0.05f, 40 + p);
    const std::vector<float> old_base = near(packed, 0.01f, 50 + p);  // what a rebase subtracts
    for (const codec_id c : codecs) {
      const std::uint32_t block = block_of(c);
      std::vector<std::byte> payload(diloco::payload::size(c, n, block));
      CUDA_TEST_CHECK(diloco::payload::encode<float>(
                          c, block, n, [&](std::size_t i) { return global[i]; }, std::span<std::byte>(payload)),
                      "encode");
      using diloco::adoption;
      const std::pair<adoption, float> cases[] = {{adoption::overwrite, 0.5f},
                                                  {adoption::mix, 0.5f},
                                                  {adoption::keep, 0.5f},
                                                  {adoption::rebase, 0.0f},
                                                  {adoption::rebase, 0.5f}};
      for (const auto& [how, alpha] : cases) {
        const std::string what = "fragment " + std::to_string(p) + " codec " + std::to_string(int(c)) + " adoption " +
                                 std::to_string(int(how)) + " alpha " + std::to_string(alpha);
        std::vector<float> theta_h = s.theta, base_h = old_base;
        host.adopt(c, block, std::span<const std::byte>(payload), slices, std::span<float>(theta_h), base_h, how,
                   alpha);
        auto theta_d = t::upload(s.theta);
        auto base_d = t::upload(old_base);
        device.adopt(c, block, std::span<const std::byte>(payload), slices, theta_d.span(), base_d, how, alpha);
        CUDA_TEST_CHECK(t::download(base_d) == base_h, what + ": the base differs");  // == : −0 may arrive as +0
        const auto theta_got = t::download(theta_d);
        std::size_t wrong = 0;
        // == : a zero's sign may differ where the device decodes into zeroed memory.
        for (std::size_t i = 0; i < theta_h.size(); ++i) wrong += !(theta_got[i] == theta_h[i]);
        CUDA_TEST_CHECK(wrong == 0, what + ": " + std::to_string(wrong) + " values of θ differ");
      }
    }
  }
}

DILOCO_CUDA_TEST(memory_space, copies_move_the_values_unchanged) {
  setting s;
  diloco::host_memory host;
  dc::device_memory device;
  auto theta_d = t::upload(s.theta);
  for (std::uint32_t p = 0; p < 2; ++p) {
    const auto slices = s.plan[p].slices();
    std::vector<float> expected(s.plan[p].size()), got(s.plan[p].size());
    host.gather(slices, std::span<const float>(s.theta), std::span<float>(expected));
    device.gather(slices, std::span<const float>(theta_d.span()), std::span<float>(got));
    CUDA_TEST_CHECK(got == expected, "gather");
    // Scatter the gathered values back into a zeroed θ: exactly fragment p's values return.
    auto base_d = t::upload(expected);
    auto zero_d = device.allocate<float>(s.theta.size());
    device.scatter(slices, base_d, zero_d.span());
    std::vector<float> scattered(s.theta.size(), 0.0f);
    host.scatter(slices, expected, std::span<float>(scattered));
    CUDA_TEST_CHECK(t::download(zero_d) == scattered, "scatter");
    // Pack θ_p into a zeroed base: fragment p's values, packed.
    auto packed_d = device.allocate<float>(s.plan[p].size());
    device.pack(slices, std::span<const float>(theta_d.span()), packed_d);
    CUDA_TEST_CHECK(t::download(packed_d) == expected, "pack");
  }
  std::vector<float> back(s.theta.size());
  device.read(std::span<const float>(theta_d.span()), std::span<float>(back));
  CUDA_TEST_CHECK(back == s.theta, "read");
  const std::vector<float> other = near(s.theta, 1.0f, 99);
  device.write(std::span<const float>(other), theta_d.span());
  CUDA_TEST_CHECK(t::download(theta_d) == other, "write");
}

}  // namespace
