// A software prefetch that is only ever a hint.
#pragma once

#include <cstddef>
#include <cstdint>

namespace diloco::detail {

/// Asks the cache for the line holding byte `offset` of the stream that
/// starts at `p`, to read it (`Write` false) or to write it. A hint: no
/// effect on any result, and never a fault, even past the end of the
/// stream's memory; the address is formed as an integer, so nothing past
/// the end is ever a pointer. Nothing without g++ or clang.
template <bool Write = false>
inline void prefetch_line(const void* p, std::size_t offset) noexcept {
#if defined(__GNUC__)
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + offset), Write ? 1 : 0, 3);
#else
  (void)p, (void)offset;
#endif
}

}  // namespace diloco::detail
