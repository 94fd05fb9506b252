// diloco_keygen: writes a CURVE key pair for a syncer or a learner.
//
//   diloco_keygen syncer     # writes syncer.key (secret, mode 0600) and syncer.pub

#include <cstdio>
#include <exception>
#include <string>

#include <diloco/transport/zmq.hpp>

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]).rfind("-", 0) == 0) {
    std::fprintf(stderr,
                 "usage: diloco_keygen NAME\n\nWrites NAME.key (the key pair; keep it secret) and NAME.pub (the public "
                 "key to give to the other side).\n");
    return 2;
  }
  try {
    const std::string name = argv[1];
    const auto keys = diloco::zeromq::generate_keypair();
    diloco::zeromq::save_keypair(keys, name + ".key", name + ".pub");
    std::printf("wrote %s.key and %s.pub (public key %s)\n", name.c_str(), name.c_str(), keys.public_key.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diloco_keygen: error: %s\n", e.what());
    return 1;
  }
}
