// diloco::inproc::hub: two endpoints of one process; a message moves as it is
// (its payload buffer changes hands, nothing is copied or checksummed).
#include <diloco/transport/inproc.hpp>

#include "endpoint_link.hpp"

namespace bench {
namespace {

class inproc_link final : public endpoint_link<diloco::inproc::endpoint, diloco::inproc::endpoint> {
 public:
  explicit inproc_link(const link_options& o)
      : endpoint_link(o, "inproc hub"),
        hub_(diloco::inproc::hub_options{o.queue_bytes, std::size_t{1} << 16}),
        learner_(hub_.attach(1)),
        syncer_(hub_.attach(diloco::syncer_peer)) {
    connect(learner_, syncer_, diloco::syncer_peer);
  }

 private:
  diloco::inproc::hub hub_;
  diloco::inproc::endpoint& learner_;
  diloco::inproc::endpoint& syncer_;
};

}  // namespace

std::unique_ptr<link> make_inproc_hub(const link_options& o) { return std::make_unique<inproc_link>(o); }

}  // namespace bench
