// Binary (de)serialization of saved state (optimizers, the syncer, a
// checkpoint): little-endian PODs, length-prefixed arrays and versioned tags,
// with every read bounds-checked. Public, so that a user's own outer optimizer
// or model state can be saved the same way.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <istream>
#include <limits>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace diloco {

/// Thrown when serialized state is truncated or inconsistent.
struct corrupt_state : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace diloco

namespace diloco::serial {

static_assert(std::endian::native == std::endian::little,
              "diloco's state files are little-endian; big-endian hosts are not supported yet");

template <class T>
requires std::is_trivially_copyable_v<T>
void write_pod(std::ostream& out, const T& value) { out.write(reinterpret_cast<const char*>(&value), sizeof(T)); }

template <class T>
requires std::is_trivially_copyable_v<T> T read_pod(std::istream& in, const char* what) {
  T value{};
  if (!in.read(reinterpret_cast<char*>(&value), sizeof(T)))
    throw corrupt_state(std::string("diloco: truncated state while reading ") + what);
  return value;
}

/// u64 count, then the values in one write.
template <class T>
requires std::is_trivially_copyable_v<T>
void write_array(std::ostream& out, std::span<const T> values) {
  write_pod<std::uint64_t>(out, values.size());
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
}
template <class T>
void write_array(std::ostream& out, const std::vector<T>& values) {
  write_array(out, std::span<const T>(values));
}

/// Reads an array written by `write_array`, refusing more than `max_elements`.
/// Memory grows with the data actually read, so a truncated stream that
/// announces a huge length fails as `corrupt_state`, not as an allocation.
template <class T>
std::vector<T> read_array(std::istream& in, std::uint64_t max_elements, const char* what) {
  const auto n = read_pod<std::uint64_t>(in, what);
  if (n > max_elements)
    throw corrupt_state(std::string("diloco: implausible length ") + std::to_string(n) + " for " + what);
  constexpr std::uint64_t chunk = std::uint64_t{1} << 20;
  std::vector<T> values;
  for (std::uint64_t done = 0; done < n;) {
    const std::uint64_t take = std::min(chunk, n - done);
    values.resize(static_cast<std::size_t>(done + take));
    if (!in.read(reinterpret_cast<char*>(values.data() + done), static_cast<std::streamsize>(take * sizeof(T))))
      throw corrupt_state(std::string("diloco: truncated state while reading ") + what);
    done += take;
  }
  return values;
}

/// Writes and checks a four-character tag and a format version at the start of
/// a state block, so a block of one optimizer is never loaded into another.
inline void write_tag(std::ostream& out, const char (&tag)[5], std::uint32_t version) {
  out.write(tag, 4);
  write_pod(out, version);
}

inline void expect_tag(std::istream& in, const char (&tag)[5], std::uint32_t version) {
  char got[4] = {};
  if (!in.read(got, 4)) throw corrupt_state(std::string("diloco: truncated state, expected tag ") + tag);
  if (std::memcmp(got, tag, 4) != 0) throw corrupt_state(std::string("diloco: state tag mismatch, expected ") + tag);
  const auto v = read_pod<std::uint32_t>(in, "format version");
  if (v != version)
    throw corrupt_state(std::string("diloco: unsupported state version ") + std::to_string(v) + " for " + tag);
}

inline constexpr std::uint64_t max_state_elements = std::uint64_t{1} << 40;

}  // namespace diloco::serial
