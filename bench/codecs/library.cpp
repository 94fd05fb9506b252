// The library: the fused codec passes and the outer Nesterov step.
#include "codecs.hpp"
#include "diloco/codec/kernels.hpp"

namespace bench {

bool encode_delta(diloco::codec_id f, std::size_t block, std::span<const float> base, std::span<const float> theta,
                  std::span<float> residual, std::span<std::byte> out, unsigned threads) {
  return diloco::codec::encode_delta(f, block, base, theta, residual, out, threads);
}

void decode_accumulate(diloco::codec_id f, std::size_t block, std::span<const std::byte> in, float weight,
                       std::span<float> acc, unsigned threads) {
  diloco::codec::decode_accumulate(f, block, in, weight, acc, threads);
}

void nesterov_step(diloco::outer::nesterov<float>& optimizer, std::span<float> global, std::span<const float> delta) {
  optimizer.step(0, global, delta);
}

}  // namespace bench
