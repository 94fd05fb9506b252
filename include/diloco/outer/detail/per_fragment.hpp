// Per-fragment optimizer state, created when a fragment is first stepped.
#pragma once

#include <cassert>
#include <concepts>
#include <cstdint>
#include <istream>
#include <ostream>
#include <vector>

#include "diloco/concepts/checkpointable.hpp"
#include "diloco/serialize.hpp"

namespace diloco::outer::detail {

/// Holds one `State` per fragment index, default-constructed on first access.
template <class State>
requires checkpointable<State> && std::default_initializable<State>
class per_fragment {
 public:
  State& operator[](std::uint32_t fragment) {
    if (fragment >= states_.size()) states_.resize(fragment + 1);
    return states_[fragment];
  }
  std::size_t size() const noexcept { return states_.size(); }

  /// Forgets the state of `fragment`: its next step starts as its first did.
  void reset(std::uint32_t fragment) {
    if (fragment < states_.size()) states_[fragment] = State{};
  }

  /// The state of `fragment`, or null if it has none yet; creates nothing.
  const State* find(std::uint32_t fragment) const noexcept {
    return fragment < states_.size() ? &states_[fragment] : nullptr;
  }

  void save(std::ostream& out) const {
    diloco::serial::write_pod<std::uint64_t>(out, states_.size());
    for (const auto& s : states_) s.save(out);
  }

  /// All or nothing: on a corrupt block the current states are kept.
  void load(std::istream& in) {
    const auto n = diloco::serial::read_pod<std::uint64_t>(in, "fragment count");
    if (n > (std::uint64_t{1} << 24)) throw diloco::corrupt_state("diloco: implausible fragment count");
    std::vector<State> loaded(static_cast<std::size_t>(n));
    for (auto& s : loaded) s.load(in);
    states_ = std::move(loaded);
  }

 private:
  std::vector<State> states_;
};

/// A buffer that is empty until the fragment's first step sizes it.
template <class T>
struct buffer_state {
  std::vector<T> values;

  std::vector<T>& sized(std::size_t n) {
    if (values.empty()) values.assign(n, T(0));
    assert(values.size() == n && "fragment size changed between outer steps");
    return values;
  }
  void save(std::ostream& out) const { diloco::serial::write_array(out, values); }
  void load(std::istream& in) {
    values = diloco::serial::read_array<T>(in, diloco::serial::max_state_elements, "outer optimizer buffer");
  }
};

}  // namespace diloco::outer::detail
