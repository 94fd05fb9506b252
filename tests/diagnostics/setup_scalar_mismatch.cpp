// A preset bundle whose inner step works on doubles and whose outer
// optimizer on floats: the two ends of one configuration would not agree.
// expect-error: diloco::presets::setup: the inner step and the outer optimizer must have the same scalar_type
#include <diloco/diloco.hpp>

int main() {
  diloco::presets::setup<diloco::inner::adamw<double>, diloco::outer::nesterov<float>, diloco::merge::average> s;
  return static_cast<int>(s.max_learners);
}
