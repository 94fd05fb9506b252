// The trainer's MLP on the GPU: the CPU `mlp` (mlp.hpp) — 784-256-256-10,
// ReLU, softmax cross-entropy, the same parameter layout, names and initial
// values — with its parameters and gradients in device memory. Matrix
// products by cuBLAS; the bias and ReLU passes, the bias gradients and the
// softmax cross-entropy with its gradient are the kernels below. A model in
// the sense of `diloco::model` whose `memory()` is a `diloco::cuda::device_memory`.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <dlfcn.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <diloco/concepts/model.hpp>
#include <diloco/cuda/detail/launch.cuh>
#include <diloco/cuda/error.cuh>
#include <diloco/cuda/memory.cuh>
#include <diloco/cuda/memory_space.cuh>
#include <diloco/params/layout.hpp>
#include <diloco/random.hpp>

#include "batch.hpp"

namespace fashion {

namespace gpu_detail {

/// pre ← pre + bias (per row), and act ← max(pre, 0) if `act` is not null:
/// the CPU's `pre.colwise() += bias; act = pre.cwiseMax(0)`, element by element.
__global__ void add_bias_relu(float* pre, float* act, const float* bias, std::size_t rows, std::size_t size) {
  for (std::size_t i = diloco::cuda::detail::first_index(); i < size; i += diloco::cuda::detail::grid_stride()) {
    const float z = pre[i] + bias[i % rows];
    pre[i] = z;
    if (act) act[i] = z > 0.0f ? z : 0.0f;
  }
}

/// delta ← delta · (pre > 0): the ReLU's derivative, as the CPU's
/// `delta.array() *= (pre.array() > 0).cast<float>()` (a product by 1 or 0).
__global__ void relu_backward(float* delta, const float* pre, std::size_t size) {
  for (std::size_t i = diloco::cuda::detail::first_index(); i < size; i += diloco::cuda::detail::grid_stride())
    delta[i] = delta[i] * (pre[i] > 0.0f ? 1.0f : 0.0f);
}

/// db[r] = Σ_j delta[r + j·rows], j = 0 … n−1 in order: one thread a row.
__global__ void bias_gradient(const float* delta, float* db, std::size_t rows, std::size_t n) {
  for (std::size_t r = diloco::cuda::detail::first_index(); r < rows; r += diloco::cuda::detail::grid_stride()) {
    float sum = 0.0f;
    for (std::size_t j = 0; j < n; ++j) sum += delta[r + j * rows];
    db[r] = sum;
  }
}

/// Threads of the one block of `softmax_cross_entropy`.
inline constexpr unsigned loss_threads = 256;

/// Softmax cross-entropy over the `n` columns of `logits` (rows × n), the
/// CPU's formulas: per column, p = exp(z − max z) / Σ exp(z − max z), loss
/// `log Σ − (z_label − max z)` in double, and the output layer's gradient
/// dz = (p − onehot(label)) / n. One block: thread t takes columns t, t+256,
/// …; the mean loss is reduced over the threads in a fixed tree, so the
/// result is deterministic. `*loss` receives the mean.
__global__ void softmax_cross_entropy(const float* logits, const std::uint8_t* labels, std::size_t rows, std::size_t n,
                                      float* dz, double* loss) {
  __shared__ double partial[loss_threads];
  double sum_loss = 0.0;
  const float scale = float(n);
  for (std::size_t j = threadIdx.x; j < n; j += loss_threads) {
    const float* z = logits + j * rows;
    float* d = dz + j * rows;
    float top = z[0];
    for (std::size_t r = 1; r < rows; ++r) top = fmaxf(top, z[r]);
    float sum = 0.0f;
    for (std::size_t r = 0; r < rows; ++r) {
      const float e = expf(z[r] - top);
      d[r] = e;
      sum += e;
    }
    const std::size_t label = labels[j];
    for (std::size_t r = 0; r < rows; ++r) {
      const float p = d[r] / sum;
      d[r] = (r == label ? p - 1.0f : p) / scale;
    }
    sum_loss += double(logf(sum)) - double(z[label] - top);
  }
  partial[threadIdx.x] = sum_loss;
  __syncthreads();
  for (unsigned half = loss_threads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = partial[0] / double(n);
}

/// Throws `diloco::cuda::error` for a failed CUDA call.
inline void check(cudaError_t e, const char* what) { diloco::cuda::detail::check(e, what); }

/// The six cuBLAS functions the model calls, from `libcublas.so.N` loaded
/// at the first use (`dlopen`) rather than linked: loading cuBLAS and
/// cuBLASLt costs 0.3–0.8 s, which every start of the trainer would pay
/// otherwise, GPU learners or not. Looked for in the toolkit's library
/// directory of the build (`FASHION_MNIST_CUBLAS_DIR`), then by the
/// loader's search path. Never unloaded.
struct cublas_functions {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string error;  ///< why it could not be loaded; empty if it was

  /// The functions, loaded once (thread-safe); check `error` first.
  static const cublas_functions& get() {
    static const cublas_functions loaded = load();
    return loaded;
  }

 private:
  static cublas_functions load() {
    cublas_functions f;
    const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* library = nullptr;
#ifdef FASHION_MNIST_CUBLAS_DIR
    library = dlopen((std::string(FASHION_MNIST_CUBLAS_DIR) + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (!library) library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      const char* why = dlerror();
      f.error = "cannot load " + name + ": " + (why ? why : "dlopen failed");
      return f;
    }
    bool found = true;
    auto resolve = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, symbol));
      if (!fn && found) {
        found = false;
        f.error = name + " has no " + symbol;
      }
    };
    resolve(f.create, "cublasCreate_v2");
    resolve(f.destroy, "cublasDestroy_v2");
    resolve(f.set_stream, "cublasSetStream_v2");
    resolve(f.set_math_mode, "cublasSetMathMode");
    resolve(f.sgemm, "cublasSgemm_v2");
    resolve(f.status_string, "cublasGetStatusString");
    return f;
  }
};

/// Throws a `std::runtime_error` naming a failed cuBLAS call.
inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("fashion::gpu_mlp: ") + what + ": " +
                             cublas_functions::get().status_string(s));
}

