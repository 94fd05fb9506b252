// bench_gpu_passes: the GPU passes of a learner and a syncer against the
// device's own copy bandwidth, measured side by side in one run.
//
// For N fp32 values, times on one stream, each run between CUDA events:
//   encode             Δ = (base − θ) + residual, encoded, the residual
//                      rewritten: per codec and block size (f32, bf16,
//                      int8/32/128/1024, fp8/128, int4/32/128)
//   decode_accumulate  acc += w · decode(code), the syncer's merge
//   nesterov           the outer step (20 B per value)
//   adamw              the inner step (28 B per value)
//   mix                θ ← αθ + (1−α)Θ (12 B per value)
// and for each, a cudaMemcpyAsync device to device moving as many bytes
// (half read, half written), run for run. Prints one JSON object per pass:
// the median time, GB/s (10⁹ bytes moved per second, reads plus writes)
// and `of_copy`, the pass's GB/s over the copy's (1.0: at the copy's speed).
//
//   bench_gpu_passes [--elements 64M] [--repeat 20]
// Exit status 1 without a usable GPU.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <diloco_tools/cli.hpp>

#include "../common/json.hpp"
#include "passes.hpp"

int main(int argc, char** argv) {
  std::uint64_t elements = std::uint64_t{1} << 26;
  int repeats = 20;
  CLI::App app("The GPU passes (encode, decode-accumulate, Nesterov, AdamW, mixing) against a device copy.",
               "bench_gpu_passes");
  diloco_tools::add_number<std::uint64_t>(app, "--elements", elements, {1024, std::uint64_t{1} << 32},
                                          "fp32 values per buffer (67108864)", "N");
  diloco_tools::add_number<int>(app, "--repeat", repeats, {1, 100000}, "timed runs of each pass (20)", "R");
  if (const auto status = diloco_tools::parse(app, argc, argv)) return *status;
  try {
    std::printf("%s\n", bench::json{{"device", gpu_bench::describe_device()}, {"elements", elements}}.dump().c_str());
    for (const auto& t : gpu_bench::time_passes(static_cast<std::size_t>(elements), repeats)) {
      const double gbps = t.bytes / t.seconds / 1e9, copy = t.bytes / t.copy_seconds / 1e9;
      bench::json line{{"pass", t.pass}};
      if (!t.codec.empty()) line["codec"] = t.codec;
      if (t.block != 0) line["block"] = t.block;
      line["bytes"] = t.bytes;
      line["median_us"] = bench::rounded(t.seconds * 1e6, 1);
      line["gb_per_s"] = bench::rounded(gbps, 1);
      line["copy_gb_per_s"] = bench::rounded(copy, 1);
      line["of_copy"] = bench::rounded(gbps / copy, 3);
      std::printf("%s\n", line.dump().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_passes: %s\n", e.what());
    return 1;
  }
  return 0;
}
