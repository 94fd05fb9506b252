// The fused codec passes: encode_delta writes exactly the bytes codec::encode
// writes for Δ = base − θ (+ residual) computed here, its error feedback
// leaves exactly Δ − decode(encode(Δ)), non-finite Δ is refused,
// decode_accumulate adds exactly what a loop over codec::decode adds, and
// neither depends on the number of threads; a θ scattered in runs (a
// fragment of several tensors) encodes as the same θ in one piece. All of it
// holds for each copy of the passes: the baseline one and, where the program
// carries them and the CPU runs them, the AVX2 and AVX-512 ones
// (diloco/detail/isa.hpp).
// This file is compiled at -O3 even where the rest of the test program is
// not (tests/CMakeLists.txt), so that the loops it checks are vectorized as
// they are in the programs that use them.
// ctest-labels: unit threads
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <diloco/codec/blocks.hpp>
#include <diloco/codec/kernels.hpp>
#include <diloco/detail/isa.hpp>

namespace codec_kernels_test {

using namespace diloco::codec;
using diloco::codec_id;

/// base and θ whose differences cover ordinary values, all-zero blocks, tiny
/// (subnormal) and huge magnitudes and exact ties of the roundings.
struct inputs {
  std::vector<float> base, theta, residual;
};

inputs make_inputs(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  inputs in{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n)};
  for (std::size_t i = 0; i < n; ++i) {
    in.base[i] = 1.0f + normal(gen);
    const std::size_t region = (i / 97) % 6;  // regions cut across the codec blocks
    float d = normal(gen) * 1e-2f;
    if (region == 1) d = 0.0f;                                   // Δ = 0
    if (region == 2) d = normal(gen) * 1e-41f;                   // subnormal Δ
    if (region == 3) d = float(int(normal(gen) * 4)) * 0.0625f;  // exact, repeated values: ties
    if (region == 4) {                                           // huge Δ: θ far from base
      in.base[i] = normal(gen) * 1e37f;
      d = normal(gen) * 1e37f;
    }
    in.theta[i] = in.base[i] - d;
    in.residual[i] = region == 5 ? 0.0f : normal(gen) * 1e-3f;
  }
  return in;
}

/// Δ computed here, element by element.
std::vector<float> reference_delta(const inputs& in, bool feedback) {
  std::vector<float> d(in.base.size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    const float diff = in.base[i] - in.theta[i];
    d[i] = feedback ? diff + in.residual[i] : diff;
  }
  return d;
}

std::vector<std::byte> reference_encoding(codec_id f, std::size_t block, const std::vector<float>& delta) {
  std::vector<std::byte> out(encoded_size(f, delta.size(), block));
  const bool ok = encode(
      f, delta.size(), block, [&](std::size_t i) { return delta[i]; }, out);
  BOOST_TEST_REQUIRE(ok, name(f) << ": codec::encode refused the reference Δ");
  return out;
}

std::vector<float> reference_decoding(codec_id f, std::size_t block, std::size_t n, const std::vector<std::byte>& in) {
  std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
  decode(f, n, block, in, [&](std::size_t i, float v) { out[i] = v; });
  return out;
}

/// `v[at]` for a failure message (Boost.Test builds it whether or not the
/// check fails), or NaN past the end.
float value_at(const std::vector<float>& v, std::size_t at) {
  return at < v.size() ? v[at] : std::numeric_limits<float>::quiet_NaN();
}

/// Equal bit for bit (so that +0 and −0 differ, and NaN is caught).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b, std::size_t& at) {
  if (a.size() != b.size()) return false;
  for (at = 0; at < a.size(); ++at)
    if (std::bit_cast<std::uint32_t>(a[at]) != std::bit_cast<std::uint32_t>(b[at])) return false;
  return true;
}

/// A run of a fragment's θ in a larger buffer, as `encode_delta` reads it
/// (the members of `diloco::fragment_slice` it uses, in a type of the test's).
struct piece {
  std::size_t flat_offset, packed_offset, size;
};

/// θ cut into runs of `run_length`, 1 and 3 values in turn, laid out in a
/// larger buffer in reverse order with 5 NaNs before each: a read outside
/// the runs makes Δ NaN, which the encoder refuses.
struct scattered_theta {
  std::vector<piece> runs;
  std::vector<float> buffer;
};

