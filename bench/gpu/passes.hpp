// The GPU passes of a learner and a syncer, timed on the device against a
// device-to-device copy of the same bytes (passes.cu); main.cpp prints them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gpu_bench {

/// One fused pass over `elements` fp32 values.
struct pass_time {
  std::string pass;   ///< encode, decode_accumulate, nesterov, adamw, mix
  std::string codec;  ///< the codec, for encode and decode; empty otherwise
  std::size_t block = 0;
  double bytes = 0;         ///< moved per run: reads plus writes
  double seconds = 0;       ///< median over the repetitions
  double copy_seconds = 0;  ///< a device-to-device copy moving as many bytes, median, same run
};

/// The device and driver, as "name (compute capability X.Y), driver D,
/// runtime R"; throws `std::runtime_error` if there is no usable GPU.
std::string describe_device();

/// Times every pass `repeats` times over `elements` values, each run
/// bracketed by CUDA events, alternating with the reference copy (after
/// one warm-up run of each). Throws `std::runtime_error` on a CUDA failure
/// or an encoding that refused its input. Correctness is the CUDA tests'
/// (tests/cuda): this only measures.
std::vector<pass_time> time_passes(std::size_t elements, int repeats);

}  // namespace gpu_bench
