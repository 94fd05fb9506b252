// Memory the host cannot touch, standing in for a GPU's in tests that run
// without one (tests/runtime/memory_space.cpp).
//
// An `arena` maps each buffer on pages of its own and keeps them PROT_NONE,
// except while an `arena::opening` is alive: inside the memory space's
// passes, the model's forward and backward pass and the inner step, as
// device memory is reachable only inside kernels. A learner that read or
// wrote a fenced model's parameters, or its own bases, anywhere but through
// the memory space would take a SIGSEGV.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <ostream>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <diloco/diloco.hpp>

#include "support/toy_model.hpp"

namespace fenced {

/// The fenced mappings of one "device".
class arena {
 public:
  arena() = default;
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;
  ~arena() {
    for (const auto& [p, bytes] : maps_) munmap(p, bytes);
  }

  /// n zeroed values of T on pages of their own, fenced.
  template <class T>
  T* map(std::size_t n) {
    const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
    const std::size_t bytes = std::max<std::size_t>(1, (n * sizeof(T) + page - 1) / page) * page;
    void* p = mmap(nullptr, bytes, open_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("fenced::arena: mmap failed");
    maps_.emplace_back(p, bytes);
    return static_cast<T*>(p);
  }

  void unmap(const void* p) {
    const auto it = std::find_if(maps_.begin(), maps_.end(), [p](const auto& m) { return m.first == p; });
    if (it == maps_.end()) return;
    munmap(it->first, it->second);
    maps_.erase(it);
  }

  /// The arena's memory readable and writable while it lives (nests).
  class opening {
   public:
    explicit opening(arena& a) : a_(a) {
      if (a_.open_++ == 0) a_.protect(PROT_READ | PROT_WRITE);
    }
    opening(const opening&) = delete;
    opening& operator=(const opening&) = delete;
    ~opening() {
      if (--a_.open_ == 0) a_.protect(PROT_NONE);
    }

   private:
    arena& a_;
  };
  opening open() { return opening(*this); }

  /// How many times the arena was opened: the passes done "on the device".
  std::uint64_t openings() const noexcept { return openings_; }

 private:
  void protect(int how) {
    if (how != PROT_NONE) ++openings_;
    for (const auto& [p, bytes] : maps_)
      if (mprotect(p, bytes, how) != 0) throw std::runtime_error("fenced::arena: mprotect failed");
  }

  std::vector<std::pair<void*, std::size_t>> maps_;
  int open_ = 0;
  std::uint64_t openings_ = 0;
};

/// n values of T in an arena: a memory space's buffer.
template <class T>
class buffer {
 public:
  buffer() = default;
  buffer(arena& a, std::size_t n) : arena_(&a), data_(a.map<T>(n)), size_(n) {}
  buffer(buffer&& o) noexcept
      : arena_(std::exchange(o.arena_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      arena_ = std::exchange(o.arena_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<T> span() noexcept { return {data_, size_}; }

 private:
  void release() {
    if (arena_) arena_->unmap(data_);
    arena_ = nullptr;
  }
  arena* arena_ = nullptr;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// The memory space of fenced models: each pass opens the arena, then does
/// what `host_memory` does.
class memory {
 public:
  template <class T>
  using buffer = fenced::buffer<T>;

  explicit memory(arena& a) : arena_(a) {}

  template <class T>
  buffer<T> allocate(std::size_t n) {
    return buffer<T>(arena_, n);
  }

  template <diloco::scalar T>
  bool encode_delta(diloco::codec_id c, std::uint32_t block, std::span<const diloco::fragment_slice> slices,
                    std::span<const T> theta, const buffer<T>& base, buffer<T>* residual, std::span<std::byte> out) {
    ++passes;
    auto open = arena_.open();
    return diloco::host_memory{}.encode_delta(c, block, slices, theta, base, residual, out);
  }
  template <diloco::scalar T>
  void adopt(diloco::codec_id c, std::uint32_t block, std::span<const std::byte> payload,
             std::span<const diloco::fragment_slice> slices, std::span<T> theta, buffer<T>& base, diloco::adoption how,
             T alpha) {
    ++passes;
    auto open = arena_.open();
    diloco::host_memory{}.adopt(c, block, payload, slices, theta, base, how, alpha);
  }
  template <diloco::scalar T>
  void scatter(std::span<const diloco::fragment_slice> slices, const buffer<T>& base, std::span<T> theta) {
    ++passes;
    auto open = arena_.open();
    diloco::host_memory{}.scatter(slices, base, theta);
  }
  template <diloco::scalar T>
  void gather(std::span<const diloco::fragment_slice> slices, std::span<const T> theta, std::span<T> host) {
    ++passes;
    auto open = arena_.open();
    diloco::host_memory{}.gather(slices, theta, host);
  }
  template <diloco::scalar T>
  void pack(std::span<const diloco::fragment_slice> slices, std::span<const T> theta, buffer<T>& base) {
    ++passes;
    auto open = arena_.open();
    diloco::host_memory{}.pack(slices, theta, base);
  }
  template <diloco::scalar T>
  void read(std::span<const T> from, std::span<T> host) {
    ++passes;
    auto open = arena_.open();
    std::copy(from.begin(), from.end(), host.begin());
  }
  template <diloco::scalar T>
  void write(std::span<const T> host, std::span<T> to) {
    ++passes;
    auto open = arena_.open();
    std::copy(host.begin(), host.end(), to.begin());
  }

  std::uint64_t passes = 0;  ///< calls of the passes above

 private:
  arena& arena_;
};

static_assert(diloco::check_memory_space<memory, float>() && diloco::memory_space<memory, float>);

/// toy::linear_regression with its parameters and gradients fenced: the
/// forward and backward pass runs with the arena open, on a host copy.
template <class T>
class linear_regression {
 public:
  using scalar_type = T;
  using batch_type = toy::batch<T>;

  linear_regression(arena& a, std::size_t features, std::uint64_t seed)
      : arena_(a),
        memory_(a),
        host_(features, seed),
        params_(a, host_.parameters().size()),
        grads_(a, host_.parameters().size()) {
    auto open = arena_.open();
    std::copy(host_.parameters().begin(), host_.parameters().end(), params_.data());
  }

  const diloco::parameter_layout& layout() const { return host_.layout(); }
  std::span<T> parameters() { return params_.span(); }
  std::span<const T> gradients() const { return {grads_.data(), grads_.size()}; }
  /// Writable where they are, as a GPU model's (a learner unit averages
  /// them in place).
  std::span<T> mutable_gradients() { return grads_.span(); }
  fenced::memory& memory() { return memory_; }
  arena& fence() noexcept { return arena_; }

  diloco::step_stats compute_gradients(const batch_type& b) {
    auto open = arena_.open();
    std::copy(params_.data(), params_.data() + params_.size(), host_.parameters().begin());
    const auto stats = host_.compute_gradients(b);
    std::copy(host_.gradients().begin(), host_.gradients().end(), grads_.data());
    return stats;
  }

  /// The parameters, read with the arena open (for the test's checks).
  std::vector<T> values() {
    auto open = arena_.open();
    return {params_.data(), params_.data() + params_.size()};
  }

 private:
  arena& arena_;
  fenced::memory memory_;
  toy::linear_regression<T> host_;
  buffer<T> params_, grads_;
};

/// An inner step run on fenced memory: the arena open around each step.
template <class Inner>
class inner_step {
 public:
  using scalar_type = typename Inner::scalar_type;
  using options_type = typename Inner::options_type;

  inner_step(arena& a, Inner inner) : arena_(&a), inner_(std::move(inner)) {}

  void step(std::span<scalar_type> params, std::span<const scalar_type> grads) {
    auto open = arena_->open();
    inner_.step(params, grads);
  }
  options_type& options() { return inner_.options(); }
  void save(std::ostream& out) const { inner_.save(out); }
  void load(std::istream& in) { inner_.load(in); }

 private:
  arena* arena_;
  Inner inner_;
};

}  // namespace fenced
