// A message copied with its payload, for transports that send one message
// over several connections.
#pragma once

#include <algorithm>

#include "diloco/protocol/message.hpp"

namespace diloco::detail {

/// A copy of `m`: its header, and its payload in a buffer of its own.
inline message duplicate(const message& m) {
  message copy;
  copy.header = m.header;
  if (m.payload.size() != 0) {
    copy.payload = byte_buffer(m.payload.size());
    std::copy(m.payload.bytes().begin(), m.payload.bytes().end(), copy.payload.bytes().begin());
  }
  return copy;
}

}  // namespace diloco::detail