/// A cuBLAS handle bound to one stream. Owns it; movable. Throws a
/// `std::runtime_error` if cuBLAS cannot be loaded or the handle not made.
class cublas {
 public:
  explicit cublas(cudaStream_t stream) : f_(&cublas_functions::get()) {
    if (!f_->error.empty()) throw std::runtime_error("fashion::gpu_mlp: " + f_->error);
    check(f_->create(&handle_), "cublasCreate");
    check(f_->set_stream(handle_, stream), "cublasSetStream");
    // FP32 products in FP32: no TF32 (CUBLAS_DEFAULT_MATH would allow it
    // under NVIDIA_TF32_OVERRIDE), so that the GPU computes what the CPU does.
    check(f_->set_math_mode(handle_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  }
  cublas(cublas&& other) noexcept : f_(other.f_), handle_(std::exchange(other.handle_, nullptr)) {}
  cublas& operator=(cublas&&) = delete;
  cublas(const cublas&) = delete;
  cublas& operator=(const cublas&) = delete;
  ~cublas() {
    if (handle_) f_->destroy(handle_);
  }

  /// C (m × n) ← op(A) · op(B), column-major, on the handle's stream.
  void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
            float* c, int ldc) const {
    const float one = 1.0f, zero = 0.0f;
    check(f_->sgemm(handle_, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                    &one, a, lda, b, ldb, &zero, c, ldc),
          "cublasSgemm");
  }

 private:
  const cublas_functions* f_;
  cublasHandle_t handle_ = nullptr;
};

}  // namespace gpu_detail

/// The 784-256-256-10 MLP (any widths) with parameters and gradients in one
/// flat `device_buffer<float>` each, in `mlp`'s layout (`layerL.weight`,
/// out × in column-major, then `layerL.bias`), initialised as `mlp` is for
/// the same seed (He-uniform weights drawn on the host in the same order,
/// zero biases): the same `layout().fingerprint()` and the same initial
/// values bit for bit, so GPU and CPU learners train one model together.
///
/// `compute_gradients` copies the batch to the device through pinned
/// buffers, runs the forward and backward passes on the model's stream and
/// waits for them (the loss crosses back: one 8-byte copy). Products are
/// cuBLAS SGEMMs in pedantic FP32; everything else is the kernels of
/// `gpu_detail`, in the CPU's formulas. The gradients differ from the CPU's
/// by the order of the sums in the products and the reductions (the tests
/// state the bound). Device buffers for the activations grow to the largest
/// batch on first use and are kept. CUDA and cuBLAS failures throw (the
/// device is lost). Not thread-safe.
class gpu_mlp {
 public:
  using scalar_type = float;
  using batch_type = batch;

