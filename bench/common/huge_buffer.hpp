// Benchmark buffers on huge pages: allocated once, 2 MiB aligned, advised
// MADV_HUGEPAGE before the first touch and written once, so that no page
// fault is timed (a fresh 4 KiB page costs ~12 µs on the project's machines).
#pragma once

#include <sys/mman.h>

#include <cassert>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <span>
#include <string>
#include <system_error>

namespace bench {

inline constexpr std::size_t huge_page = std::size_t{2} << 20;
/// MADV_COLLAPSE (Linux 6.1); glibc 2.36's headers do not define it yet.
inline constexpr int madv_collapse = 25;

inline std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }
inline std::size_t round_down(std::size_t x, std::size_t to) { return x / to * to; }

/// `bytes` bytes in their own anonymous mapping, 2 MiB aligned, advised
/// MADV_HUGEPAGE before the first touch, then zeroed once.
class huge_buffer {
 public:
  explicit huge_buffer(std::size_t bytes) : bytes_(round_up(bytes, huge_page)), size_(bytes) {
    map_bytes_ = bytes_ + huge_page;
    map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map_ == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap");
    data_ = reinterpret_cast<std::byte*>(round_up(reinterpret_cast<std::uintptr_t>(map_), huge_page));
    madvise(data_, bytes_, MADV_HUGEPAGE);  // best effort: THP may be off
    std::memset(data_, 0, size_);
  }
  ~huge_buffer() { munmap(map_, map_bytes_); }
  huge_buffer(const huge_buffer&) = delete;
  huge_buffer& operator=(const huge_buffer&) = delete;

  /// The first `n` elements of type `T`.
  template <class T>
  std::span<T> first(std::size_t n) const {
    assert(n * sizeof(T) <= size_);
    return {reinterpret_cast<T*>(data_), n};
  }

 private:
  std::size_t bytes_ = 0;
  std::size_t size_ = 0;
  std::size_t map_bytes_ = 0;
  void* map_ = nullptr;
  std::byte* data_ = nullptr;
};

/// Asks the kernel to back the 2 MiB pages inside [p, p + bytes) with huge
/// pages now (MADV_COLLAPSE). Used on buffers the library allocates itself
/// (an optimizer's momentum), which the benchmark cannot place.
inline bool collapse_to_huge_pages(const void* p, std::size_t bytes) {
  const auto begin = round_up(reinterpret_cast<std::uintptr_t>(p), huge_page);
  const auto end = round_down(reinterpret_cast<std::uintptr_t>(p) + bytes, huge_page);
  if (end <= begin) return false;
  auto* start = reinterpret_cast<void*>(begin);
  madvise(start, end - begin, MADV_HUGEPAGE);
  return madvise(start, end - begin, madv_collapse) == 0;
}

/// AnonHugePages of this process, in bytes (0 where /proc is unreadable).
inline std::size_t anon_huge_bytes() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  std::size_t kib = 0;
  while (in >> key) {
    if (key == "AnonHugePages:" && in >> kib) return kib * 1024;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

}  // namespace bench
