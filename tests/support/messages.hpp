// Messages and sends shared by the network transports' tests
// (tests/transport/tcp.cpp, tests/transport/zeromq.cpp).
#pragma once

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#include <diloco/transport/message.hpp>

namespace transport_test {

/// A join from `learner` (incarnation 1) with a made-up layout.
inline diloco::message join_of(std::uint32_t learner) {
  diloco::message m;
  m.header.kind = diloco::message_kind::join;
  m.header.learner = learner;
  m.header.incarnation = 1;
  m.header.layout = 0xabcdef;
  m.header.element_count = 1234;
  return m;
}

/// An f32 update to `learner` at revision 42 carrying `values`.
inline diloco::message update_with(std::vector<float> values, std::uint32_t learner = 3) {
  diloco::message m;
  m.header.kind = diloco::message_kind::update;
  m.header.codec = diloco::codec_id::f32;
  m.header.learner = learner;
  m.header.incarnation = 1;
  m.header.revision = 42;
  m.header.element_count = values.size();
  m.payload = diloco::byte_buffer(values.size() * sizeof(float));
  std::memcpy(m.payload.data(), values.data(), m.payload.size());
  return m;
}

/// Sends until the transport takes it (a fresh connection may not be up yet).
template <class Endpoint>
void send_within(Endpoint& e, diloco::peer_id to, diloco::message m,
                 std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  std::error_code ec;
  while ((ec = e.try_send(to, m)) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  BOOST_TEST_REQUIRE(!ec, "send failed: " << ec.message());
}

}  // namespace transport_test
