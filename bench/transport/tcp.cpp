// diloco::tcp (standalone Asio): a server and a client on 127.0.0.1, each with
// its own I/O thread. Headers and payloads are written with one gathered
// write from where they are; payloads are read straight into pooled buffers.
#include <diloco/transport/tcp.hpp>

#include "endpoint_link.hpp"

namespace bench {
namespace {

diloco::tcp::socket_options asio_options(const link_options& o) {
  diloco::tcp::socket_options s;
  s.send_queue_bytes = o.queue_bytes;
  s.receive_queue_bytes = o.queue_bytes;
  return s;
}

class asio_link final : public endpoint_link<diloco::tcp::client, diloco::tcp::server> {
 public:
  explicit asio_link(const link_options& o)
      : endpoint_link(o, "asio tcp"),
        syncer_("127.0.0.1", 0, asio_options(o)),
        learner_("127.0.0.1", syncer_.port(), asio_options(o)) {
    connect(learner_, syncer_, diloco::syncer_peer);
  }

 private:
  diloco::tcp::server syncer_;
  diloco::tcp::client learner_;
};

}  // namespace

std::unique_ptr<link> make_asio_tcp(const link_options& o) { return std::make_unique<asio_link>(o); }

}  // namespace bench