scattered_theta scatter(const std::vector<float>& theta, std::size_t run_length) {
  scattered_theta s;
  const std::size_t lengths[] = {run_length, 1, 3};
  for (std::size_t packed = 0, k = 0; packed < theta.size(); ++k) {
    const std::size_t size = std::min(lengths[k % 3], theta.size() - packed);
    s.runs.push_back({0, packed, size});
    packed += size;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto r = s.runs.rbegin(); r != s.runs.rend(); ++r) {
    s.buffer.insert(s.buffer.end(), 5, nan);
    r->flat_offset = s.buffer.size();
    s.buffer.insert(s.buffer.end(), theta.begin() + std::ptrdiff_t(r->packed_offset),
                    theta.begin() + std::ptrdiff_t(r->packed_offset + r->size));
  }
  s.buffer.insert(s.buffer.end(), 5, nan);
  return s;
}

/// Runs encode_delta on `threads` threads and checks its bytes and residual
/// against codec::encode and codec::decode of the Δ computed here. With
/// `run_length` > 0, θ is scattered in runs (`scatter`) and read through them.
void check_encode_delta(codec_id f, std::size_t block, const inputs& in, bool feedback, unsigned threads,
                        std::size_t run_length = 0) {
  const std::size_t n = in.base.size();
  const auto delta = reference_delta(in, feedback);
  const auto want_bytes = reference_encoding(f, block, delta);

  std::vector<std::byte> out(encoded_size(f, n, block), std::byte{0xAB});
  std::vector<float> residual = in.residual;
  const auto residual_span = feedback ? std::span<float>(residual) : std::span<float>();
  bool ok = false;
  if (run_length == 0) {
    ok = encode_delta(f, block, in.base, in.theta, residual_span, out, threads);
  } else {
    const auto s = scatter(in.theta, run_length);
    ok = encode_delta(f, block, std::span<const piece>(s.runs), s.buffer.data(), in.base, residual_span, out, threads);
  }
  const auto context = [&] {
    return std::string(name(f)) + " block " + std::to_string(block) + " n " + std::to_string(n) +
           (feedback ? " with" : " without") + " error feedback, " + std::to_string(threads) + " threads" +
           (run_length ? ", θ in runs of " + std::to_string(run_length) + ", 1 and 3" : std::string());
  };
  BOOST_TEST_REQUIRE(ok, context() << ": refused finite input");
  BOOST_TEST_REQUIRE(out.size() == want_bytes.size());
  const auto differs = std::mismatch(out.begin(), out.end(), want_bytes.begin());
  BOOST_TEST_REQUIRE((differs.first == out.end()),
                     context() << ": byte " << (differs.first - out.begin()) << " differs from codec::encode");

  if (!feedback) {
    std::size_t at = 0;
    BOOST_TEST_REQUIRE(same_bits(residual, in.residual, at), context() << ": the unused residual changed at " << at);
    return;
  }
  const auto decoded = reference_decoding(f, block, n, want_bytes);
  std::vector<float> want_residual(n);
  for (std::size_t i = 0; i < n; ++i) want_residual[i] = delta[i] - decoded[i];
  std::size_t at = 0;
  BOOST_TEST_REQUIRE(same_bits(residual, want_residual, at),
                     context() << ": residual " << at << " is " << value_at(residual, at)
                               << ", Δ − decode(encode(Δ)) is " << value_at(want_residual, at));
}

void check_encode_delta(codec_id f, std::size_t block, std::size_t n, bool feedback, unsigned threads, unsigned seed) {
  check_encode_delta(f, block, make_inputs(n, seed), feedback, threads);
}

/// A valid encoding of `n` values with every kind of code: random scales
/// (some 0) and random codes (none of the invalid ones), written byte by byte
/// here, not by the encoder.
std::vector<std::byte> random_encoding(codec_id f, std::size_t n, std::size_t block, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<unsigned> byte(0, 255);
  std::normal_distribution<float> normal;
  std::vector<std::byte> out(encoded_size(f, n, block));
  auto random_float = [&] { return normal(gen) * std::ldexp(1.0f, int(byte(gen) % 40) - 20); };
  if (f == codec_id::f32 || f == codec_id::bf16) {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = random_float();
      if (f == codec_id::f32)
        std::memcpy(out.data() + 4 * i, &v, 4);
      else
        std::memcpy(out.data() + 2 * i, reinterpret_cast<const char*>(&v) + 2, 2);  // the upper half: bf16
    }
  } else {
    std::byte* p = out.data();
    for (std::size_t first = 0; first < n; first += block) {
      const std::size_t len = std::min(block, n - first);
      const float scale = byte(gen) % 8 == 0 ? 0.0f : std::fabs(random_float());
      std::memcpy(p, &scale, 4);
      for (std::size_t i = 0; i < code_bytes(f, len); ++i) {
        unsigned c = byte(gen);
        if (f == codec_id::int8 && c == 0x80u) c = 0x81u;
        if (f == codec_id::fp8 && (c & 0x7Fu) == 0x7Fu) c ^= 0x01u;
        if (f == codec_id::int4) {
          if ((c & 0xFu) == 0x8u) c ^= 0x1u;
          if ((c >> 4) == 0x8u) c ^= 0x10u;
          if (2 * i + 1 == len) c &= 0xFu;  // the odd tail's padding
        }
        p[4 + i] = std::byte(c);
      }
      p += 4 + code_bytes(f, len);
    }
  }
  BOOST_TEST_REQUIRE(valid(f, n, block, out), name(f) << ": the test's own random encoding is not valid");
  return out;
}

