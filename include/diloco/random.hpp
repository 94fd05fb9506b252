// A small, fully specified pseudo-random generator, so simulated runs, fault
// schedules and examples give the same numbers with every standard library.
#pragma once

#include <cstdint>

namespace diloco {

/// SplitMix64 (Steele, Lea & Flood 2014; constants as in Vigna's reference).
class splitmix64 {
 public:
  explicit splitmix64(std::uint64_t seed) noexcept : state_(seed) {}

  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, n), n > 0 (multiply-shift; bias below 2^-32 for n < 2^32).
  std::uint64_t below(std::uint64_t n) noexcept {
    __extension__ using u128 = unsigned __int128;
    return static_cast<std::uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }

 private:
  std::uint64_t state_;
};

}  // namespace diloco