  /// Allocates everything on the current device; throws `diloco::cuda::error`
  /// (or a `std::runtime_error` from cuBLAS) when it cannot.
  explicit gpu_mlp(std::vector<int> widths = {784, 256, 256, 10}, std::uint64_t seed = 1)
      : widths_(std::move(widths)), blas_(stream_.get()) {
    for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
      weights_.push_back(layout_.add("layer" + std::to_string(l) + ".weight",
                                     static_cast<std::size_t>(widths_[l + 1]) * static_cast<std::size_t>(widths_[l])));
      biases_.push_back(layout_.add("layer" + std::to_string(l) + ".bias", static_cast<std::size_t>(widths_[l + 1])));
    }
    std::vector<float> initial(layout_.size(), 0.0f);
    diloco::splitmix64 rng(seed);
    for (std::size_t l = 0; l < weights_.size(); ++l) {
      const auto& w = layout_[weights_[l]];
      const double bound = std::sqrt(6.0 / widths_[l]);
      for (std::size_t i = 0; i < w.size; ++i) initial[w.offset + i] = float((2.0 * rng.uniform() - 1.0) * bound);
    }
    params_ = diloco::cuda::device_buffer<float>(layout_.size());
    grads_ = diloco::cuda::device_buffer<float>(layout_.size());
    loss_ = diloco::cuda::device_buffer<double>(1);
    loss_host_ = diloco::cuda::pinned_buffer<double>(1);
    gpu_detail::check(
        cudaMemcpyAsync(params_.data(), initial.data(), params_.bytes(), cudaMemcpyHostToDevice, stream_.get()),
        "cudaMemcpyAsync");
    gpu_detail::check(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream_.get()), "cudaMemsetAsync");
    gpu_detail::check(stream_.synchronize(), "cudaStreamSynchronize");
  }

  gpu_mlp(const gpu_mlp&) = delete;
  gpu_mlp& operator=(const gpu_mlp&) = delete;

  const diloco::parameter_layout& layout() const noexcept { return layout_; }
  /// Device memory.
  std::span<float> parameters() noexcept { return params_.span(); }
  /// Device memory.
  std::span<const float> gradients() const noexcept { return grads_.span(); }
  /// The gradients, writable where they are: a learner unit averages them
  /// over its ranks in place (`diloco::unit_model`).
  std::span<float> mutable_gradients() noexcept { return grads_.span(); }
  /// The learner's memory space: device memory on this model's stream.
  diloco::cuda::device_memory& memory() noexcept { return memory_; }
  /// The stream every pass of this model runs on (give it to the inner step).
  cudaStream_t stream() const noexcept { return stream_.get(); }

  /// Forward and backward pass; overwrites the gradients. Loss is the mean
  /// cross-entropy over the batch. Blocks until the passes are done.
  /// Throws `std::invalid_argument` for a label ≥ the output width or a
  /// batch of another input width.
  diloco::step_stats compute_gradients(const batch& b) {
    const auto started = std::chrono::steady_clock::now();
    const std::size_t n = b.size();
    const std::size_t layers = weights_.size();
    const std::size_t features = static_cast<std::size_t>(widths_.front());
    const auto classes = static_cast<std::size_t>(widths_.back());
    if (b.features != features || b.x.size() != features * n)
      throw std::invalid_argument("fashion::gpu_mlp: the batch's images are not " + std::to_string(features) +
                                  " pixels each");
    if (std::any_of(b.y.begin(), b.y.end(), [classes](std::uint8_t y) { return y >= classes; }))
      throw std::invalid_argument("fashion::gpu_mlp: a label is beyond the output layer");
    if (n == 0) return {0.0, 0};
    reserve(n);
    const cudaStream_t s = stream_.get();
    // The pinned buffers are free: the last call waited for its copies.
    std::memcpy(x_host_.data(), b.x.data(), b.x.size() * sizeof(float));
    std::memcpy(y_host_.data(), b.y.data(), n);
    gpu_detail::check(cudaMemcpyAsync(x_.data(), x_host_.data(), b.x.size() * sizeof(float), cudaMemcpyHostToDevice, s),
                      "cudaMemcpyAsync");
    gpu_detail::check(cudaMemcpyAsync(y_.data(), y_host_.data(), n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");

    const int cols = static_cast<int>(n);
    diloco::cuda::detail::clear_stale_error();  // every launch below is checked on its own
    for (std::size_t l = 0; l < layers; ++l) {
      const int out = widths_[l + 1], in = widths_[l];
      const float* input = l == 0 ? x_.data() : act_[l - 1].data();
      blas_.gemm(false, false, out, cols, in, param(weights_[l]), out, input, in, pre_[l].data(), out);
      const std::size_t size = static_cast<std::size_t>(out) * n;
      gpu_detail::add_bias_relu<<<diloco::cuda::detail::blocks_for(size), diloco::cuda::detail::threads, 0, s>>>(
          pre_[l].data(), l + 1 < layers ? act_[l].data() : nullptr, param(biases_[l]), static_cast<std::size_t>(out),
          size);
      launched("add_bias_relu");
    }
    gpu_detail::softmax_cross_entropy<<<1, gpu_detail::loss_threads, 0, s>>>(pre_.back().data(), y_.data(), classes, n,
                                                                             delta_.back().data(), loss_.data());
    launched("softmax_cross_entropy");
    for (std::size_t l = layers; l-- > 0;) {
      const int out = widths_[l + 1], in = widths_[l];
      const float* input = l == 0 ? x_.data() : act_[l - 1].data();
      blas_.gemm(false, true, out, in, cols, delta_[l].data(), out, input, in, grad(weights_[l]), out);
      gpu_detail::bias_gradient<<<diloco::cuda::detail::blocks_for(static_cast<std::size_t>(out)),
                                  diloco::cuda::detail::threads, 0, s>>>(delta_[l].data(), grad(biases_[l]),
                                                                         static_cast<std::size_t>(out), n);
      launched("bias_gradient");
      if (l > 0) {
        blas_.gemm(true, false, in, cols, out, param(weights_[l]), out, delta_[l].data(), out, delta_[l - 1].data(),
                   in);
        const std::size_t size = static_cast<std::size_t>(in) * n;
        gpu_detail::relu_backward<<<diloco::cuda::detail::blocks_for(size), diloco::cuda::detail::threads, 0, s>>>(
            delta_[l - 1].data(), pre_[l - 1].data(), size);
        launched("relu_backward");
      }
    }
    gpu_detail::check(cudaMemcpyAsync(loss_host_.data(), loss_.data(), sizeof(double), cudaMemcpyDeviceToHost, s),
                      "cudaMemcpyAsync");
    gpu_detail::check(stream_.synchronize(), "cudaStreamSynchronize");
    last_compute_ = std::chrono::steady_clock::now() - started;
    return {loss_host_[0], static_cast<std::uint64_t>(n)};
  }

  /// Wall time of the last `compute_gradients`, its wait for the device included.
  std::chrono::steady_clock::duration last_compute() const noexcept { return last_compute_; }

 private:
  float* param(std::size_t tensor) noexcept { return params_.data() + layout_[tensor].offset; }
  float* grad(std::size_t tensor) noexcept { return grads_.data() + layout_[tensor].offset; }
  static void launched(const char* kernel) { gpu_detail::check(diloco::cuda::detail::launched(), kernel); }

  /// Buffers for batches of up to `n` examples (reallocated only to grow:
  /// `cudaFree` waits for the device).
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    const std::size_t layers = weights_.size();
    const auto features = static_cast<std::size_t>(widths_.front());
    x_host_ = diloco::cuda::pinned_buffer<float>(features * n);
    y_host_ = diloco::cuda::pinned_buffer<std::uint8_t>(n);
    x_ = diloco::cuda::device_buffer<float>(features * n);
    y_ = diloco::cuda::device_buffer<std::uint8_t>(n);
    pre_.clear();
    act_.clear();
    delta_.clear();
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t size = static_cast<std::size_t>(widths_[l + 1]) * n;
      pre_.emplace_back(size);
      delta_.emplace_back(size);
      if (l + 1 < layers) act_.emplace_back(size);
    }
    capacity_ = n;
  }

  std::vector<int> widths_;
  diloco::parameter_layout layout_;
  std::vector<std::size_t> weights_, biases_;  ///< tensor indices in `layout_`
  diloco::cuda::stream stream_;
  gpu_detail::cublas blas_;
  diloco::cuda::device_memory memory_{stream_.get()};
  diloco::cuda::device_buffer<float> params_, grads_;
  diloco::cuda::device_buffer<double> loss_;
  diloco::cuda::pinned_buffer<double> loss_host_;
  std::size_t capacity_ = 0;  ///< examples the buffers below hold
  diloco::cuda::pinned_buffer<float> x_host_;
  diloco::cuda::pinned_buffer<std::uint8_t> y_host_;
  diloco::cuda::device_buffer<float> x_;
  diloco::cuda::device_buffer<std::uint8_t> y_;
  std::vector<diloco::cuda::device_buffer<float>> pre_, act_, delta_;  ///< per layer, out × n
  std::chrono::steady_clock::duration last_compute_{};
};

static_assert(diloco::check_model<gpu_mlp>() && diloco::model<gpu_mlp>);

}  // namespace fashion
