// A minimal `diloco::merge_policy` (docs/concepts/merge_policy.md): an
// elected-sign mean. Per element, the weighted sum of the contributions
// elects a sign; the merge is the weighted mean of the contributions of that
// sign only, so that learners pulling an element the other way do not cancel
// it out (the sign election of TIES-merging, Yadav et al. 2023). The weight
// is a separate `diloco::weighting`, as in the library's own merges.
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include <diloco/concepts/merge_policy.hpp>
#include <diloco/merge/weighted_mean.hpp>
#include <diloco/scalar.hpp>

/// A Weighting: a contribution weighs the inner steps behind it.
struct by_steps {
  double weight(std::uint64_t /*tokens*/, std::uint64_t steps) const { return static_cast<double>(steps); }
};

template <diloco::weighting W = by_steps>
struct elected_sign_mean : W {
  template <diloco::scalar T>
  void merge(std::span<const diloco::weighted_delta<T>> contributions,
             std::span<const diloco::fragment_slice> /*slices*/, std::span<T> out, double scale) const {
    for (std::size_t i = 0; i < out.size(); ++i) {
      double sum = 0.0;
      for (const auto& c : contributions) sum += c.weight * double(c.delta[i]);
      double elected = 0.0, weight = 0.0;
      for (const auto& c : contributions)
        if (double(c.delta[i]) * sum > 0.0) {
          elected += c.weight * double(c.delta[i]);
          weight += c.weight;
        }
      out[i] = weight > 0.0 ? T(scale * elected / weight) : T(0);
    }
  }
};

static_assert(diloco::check_merge_policy<elected_sign_mean<>, float>());
static_assert(diloco::check_merge_policy<elected_sign_mean<>, double>());
// The same weighting serves the library's merges too.
static_assert(diloco::check_merge_policy<diloco::merge::weighted_mean<by_steps>, float>());

int main() {
  const elected_sign_mean<> policy;
  const std::vector<float> a{1.0f, 2.0f, -1.0f}, b{3.0f, -2.0f, -1.0f};
  const std::vector<diloco::weighted_delta<float>> round{
      {a, policy.weight(/*tokens=*/64, /*steps=*/1)},
      {b, policy.weight(/*tokens=*/64, /*steps=*/3)},
  };
  const diloco::fragment_slice whole{.tensor = 0, .flat_offset = 0, .packed_offset = 0, .size = 3};
  std::vector<float> merged(3);
  policy.merge<float>(round, {&whole, 1}, merged, 0.5);  // a partial round: the syncer halves it
  std::vector<float> same(3);
  const std::vector<diloco::weighted_delta<float>> twice{{a, 1.0}, {a, 2.0}};
  policy.merge<float>(twice, {&whole, 1}, same, 1.0);
  std::printf("merged %.3f %.3f %.3f\n", double(merged[0]), double(merged[1]), double(merged[2]));
  // Element 0: (1·1 + 3·3) / 4 = 2.5; element 1: b alone outweighs a, −2; element 2: −1; each halved.
  const bool ok = merged == std::vector<float>{1.25f, -1.0f, -0.5f} && same == a;
  return ok ? 0 : 1;
}
