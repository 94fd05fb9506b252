// The reference: STREAM triad, on one thread or several.
#include "codecs.hpp"
#include "diloco/detail/parallel.hpp"

namespace bench {

void triad(std::span<float> a, std::span<const float> b, std::span<const float> c, float s, unsigned threads) {
  const std::size_t n = a.size();
  constexpr std::size_t chunk = 4096;  // as the library's passes: whole pages, at least 2^16 values a thread
  diloco::detail::parallel_for((n + chunk - 1) / chunk, diloco::detail::threads_for(n, threads, std::size_t{1} << 16),
                               [&](std::size_t first, std::size_t last) {
                                 float* __restrict pa = a.data();
                                 const float* __restrict pb = b.data();
                                 const float* __restrict pc = c.data();
                                 const std::size_t end = last * chunk < n ? last * chunk : n;
                                 for (std::size_t i = first * chunk; i < end; ++i) pa[i] = pb[i] + s * pc[i];
                               });
}

}  // namespace bench
