// CURVE key pairs for diloco::zeromq: made by libzmq, and written to and read
// from key files (`public-key = ...`, `secret-key = ...`).
#pragma once

#include <zmq.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>

#include "diloco/transport/zeromq/learner_ids.hpp"

namespace diloco::zeromq {

/// A CURVE key pair (RFC 26/CurveZMQ), each key 40 characters of Z85.
struct curve_keypair {
  std::string public_key;
  std::string secret_key;
};

/// A fresh key pair from libzmq (built with libsodium in Debian). Throws
/// `std::runtime_error` if libzmq has no CURVE support.
inline curve_keypair generate_keypair() {
  char pub[41] = {}, sec[41] = {};
  if (zmq_curve_keypair(pub, sec) != 0)
    throw std::runtime_error("diloco::zeromq: libzmq has no CURVE support (" + std::string(zmq_strerror(errno)) + ")");
  return {pub, sec};
}

namespace detail {

/// The 32 key bytes of a Z85 key, or nothing if it is not one.
inline std::optional<std::array<std::uint8_t, 32>> decode_key(const std::string& z85) {
  std::array<std::uint8_t, 32> key{};
  if (z85.size() != 40 || zmq_z85_decode(key.data(), z85.c_str()) == nullptr) return std::nullopt;
  return key;
}

/// `name = value` lines of a key file; lines starting with `#` are comments
/// (only whole lines: `#` and `=` are Z85 characters).
inline std::optional<std::string> key_field(const std::filesystem::path& path, const std::string& name) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("diloco::zeromq: cannot read key file " + path.string());
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    if (eq != std::string::npos && trim(line.substr(0, eq)) == name) return trim(line.substr(eq + 1));
  }
  return std::nullopt;
}

inline std::string checked_key(const std::filesystem::path& path, const std::string& name) {
  const auto value = key_field(path, name);
  if (!value || !decode_key(*value))
    throw std::runtime_error("diloco::zeromq: " + path.string() + " has no valid '" + name + " = <40 Z85 characters>'");
  return *value;
}

}  // namespace detail

/// Writes `keys` as two files: `secret_file` (both keys, mode 0600) and
/// `public_file` (the public key, to hand to the other side). With
/// `learners`, the public file also says which learner ids the key may speak
/// for (a `learners = ...` line), which makes it an allow-list entry for
/// `load_allow_list`. Throws `std::invalid_argument` for a set with no id.
inline void save_keypair(const curve_keypair& keys, const std::filesystem::path& secret_file,
                         const std::filesystem::path& public_file,
                         const std::optional<learner_ids>& learners = std::nullopt) {
  if (learners && learners->empty())
    throw std::invalid_argument("diloco::zeromq: a key for no learner id at all would admit nobody");
  {
    std::ofstream out(secret_file, std::ios::trunc);
    out << "# diloco CURVE key pair: keep this file secret\npublic-key = " << keys.public_key
        << "\nsecret-key = " << keys.secret_key << "\n";
    if (!out) throw std::runtime_error("diloco::zeromq: cannot write " + secret_file.string());
  }
  std::filesystem::permissions(secret_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::replace);
  std::ofstream out(public_file, std::ios::trunc);
  out << "# diloco CURVE public key\npublic-key = " << keys.public_key << "\n";
  if (learners) out << "learners = " << learners->to_string() << "\n";
  if (!out) throw std::runtime_error("diloco::zeromq: cannot write " + public_file.string());
}

/// Reads a key pair written by `save_keypair`; throws with the file's name
/// if it is missing or malformed.
inline curve_keypair load_keypair(const std::filesystem::path& secret_file) {
  return {detail::checked_key(secret_file, "public-key"), detail::checked_key(secret_file, "secret-key")};
}

/// Reads the public key of a public (or secret) key file.
inline std::string load_public_key(const std::filesystem::path& file) {
  return detail::checked_key(file, "public-key");
}

}  // namespace diloco::zeromq
