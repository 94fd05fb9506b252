// bench_outer_step: DiLoCo's outer Nesterov step against the memory system.
//
// For each N, on one set of buffers (2 MiB aligned, MADV_HUGEPAGE, written
// before timing), times in turn, repetition after repetition (A B C … A B C …):
//   triad          STREAM triad a = b + s·c                       12 B/param
//   diloco         diloco::outer::nesterov<float>::step          20 B/param
//   four_pass      Nesterov as PyTorch's foreach SGD does it      44 B/param
//   element_loop   the library's element functor, bench buffers   20 B/param
//   memcpy         std::memcpy                                     8 B/param
// and prints median, min and max GB/s (10⁹ bytes/s, STREAM's counting) and the
// ratios diloco/triad and diloco/four_pass. Before timing, the fused step is
// checked against the four-pass one on a prefix; after timing, the three
// momentum buffers are checked against each other over all N.
//
//   bench_outer_step [--sizes 16M,64M] [--repeat 20] [--warmup 2] [--json]
//                    [--keep-library-pages]
#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <diloco_tools/cli.hpp>
#include "../common/huge_buffer.hpp"
#include "../common/json.hpp"
#include "../common/stats.hpp"
#include "outer_step.hpp"

namespace {

using bench::summarize;
using bench::summary;

struct options {
  std::vector<std::size_t> sizes{std::size_t{16} << 20, std::size_t{64} << 20};
  int repeat = 20;
  int warmup = 2;
  bool json = false;
  bool keep_library_pages = false;
};

/// Reads the command line into `o`; see `diloco_tools::parse` for the result.
std::optional<int> parse(int argc, char** argv, options& o) {
  CLI::App app("DiLoCo's outer Nesterov step against STREAM triad, a four-pass Nesterov and memcpy.",
               "bench_outer_step");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--sizes", o.sizes, "parameter counts (fp32); suffixes K, M, G are powers of 2 (16M,64M)")
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
  app.add_flag("--json", o.json, "one JSON object per size on stdout, nothing else");
  app.add_flag("--keep-library-pages", o.keep_library_pages,
               "leave the optimizer's momentum buffer on the pages malloc gave it (default: collapse it to huge "
               "pages)");
  return diloco_tools::parse(app, argc, argv);
}

/// Equal up to fp rounding: a few ulps, and more than contraction into FMAs
/// (-march=native) can change; a wrong formula is off by orders more.
bool close(float a, float b) { return std::fabs(a - b) <= 1e-5f * std::max(std::fabs(a), std::fabs(b)); }

/// Empty if `a` and `b` agree everywhere, else where they first differ.
std::string compare(const char* what, std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return std::string(what) + ": sizes differ";
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!close(a[i], b[i])) {
      char msg[160];
      std::snprintf(msg, sizeof msg, "%s differs at %zu: %.9g vs %.9g", what, i, double(a[i]), double(b[i]));
      return msg;
    }
  }
  return {};
}

/// Runs three steps of the library's step, the element loop and the four-pass
/// Nesterov on copies of the first `n` parameters and compares Θ and m.
std::string check_prefix(std::span<const float> global, std::span<const float> delta) {
  const std::size_t n = global.size();
  std::vector<float> g_lib(global.begin(), global.end()), g_loop = g_lib, g_four = g_lib;
  std::vector<float> m_loop(n, 0.0f), m_four(n, 0.0f), tmp(n, 0.0f);
  diloco::outer::nesterov<float> optimizer({bench::outer_lr, bench::outer_momentum});
  for (int step = 0; step < 3; ++step) {
    bench::diloco_step(optimizer, g_lib, delta);
    bench::diloco_element_loop(g_loop, m_loop, delta);
    bench::four_pass_nesterov(g_four, m_four, tmp, delta);
  }
  for (auto err : {compare("prefix Θ (diloco vs four_pass)", g_lib, g_four),
                   compare("prefix m (diloco vs four_pass)", optimizer.momentum(0), m_four),
                   compare("prefix Θ (element_loop vs four_pass)", g_loop, g_four),
                   compare("prefix m (element_loop vs four_pass)", m_loop, m_four)})
    if (!err.empty()) return err;
  // The step must have done something: Θ moved by more than rounding.
  if (close(g_four[0], global[0])) return "prefix: the four-pass step left Θ unchanged";
  return {};
}

struct method {
  const char* name;
  double bytes_per_param;
  std::function<void()> run;
  std::vector<double> gbps{};
};

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

