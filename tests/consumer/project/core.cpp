// A program that uses diloco's core the way a downstream project with its own
// model on std::vector does: the umbrella header, a layout, a fragment plan
// and one outer Nesterov step, checked against values computed by hand. It is
// built against diloco::diloco alone, which must not put Eigen (or anything
// but the standard library) on the include path. Exits non-zero on a mismatch.
#if __has_include(<Eigen/Core>)
#error "diloco::diloco put Eigen on the include path: the core must need only the standard library"
#endif
#include <diloco/diloco.hpp>

#include <cstddef>
#include <cstdio>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "diloco core consumer: check failed: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  static_assert(diloco::version_major == 0 && diloco::version_minor == 1);

  // Three tensors, 12 parameters: w (6), b (2), emb (4, an embedding), in one
  // flat std::vector as the user's model keeps them.
  diloco::parameter_layout layout;
  layout.add("w", 6);
  layout.add("b", 2);
  layout.add("emb", 4, diloco::tensor_role::embedding);
  std::vector<float> parameters = {7, 7, 7, 7, 7, 7, 1, 2, 3, 4, 5, 6};
  expect(layout.size() == 12 && layout.tensor_count() == 3, "layout has 12 parameters in 3 tensors");

  // Two fragments of 6 (largest first into the lightest): {w} and {b, emb}.
  const auto plan = diloco::fragment_plan::balanced(layout, 2);
  expect(plan.count() == 2 && plan[0].size() == 6 && plan[1].size() == 6, "two fragments of 6 parameters");

  // One outer Nesterov step on fragment 1 with eta = mu = 0.5 from zero
  // momentum: m = delta and theta <- theta - eta (delta + mu m) = theta - 0.75 delta.
  std::vector<float> global(plan[1].size());
  plan.gather<float>(1, parameters, global);
  const std::vector<float> delta = {2.0f, 1.0f, 0.0f, -1.0f, 4.0f, 0.5f};
  diloco::outer::nesterov<float> outer({.learning_rate = 0.5, .momentum = 0.5});
  outer.step(1, global, delta);
  plan.scatter<float>(1, global, parameters);

  const std::vector<float> expected = {
      7, 7, 7, 7, 7, 7, 1.0f - 1.5f, 2.0f - 0.75f, 3.0f, 4.0f + 0.75f, 5.0f - 3.0f, 6.0f - 0.375f};
  expect(parameters == expected, "parameters after the outer step (fragment 0 untouched)");

  if (failures == 0) std::puts("diloco core consumer: ok");
  return failures == 0 ? 0 : 1;
}
