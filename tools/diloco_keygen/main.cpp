// diloco_keygen: writes a CURVE key pair for a syncer or a learner.
//
//   diloco_keygen syncer                    # writes syncer.key (secret, mode 0600) and syncer.pub
//   diloco_keygen site-a --learners 0-3,7   # site-a.pub may speak for learners 0-3 and 7

#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include <diloco/transport/zeromq.hpp>

namespace {

constexpr const char* usage =
    "usage: diloco_keygen NAME [--learners IDS]\n\n"
    "Writes NAME.key (the key pair; keep it secret) and NAME.pub (the public key, to give to the other side).\n\n"
    "  --learners IDS   a learner's key: write 'learners = IDS' into NAME.pub, the learner ids the key may\n"
    "                   speak for: ids and ranges like 0-3,7, or '*' for any learner. The syncer's --allow\n"
    "                   file needs this line after every key.\n";

}  // namespace

int main(int argc, char** argv) {
  std::string name;
  std::optional<diloco::zeromq::learner_ids> learners;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "-h" || arg == "--help") {
        std::fputs(usage, stdout);
        return 0;
      }
      if (arg == "--learners") {
        if (i + 1 == argc) throw std::invalid_argument("--learners needs a value");
        learners = diloco::zeromq::learner_ids::parse(argv[++i]);
      } else if (arg.rfind("-", 0) == 0 || !name.empty()) {
        throw std::invalid_argument("unexpected argument '" + arg + "'");
      } else {
        name = arg;
      }
    }
    if (name.empty()) throw std::invalid_argument("no NAME given");
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "diloco_keygen: %s\n\n%s", e.what(), usage);
    return 2;
  }
  try {
    const auto keys = diloco::zeromq::generate_keypair();
    diloco::zeromq::save_keypair(keys, name + ".key", name + ".pub", learners);
    std::printf("wrote %s.key and %s.pub (public key %s", name.c_str(), name.c_str(), keys.public_key.c_str());
    if (learners) std::printf(", learners %s", learners->to_string().c_str());
    std::printf(")\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_keygen: error: %s\n", e.what());
    return 1;
  }
}