void check_decode_accumulate(codec_id f, std::size_t block, std::size_t n, unsigned threads, unsigned seed) {
  const auto bytes = random_encoding(f, n, block, seed);
  std::mt19937 gen(seed + 1);
  std::normal_distribution<float> normal;
  std::vector<float> acc(n);
  for (auto& a : acc) a = normal(gen);
  const float weight = 0.37f;
  std::vector<float> want = acc;
  decode(f, n, block, bytes, [&](std::size_t i, float v) { want[i] += weight * v; });
  decode_accumulate(f, block, bytes, weight, acc, threads);
  std::size_t at = 0;
  BOOST_TEST_REQUIRE(same_bits(acc, want, at), name(f) << " block " << block << " n " << n << ", " << threads
                                                       << " threads: value " << at << " is " << value_at(acc, at)
                                                       << ", the codec::decode loop gives " << value_at(want, at));
}

std::vector<std::size_t> sizes_for(std::size_t block) {
  return {0, 1, 2, 3, block - 1 > 0 ? block - 1 : 1, block, block + 1, 2 * block + 3, 1000, 1001};
}

// Up to 1024 (pipelined_block_max): encode_delta's pipelined encoder; 1025:
// longer than it pipelines, coded in pieces of 1024 and 1 (odd, for int4).
constexpr std::size_t blocks[] = {256, 64, 32, 7, 1, 1024, 1025};

/// Large enough that 3 threads each get a share (2^16 values at least).
constexpr std::size_t threaded_n = 3 * (std::size_t{1} << 16) + 4099;

BOOST_AUTO_TEST_SUITE(codec_kernels)

BOOST_AUTO_TEST_CASE(encode_delta_writes_the_bytes_of_codec_encode) {
  unsigned seed = 1;
  for (const codec_id f : float_codecs)
    for (const std::size_t block : blocks)
      for (const std::size_t n : sizes_for(block)) check_encode_delta(f, block, n, false, 1, seed++);
}

BOOST_AUTO_TEST_CASE(theta_in_runs_gives_the_bytes_and_residual_of_theta_in_one_piece) {
  // Runs shorter and longer than a block, so that blocks lie within a run,
  // across two and across many; on 1 thread and on 3.
  unsigned seed = 50;
  for (const codec_id f : float_codecs)
    for (const std::size_t block : {std::size_t{256}, std::size_t{7}})
      for (const std::size_t run_length : {std::size_t{1000}, std::size_t{300}, std::size_t{5}})
        for (const bool feedback : {false, true}) {
          check_encode_delta(f, block, make_inputs(2 * block + 1001, seed++), feedback, 1, run_length);
          check_encode_delta(f, block, make_inputs(threaded_n, seed++), feedback, 3, run_length);
        }
}

BOOST_AUTO_TEST_CASE(error_feedback_leaves_the_encoding_error) {
  unsigned seed = 100;
  for (const codec_id f : float_codecs)
    for (const std::size_t block : blocks)
      for (const std::size_t n : sizes_for(block)) check_encode_delta(f, block, n, true, 1, seed++);
}

