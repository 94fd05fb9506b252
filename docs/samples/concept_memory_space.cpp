// A minimal `diloco::memory_space` (docs/concepts/memory_space.md): host
// memory that counts the bytes its passes move between itself and host
// memory, which is what a device's space must keep to the bytes of the wire.
// Its buffers are its own type; the codec work is `host_memory`'s, whose
// passes take any buffer the host can read, so that the bytes are the
// library's, bit for bit. `main` runs the passes of one fragment in the order
// a learner does: gather, adopt, encode_delta, pack, adopt again (a rebase).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <diloco/concepts/memory_space.hpp>
#include <diloco/params/fragments.hpp>
#include <diloco/params/layout.hpp>
#include <diloco/protocol/payload.hpp>
#include <diloco/runtime/host_memory.hpp>

/// n values of this space: move-only, as device memory usually is.
template <class T>
class chunk {
 public:
  explicit chunk(std::size_t n) : values_(std::make_unique<T[]>(n)), size_(n) {}  // zeros
  T* data() noexcept { return values_.get(); }
  const T* data() const noexcept { return values_.get(); }
  std::size_t size() const noexcept { return size_; }

 private:
  std::unique_ptr<T[]> values_;
  std::size_t size_;
};

class counted_memory {
 public:
  template <class T>
  using buffer = chunk<T>;

  template <class T>
  buffer<T> allocate(std::size_t n) {
    return buffer<T>(n);
  }

  template <diloco::scalar T>
  bool encode_delta(diloco::codec_id codec, std::uint32_t block, std::span<const diloco::fragment_slice> slices,
                    std::span<const T> theta, const buffer<T>& base, buffer<T>* residual, std::span<std::byte> out) {
    crossed += out.size();
    return host_.encode_delta(codec, block, slices, theta, base, residual, out);
  }
  template <diloco::scalar T>
  void adopt(diloco::codec_id codec, std::uint32_t block, std::span<const std::byte> payload,
             std::span<const diloco::fragment_slice> slices, std::span<T> theta, buffer<T>& base, diloco::adoption how,
             T alpha) {
    crossed += payload.size();
    host_.adopt(codec, block, payload, slices, theta, base, how, alpha);
  }
  template <diloco::scalar T>
  void scatter(std::span<const diloco::fragment_slice> slices, const buffer<T>& base, std::span<T> theta) {
    host_.scatter(slices, base, theta);  // within this memory: nothing crosses
  }
  template <diloco::scalar T>
  void gather(std::span<const diloco::fragment_slice> slices, std::span<const T> theta, std::span<T> host) {
    crossed += host.size_bytes();
    host_.gather(slices, theta, host);
  }
  template <diloco::scalar T>
  void pack(std::span<const diloco::fragment_slice> slices, std::span<const T> theta, buffer<T>& base) {
    host_.pack(slices, theta, base);  // within this memory: nothing crosses
  }
  template <diloco::scalar T>
  void read(std::span<const T> from, std::span<T> host) {
    crossed += host.size_bytes();
    host_.read(from, host);
  }
  template <diloco::scalar T>
  void write(std::span<const T> host, std::span<T> to) {
    crossed += host.size_bytes();
    host_.write(host, to);
  }

  std::size_t crossed = 0;  ///< bytes moved to or from host memory

 private:
  diloco::host_memory host_;
};

static_assert(diloco::check_memory_space<counted_memory, float>());
static_assert(diloco::check_memory_space<counted_memory, double>());

int main() {
  diloco::parameter_layout layout;
  layout.add("w", 6);
  layout.add("b", 2);
  const auto plan = diloco::fragment_plan::balanced(layout, 2);
  const auto slices = plan[0].slices();
  const std::size_t n = plan[0].size();
  std::vector<float> theta{1, 2, 3, 4, 5, 6, 7, 8};  // a model's parameters, in this (host) memory

  counted_memory space;
  auto base = space.allocate<float>(n);
  std::vector<float> initial(n);
  space.gather<float>(slices, theta, initial);  // the initial state sent to a syncer that has none

  std::vector<std::byte> update(diloco::payload::size(diloco::codec_id::f32, n, 0));  // that state comes back
  std::memcpy(update.data(), initial.data(), update.size());
  space.adopt<float>(diloco::codec_id::f32, 0, update, slices, theta, base, diloco::adoption::overwrite, 0.0f);

  for (float& v : theta) v -= 0.5f;  // inner steps
  std::vector<std::byte> out(update.size());
  const bool sent = space.encode_delta<float>(diloco::codec_id::f32, 0, slices, theta, base, nullptr, out);
  std::vector<float> delta(n);
  double squared = 0.0;
  const auto verdict = diloco::payload::decode<float>(diloco::codec_id::f32, 0, out, delta, squared);

  bool ok = sent && verdict == diloco::payload::verdict::ok && space.crossed == 3 * n * sizeof(float);
  for (float d : delta) ok = ok && d == 0.5f;  // Δ = base − θ_p

  // What was sent leaves the learner's account (the default adoption rule):
  // the base moves to θ_p, then one more step, then the answer Θ = initial + 1
  // is taken in by a rebase, θ_p ← Θ + (θ_p − base): the step after the send is kept.
  space.pack<float>(slices, theta, base);
  for (float& v : theta) v -= 0.25f;
  std::vector<float> answer(initial);
  for (float& v : answer) v += 1.0f;
  std::memcpy(update.data(), answer.data(), update.size());
  space.adopt<float>(diloco::codec_id::f32, 0, update, slices, theta, base, diloco::adoption::rebase, 0.0f);
  std::vector<float> packed(n);
  space.gather<float>(slices, theta, packed);
  for (std::size_t i = 0; i < n; ++i) ok = ok && packed[i] == answer[i] - 0.25f;
  std::printf("fragment 0: %zu values, outer gradient %.2f, rebased by %.2f, %zu bytes crossed\n", n, double(delta[0]),
              double(packed[0] - answer[0]), space.crossed);
  return ok ? 0 : 1;
}
