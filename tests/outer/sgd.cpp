// ctest-labels: unit
#include "diloco/outer/sgd.hpp"

#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "diloco/outer/nesterov.hpp"
#include "support/numeric.hpp"

namespace outer_sgd_test {

using diloco::corrupt_state;
using diloco::outer::sgd;
using diloco::test::check_close;
using diloco::test::scalar_types;
using diloco::test::tolerance;

BOOST_AUTO_TEST_SUITE(outer_sgd)

BOOST_AUTO_TEST_CASE_TEMPLATE(steps_by_hand, T, scalar_types) {
  // η = 0.7: Θ = (1, 2, −0.5) − 0.7·(0.5, −1, 0.25) = (0.65, 2.7, −0.675);
  // again with Δ = (0.1, 0.1, 0.1): (0.58, 2.63, −0.745).
  sgd<T> opt({0.7});
  std::vector<T> global{T(1), T(2), T(-0.5)};
  opt.step(0, global, std::vector<T>{T(0.5), T(-1), T(0.25)});
  check_close(global, {0.65, 2.7, -0.675}, tolerance<T>);
  opt.step(0, global, std::vector<T>{T(0.1), T(0.1), T(0.1)});
  check_close(global, {0.58, 2.63, -0.745}, tolerance<T>);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(learning_rate_one_is_federated_averaging, T, scalar_types) {
  // Θ = 1, learners at 0.5 and 0.75: Δ = 1 − (0.5 + 0.75)/2 = 0.375, Θ − Δ = 0.625.
  sgd<T> opt;
  BOOST_TEST(opt.options().learning_rate == 1.0);
  std::vector<T> global{T(1)};
  opt.step(3, global, std::vector<T>{T(0.375)});
  BOOST_TEST(global[0] == T(0.625));
}

BOOST_AUTO_TEST_CASE_TEMPLATE(fragments_share_no_state, T, scalar_types) {
  sgd<T> opt({0.5});
  std::vector<T> a{T(1), T(1)};
  std::vector<T> b{T(1), T(1)};
  opt.step(0, a, std::vector<T>{T(1), T(2)});
  opt.step(7, b, std::vector<T>{T(1), T(2)});
  BOOST_TEST(a == b, boost::test_tools::per_element());
  BOOST_TEST(a == (std::vector<T>{T(0.5), T(0)}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(invalid_options_throw) {
  BOOST_CHECK_THROW(sgd<float>({-0.1}), std::invalid_argument);
  BOOST_CHECK_THROW(sgd<double>({std::numeric_limits<double>::quiet_NaN()}), std::invalid_argument);
  BOOST_CHECK_NO_THROW(sgd<double>({0.0}));
}

BOOST_AUTO_TEST_CASE(save_load_round_trip_and_bad_blocks) {
  sgd<float> opt({0.5});
  std::stringstream state;
  opt.save(state);
  const std::string bytes = state.str();
  BOOST_CHECK_NO_THROW(opt.load(state));

  for (std::size_t length = 0; length < bytes.size(); ++length) {
    std::istringstream in(bytes.substr(0, length));
    BOOST_CHECK_THROW(opt.load(in), corrupt_state);
  }

  std::stringstream nesterov_state;
  diloco::outer::nesterov<float>{}.save(nesterov_state);
  BOOST_CHECK_THROW(opt.load(nesterov_state), corrupt_state);

  // Still usable and unchanged: 1 − 0.5·1.
  std::vector<float> global{1.0f};
  opt.step(0, global, std::vector<float>{1.0f});
  BOOST_TEST(global[0] == 0.5f);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace outer_sgd_test
