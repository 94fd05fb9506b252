// A character-level decoder-only transformer in LibTorch: token and position
// embeddings, pre-norm blocks of causal multi-head self-attention and a GELU
// MLP (4x wide), a final layer norm and a linear head (Radford et al. 2019,
// "Language Models are Unsupervised Multitask Learners", section 2.3).
// Written against the plain torch::nn API, so that nothing in it knows about
// diloco: the adapter (diloco/adapters/torch.hpp) takes it as it is.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "corpus.hpp"

namespace text {

struct shape {
  std::int64_t vocabulary = 0;
  std::int64_t width = 128;  ///< d_model
  std::int64_t layers = 2;
  std::int64_t heads = 4;     ///< divides `width`
  std::int64_t context = 64;  ///< tokens per window
};

/// One pre-norm block: x + attention(norm(x)), then x + mlp(norm(x)).
class block_impl : public ::torch::nn::Module {
 public:
  block_impl(std::int64_t width, std::int64_t heads)
      : heads_(heads),
        norm1_(register_module("norm1", ::torch::nn::LayerNorm(::torch::nn::LayerNormOptions({width})))),
        qkv_(register_module("qkv", ::torch::nn::Linear(width, 3 * width))),
        out_(register_module("out", ::torch::nn::Linear(width, width))),
        norm2_(register_module("norm2", ::torch::nn::LayerNorm(::torch::nn::LayerNormOptions({width})))),
        up_(register_module("up", ::torch::nn::Linear(width, 4 * width))),
        down_(register_module("down", ::torch::nn::Linear(4 * width, width))) {}

  /// `x`: batch × time × width; `future`: time × time, true above the diagonal.
  ::torch::Tensor forward(::torch::Tensor x, const ::torch::Tensor& future) {
    const auto b = x.size(0), t = x.size(1), w = x.size(2), d = w / heads_;
    // batch × time × (q, k, v) × heads × d  →  (q, k, v) × batch × heads × time × d
    const auto qkv = qkv_(norm1_(x)).view({b, t, 3, heads_, d}).permute({2, 0, 3, 1, 4});
    auto scores = ::torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(double(d));
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity()).softmax(-1);
    const auto attended = ::torch::matmul(scores, qkv[2]).transpose(1, 2).reshape({b, t, w});
    x = x + out_(attended);
    return x + down_(::torch::gelu(up_(norm2_(x))));
  }

 private:
  std::int64_t heads_;
  ::torch::nn::LayerNorm norm1_;
  ::torch::nn::Linear qkv_, out_;
  ::torch::nn::LayerNorm norm2_;
  ::torch::nn::Linear up_, down_;
};
TORCH_MODULE_IMPL(block, block_impl);

class transformer_impl : public ::torch::nn::Module {
 public:
  /// Initialized from `seed` (LibTorch's default initializations).
  transformer_impl(const shape& s, std::uint64_t seed) : shape_(s) {
    if (s.heads <= 0 || s.width % s.heads != 0)
      throw std::invalid_argument("the width (" + std::to_string(s.width) + ") must be a multiple of the heads (" +
                                  std::to_string(s.heads) + ")");
    ::torch::manual_seed(seed);
    tokens_ = register_module("tokens", ::torch::nn::Embedding(s.vocabulary, s.width));
    positions_ = register_module("positions", ::torch::nn::Embedding(s.context, s.width));
    for (std::int64_t i = 0; i < s.layers; ++i)
      blocks_.push_back(register_module("block" + std::to_string(i), block(s.width, s.heads)));
    norm_ = register_module("norm", ::torch::nn::LayerNorm(::torch::nn::LayerNormOptions({s.width})));
    head_ = register_module("head", ::torch::nn::Linear(s.width, s.vocabulary));
    future_ = ::torch::ones({s.context, s.context}, ::torch::kBool).triu(1);
  }

  /// Logits, batch × time × vocabulary, of `inputs` (batch × time token ids).
  ::torch::Tensor forward(const ::torch::Tensor& inputs) {
    const auto t = inputs.size(1);
    auto x = tokens_(inputs) + positions_(::torch::arange(t));
    const auto future = future_.narrow(0, 0, t).narrow(1, 0, t);
    for (auto& b : blocks_) x = b(x, future);
    return head_(norm_(x));
  }

  /// Mean cross-entropy, in nats per character, of predicting each window's
  /// next characters (`b`: rows × (context + 1) tokens).
  ::torch::Tensor loss(const batch& b) {
    const auto windows = ::torch::from_blob(const_cast<std::int64_t*>(b.tokens.data()),
                                            {std::int64_t(b.rows), std::int64_t(b.context) + 1}, ::torch::kInt64);
    const auto inputs = windows.narrow(1, 0, b.context);
    const auto targets = windows.narrow(1, 1, b.context).reshape({-1});
    return ::torch::nn::functional::cross_entropy(forward(inputs).reshape({-1, shape_.vocabulary}), targets);
  }

  const shape& dimensions() const noexcept { return shape_; }

 private:
  shape shape_;
  ::torch::nn::Embedding tokens_{nullptr}, positions_{nullptr};
  std::vector<block> blocks_;
  ::torch::nn::LayerNorm norm_{nullptr};
  ::torch::nn::Linear head_{nullptr};
  ::torch::Tensor future_;
};
TORCH_MODULE_IMPL(transformer, transformer_impl);

}  // namespace text
