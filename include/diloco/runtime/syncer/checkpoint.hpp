// The body of a syncer checkpoint: the model's layout description followed by
// the syncer's saved state, so that a restarted syncer needs no knowledge of
// the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diloco/concepts/merge_policy.hpp"
#include "diloco/concepts/outer_optimizer.hpp"
#include "diloco/concepts/transport.hpp"
#include "diloco/params/layout.hpp"
#include "diloco/protocol/wire.hpp"
#include "diloco/runtime/syncer.hpp"
#include "diloco/serialize.hpp"

namespace diloco {

/// A checkpoint body read back.
struct syncer_checkpoint {
  parameter_layout layout;  ///< the model: construct the syncer with it
  std::string state;        ///< what `syncer::save` wrote: hand it to `syncer::load`
};

/// The checkpoint body of syncer `s` (little-endian): u64 length of the
/// layout description, the description (`wire::encode_layout`, the `layout`
/// message's payload), then `s.save`. Store it with `checkpoint_store`.
/// Cost: one copy of the parameters and the optimizer state.
template <outer_optimizer OuterOptimizer, merge_policy<typename OuterOptimizer::scalar_type> MergePolicy,
          transport Transport>
std::string checkpoint_body(const syncer<OuterOptimizer, MergePolicy, Transport>& s) {
  std::ostringstream out;
  const auto description = wire::encode_layout(s.layout());
  serial::write_pod<std::uint64_t>(out, description.size());
  out.write(reinterpret_cast<const char*>(description.data()), static_cast<std::streamsize>(description.size()));
  s.save(out);
  return out.str();
}

/// Splits a body written by `checkpoint_body` into the model's layout and the
/// syncer's state (checked later by `syncer::load`). Throws `corrupt_state`,
/// naming what is wrong, when the layout description is cut short or
/// malformed or describes more than `max_elements` parameters.
inline syncer_checkpoint read_checkpoint_body(std::string_view body,
                                              std::uint64_t max_elements = std::uint64_t{1} << 32) {
  std::uint64_t length = 0;
  if (body.size() < sizeof length) throw corrupt_state("diloco: checkpoint body shorter than its layout length");
  std::memcpy(&length, body.data(), sizeof length);
  body.remove_prefix(sizeof length);
  if (length > body.size()) throw corrupt_state("diloco: checkpoint body shorter than its layout description");
  const auto* bytes = reinterpret_cast<const std::byte*>(body.data());
  auto layout = wire::decode_layout(std::span<const std::byte>(bytes, static_cast<std::size_t>(length)), max_elements);
  if (!layout) throw corrupt_state("diloco: the checkpoint's layout description is malformed");
  body.remove_prefix(static_cast<std::size_t>(length));
  return {std::move(*layout), std::string(body)};
}

}  // namespace diloco
