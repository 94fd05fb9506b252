// The references: STREAM triad and memcpy.
#include <cstring>

#include "outer_step.hpp"

namespace bench {

void triad(std::span<float> a, std::span<const float> b, std::span<const float> c, float s) {
  float* __restrict pa = a.data();
  const float* __restrict pb = b.data();
  const float* __restrict pc = c.data();
  const std::size_t n = a.size();
  for (std::size_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
}

void copy(std::span<float> dst, std::span<const float> src) { std::memcpy(dst.data(), src.data(), src.size_bytes()); }

}  // namespace bench
