// The text char_lm trains on: a public-domain English corpus from a Debian
// package (the King James Bible of bible-kjv, 4.3 MB), its characters as
// tokens, split by position into training text (the first 90 %) and
// validation text (the rest, from Acts 22 to the end, never trained on).
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <diloco/random.hpp>

namespace text {

/// A text that cannot be loaded: missing, unreadable or too short.
struct corpus_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The whole King James Bible as the `bible` program of Debian's bible-kjv
/// prints it (one verse per line, numbered, chapters headed).
inline std::string king_james_bible() {
  constexpr const char* command = "bible gen1:1-rev22:21 2>/dev/null";
  FILE* pipe = ::popen(command, "r");
  if (pipe == nullptr) throw corpus_error("cannot run `bible`");
  std::string out;
  std::array<char, 1 << 16> chunk{};
  std::size_t n;
  while ((n = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0) out.append(chunk.data(), n);
  const int status = ::pclose(pipe);
  if (status != 0 || out.size() < 1'000'000)
    throw corpus_error(
        "`bible gen1:1-rev22:21` did not print the King James Bible (install Debian's bible-kjv "
        "package, or pass --text FILE)");
  return out;
}

/// A text as token ids: its distinct bytes, in byte order, are the
/// vocabulary.
class corpus {
 public:
  /// `path` empty: the King James Bible. Throws `corpus_error`.
  explicit corpus(const std::string& path, double validation_share = 0.1) {
    std::string raw;
    if (path.empty()) {
      raw = king_james_bible();
      name_ = "King James Bible (bible-kjv)";
    } else {
      std::ifstream in(path, std::ios::binary);
      if (!in) throw corpus_error("cannot read " + path);
      raw.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      name_ = path;
    }
    std::array<int, 256> id;
    id.fill(-1);
    for (unsigned char c : raw) id[c] = 0;
    for (int c = 0; c < 256; ++c)
      if (id[c] == 0) {
        id[c] = static_cast<int>(alphabet_.size());
        alphabet_.push_back(static_cast<char>(c));
      }
    tokens_.reserve(raw.size());
    for (unsigned char c : raw) tokens_.push_back(static_cast<std::uint8_t>(id[c]));
    split_ = static_cast<std::size_t>(double(tokens_.size()) * (1.0 - validation_share));
    if (alphabet_.size() < 2 || split_ < 10'000 || tokens_.size() - split_ < 10'000)
      throw corpus_error(name_ + " is too short: at least 10 000 characters of training and of validation text");
  }

  const std::string& name() const noexcept { return name_; }
  std::size_t vocabulary() const noexcept { return alphabet_.size(); }
  std::size_t size() const noexcept { return tokens_.size(); }
  /// Tokens [0, split) train, [split, size) validate.
  std::size_t split() const noexcept { return split_; }
  const std::uint8_t* tokens() const noexcept { return tokens_.data(); }

 private:
  std::string name_;
  std::string alphabet_;
  std::vector<std::uint8_t> tokens_;
  std::size_t split_ = 0;
};

/// A batch: `rows` windows of `context + 1` tokens each (inputs are the first
/// `context`, targets the last `context`), row-major.
struct batch {
  std::uint32_t rows = 0;
  std::uint32_t context = 0;
  std::vector<std::int64_t> tokens;
};

/// How the training text is dealt out to the learners.
enum class data_split {
  /// Every learner draws its windows from the whole training text, each in
  /// its own seeded order: independent, identically distributed samples, as
  /// a shuffled data loader gives every replica.
  shuffled,
  /// Learner i of M draws only from its own contiguous share i of the text
  /// (the Bible's books in order): each learner sees a different
  /// distribution, the non-IID case.
  shares,
};

/// Learner `index`'s windows: uniformly placed in the whole training text or
/// in its own share of it (`data_split`), in a seeded order.
class sampler {
 public:
  sampler(const corpus& c, std::uint32_t learners, std::uint32_t index, std::uint32_t context, std::uint64_t seed,
          data_split split = data_split::shuffled)
      : corpus_(&c), context_(context), rng_(seed * 1'000'003 + index + 29) {
    const std::size_t share = split == data_split::shares ? c.split() / learners : c.split();
    begin_ = split == data_split::shares ? share * index : 0;
    end_ = begin_ + share;
    if (share < std::size_t(context) + 2)
      throw std::invalid_argument("the training text is too short for " + std::to_string(learners) +
                                  " learners' shares of windows of " + std::to_string(context) + " characters");
  }

  batch next(std::uint32_t rows) {
    batch b{rows, context_, {}};
    b.tokens.resize(std::size_t(rows) * (context_ + 1));
    for (std::uint32_t r = 0; r < rows; ++r) {
      const std::size_t at = begin_ + rng_.below(end_ - begin_ - context_ - 1);
      for (std::uint32_t t = 0; t <= context_; ++t) b.tokens[r * (context_ + 1) + t] = corpus_->tokens()[at + t];
    }
    return b;
  }

 private:
  const corpus* corpus_;
  std::uint32_t context_;
  diloco::splitmix64 rng_;
  std::size_t begin_ = 0, end_ = 0;
};

/// The validation windows: `count` windows spread evenly over the
/// validation text, the same for every run.
inline batch validation_windows(const corpus& c, std::uint32_t context, std::uint32_t count) {
  batch b{count, context, {}};
  const std::size_t span = c.size() - c.split() - context - 1;
  b.tokens.resize(std::size_t(count) * (context + 1));
  for (std::uint32_t r = 0; r < count; ++r) {
    const std::size_t at = c.split() + span * r / count;
    for (std::uint32_t t = 0; t <= context; ++t) b.tokens[r * (context + 1) + t] = c.tokens()[at + t];
  }
  return b;
}

}  // namespace text