BOOST_AUTO_TEST_CASE(error_feedback_carries_the_error_into_the_next_encoding) {
  // Two rounds by hand, int8, one block of two values: Δ₁ = (1, 0.3).
  // absmax 1: 0.3·127 = 38.1 → 38, decoded 38/127; residual 0.3 − 38/127.
  // Round 2 with the same base and θ: Δ₂ = (1, 0.3 + residual₁).
  std::vector<float> base{1.0f, 0.3f}, theta{0.0f, 0.0f}, residual{0.0f, 0.0f};
  std::vector<std::byte> out(encoded_size(codec_id::int8, 2, 256));
  BOOST_TEST_REQUIRE(encode_delta(codec_id::int8, 256, base, theta, residual, out, 1));
  BOOST_TEST(std::to_integer<int>(out[5]) == 38);
  const float r1 = 0.3f - 38.0f / 127.0f * 1.0f;
  BOOST_TEST(residual[0] == 0.0f);
  BOOST_TEST(residual[1] == r1);
  BOOST_TEST_REQUIRE(encode_delta(codec_id::int8, 256, base, theta, residual, out, 1));
  const float d2 = 0.3f + r1;  // 38.2 or so: still 38
  BOOST_TEST(std::to_integer<int>(out[5]) == 38);
  BOOST_TEST(residual[1] == d2 - 38.0f / 127.0f * 1.0f);
}

BOOST_AUTO_TEST_CASE(error_feedback_sends_over_rounds_what_one_round_drops) {
  // The same outer gradient g every round: without feedback int4 sends the
  // same rounded value each time; with it, the mean of what is sent
  // approaches g, within one quantization error over the rounds.
  constexpr std::size_t n = 256, rounds = 64;
  std::mt19937 gen(6);
  std::normal_distribution<float> normal;
  std::vector<float> base(n), theta(n), g(n);
  float absmax = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    base[i] = normal(gen);
    theta[i] = base[i] - 0.01f * normal(gen);
    g[i] = base[i] - theta[i];
    absmax = std::max(absmax, std::fabs(g[i]));
  }
  std::vector<float> residual(n, 0.0f);
  std::vector<double> sent_sum(n, 0.0), plain_sum(n, 0.0);
  std::vector<std::byte> bytes(encoded_size(codec_id::int4, n, n)), plain(bytes.size());
  for (std::size_t r = 0; r < rounds; ++r) {
    BOOST_TEST_REQUIRE(encode_delta(codec_id::int4, n, base, theta, residual, bytes, 1));
    BOOST_TEST_REQUIRE(encode_delta(codec_id::int4, n, base, theta, {}, plain, 1));
    const auto sent = reference_decoding(codec_id::int4, n, n, bytes),
               once = reference_decoding(codec_id::int4, n, n, plain);
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

BOOST_AUTO_TEST_CASE(non_finite_delta_is_refused_and_the_residual_restarts) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float big = std::numeric_limits<float>::max();
  for (const std::size_t n : {std::size_t{300}, threaded_n}) {
    const inputs finite = make_inputs(n, 7);
    for (const codec_id f : float_codecs)
      for (const std::size_t at : {std::size_t{0}, n / 2 + 1, n - 1})
        for (int where = 0; where < 4; ++where)
          for (const unsigned threads : {1u, 3u}) {
            inputs in = finite;
            if (where == 0) in.base[at] = nan;
            if (where == 1) in.theta[at] = -inf;
            if (where == 2) in.residual[at] = inf;
            if (where == 3) in.base[at] = big, in.theta[at] = -big;  // finite inputs, Δ overflows to +∞
            std::vector<std::byte> out(encoded_size(f, n, default_block));
            std::vector<float> residual = in.residual;
            BOOST_TEST(!encode_delta(f, default_block, in.base, in.theta, residual, out, threads),
                       name(f) << " accepted a non-finite Δ at " << at << " (case " << where << ")");
            std::size_t nonzero = 0;
            for (const float r : residual) nonzero += r != 0.0f;
            BOOST_TEST(nonzero == 0u, name(f) << ": " << nonzero << " residual values survived a refusal");
            if (where != 2)  // without error feedback too
              BOOST_TEST(!encode_delta(f, default_block, in.base, in.theta, {}, out, threads), name(f));
          }
  }
}

BOOST_AUTO_TEST_CASE(a_wrong_output_size_is_refused_and_nothing_changes) {
  const inputs in = make_inputs(300, 3);
  std::vector<float> residual = in.residual;
  std::vector<std::byte> out(encoded_size(codec_id::int8, 300, default_block) - 1);
  BOOST_TEST(!encode_delta(codec_id::int8, default_block, in.base, in.theta, residual, out, 1));
  BOOST_TEST(residual == in.residual);
  std::vector<std::byte> right(encoded_size(codec_id::int8, 300, default_block));
  BOOST_TEST(!encode_delta(codec_id::int8, 0, in.base, in.theta, residual, right, 1));  // block 0
}

