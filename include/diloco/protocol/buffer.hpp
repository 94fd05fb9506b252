// Pooled, aligned byte buffers for message payloads.
//
// Allocating and freeing large buffers per message is ten times slower than
// reusing them on machines where a fresh page costs ~12 µs to fault in, so
// payloads come from a pool and go back to it when the last owner drops them,
// on whatever thread that happens.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace diloco {

namespace detail {

inline constexpr std::size_t buffer_alignment = 64;
inline constexpr std::size_t huge_page = std::size_t{2} << 20;

struct block {
  std::byte* data = nullptr;
  std::size_t capacity = 0;
};

/// Blocks of 2 MiB or more are 2 MiB aligned (huge pages); the rest 64 bytes.
/// Allocation and release derive the alignment from the capacity alike.
inline std::align_val_t alignment_for(std::size_t capacity) noexcept {
  return std::align_val_t{capacity >= huge_page ? huge_page : buffer_alignment};
}

/// The capacity of a block allocated for `bytes`: whole pages, or whole huge
/// pages from 2 MiB on.
inline std::size_t capacity_for(std::size_t bytes) noexcept {
  const std::size_t granule = bytes >= huge_page ? huge_page : 4096;
  return (bytes + granule - 1) / granule * granule;
}

inline block allocate_block(std::size_t bytes) {
  const std::size_t capacity = capacity_for(bytes);
  auto* p = static_cast<std::byte*>(::operator new(capacity, alignment_for(capacity)));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (capacity >= huge_page) ::madvise(p, capacity, MADV_HUGEPAGE);
#endif
  return {p, capacity};
}

inline void free_block(block b) noexcept {
  if (b.data) ::operator delete(b.data, alignment_for(b.capacity));
}

struct pool_state {
  std::mutex mutex;
  std::vector<block> free;
  std::size_t max_cached = 0;
  std::size_t max_cached_bytes = 0;
  std::size_t cached_bytes = 0;
  std::uint64_t allocations = 0;
  std::uint64_t reuses = 0;

  ~pool_state() {
    for (auto b : free) free_block(b);
  }

  void give_back(block b) noexcept {
    {
      std::lock_guard lock(mutex);
      if (free.size() < max_cached && cached_bytes + b.capacity <= max_cached_bytes) {
        free.push_back(b);
        cached_bytes += b.capacity;
        return;
      }
    }
    free_block(b);
  }
};

}  // namespace detail

/// A move-only byte buffer, 64-byte aligned (2 MiB aligned with transparent
/// huge pages requested when it is at least 2 MiB). If it came from a
/// `buffer_pool` it returns there on destruction, from any thread.
class byte_buffer {
 public:
  byte_buffer() = default;

  /// An unpooled buffer of `bytes` bytes (uninitialized).
  explicit byte_buffer(std::size_t bytes)
      : block_(bytes ? detail::allocate_block(bytes) : detail::block{}), size_(bytes) {}

  byte_buffer(byte_buffer&& other) noexcept
      : block_(std::exchange(other.block_, {})), size_(std::exchange(other.size_, 0)), home_(std::move(other.home_)) {}

  byte_buffer& operator=(byte_buffer&& other) noexcept {
    if (this != &other) {
      release();
      block_ = std::exchange(other.block_, {});
      size_ = std::exchange(other.size_, 0);
      home_ = std::move(other.home_);
    }
    return *this;
  }

