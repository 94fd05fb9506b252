// bench_codecs: the fused codec passes and the outer step against the memory
// system, on one thread and on every core.
//
// For each N, on one set of buffers (2 MiB aligned, MADV_HUGEPAGE, written
// before timing), times in turn, repetition after repetition (A B C … A B C …),
// each on 1 thread and on T threads (T = every core):
//   triad                  STREAM triad a = b + s·c                12 B/param
//   encode/<fmt>           encode_delta, no error feedback          8 B/param + encoding
//   encode_ef/<fmt>        encode_delta with error feedback        16 B/param + encoding
//   decode_acc/<fmt>       decode_accumulate                        8 B/param + encoding
//   nesterov               diloco::outer::nesterov<float>::step    20 B/param
// then the outer step alone, back to back (nesterov_b2b: warm-ups and
// repetitions on 1 thread, then on T), as bench/codecs/torch_sgd.py times
// PyTorch's, and prints median, min and max GB/s (10⁹ bytes/s, STREAM's
// counting) and each one's ratio to the triad of the same thread count. Before timing, the
// fused passes are checked against codec::encode and codec::decode on a
// prefix, on T threads. The fused passes run the copy the library picks
// (diloco/detail/isa.hpp: AVX-512 or AVX2 where the build is for the x86-64
// baseline and the CPU has it), or at most AVX2 with --isa avx2, or the
// baseline copy with --isa baseline; the first line (the JSON's "isa") says
// which.
//
//   bench_codecs [--sizes 16M] [--repeat 10] [--warmup 2] [--block 256] [--threads T]
//                [--isa best|avx2|baseline] [--json]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <diloco_tools/cli.hpp>
#include "../common/huge_buffer.hpp"
#include "../common/json.hpp"
#include "../common/stats.hpp"
#include "codecs.hpp"
#include "diloco/detail/isa.hpp"
#include "diloco/detail/parallel.hpp"

