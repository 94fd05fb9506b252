// Balanced tensor fragmentation and the staggered fragment schedule.
//
// Streaming DiLoCo (arXiv 2501.18512) synchronizes the model one fragment at a
// time so that traffic is spread over the sync period; Decoupled DiLoCo
// (arXiv 2604.21428) balances fragments by size. A fragment here is a list of
// slices of the flat parameter buffer; on the wire and at the syncer a fragment
// is those slices packed back to back in plan order ("packed" layout).
#pragma once

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "diloco/params/layout.hpp"

namespace diloco {

/// A contiguous run of one tensor that belongs to a fragment.
struct fragment_slice {
  std::uint32_t tensor = 0;       ///< index into the layout
  std::size_t flat_offset = 0;    ///< first element in the flat parameter buffer
  std::size_t packed_offset = 0;  ///< first element in the fragment's packed buffer
  std::size_t size = 0;           ///< elements
  tensor_role role = tensor_role::dense;
};

/// One fragment: its slices in flat order and its total size in elements.
class fragment {
 public:
  std::span<const fragment_slice> slices() const noexcept { return slices_; }
  std::size_t size() const noexcept { return size_; }

 private:
  friend class fragment_plan;
  std::vector<fragment_slice> slices_;
  std::size_t size_ = 0;
};

/// The partition of a layout into P fragments of near-equal size.
///
/// `balanced` packs tensors greedily, largest first, into the currently
/// lightest fragment (longest-processing-time bin packing); a tensor larger than
/// `total / P` elements is first cut at element boundaries into equal pieces.
/// Pieces of one tensor that land in the same fragment and touch are joined, so
/// a slice is always one tensor or one contiguous piece of it. The plan is a
/// pure function of (layout, P): learners and the syncer compute it
/// independently and agree.
class fragment_plan {
 public:
  fragment_plan() = default;

  /// Throws `std::invalid_argument` when `count` is 0 or exceeds the number of
  /// parameters.
  static fragment_plan balanced(const parameter_layout& layout, std::size_t count) {
    if (count == 0) throw std::invalid_argument("diloco::fragment_plan: fragment count must be at least 1");
    if (count > layout.size())
      throw std::invalid_argument("diloco::fragment_plan: " + std::to_string(count) +
                                  " fragments for only " + std::to_string(layout.size()) + " parameters");
    const std::size_t target = std::max<std::size_t>(1, layout.size() / count);

    struct piece {
      std::uint32_t tensor;
      std::size_t flat_offset;
      std::size_t size;
    };
    std::vector<piece> pieces;
    for (std::uint32_t t = 0; t < layout.tensor_count(); ++t) {
      const auto& info = layout[t];
      const std::size_t n = (info.size + target - 1) / target;  // pieces of at most ~target
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t begin = info.size * k / n;
        const std::size_t end = info.size * (k + 1) / n;
        pieces.push_back({t, info.offset + begin, end - begin});
      }
    }
    // Largest first; ties in flat order so the plan is deterministic.
    std::stable_sort(pieces.begin(), pieces.end(),
                     [](const piece& a, const piece& b) { return a.size > b.size; });

    fragment_plan plan;
    plan.fragments_.resize(count);
    for (const auto& pc : pieces) {
      auto lightest = std::min_element(plan.fragments_.begin(), plan.fragments_.end(),
                                       [](const fragment& a, const fragment& b) { return a.size_ < b.size_; });
      lightest->slices_.push_back({pc.tensor, pc.flat_offset, 0, pc.size, layout[pc.tensor].role});
      lightest->size_ += pc.size;
    }
    for (auto& f : plan.fragments_) {
      std::sort(f.slices_.begin(), f.slices_.end(),
                [](const fragment_slice& a, const fragment_slice& b) { return a.flat_offset < b.flat_offset; });
      std::vector<fragment_slice> joined;
      for (const auto& s : f.slices_) {
        if (!joined.empty() && joined.back().tensor == s.tensor &&
            joined.back().flat_offset + joined.back().size == s.flat_offset)
          joined.back().size += s.size;
        else
          joined.push_back(s);
      }
      std::size_t packed = 0;
      for (auto& s : joined) {
        s.packed_offset = packed;
        packed += s.size;
      }
      f.slices_ = std::move(joined);
    }
    plan.total_ = layout.size();
    return plan;
  }

  std::size_t count() const noexcept { return fragments_.size(); }
  const fragment& operator[](std::size_t p) const noexcept { return fragments_[p]; }
  std::span<const fragment> fragments() const noexcept { return fragments_; }

  /// Number of parameters covered (the layout's size).
  std::size_t total_size() const noexcept { return total_; }

  /// Largest fragment over the mean fragment size (1 is perfect balance).
  double imbalance() const noexcept {
    if (fragments_.empty()) return 0.0;
    std::size_t largest = 0;
    for (const auto& f : fragments_) largest = std::max(largest, f.size());
    return static_cast<double>(largest) * static_cast<double>(fragments_.size()) / static_cast<double>(total_);
  }

  /// Copies fragment `p` out of the flat buffer into its packed form.
  template <class T>
  void gather(std::size_t p, std::span<const T> flat, std::span<T> packed) const {
    assert(flat.size() == total_ && packed.size() == fragments_[p].size());
    for (const auto& s : fragments_[p].slices())
      std::copy_n(flat.data() + s.flat_offset, s.size, packed.data() + s.packed_offset);
  }

  /// Copies the packed fragment `p` back into the flat buffer.
  template <class T>
  void scatter(std::size_t p, std::span<const T> packed, std::span<T> flat) const {
    assert(flat.size() == total_ && packed.size() == fragments_[p].size());
    for (const auto& s : fragments_[p].slices())
      std::copy_n(packed.data() + s.packed_offset, s.size, flat.data() + s.flat_offset);
  }

 private:
  std::vector<fragment> fragments_;
  std::size_t total_ = 0;
};

/// When each fragment falls due: fragment p is sent after local step s
/// (s = 1, 2, ...) when `(s - offset_p) mod H == 0`, with
/// `offset_p = floor(p * H / P)` (Streaming DiLoCo's staggered schedule). With
/// P = H one fragment leaves per step; with P = 1 the whole model leaves every
/// H steps.
class fragment_schedule {
 public:
  fragment_schedule() = default;

  /// Throws `std::invalid_argument` when either argument is 0.
  fragment_schedule(std::uint32_t sync_period, std::uint32_t fragments)
      : period_(sync_period), fragments_(fragments) {
    if (sync_period == 0) throw std::invalid_argument("diloco::fragment_schedule: sync period H must be at least 1");
    if (fragments == 0) throw std::invalid_argument("diloco::fragment_schedule: fragment count P must be at least 1");
  }

  std::uint32_t sync_period() const noexcept { return period_; }
  std::uint32_t fragments() const noexcept { return fragments_; }

  std::uint64_t offset(std::uint32_t p) const noexcept {
    return static_cast<std::uint64_t>(p) * period_ / fragments_;
  }

  /// Whether fragment `p` falls due right after local step `step` (1-based).
  bool due(std::uint32_t p, std::uint64_t step) const noexcept {
    const std::uint64_t off = offset(p);
    return step >= 1 && step >= off && (step - off) % period_ == 0;
  }

 private:
  std::uint32_t period_ = 1;
  std::uint32_t fragments_ = 1;
};

}  // namespace diloco
