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
#include <diloco_tools/cli.hpp>

int main(int argc, char** argv) {
  std::string name, ids;
  CLI::App app{
      "Writes NAME.key (the key pair; keep it secret) and NAME.pub (the public key, to give to the other side).",
      "diloco_keygen"};
  app.add_option("NAME", name, "the key's name: the files are NAME.key and NAME.pub")->required();
  const CLI::Option* learners_option =
      app.add_option("--learners", ids,
                     "a learner's key: write 'learners = IDS' into NAME.pub, the learner ids the key may speak for: "
                     "ids and ranges like 0-3,7, or '*' for any learner. The syncer's --allow file needs this line "
                     "after every key.")
          ->type_name("IDS");
  if (const auto status = diloco_tools::parse(app, argc, argv)) return *status;

  std::optional<diloco::zeromq::learner_ids> learners;
  if (learners_option->count() > 0) {
    try {
      learners = diloco::zeromq::learner_ids::parse(ids);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "diloco_keygen: --learners: %s\n", e.what());
      return diloco_tools::bad_usage;
    }
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
