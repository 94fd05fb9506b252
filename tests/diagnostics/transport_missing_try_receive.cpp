// A transport that can only send, handed to a syncer.
// expect-error: diloco::transport: missing member `std::optional<envelope> try_receive\(\)`
#include <diloco/diloco.hpp>

#include <system_error>
#include <vector>

namespace {

struct send_only_transport {
  std::error_code try_send(diloco::peer_id, diloco::message&) { return diloco::errc::closed; }
};

}  // namespace

int main() {
  diloco::parameter_layout layout;
  layout.add("w", 4);
  const std::vector<float> initial(4, 0.0f);
  send_only_transport transport;
  diloco::syncer<diloco::outer::nesterov<float>, diloco::merge::average, send_only_transport> syncer(layout, initial,
                                                                                                     transport);
}
