// libFuzzer target for the message decoder and the syncer's validation
// behind it. The input format and the checks are in harness.hpp; the seed
// corpus comes from make_corpus.cpp.
//
//   decode_fuzzer -max_total_time=60 corpus/ seeds/
#include <cstddef>
#include <cstdint>

#include "harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)diloco::fuzz::harness::run(data, size);
  return 0;
}
