// A program that uses diloco the way a downstream project with an Eigen model
// does: the umbrella header and the Eigen adapter (component `eigen`), a
// layout, a fragment plan and one outer Nesterov step, checked against values
// computed by hand. Exits non-zero on a mismatch.
#include <diloco/adapters/eigen.hpp>
#include <diloco/diloco.hpp>

#include <cstddef>
#include <cstdio>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "diloco consumer: check failed: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  static_assert(diloco::version_major == 0 && diloco::version_minor == 1);

  // Three tensors, 12 parameters: w (2×3), b (2×1), emb (4×1, an embedding).
  diloco::eigen::parameter_store<float> store;
  const std::size_t w = store.add("w", 2, 3);
  const std::size_t b = store.add("b", 2, 1);
  const std::size_t emb = store.add("emb", 4, 1, diloco::tensor_role::embedding);
  store.param(w).setConstant(7.0f);
  store.param(b) << 1.0f, 2.0f;
  store.param(emb) << 3.0f, 4.0f, 5.0f, 6.0f;
  const diloco::parameter_layout& layout = store.layout();
  expect(layout.size() == 12 && layout.tensor_count() == 3, "layout has 12 parameters in 3 tensors");

  // Two fragments of 6 (largest first into the lightest): {w} and {b, emb},
  // the second packed as b at 0 and emb at 2.
  const auto plan = diloco::fragment_plan::balanced(layout, 2);
  expect(plan.count() == 2, "two fragments");
  expect(plan[0].size() == 6 && plan[1].size() == 6, "fragments of 6 parameters each");
  expect(plan[1].slices().size() == 2 && plan[1].slices()[0].flat_offset == 6 &&
             plan[1].slices()[0].packed_offset == 0 && plan[1].slices()[1].flat_offset == 8 &&
             plan[1].slices()[1].packed_offset == 2 && plan[1].slices()[1].role == diloco::tensor_role::embedding,
         "fragment 1 is b then emb");

  // One outer Nesterov step on fragment 1 with η = μ = 0.5 from zero momentum:
  // m = Δ and Θ ← Θ − η(Δ + μ·m) = Θ − 0.75·Δ.
  std::vector<float> global(plan[1].size());
  plan.gather<float>(1, store.parameters(), global);
  const std::vector<float> delta = {2.0f, 1.0f, 0.0f, -1.0f, 4.0f, 0.5f};
  diloco::outer::nesterov<float> outer({.learning_rate = 0.5, .momentum = 0.5});
  outer.step(1, global, delta);
  plan.scatter<float>(1, global, store.parameters());

  const float expected_b[] = {1.0f - 1.5f, 2.0f - 0.75f};
  const float expected_emb[] = {3.0f, 4.0f + 0.75f, 5.0f - 3.0f, 6.0f - 0.375f};
  for (Eigen::Index i = 0; i < 2; ++i) expect(store.param(b)(i, 0) == expected_b[i], "b after the outer step");
  for (Eigen::Index i = 0; i < 4; ++i) expect(store.param(emb)(i, 0) == expected_emb[i], "emb after the outer step");
  expect((store.param(w).array() == 7.0f).all(), "w (fragment 0) untouched");
  expect(outer.momentum(1).size() == 6 && outer.momentum(1)[4] == 4.0f, "momentum of fragment 1 is delta");

  if (failures == 0) std::puts("diloco consumer: ok");
  return failures == 0 ? 0 : 1;
}
