// ctest-labels: unit
#include "diloco/params/fragments.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "support/numeric.hpp"

namespace params_fragments_test {

using diloco::fragment_plan;
using diloco::fragment_schedule;
using diloco::fragment_slice;
using diloco::parameter_layout;
using diloco::tensor_role;

/// An MLP 784-256-256-10 with biases (269,322 parameters).
parameter_layout mlp() {
  parameter_layout layout;
  layout.add("fc1.weight", 784 * 256);
  layout.add("fc1.bias", 256);
  layout.add("fc2.weight", 256 * 256);
  layout.add("fc2.bias", 256);
  layout.add("fc3.weight", 256 * 10);
  layout.add("fc3.bias", 10);
  return layout;
}

/// A small transformer: a 32000×128 token embedding (4,096,000 parameters,
/// 63% of the model) and 12 equal blocks of 196,864 parameters.
parameter_layout transformer() {
  parameter_layout layout;
  layout.add("tok_embed", 32000 * 128, tensor_role::embedding);
  for (int b = 0; b < 12; ++b) {
    const std::string p = "block" + std::to_string(b) + ".";
    layout.add(p + "ln1", 128);
    layout.add(p + "qkv", 128 * 384);
    layout.add(p + "proj", 128 * 128);
    layout.add(p + "ln2", 128);
    layout.add(p + "mlp_up", 128 * 512);
    layout.add(p + "mlp_down", 512 * 128);
  }
  layout.add("ln_f", 128);
  return layout;
}

/// Checks the structural promises of a plan over `layout` and returns the size
/// of its largest fragment: every element is covered exactly once; slices stay
/// inside their tensor, carry its role, are sorted by flat offset, are packed
/// back to back from 0, and two touching pieces of one tensor are joined.
std::size_t check_plan(const parameter_layout& layout, const fragment_plan& plan, std::size_t count) {
  BOOST_TEST_REQUIRE(plan.count() == count);
  BOOST_TEST(plan.fragments().size() == count);
  BOOST_TEST(plan.total_size() == layout.size());
  std::vector<int> coverage(layout.size(), 0);
  std::size_t largest = 0;
  for (std::size_t p = 0; p < count; ++p) {
    const auto& f = plan[p];
    std::size_t packed = 0;
    const fragment_slice* previous = nullptr;
    for (const auto& s : f.slices()) {
      BOOST_TEST_REQUIRE(s.tensor < layout.tensor_count());
      const auto& t = layout[s.tensor];
      BOOST_TEST(s.size > 0u);
      BOOST_TEST(s.flat_offset >= t.offset);
      BOOST_TEST(s.flat_offset + s.size <= t.offset + t.size);
      BOOST_TEST((s.role == t.role));
      BOOST_TEST(s.packed_offset == packed);
      packed += s.size;
      if (previous) {
        BOOST_TEST(previous->flat_offset + previous->size <= s.flat_offset);
        BOOST_TEST(!(previous->tensor == s.tensor && previous->flat_offset + previous->size == s.flat_offset),
                   "touching pieces of tensor " << s.tensor << " were not joined");
      }
      previous = &s;
      for (std::size_t i = s.flat_offset; i < s.flat_offset + s.size && i < coverage.size(); ++i) ++coverage[i];
    }
    BOOST_TEST(f.size() == packed);
    BOOST_TEST(f.size() > 0u);
    largest = std::max(largest, f.size());
  }
  const auto wrong = std::count_if(coverage.begin(), coverage.end(), [](int c) { return c != 1; });
  BOOST_TEST(wrong == 0, wrong << " elements are not covered exactly once");
  return largest;
}

/// max fragment size × P / total, from the fragment sizes.
double expected_imbalance(std::size_t largest, std::size_t count, std::size_t total) {
  return static_cast<double>(largest) * static_cast<double>(count) / static_cast<double>(total);
}

std::multiset<std::size_t> fragment_sizes(const fragment_plan& plan) {
  std::multiset<std::size_t> sizes;
  for (const auto& f : plan.fragments()) sizes.insert(f.size());
  return sizes;
}

/// Steps in [0, last] at which fragment `p` is due.
std::vector<std::uint64_t> due_steps(const fragment_schedule& schedule, std::uint32_t p, std::uint64_t last) {
  std::vector<std::uint64_t> steps;
  for (std::uint64_t s = 0; s <= last; ++s)
    if (schedule.due(p, s)) steps.push_back(s);
  return steps;
}

BOOST_AUTO_TEST_SUITE(params_fragments)

// Regression: cutting a tensor into ceil(size / (total/P)) equal pieces left
// pieces just under total/P that could not share a fragment, so one fragment
// took two: P = 3 gave 1.475 (132,437 · 3 / 269,322), P = 6 gave 1.460, P = 7
// gave 1.703 (fc2 in two pieces of 32,768 together: 65,536 · 7 / 269,322).
BOOST_AUTO_TEST_CASE(mlp_plans_cover_everything_once_and_are_balanced) {
  const auto layout = mlp();
  BOOST_TEST(layout.size() == 269322u);  // 200704 + 256 + 65536 + 256 + 2560 + 10
  for (std::size_t count = 1; count <= 8; ++count) {
    BOOST_TEST_CONTEXT("P = " << count) {
      const auto plan = fragment_plan::balanced(layout, count);
      const std::size_t largest = check_plan(layout, plan, count);
      const double imbalance = expected_imbalance(largest, count, layout.size());
      BOOST_TEST(plan.imbalance() == imbalance, boost::test_tools::tolerance(1e-12));
      BOOST_TEST(plan.imbalance() >= 1.0);
      BOOST_TEST(plan.imbalance() <= 4.0 / 3.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(transformer_plans_cut_the_embedding_and_are_balanced) {
  const auto layout = transformer();
  BOOST_TEST(layout.size() == 6458496u);  // 4096000 + 12 · 196864 + 128
  for (std::size_t count = 1; count <= 8; ++count) {
    BOOST_TEST_CONTEXT("P = " << count) {
      const auto plan = fragment_plan::balanced(layout, count);
      const std::size_t largest = check_plan(layout, plan, count);
      BOOST_TEST(plan.imbalance() == expected_imbalance(largest, count, layout.size()),
                 boost::test_tools::tolerance(1e-12));
      BOOST_TEST(plan.imbalance() <= 4.0 / 3.0);
      // For P ≥ 2 the embedding exceeds total / P, so it must be spread over
      // more than one fragment.
      std::size_t holding_embedding = 0;
      for (const auto& f : plan.fragments())
        holding_embedding +=
            std::any_of(f.slices().begin(), f.slices().end(), [](const fragment_slice& s) { return s.tensor == 0; });
      if (count >= 2) BOOST_TEST(holding_embedding >= 2u);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_tensor_larger_than_the_target_is_cut_into_target_sized_pieces) {
  // total = 120, P = 4: T = 30, limit T + T/8 = 33. "big" (100) is cut into
  // [0,30) [30,60) [60,90) and the remainder [90,100). Largest first: the three
  // 30s take three empty fragments; then the 10s in flat order, big[90,100),
  // s1, s2, all go to the fourth (10, 20, 30 ≤ 33): every fragment holds 30.
  parameter_layout layout;
  layout.add("big", 100);
  layout.add("s1", 10);
  layout.add("s2", 10);
  const auto plan = fragment_plan::balanced(layout, 4);
  const std::size_t largest = check_plan(layout, plan, 4);
  BOOST_TEST(largest == 30u);
  BOOST_TEST((fragment_sizes(plan) == std::multiset<std::size_t>{30, 30, 30, 30}));
  BOOST_TEST(plan.imbalance() == 1.0, boost::test_tools::tolerance(1e-12));

  std::multiset<std::pair<std::size_t, std::size_t>> big_pieces;  // (offset, size)
  for (const auto& f : plan.fragments()) {
    for (const auto& s : f.slices())
      if (s.tensor == 0) big_pieces.insert({s.flat_offset, s.size});
    if (f.slices().size() == 3u) {  // the fourth: big's remainder, s1, s2
      BOOST_TEST(f.slices()[0].tensor == 0u);
      BOOST_TEST(f.slices()[0].flat_offset == 90u);
      BOOST_TEST(f.slices()[1].tensor == 1u);
      BOOST_TEST(f.slices()[2].tensor == 2u);
    }
  }
  BOOST_TEST((big_pieces == std::multiset<std::pair<std::size_t, std::size_t>>{{0, 30}, {30, 30}, {60, 30}, {90, 10}}));
}

BOOST_AUTO_TEST_CASE(a_piece_that_would_overflow_its_fragment_is_cut) {
  // Five tensors of 10, P = 4: T = 13, limit 13 + 1 = 14. None is cut up
  // front. t0..t3 take the four fragments (10 each). t4 [40,50) would make
  // 20 > 14: fragment 0 is filled to 13 with [40,43); the rest [43,50) (7)
  // would make 17 in fragment 1: filled to 13 with [43,46); the rest [46,50)
  // (4) fits fragment 2 (14 ≤ 14). Sizes {13, 13, 14, 10}: 14 · 4 / 50 = 1.12,
  // where plain LPT gives 20 · 4 / 50 = 1.6.
  parameter_layout layout;
  for (int t = 0; t < 5; ++t) layout.add(std::string(1, 't').append(std::to_string(t)), 10);
  const auto plan = fragment_plan::balanced(layout, 4);
  check_plan(layout, plan, 4);
  BOOST_TEST((fragment_sizes(plan) == std::multiset<std::size_t>{10, 13, 13, 14}));
  BOOST_TEST(plan.imbalance() == 14.0 * 4 / 50, boost::test_tools::tolerance(1e-12));
  std::multiset<std::pair<std::size_t, std::size_t>> t4_pieces;
  for (const auto& f : plan.fragments())
    for (const auto& s : f.slices())
      if (s.tensor == 4) t4_pieces.insert({s.flat_offset, s.size});
  BOOST_TEST((t4_pieces == std::multiset<std::pair<std::size_t, std::size_t>>{{40, 3}, {43, 3}, {46, 4}}));
}

BOOST_AUTO_TEST_CASE(rounding_never_leaves_a_fragment_empty) {
  // One tensor of 10, P = 6: T = 2, limit 2, so five pieces of 2 fill five
  // fragments and the sixth stays empty; the first heaviest fragment's slice
  // [0,2) is halved into it: sizes {1, 1, 2, 2, 2, 2}, 2 · 6 / 10 = 1.2.
  parameter_layout layout;
  layout.add("w", 10);
  const auto plan = fragment_plan::balanced(layout, 6);
  check_plan(layout, plan, 6);
  BOOST_TEST((fragment_sizes(plan) == std::multiset<std::size_t>{1, 1, 2, 2, 2, 2}));
  BOOST_TEST(plan.imbalance() == 1.2, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(random_layouts_stay_within_the_documented_bound) {
  // max fragment ≤ T + T/8 with T = ceil(total / P), every fragment non-empty,
  // and no fragment holds two touching slices of one tensor.
  std::uint64_t state = 12345;
  auto next = [&state](std::uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  for (int trial = 0; trial < 200; ++trial) {
    parameter_layout layout;
    const auto tensors = 1 + next(12);
    for (std::uint64_t t = 0; t < tensors; ++t)
      layout.add(std::string(1, 't').append(std::to_string(t)), 1 + next(next(2) ? 50 : 5000));
    for (std::size_t p = 1; p <= std::min<std::size_t>(16, layout.size()); ++p) {
      const auto plan = fragment_plan::balanced(layout, p);
      const std::size_t largest = check_plan(layout, plan, p);
      const std::size_t target = (layout.size() + p - 1) / p;
      BOOST_TEST(largest <= target + target / 8, "trial " << trial << ", P = " << p);
      for (const auto& f : plan.fragments()) {
        BOOST_TEST(f.size() > 0u);
        for (std::size_t i = 1; i < f.slices().size(); ++i) {
          const auto& a = f.slices()[i - 1];
          const auto& b = f.slices()[i];
          BOOST_TEST(!(a.tensor == b.tensor && a.flat_offset + a.size == b.flat_offset));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(one_fragment_per_element_is_allowed) {
  parameter_layout layout;
  layout.add("a", 3);
  layout.add("e", 2, tensor_role::embedding);
  const auto plan = fragment_plan::balanced(layout, 5);
  check_plan(layout, plan, 5);
  for (const auto& f : plan.fragments()) BOOST_TEST(f.size() == 1u);
  BOOST_TEST(plan.imbalance() == 1.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_single_fragment_holds_every_tensor_whole) {
  const auto layout = mlp();
  const auto plan = fragment_plan::balanced(layout, 1);
  check_plan(layout, plan, 1);
  BOOST_TEST_REQUIRE(plan[0].slices().size() == layout.tensor_count());
  for (std::size_t t = 0; t < layout.tensor_count(); ++t) {
    BOOST_TEST(plan[0].slices()[t].tensor == t);
    BOOST_TEST(plan[0].slices()[t].flat_offset == layout[t].offset);
    BOOST_TEST(plan[0].slices()[t].packed_offset == layout[t].offset);
    BOOST_TEST(plan[0].slices()[t].size == layout[t].size);
  }
  BOOST_TEST(plan.imbalance() == 1.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(bad_fragment_counts_throw) {
  parameter_layout layout;
  layout.add("a", 3);
  layout.add("b", 2);
  BOOST_CHECK_THROW(fragment_plan::balanced(layout, 0), std::invalid_argument);
  BOOST_CHECK_THROW(fragment_plan::balanced(layout, 6), std::invalid_argument);
  BOOST_CHECK_THROW(fragment_plan::balanced(parameter_layout{}, 1), std::invalid_argument);
  BOOST_CHECK_NO_THROW(fragment_plan::balanced(layout, 5));
}

BOOST_AUTO_TEST_CASE(a_default_plan_is_empty) {
  const fragment_plan plan;
  BOOST_TEST(plan.count() == 0u);
  BOOST_TEST(plan.total_size() == 0u);
  BOOST_TEST(plan.imbalance() == 0.0);
}

BOOST_AUTO_TEST_CASE(equal_layouts_give_identical_plans) {
  for (std::size_t count : {1u, 3u, 7u}) {
    const auto a = fragment_plan::balanced(transformer(), count);
    const auto b = fragment_plan::balanced(transformer(), count);
    BOOST_TEST_REQUIRE(a.count() == b.count());
    for (std::size_t p = 0; p < count; ++p) {
      BOOST_TEST_REQUIRE(a[p].slices().size() == b[p].slices().size());
      BOOST_TEST(a[p].size() == b[p].size());
      for (std::size_t i = 0; i < a[p].slices().size(); ++i) {
        const auto& x = a[p].slices()[i];
        const auto& y = b[p].slices()[i];
        BOOST_TEST(x.tensor == y.tensor);
        BOOST_TEST(x.flat_offset == y.flat_offset);
        BOOST_TEST(x.packed_offset == y.packed_offset);
        BOOST_TEST(x.size == y.size);
        BOOST_TEST((x.role == y.role));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE_TEMPLATE(gather_then_scatter_round_trips, T, diloco::test::scalar_types) {
  parameter_layout layout;
  layout.add("embed", 40, tensor_role::embedding);
  layout.add("w", 17);
  layout.add("b", 3);
  layout.add("v", 9);
  const auto plan = fragment_plan::balanced(layout, 4);
  check_plan(layout, plan, 4);

  std::vector<T> flat(layout.size());
  for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = T(i) + T(0.5);

  std::vector<T> rebuilt(layout.size(), T(-1));
  for (std::size_t p = 0; p < plan.count(); ++p) {
    std::vector<T> packed(plan[p].size(), T(-2));
    plan.gather<T>(p, flat, packed);
    for (const auto& s : plan[p].slices())
      for (std::size_t j = 0; j < s.size; ++j) BOOST_TEST(packed[s.packed_offset + j] == flat[s.flat_offset + j]);

    // Scattering fragment p alone writes exactly its elements.
    std::vector<T> alone(layout.size(), T(0));
    plan.scatter<T>(p, packed, alone);
    std::size_t written = 0;
    for (std::size_t i = 0; i < alone.size(); ++i) written += alone[i] != T(0);
    BOOST_TEST(written == plan[p].size());

    plan.scatter<T>(p, packed, rebuilt);
  }
  BOOST_TEST(rebuilt == flat, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(schedule_h8_p4_by_hand) {
  // offsets ⌊p·8/4⌋ = 0, 2, 4, 6; fragment p is due at offset + kH, s ≥ 1.
  const fragment_schedule schedule(8, 4);
  BOOST_TEST(schedule.sync_period() == 8u);
  BOOST_TEST(schedule.fragments() == 4u);
  BOOST_TEST(schedule.offset(0) == 0u);
  BOOST_TEST(schedule.offset(1) == 2u);
  BOOST_TEST(schedule.offset(2) == 4u);
  BOOST_TEST(schedule.offset(3) == 6u);
  using steps = std::vector<std::uint64_t>;
  BOOST_TEST(due_steps(schedule, 0, 24) == (steps{8, 16, 24}), boost::test_tools::per_element());
  BOOST_TEST(due_steps(schedule, 1, 24) == (steps{2, 10, 18}), boost::test_tools::per_element());
  BOOST_TEST(due_steps(schedule, 2, 24) == (steps{4, 12, 20}), boost::test_tools::per_element());
  BOOST_TEST(due_steps(schedule, 3, 24) == (steps{6, 14, 22}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(schedule_h5_p3_by_hand) {
  // offsets ⌊0·5/3⌋ = 0, ⌊5/3⌋ = 1, ⌊10/3⌋ = 3.
  const fragment_schedule schedule(5, 3);
  BOOST_TEST(schedule.offset(1) == 1u);
  BOOST_TEST(schedule.offset(2) == 3u);
  using steps = std::vector<std::uint64_t>;
  BOOST_TEST(due_steps(schedule, 0, 16) == (steps{5, 10, 15}), boost::test_tools::per_element());
  BOOST_TEST(due_steps(schedule, 1, 16) == (steps{1, 6, 11, 16}), boost::test_tools::per_element());
  BOOST_TEST(due_steps(schedule, 2, 16) == (steps{3, 8, 13}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(schedule_with_one_fragment_sends_every_h_steps) {
  const fragment_schedule schedule(4, 1);
  using steps = std::vector<std::uint64_t>;
  BOOST_TEST(due_steps(schedule, 0, 13) == (steps{4, 8, 12}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(schedule_with_p_equal_h_sends_one_fragment_per_step) {
  for (std::uint32_t h : {1u, 2u, 6u, 10u}) {
    const fragment_schedule schedule(h, h);
    BOOST_TEST(!schedule.due(0, 0));
    for (std::uint64_t s = h; s < 5 * h; ++s) {
      std::uint32_t due = 0;
      std::uint32_t which = h;
      for (std::uint32_t p = 0; p < h; ++p)
        if (schedule.due(p, s)) {
          ++due;
          which = p;
        }
      BOOST_TEST(due == 1u, "H = P = " << h << ", step " << s);
      BOOST_TEST(which == s % h);  // offset(p) = p
    }
  }
}

BOOST_AUTO_TEST_CASE(every_fragment_is_due_once_per_period) {
  const fragment_schedule schedule(7, 3);
  for (std::uint32_t p = 0; p < 3; ++p)
    for (std::uint64_t window = 7; window < 70; window += 7) {
      int due = 0;
      for (std::uint64_t s = window; s < window + 7; ++s) due += schedule.due(p, s);
      BOOST_TEST(due == 1, "fragment " << p << ", steps " << window << "..." << window + 6);
    }
}

BOOST_AUTO_TEST_CASE(step_zero_is_never_due) {
  for (std::uint32_t h : {1u, 3u, 8u})
    for (std::uint32_t count : {1u, 2u, 8u}) {
      const fragment_schedule schedule(h, count);
      for (std::uint32_t p = 0; p < count; ++p) BOOST_TEST(!schedule.due(p, 0));
    }
}

BOOST_AUTO_TEST_CASE(schedule_rejects_zero_period_or_fragments) {
  BOOST_CHECK_THROW(fragment_schedule(0, 1), std::invalid_argument);
  BOOST_CHECK_THROW(fragment_schedule(1, 0), std::invalid_argument);
  BOOST_CHECK_THROW(fragment_schedule(0, 0), std::invalid_argument);
  BOOST_CHECK_NO_THROW(fragment_schedule(1, 1));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace params_fragments_test