int run_size(const options& o, std::size_t n, const bench::huge_buffer& global_buf, const bench::huge_buffer& delta_buf,
             const bench::huge_buffer& m_four_buf, const bench::huge_buffer& m_loop_buf,
             const bench::huge_buffer& tmp_buf) {
  const auto global = global_buf.first<float>(n), delta = delta_buf.first<float>(n),
             m_four = m_four_buf.first<float>(n), m_loop = m_loop_buf.first<float>(n), tmp = tmp_buf.first<float>(n);
  for (std::size_t i = 0; i < n; ++i) {
    global[i] = 1.0f + static_cast<float>(i % 1024) * 1e-4f;
    delta[i] = 1e-3f * (1.0f + static_cast<float>(i % 97) / 97.0f);
  }
  std::fill(m_four.begin(), m_four.end(), 0.0f);
  std::fill(m_loop.begin(), m_loop.end(), 0.0f);
  std::fill(tmp.begin(), tmp.end(), 0.0f);

  if (auto err =
          check_prefix(global.first(std::min<std::size_t>(n, 4099)), delta.first(std::min<std::size_t>(n, 4099)));
      !err.empty()) {
    std::fprintf(stderr, "bench_outer_step: N = %zu: %s\n", n, err.c_str());
    return 1;
  }

  // The optimizer sizes its momentum on the first step: take that step with
  // Δ = 0 (tmp), which leaves Θ and m = 0 as they are, before anything is timed.
  diloco::outer::nesterov<float> optimizer({bench::outer_lr, bench::outer_momentum});
  const std::size_t huge_before = bench::anon_huge_bytes();
  bench::diloco_step(optimizer, global, tmp);
  const auto m_lib = optimizer.momentum(0);
  if (!o.keep_library_pages && !bench::collapse_to_huge_pages(m_lib.data(), m_lib.size_bytes()) && !o.json)
    std::fprintf(stderr, "bench_outer_step: could not collapse the optimizer's momentum to huge pages\n");
  const std::size_t huge_after = bench::anon_huge_bytes();
  const std::size_t library_huge = huge_after - std::min(huge_after, huge_before);

  constexpr float triad_scalar = 3.0f;
  std::vector<method> methods;
  methods.push_back({"triad", bench::bytes_per_param::triad, [&] { bench::triad(tmp, global, delta, triad_scalar); }});
  methods.push_back({"diloco", bench::bytes_per_param::fused, [&] { bench::diloco_step(optimizer, global, delta); }});
  methods.push_back(
      {"four_pass", bench::bytes_per_param::four_pass, [&] { bench::four_pass_nesterov(global, m_four, tmp, delta); }});
  methods.push_back(
      {"element_loop", bench::bytes_per_param::fused, [&] { bench::diloco_element_loop(global, m_loop, delta); }});
  methods.push_back({"memcpy", bench::bytes_per_param::copy, [&] { bench::copy(tmp, delta); }});

  for (int r = 0; r < o.warmup + o.repeat; ++r) {
    for (auto& m : methods) {
      const auto t0 = std::chrono::steady_clock::now();
      m.run();
      const auto t1 = std::chrono::steady_clock::now();
      if (r < o.warmup) continue;
      const double seconds = std::chrono::duration<double>(t1 - t0).count();
      m.gbps.push_back(m.bytes_per_param * static_cast<double>(n) / seconds / 1e9);
    }
  }

  // Every momentum buffer saw the same Δ the same number of times.
  for (auto err : {compare("momentum (diloco vs four_pass)", m_lib, m_four),
                   compare("momentum (element_loop vs four_pass)", m_loop, m_four)}) {
    if (!err.empty()) {
      std::fprintf(stderr, "bench_outer_step: N = %zu after timing: %s\n", n, err.c_str());
      return 1;
    }
  }

  std::vector<summary> s;
  for (const auto& m : methods) s.push_back(summarize(m.gbps));
  const double over_triad = s[1].median / s[0].median;
  // Parameters per second, fused over four-pass: the speed-up of fusing.
  const double speedup = (s[1].median / methods[1].bytes_per_param) / (s[2].median / methods[2].bytes_per_param);

  if (o.json) {
    bench::json per_method = bench::json::object();
    for (std::size_t i = 0; i < methods.size(); ++i)
      per_method[methods[i].name] = {
          {"bytes_per_param", methods[i].bytes_per_param},
          {"median_gbps", bench::rounded(s[i].median, 3)},
          {"min_gbps", bench::rounded(s[i].min, 3)},
          {"max_gbps", bench::rounded(s[i].max, 3)},
          {"median_ms", bench::rounded(methods[i].bytes_per_param * static_cast<double>(n) / s[i].median / 1e6, 4)}};
    const bench::json line{{"n", n},
                           {"repeat", o.repeat},
                           {"warmup", o.warmup},
                           {"library_momentum_huge_bytes", library_huge},
                           {"methods", std::move(per_method)},
                           {"diloco_over_triad", bench::rounded(over_triad, 4)},
                           {"diloco_speedup_over_four_pass", bench::rounded(speedup, 4)}};
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf("N = %zu fp32 (%s per buffer), %d timed repetitions after %d warm-ups, methods interleaved\n", n,
                mib(n * sizeof(float)).c_str(), o.repeat, o.warmup);
    std::printf("optimizer momentum on huge pages: %s of %s%s\n", mib(library_huge).c_str(),
                mib(m_lib.size_bytes()).c_str(), o.keep_library_pages ? " (--keep-library-pages)" : "");
    std::printf("  %-13s %7s %12s %9s %9s %10s\n", "method", "B/param", "median GB/s", "min", "max", "median ms");
    for (std::size_t i = 0; i < methods.size(); ++i)
      std::printf("  %-13s %7g %12.1f %9.1f %9.1f %10.2f\n", methods[i].name, methods[i].bytes_per_param, s[i].median,
                  s[i].min, s[i].max, methods[i].bytes_per_param * static_cast<double>(n) / s[i].median / 1e6);
    std::printf("  diloco / triad (GB/s as counted):        %.2f\n", over_triad);
    std::printf("  diloco / four_pass (parameters per s):   %.2f\n\n", speedup);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  if (const auto status = parse(argc, argv, o)) return *status;
  try {
    const std::size_t max_n = *std::max_element(o.sizes.begin(), o.sizes.end());
    const std::size_t huge_before = bench::anon_huge_bytes();
    const std::size_t bytes = max_n * sizeof(float);
    bench::huge_buffer global(bytes), delta(bytes), m_four(bytes), m_loop(bytes), tmp(bytes);
    const std::size_t huge_after = bench::anon_huge_bytes();
    if (!o.json)
      std::printf("bench buffers: 5 x %s, on huge pages: %s\n\n", mib(max_n * sizeof(float)).c_str(),
                  mib(huge_after - std::min(huge_after, huge_before)).c_str());
    for (const std::size_t n : o.sizes)
      if (const int rc = run_size(o, n, global, delta, m_four, m_loop, tmp); rc != 0) return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_outer_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
