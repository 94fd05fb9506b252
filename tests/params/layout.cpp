// ctest-labels: unit
#include "diloco/params/layout.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include <boost/test/unit_test.hpp>

namespace params_layout_test {

using diloco::parameter_layout;
using diloco::tensor_role;

parameter_layout small_model() {
  parameter_layout layout;
  layout.add("embed", 12, tensor_role::embedding);
  layout.add("w", 6);
  layout.add("b", 3);
  return layout;
}

/// Checks that a failed `add` left `layout` exactly as `before`.
void check_unchanged(const parameter_layout& layout, const parameter_layout& before) {
  BOOST_TEST((layout == before));
  BOOST_TEST(layout.tensor_count() == before.tensor_count());
  BOOST_TEST(layout.size() == before.size());
  BOOST_TEST(layout.fingerprint() == before.fingerprint());
}

BOOST_AUTO_TEST_SUITE(params_layout)

BOOST_AUTO_TEST_CASE(tensors_are_packed_back_to_back) {
  parameter_layout layout;
  BOOST_TEST(layout.size() == 0u);
  BOOST_TEST(layout.tensor_count() == 0u);

  BOOST_TEST(layout.add("embed", 12, tensor_role::embedding) == 0u);
  BOOST_TEST(layout.add("w", 6) == 1u);
  BOOST_TEST(layout.add("b", 3) == 2u);

  // offsets: 0, 0 + 12 = 12, 12 + 6 = 18; size 18 + 3 = 21
  BOOST_TEST(layout.tensor_count() == 3u);
  BOOST_TEST(layout.size() == 21u);
  BOOST_TEST(layout[0].offset == 0u);
  BOOST_TEST(layout[1].offset == 12u);
  BOOST_TEST(layout[2].offset == 18u);
  BOOST_TEST(layout[0].size == 12u);
  BOOST_TEST(layout[1].size == 6u);
  BOOST_TEST(layout[2].size == 3u);
  BOOST_TEST((layout[0].role == tensor_role::embedding));
  BOOST_TEST((layout[1].role == tensor_role::dense));
  BOOST_TEST((layout[2].role == tensor_role::dense));
  BOOST_TEST(layout.tensors().size() == 3u);
  BOOST_TEST(layout.tensors()[1].name == "w");
}

BOOST_AUTO_TEST_CASE(find_returns_the_named_tensor_or_null) {
  const auto layout = small_model();
  const auto* w = layout.find("w");
  BOOST_TEST_REQUIRE(w != nullptr);
  BOOST_TEST(w == &layout[1]);
  BOOST_TEST(w->offset == 12u);
  BOOST_TEST(w->size == 6u);
  BOOST_TEST(layout.find("embed") == &layout[0]);
  BOOST_TEST(layout.find("missing") == nullptr);
  BOOST_TEST(layout.find("") == nullptr);
  BOOST_TEST(layout.find("W") == nullptr);  // names are case sensitive
  BOOST_TEST(parameter_layout{}.find("w") == nullptr);
}

BOOST_AUTO_TEST_CASE(bad_tensors_are_rejected_and_leave_the_layout_unchanged) {
  auto layout = small_model();
  const auto before = layout;

  BOOST_CHECK_THROW(layout.add("w", 4), std::invalid_argument);
  check_unchanged(layout, before);
  BOOST_CHECK_THROW(layout.add("embed", 4, tensor_role::embedding), std::invalid_argument);
  check_unchanged(layout, before);
  BOOST_CHECK_THROW(layout.add("", 4), std::invalid_argument);
  check_unchanged(layout, before);
  BOOST_CHECK_THROW(layout.add("c", 0), std::invalid_argument);
  check_unchanged(layout, before);

  // The layout still accepts good tensors after the failures, right after the last one.
  BOOST_TEST(layout.add("c", 4) == 3u);
  BOOST_TEST(layout[3].offset == 21u);
  BOOST_TEST(layout.size() == 25u);
}

BOOST_AUTO_TEST_CASE(empty_layout_fingerprint_is_the_fnv1a_offset_basis) {
  // FNV-1a of no bytes is the 64-bit offset basis 0xcbf29ce484222325.
  BOOST_TEST(parameter_layout{}.fingerprint() == std::uint64_t{0xcbf29ce484222325});
}

BOOST_AUTO_TEST_CASE(equal_layouts_have_equal_fingerprints) {
  const auto a = small_model();
  const auto b = small_model();
  BOOST_TEST(a.fingerprint() == b.fingerprint());
  BOOST_TEST((a == b));
  BOOST_TEST(a.fingerprint() != parameter_layout{}.fingerprint());
  BOOST_TEST(!(a == parameter_layout{}));
}

BOOST_AUTO_TEST_CASE(any_change_changes_the_fingerprint_and_equality) {
  const auto base = small_model();
  const auto differs = [&base](const parameter_layout& other, const char* what) {
    BOOST_TEST(other.fingerprint() != base.fingerprint(), what);
    BOOST_TEST(!(other == base), what);
    BOOST_TEST(!(base == other), what);
  };

  parameter_layout renamed;
  renamed.add("embed", 12, tensor_role::embedding);
  renamed.add("v", 6);
  renamed.add("b", 3);
  differs(renamed, "a name");

  parameter_layout resized;
  resized.add("embed", 12, tensor_role::embedding);
  resized.add("w", 7);
  resized.add("b", 3);
  differs(resized, "a size");

  parameter_layout retyped;
  retyped.add("embed", 12, tensor_role::dense);
  retyped.add("w", 6);
  retyped.add("b", 3);
  differs(retyped, "a role");

  parameter_layout reordered;
  reordered.add("embed", 12, tensor_role::embedding);
  reordered.add("b", 3);
  reordered.add("w", 6);
  differs(reordered, "the order");

  parameter_layout longer = small_model();
  longer.add("c", 1);
  differs(longer, "an extra tensor");

  parameter_layout shorter;
  shorter.add("embed", 12, tensor_role::embedding);
  shorter.add("w", 6);
  differs(shorter, "a missing tensor");
}

BOOST_AUTO_TEST_CASE(fingerprint_separates_names_and_sees_every_size_byte) {
  // The same characters split differently between two names.
  parameter_layout ab_c;
  ab_c.add("ab", 1);
  ab_c.add("c", 1);
  parameter_layout a_bc;
  a_bc.add("a", 1);
  a_bc.add("bc", 1);
  BOOST_TEST(ab_c.fingerprint() != a_bc.fingerprint());
  BOOST_TEST(!(ab_c == a_bc));

  // Sizes that differ only above the low 32 bits: 1 and 1 + 2^32.
  parameter_layout low;
  low.add("w", 1);
  parameter_layout high;
  high.add("w", 1 + (std::size_t{1} << 32));
  BOOST_TEST(low.fingerprint() != high.fingerprint());
  BOOST_TEST(!(low == high));
}

BOOST_AUTO_TEST_CASE(a_copy_compares_equal) {
  const auto a = small_model();
  const auto copy = a;
  BOOST_TEST((copy == a));
  BOOST_TEST(copy.fingerprint() == a.fingerprint());
  BOOST_TEST((a == a));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace params_layout_test