namespace {

using bench::summarize;
using bench::summary;

using diloco::codec_id;

struct options {
  std::vector<std::size_t> sizes{std::size_t{16} << 20};
  int repeat = 10;
  int warmup = 2;
  std::size_t block = diloco::codec::default_block;
  unsigned threads = 0;
  diloco::detail::isa_copy isa_ceiling = diloco::detail::isa_copy::avx512;
  bool json = false;
};

/// Which code the fused passes run, in words.
const char* isa_in_use() {
  using diloco::detail::isa_copy;
  switch (diloco::detail::isa_in_use()) {
    case isa_copy::avx512: return "avx512 (the library's AVX-512 copy, picked at run time)";
    case isa_copy::avx2:
      return diloco::detail::isa_copy_available(isa_copy::avx512)
                 ? "avx2 (the library's AVX2 copy, forced: --isa avx2)"
                 : "avx2 (the library's AVX2 copy, picked at run time)";
    case isa_copy::baseline: break;
  }
  if (diloco::detail::isa_ceiling().load() == isa_copy::baseline) return "baseline (forced: --isa baseline)";
#if defined(__AVX512BW__)
  return "avx512 (the whole program is compiled for it)";
#elif defined(__AVX2__)
  return "avx2 or above (the whole program is compiled for it; this CPU or build has no wider copy)";
#else
  return DILOCO_ISA_DISPATCH ? "baseline (this CPU has no AVX2)" : "baseline (no wider copy in this build)";
#endif
}

std::optional<int> parse(int argc, char** argv, options& o) {
  CLI::App app("The fused codec passes and the outer Nesterov step against STREAM triad, on 1 thread and on T.",
               "bench_codecs");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--sizes", o.sizes, "parameter counts (fp32); suffixes K, M, G are powers of 2 (16M)")
      ->delimiter(',')
      ->transform(diloco_tools::size_multiple_of(1))
      ->option_text("N,...");
  app.add_option("--repeat", o.repeat, "timed repetitions of each method (>= 1)")
      ->check(CLI::Range(1, 1'000'000).description(""))
      ->capture_default_str()
      ->type_name("K");
  app.add_option("--warmup", o.warmup, "untimed repetitions first (>= 0)")
      ->check(CLI::Range(0, 1'000'000).description(""))
      ->capture_default_str()
      ->type_name("W");
  app.add_option("--block", o.block, "values per scaled block of int8, fp8 and int4 (>= 1)")
      ->transform(diloco_tools::size_multiple_of(1))
      ->capture_default_str()
      ->type_name("B");
  app.add_option("--threads", o.threads, "threads of the many-thread runs (0: every core)")
      ->check(CLI::Range(0u, 4096u).description(""))
      ->capture_default_str()
      ->type_name("T");
  std::string isa = "best";
  app.add_option("--isa", isa,
                 "the fused passes' widest copy: best (AVX-512 or AVX2 where the library has a copy and the CPU can), "
                 "avx2 or baseline")
      ->check(CLI::IsMember({"best", "avx2", "baseline"}))
      ->capture_default_str();
  app.add_flag("--json", o.json, "one JSON object per size on stdout, nothing else");
  app.final_callback([&] {
    using diloco::detail::isa_copy;
    o.isa_ceiling = isa == "baseline" ? isa_copy::baseline : isa == "avx2" ? isa_copy::avx2 : isa_copy::avx512;
  });
  return diloco_tools::parse(app, argc, argv);
}

/// Empty if the fused passes on `threads` threads agree with codec::encode and
/// codec::decode on `n` values of `base` and `theta`, bit for bit.
std::string check_prefix(std::span<const float> base, std::span<const float> theta, std::size_t block,
                         unsigned threads) {
  using namespace diloco::codec;
  const std::size_t n = base.size();
  for (const codec_id f : float_codecs) {
    std::vector<float> delta(n), residual(n, 1e-4f), r_want(n);
    for (std::size_t i = 0; i < n; ++i) delta[i] = base[i] - theta[i] + residual[i];
    std::vector<std::byte> want(encoded_size(f, n, block)), got(want.size());
    if (!encode(
            f, n, block, [&](std::size_t i) { return delta[i]; }, want))
      return std::string(name(f)) + ": codec::encode refused the prefix";
    if (!bench::encode_delta(f, block, base, theta, residual, got, threads))
      return std::string(name(f)) + ": encode_delta refused the prefix";
    if (want != got) return std::string(name(f)) + ": encode_delta's bytes differ from codec::encode's";
    decode(f, n, block, want, [&](std::size_t i, float v) { r_want[i] = delta[i] - v; });
    if (std::memcmp(r_want.data(), residual.data(), n * sizeof(float)) != 0)
      return std::string(name(f)) + ": encode_delta's residual differs from Δ − decode(encode(Δ))";
    std::vector<float> acc(n, 1.0f), acc_want(n, 1.0f);
    decode(f, n, block, want, [&](std::size_t i, float v) { acc_want[i] += 0.5f * v; });
    bench::decode_accumulate(f, block, want, 0.5f, acc, threads);
    if (std::memcmp(acc.data(), acc_want.data(), n * sizeof(float)) != 0)
      return std::string(name(f)) + ": decode_accumulate differs from the codec::decode loop";
  }
  return {};
}

struct method {
  std::string name;
  unsigned threads;
  double bytes_per_param;
  std::function<void()> run;
  std::vector<double> gbps{};
};

/// Runs `m` once on `n` parameters and, unless it is a warm-up, keeps its GB/s.
void run_once(method& m, std::size_t n, bool warm_up) {
  const auto t0 = std::chrono::steady_clock::now();
  m.run();
  const auto t1 = std::chrono::steady_clock::now();
  if (!warm_up)
    m.gbps.push_back(m.bytes_per_param * static_cast<double>(n) / std::chrono::duration<double>(t1 - t0).count() / 1e9);
}

struct buffers {
  bench::huge_buffer base, theta, residual, acc, encoded, triad_out, global, delta;
  explicit buffers(std::size_t n)
      : base(4 * n),
        theta(4 * n),
        residual(4 * n),
        acc(4 * n),
        encoded(4 * n),
        triad_out(4 * n),
        global(4 * n),
        delta(4 * n) {}
};

int run_size(const options& o, std::size_t n, unsigned many, const buffers& b) {
  const auto base = b.base.first<float>(n), theta = b.theta.first<float>(n), residual = b.residual.first<float>(n),
             acc = b.acc.first<float>(n), triad_out = b.triad_out.first<float>(n), global = b.global.first<float>(n),
             delta = b.delta.first<float>(n);
  for (std::size_t i = 0; i < n; ++i) {
    base[i] = 1.0f + static_cast<float>(i % 1024) * 1e-4f;
    theta[i] = base[i] - 1e-3f * std::cos(static_cast<float>(i % 4099));
    residual[i] = 0.0f;
    acc[i] = 0.0f;
    global[i] = base[i];
    delta[i] = 1e-3f * (1.0f + static_cast<float>(i % 97) / 97.0f);
  }
  const std::size_t check_n = std::min<std::size_t>(n, 3 * (std::size_t{1} << 16) + 4099);
  if (auto err = check_prefix(base.first(check_n), theta.first(check_n), o.block, many); !err.empty()) {
    std::fprintf(stderr, "bench_codecs: N = %zu: %s\n", n, err.c_str());
    return 1;
  }

  // The optimizers size their momentum on the first step: take it with Δ = 0
  // (triad_out, zeroed), which leaves Θ and m as they are, then put the
  // momentum on huge pages like the benchmark's own buffers.
  std::fill(triad_out.begin(), triad_out.end(), 0.0f);
  diloco::outer::nesterov<float> one({bench::outer_lr, bench::outer_momentum, 1});
  diloco::outer::nesterov<float> all({bench::outer_lr, bench::outer_momentum, many});
  for (auto* opt : {&one, &all}) {
    bench::nesterov_step(*opt, global, triad_out);
    bench::collapse_to_huge_pages(opt->momentum(0).data(), opt->momentum(0).size_bytes());
  }

  std::vector<method> methods;
  for (const unsigned t : {1u, many})
    methods.push_back(
        {"triad", t, bench::bytes_per_param::triad, [=] { bench::triad(triad_out, base, theta, 3.0f, t); }});
  // Per format: the encodings, then the decodings of what the last one wrote.
  for (const codec_id f : diloco::codec::float_codecs) {
    const auto out = b.encoded.first<std::byte>(diloco::codec::encoded_size(f, n, o.block));
    const std::string fmt(diloco::codec::name(f));
    for (const bool feedback : {false, true})
      for (const unsigned t : {1u, many})
        methods.push_back(
            {(feedback ? "encode_ef/" : "encode/") + fmt, t, bench::bytes_per_param::encode(f, n, o.block, feedback),
             [=, block = o.block] {
               if (!bench::encode_delta(f, block, base, theta, feedback ? residual : std::span<float>(), out, t))
                 throw std::runtime_error("encode_delta refused finite input");
             }});
    for (const unsigned t : {1u, many})
      methods.push_back({"decode_acc/" + fmt, t, bench::bytes_per_param::decode(f, n, o.block),
                         [=, block = o.block] { bench::decode_accumulate(f, block, out, 1e-3f, acc, t); }});
  }
  methods.push_back(
      {"nesterov", 1, bench::bytes_per_param::nesterov, [&] { bench::nesterov_step(one, global, delta); }});
  methods.push_back(
      {"nesterov", many, bench::bytes_per_param::nesterov, [&] { bench::nesterov_step(all, global, delta); }});

  for (int r = 0; r < o.warmup + o.repeat; ++r)
    for (auto& m : methods) run_once(m, n, r < o.warmup);
  // Then the outer step alone, back to back on the same buffers, as
  // torch_sgd.py times PyTorch's: one thread's warm-ups and repetitions, then
  // T threads'. Between the interleaved passes above the step finds none of
  // its data in cache; stepped again and again, as PyTorch is, part of it may
  // still be there.
  for (auto* opt : {&one, &all}) {
    method m{"nesterov_b2b", opt == &one ? 1u : many, bench::bytes_per_param::nesterov,
             [opt, global, delta] { bench::nesterov_step(*opt, global, delta); }};
    for (int r = 0; r < o.warmup + o.repeat; ++r) run_once(m, n, r < o.warmup);
    methods.push_back(std::move(m));
  }

  std::vector<summary> s;
  for (const auto& m : methods) s.push_back(summarize(m.gbps));
  auto triad_of = [&](unsigned t) { return t == 1 ? s[0].median : s[1].median; };

  if (o.json) {
    bench::json list = bench::json::array();
    for (std::size_t i = 0; i < methods.size(); ++i) {
      const auto& m = methods[i];
      list.push_back({{"method", m.name},
                      {"threads", m.threads},
                      {"bytes_per_param", bench::rounded(m.bytes_per_param, 4)},
                      {"median_gbps", bench::rounded(s[i].median, 3)},
                      {"min_gbps", bench::rounded(s[i].min, 3)},
                      {"max_gbps", bench::rounded(s[i].max, 3)},
                      {"median_ms", bench::rounded(m.bytes_per_param * static_cast<double>(n) / s[i].median / 1e6, 4)},
                      {"over_triad", bench::rounded(s[i].median / triad_of(m.threads), 3)}});
    }
    const bench::json line{{"n", n},
                           {"block", o.block},
                           {"threads", many},
                           {"isa", isa_in_use()},
                           {"repeat", o.repeat},
                           {"warmup", o.warmup},
                           {"methods", std::move(list)}};
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf(
        "N = %zu fp32 (%zu MiB per buffer), block %zu, 1 and %u threads, %d timed repetitions after %d "
        "warm-ups, methods interleaved; fused passes: %s\n",
        n, n * 4 >> 20, o.block, many, o.repeat, o.warmup, isa_in_use());
    std::printf("  %-16s %7s %7s %12s %9s %9s %10s %10s\n", "method", "threads", "B/param", "median GB/s", "min", "max",
                "median ms", "/ triad");
    for (std::size_t i = 0; i < methods.size(); ++i) {
      const auto& m = methods[i];
      std::printf("  %-16s %7u %7.3f %12.1f %9.1f %9.1f %10.2f %10.2f\n", m.name.c_str(), m.threads, m.bytes_per_param,
                  s[i].median, s[i].min, s[i].max, m.bytes_per_param * static_cast<double>(n) / s[i].median / 1e6,
                  s[i].median / triad_of(m.threads));
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const auto status = parse(argc, argv, o)) return *status;
  diloco::detail::isa_ceiling().store(o.isa_ceiling);
  try {
    const unsigned many = diloco::detail::resolve_threads(o.threads);
    const std::size_t max_n = *std::max_element(o.sizes.begin(), o.sizes.end());
    const buffers b(max_n);
    for (const std::size_t n : o.sizes)
      if (const int rc = run_size(o, n, many, b); rc != 0) return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_codecs: %s\n", e.what());
    return 1;
  }
  return 0;
}
