// diloco::zeromq::learner_ids: the set of learner ids one CURVE key may speak
// for, and its text form (`0-3,7`, `*`) used by key files and allow-lists.
#pragma once

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace diloco::zeromq {

namespace detail {

/// `s` without leading and trailing blanks (spaces, tabs, carriage returns).
inline std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  const auto e = s.find_last_not_of(" \t\r");
  return b == std::string_view::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

}  // namespace detail

/// A set of learner ids: the ids one CURVE key may speak for. Written as ids
/// and inclusive ranges separated by commas (`0-3,7,9-12`), or `*` for any
/// id. Held as sorted, merged ranges: `contains` costs O(log ranges).
class learner_ids {
 public:
  /// No id at all.
  learner_ids() = default;

  /// Every id.
  static learner_ids any() {
    learner_ids ids;
    ids.any_ = true;
    return ids;
  }

  /// Parses the text form. Throws `std::invalid_argument` that quotes the
  /// text and names what is wrong with it.
  static learner_ids parse(std::string_view text) {
    const auto bad = [text](const std::string& why) {
      return std::invalid_argument("learner ids '" + std::string(text) + "': " + why);
    };
    const std::string all = detail::trim(text);
    if (all == "*") return any();
    if (all.empty()) throw bad("empty; write ids and ranges like 0-3,7 or * for any learner");
    learner_ids ids;
    for (std::size_t start = 0;;) {
      const auto comma = all.find(',', start);
      const std::string item = detail::trim(
          std::string_view(all).substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (item.empty()) throw bad("an empty item between commas");
      if (item == "*") throw bad("'*' stands alone (it already means any learner)");
      const auto dash = item.find('-');
      const auto first =
          number(dash == std::string::npos ? item : detail::trim(std::string_view(item).substr(0, dash)));
      const auto last =
          dash == std::string::npos ? first : number(detail::trim(std::string_view(item).substr(dash + 1)));
      if (!first || !last) throw bad("'" + item + "' is neither an id (0 to 4294967295) nor a range of ids (A-B)");
      if (*last < *first) throw bad("the range '" + item + "' ends before it starts");
      ids.add(*first, *last);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return ids;
  }

  /// Adds ids `first` to `last`, both included (`first <= last`).
  learner_ids& add(std::uint32_t first, std::uint32_t last) {
    assert(first <= last);
    if (any_) return *this;
    std::vector<range> merged;
    merged.reserve(ranges_.size() + 1);
    range r{first, last};
    bool placed = false;
    for (const auto& x : ranges_) {
      if (x.last < r.first && r.first - x.last > 1) {
        merged.push_back(x);
      } else if (r.last < x.first && x.first - r.last > 1) {
        if (!placed) merged.push_back(r);
        placed = true;
        merged.push_back(x);
      } else {
        r.first = std::min(r.first, x.first);
        r.last = std::max(r.last, x.last);
      }
    }
    if (!placed) merged.push_back(r);
    ranges_ = std::move(merged);
    return *this;
  }

  bool contains(std::uint32_t id) const noexcept {
    if (any_) return true;
    const auto after = std::upper_bound(ranges_.begin(), ranges_.end(), id,
                                        [](std::uint32_t v, const range& r) { return v < r.first; });
    return after != ranges_.begin() && std::prev(after)->last >= id;
  }

  bool is_any() const noexcept { return any_; }
  bool empty() const noexcept { return !any_ && ranges_.empty(); }

  /// The canonical text: `*`, or merged ranges in increasing order
  /// (`0-3,7`); empty for no id. `parse(to_string())` gives the same set.
  std::string to_string() const {
    if (any_) return "*";
    std::string out;
    for (const auto& r : ranges_) {
      if (!out.empty()) out += ',';
      out += std::to_string(r.first);
      if (r.last != r.first) out += '-' + std::to_string(r.last);
    }
    return out;
  }

  friend bool operator==(const learner_ids&, const learner_ids&) = default;

 private:
  struct range {
    std::uint32_t first, last;
    friend bool operator==(const range&, const range&) = default;
  };

  static std::optional<std::uint32_t> number(const std::string& digits) {
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    std::uint32_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
    return v;
  }

  bool any_ = false;
  std::vector<range> ranges_;  ///< sorted, neither overlapping nor touching
};

}  // namespace diloco::zeromq