  byte_buffer(const byte_buffer&) = delete;
  byte_buffer& operator=(const byte_buffer&) = delete;
  ~byte_buffer() { release(); }

  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return block_.capacity; }
  bool empty() const noexcept { return size_ == 0; }
  std::byte* data() noexcept { return block_.data; }
  const std::byte* data() const noexcept { return block_.data; }
  std::span<std::byte> bytes() noexcept { return {block_.data, size_}; }
  std::span<const std::byte> bytes() const noexcept { return {block_.data, size_}; }

  /// Sets the size to `bytes`, at most `capacity()`; the contents stay (the
  /// bytes past the old size are unspecified). Allocates nothing.
  void resize(std::size_t bytes) noexcept {
    assert(bytes <= block_.capacity && "byte_buffer::resize: past the capacity");
    size_ = bytes;
  }

  /// The payload as `size() / sizeof(T)` elements of `T`.
  template <class T>
  std::span<T> as() noexcept {
    return {reinterpret_cast<T*>(block_.data), size_ / sizeof(T)};
  }
  template <class T>
  std::span<const T> as() const noexcept {
    return {reinterpret_cast<const T*>(block_.data), size_ / sizeof(T)};
  }

 private:
  friend class buffer_pool;
  byte_buffer(detail::block b, std::size_t size, std::shared_ptr<detail::pool_state> home)
      : block_(b), size_(size), home_(std::move(home)) {}

  void release() noexcept {
    if (!block_.data) return;
    if (home_)
      home_->give_back(block_);
    else
      detail::free_block(block_);
    block_ = {};
    size_ = 0;
    home_.reset();
  }

  detail::block block_{};
  std::size_t size_ = 0;
  std::shared_ptr<detail::pool_state> home_;
};

/// A thread-safe cache of payload blocks. `acquire` hands out the smallest
/// cached block that fits (best fit) or allocates one; at most
/// `max_cached_blocks` blocks and `max_cached_bytes` bytes wait in the cache,
/// the rest are freed. Buffers may outlive the pool.
class buffer_pool {
 public:
  explicit buffer_pool(std::size_t max_cached_blocks = 64, std::size_t max_cached_bytes = std::size_t{1} << 30)
      : state_(std::make_shared<detail::pool_state>()) {
    state_->max_cached = max_cached_blocks;
    state_->max_cached_bytes = max_cached_bytes;
  }

  /// A buffer of `bytes` bytes with unspecified contents.
  byte_buffer acquire(std::size_t bytes) { return acquire(bytes, std::numeric_limits<std::size_t>::max()); }

  /// A buffer of `bytes` bytes with unspecified contents, cached only if
  /// its capacity is at most `max_capacity` (a fresh one otherwise), so that
  /// a small request does not tie up a large block.
  byte_buffer acquire(std::size_t bytes, std::size_t max_capacity) {
    if (bytes == 0) return {};
    {
      std::lock_guard lock(state_->mutex);
      if (auto b = take_cached(bytes, max_capacity); b.data()) return b;
      ++state_->allocations;
    }
    return byte_buffer(detail::allocate_block(bytes), bytes, state_);
  }

  /// A cached buffer of `bytes` bytes whose capacity is at most
  /// `max_capacity`, or an empty one if none is cached: never allocates (a
  /// cached block's pages are already resident). Not counted as an
  /// allocation when empty.
  byte_buffer acquire_cached(std::size_t bytes, std::size_t max_capacity) {
    if (bytes == 0 || bytes > max_capacity) return {};
    std::lock_guard lock(state_->mutex);
    return take_cached(bytes, max_capacity);
  }

  /// Blocks allocated so far, and acquisitions served from the cache.
  std::uint64_t allocations() const {
    std::lock_guard lock(state_->mutex);
    return state_->allocations;
  }
  std::uint64_t reuses() const {
    std::lock_guard lock(state_->mutex);
    return state_->reuses;
  }

 private:
  /// The cached block that fits `bytes` best, if its capacity is at most
  /// `max_capacity`. Under the pool's mutex.
  byte_buffer take_cached(std::size_t bytes, std::size_t max_capacity) {
    auto& free = state_->free;
    // A block of the capacity a fresh one would have fits best: stop there
    // (a pool of a few hundred equal blocks is searched in one step).
    const std::size_t exact = detail::capacity_for(bytes);
    std::size_t best = free.size();
    for (std::size_t i = 0; i < free.size(); ++i) {
      if (free[i].capacity < bytes || (best != free.size() && free[i].capacity >= free[best].capacity)) continue;
      best = i;
      if (free[i].capacity == exact) break;
    }
    if (best == free.size() || free[best].capacity > max_capacity) return {};
    const auto b = free[best];
    free[best] = free.back();
    free.pop_back();
    state_->cached_bytes -= b.capacity;
    ++state_->reuses;
    return byte_buffer(b, bytes, state_);
  }

  std::shared_ptr<detail::pool_state> state_;
};

}  // namespace diloco
