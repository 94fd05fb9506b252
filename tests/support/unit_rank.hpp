// A rank's loop in the learner-unit tests: step the unit on batches from a
// teacher, then finish it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

namespace unit_test_support {

/// Steps `unit` (a `diloco::unit_learner` over a blocking transport)
/// `steps` times on batches of `batch` from `data` (`next(n)`), 1 ms apart,
/// then finishes it. Returns what stopped the unit, or "".
template <class Unit, class Data>
std::string train_then_finish(Unit& unit, Data& data, std::uint64_t steps, std::size_t batch) {
  for (std::uint64_t s = 0; s < steps; ++s) {
    if (auto result = unit.step(data.next(batch)); !result) return result.error().message();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  unit.finish();
  return unit.error() ? unit.error().message() : std::string();
}

}  // namespace unit_test_support