BOOST_AUTO_TEST_CASE(a_codec_that_is_not_a_float_codec_is_refused_and_nothing_changes) {
  const inputs in = make_inputs(300, 3);
  for (const codec_id c : {codec_id::none, codec_id::f64, codec_id::bytes}) {
    std::vector<float> residual = in.residual;
    std::vector<std::byte> out(encoded_size(c, 300, default_block), std::byte{0x5A});
    BOOST_TEST(!encode_delta(c, default_block, in.base, in.theta, residual, out, 1), name(c));
    BOOST_TEST(residual == in.residual, name(c));
    BOOST_TEST(std::ranges::count(out, std::byte{0x5A}) == std::ptrdiff_t(out.size()), name(c) << " wrote bytes");
  }
}

BOOST_AUTO_TEST_CASE(decode_accumulate_adds_what_codec_decode_gives) {
  unsigned seed = 200;
  for (const codec_id f : float_codecs)
    for (const std::size_t block : blocks)
      for (const std::size_t n : sizes_for(block)) check_decode_accumulate(f, block, n, 1, seed++);
}

BOOST_AUTO_TEST_CASE(decode_accumulate_of_encode_delta_is_the_weighted_sum) {
  // By hand: fp32 is exact, so acc = 1 + 0.5 · (base − θ).
  const std::vector<float> base{3.0f, -1.0f, 0.5f}, theta{1.0f, 1.0f, 0.25f};
  std::vector<std::byte> bytes(encoded_size(codec_id::f32, 3, 256));
  BOOST_TEST_REQUIRE(encode_delta(codec_id::f32, 256, base, theta, {}, bytes, 1));
  std::vector<float> acc(3, 1.0f);
  decode_accumulate(codec_id::f32, 256, bytes, 0.5f, acc, 1);
  BOOST_TEST(acc == (std::vector<float>{2.0f, 0.0f, 1.125f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(results_do_not_depend_on_the_thread_count) {
  // threaded_n gives 3 threads a share each; the results must equal the
  // references (hence each other) bit for bit.
  const inputs in = make_inputs(threaded_n, 300);
  for (const codec_id f : float_codecs)
    for (const std::size_t block : {std::size_t{256}, std::size_t{7}})
      for (const unsigned threads : {2u, 3u, 0u}) {  // 1 thread: the cases above
        check_encode_delta(f, block, in, false, threads);
        check_encode_delta(f, block, in, true, threads);
        check_decode_accumulate(f, block, threaded_n, threads, 300);
      }
}

BOOST_AUTO_TEST_CASE(every_copy_of_the_fused_passes_gives_the_same_bits) {
  // The cases above ran the copy `with_best_isa` picks by default (the
  // widest this build has and this CPU runs). Here each copy, forced in
  // turn, must again give exactly the bytes of codec::encode and the sums of
  // codec::decode, so that programs built with different flags, or run on
  // different CPUs, exchange the same bits.
  using diloco::detail::isa_copy;
  struct restore {
    ~restore() { diloco::detail::isa_ceiling().store(isa_copy::avx512); }
  } restore_ceiling;
  for (const isa_copy copy : {isa_copy::baseline, isa_copy::avx2, isa_copy::avx512}) {
    const char* name = copy == isa_copy::baseline ? "baseline" : copy == isa_copy::avx2 ? "AVX2" : "AVX-512";
    if (!diloco::detail::isa_copy_available(copy)) {
      BOOST_TEST_MESSAGE("the " << name << " copy does not run here (DILOCO_ISA_AVX2_COPY " << DILOCO_ISA_AVX2_COPY
                                << ", DILOCO_ISA_AVX512_COPY " << DILOCO_ISA_AVX512_COPY << ")");
      continue;
    }
    diloco::detail::isa_ceiling().store(copy);
    BOOST_TEST((diloco::detail::isa_in_use() == copy), name << " forced");
    // One thread: each thread's share goes through the same choice, and the
    // cases above cover the thread counts (with the default copy); sizes
    // cross block boundaries and leave short last blocks.
    unsigned seed = 500;
    for (const codec_id f : float_codecs)
      for (const std::size_t block : {std::size_t{256}, std::size_t{64}, std::size_t{7}})
        for (const std::size_t n : {block + 5, std::size_t{4099}}) {
          for (const bool feedback : {false, true}) check_encode_delta(f, block, n, feedback, 1, seed++);
          check_decode_accumulate(f, block, n, 1, seed++);
        }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace codec_kernels_test
