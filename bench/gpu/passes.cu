// The timed passes of bench_gpu_passes (passes.hpp): the library's kernels
// on device buffers, each run between two CUDA events on one stream, and a
// cudaMemcpyAsync device to device moving the same bytes (half of them read,
// half written) as the reference, run for run.
#include "passes.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "diloco/codec/blocks.hpp"
#include "diloco/cuda/adamw.cuh"
#include "diloco/cuda/codec.cuh"
#include "diloco/cuda/memory.cuh"
#include "diloco/cuda/mixing.cuh"
#include "diloco/cuda/nesterov.cuh"

namespace gpu_bench {

namespace {

using diloco::codec_id;
namespace dc = diloco::cuda;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__global__ void fill(float* x, std::size_t n, float scale, float offset) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    x[i] = offset + scale * float((i * 2654435761u) % 1000u) / 1000.0f;
}

/// Buffers of `n` values, filled with small distinct values.
dc::device_buffer<float> values(std::size_t n, float scale, float offset) {
  dc::device_buffer<float> b(n);
  fill<<<1024, 256>>>(b.data(), n, scale, offset);
  check(cudaGetLastError(), "fill");
  return b;
}

/// Median seconds of `repeats` runs of `run` on `stream`, after one warm-up.
double median_seconds(const std::function<void()>& run, cudaStream_t stream, int repeats) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  run();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    run();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(double(ms) / 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

const char* name(codec_id f) {
  switch (f) {
    case codec_id::f32: return "f32";
    case codec_id::bf16: return "bf16";
    case codec_id::int8: return "int8";
    case codec_id::fp8: return "fp8";
    case codec_id::int4: return "int4";
    default: return "?";
  }
}

}  // namespace

std::string describe_device() {
  int device = 0, count = 0, driver = 0, runtime = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) throw std::runtime_error("no CUDA device");
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  return std::string(p.name) + " (compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
         ", " + std::to_string(p.totalGlobalMem >> 30) + " GiB), driver " + std::to_string(driver / 1000) + "." +
         std::to_string(driver % 1000 / 10) + ", runtime " + std::to_string(runtime / 1000) + "." +
         std::to_string(runtime % 1000 / 10);
}

std::vector<pass_time> time_passes(std::size_t n, int repeats) {
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  auto base = values(n, 1.0f, 0.0f), theta = values(n, 1.0f, 0.001f), residual = values(n, 0.001f, 0.0f);
  auto m = values(n, 0.01f, 0.0f), v = values(n, 0.01f, 0.001f), g = values(n, 0.1f, -0.05f);
  // The copy's buffers: as many bytes as the largest pass moves, halved.
  dc::device_buffer<std::byte> copy_from(n * 16), copy_to(n * 16);
  dc::device_buffer<std::byte> code(diloco::codec::encoded_size(codec_id::f32, n, 0));
  dc::device_buffer<unsigned> refused(1);
  check(cudaMemsetAsync(refused.data(), 0, sizeof(unsigned), stream), "cudaMemsetAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  std::vector<pass_time> out;
  const auto measure = [&](pass_time t, const std::function<void()>& run) {
    t.seconds = median_seconds(run, stream, repeats);
    const auto half = static_cast<std::size_t>(t.bytes / 2);
    t.copy_seconds = median_seconds(
        [&] {
          check(cudaMemcpyAsync(copy_to.data(), copy_from.data(), half, cudaMemcpyDeviceToDevice, stream), "copy");
        },
        stream, repeats);
    out.push_back(t);
  };
  const double fp32 = double(n) * 4;

  // The learner's send: Δ = (base − θ) + residual encoded, the residual
  // rewritten (error feedback): reads 3 values, writes the code and 1 value.
  struct format {
    codec_id codec;
    std::size_t block;
  };
  for (const format f : {format{codec_id::f32, 0}, format{codec_id::bf16, 0}, format{codec_id::int8, 32},
                         format{codec_id::int8, 128}, format{codec_id::int8, 1024}, format{codec_id::fp8, 128},
                         format{codec_id::int4, 32}, format{codec_id::int4, 128}}) {
    const std::size_t bytes = diloco::codec::encoded_size(f.codec, n, f.block);
    const std::span<std::byte> code_bytes(code.data(), bytes);
    measure({"encode", name(f.codec), f.block, 4 * fp32 + double(bytes)}, [&] {
      check(dc::encode_delta(f.codec, f.block, std::span<const float>(base.span()),
                             std::span<const float>(theta.span()), residual.span(), code_bytes, refused.data(), stream),
            "encode_delta");
    });
    // The syncer's merge: acc += w · decode(code).
    measure({"decode_accumulate", name(f.codec), f.block, 2 * fp32 + double(bytes)}, [&] {
      check(dc::decode_accumulate(f.codec, f.block, std::span<const std::byte>(code_bytes), 0.5f, m.span(), stream),
            "decode_accumulate");
    });
  }
  unsigned refused_host = 0;
  check(cudaMemcpy(&refused_host, refused.data(), sizeof(unsigned), cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (refused_host != 0) throw std::runtime_error("an encoding refused its (finite) input");

  measure({"nesterov", "", 0, 5 * fp32}, [&] {
    check(dc::nesterov_step(diloco::outer::nesterov_element<float>{0.7f, 0.9f}, base.span(), m.span(),
                            std::span<const float>(g.span()), stream),
          "nesterov_step");
  });
  const auto adamw = diloco::inner::adamw_element<float>::at_step(diloco::inner::adamw_options{}, 10);
  measure({"adamw", "", 0, 7 * fp32}, [&] {
    check(dc::adamw_step(adamw, theta.span(), m.span(), v.span(), std::span<const float>(g.span()), stream),
          "adamw_step");
  });
  measure({"mix", "", 0, 3 * fp32}, [&] {
    check(dc::mix(diloco::mixing_element<float>{0.5f}, theta.span(), std::span<const float>(base.span()), stream),
          "mix");
  });
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaStreamDestroy(stream);
  return out;
}

}  // namespace gpu_bench
