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
#include <queue>
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
/// `balanced` packs greedily, largest piece first, into the currently lightest
/// fragment (longest-processing-time bin packing) against a target of
/// `T = ceil(total / P)` elements:
/// - a tensor larger than T is first cut at element boundaries into pieces of
///   T elements and a remainder;
/// - a piece that would take its fragment past `T + T/8` is cut: the fragment
///   is filled up to T and the rest goes back to the queue.
/// So no fragment exceeds `T + T/8` (max/mean ≤ 1.125 up to rounding), where
/// plain LPT reaches 1.6 (five tensors of 10 in four fragments). If rounding
/// leaves a fragment empty, the largest slice of the heaviest one is halved
/// into it. Pieces of one tensor that land in the same fragment and touch are
/// joined, so a slice is one tensor or one contiguous piece of it. The plan is
/// a pure function of (layout, P): learners and the syncer compute it
/// independently and agree.
class fragment_plan {
 public:
  fragment_plan() = default;

  /// Throws `std::invalid_argument` when `count` is 0 or exceeds the number of
  /// parameters.
  static fragment_plan balanced(const parameter_layout& layout, std::size_t count) {
    if (count == 0) throw std::invalid_argument("diloco::fragment_plan: fragment count must be at least 1");
    if (count > layout.size())
      throw std::invalid_argument("diloco::fragment_plan: " + std::to_string(count) + " fragments for only " +
                                  std::to_string(layout.size()) + " parameters");
    const std::size_t target = (layout.size() + count - 1) / count;
    const std::size_t limit = target + target / 8;

    struct piece {
      std::uint32_t tensor;
      std::size_t flat_offset;
      std::size_t size;
    };
    // Largest first; equal sizes in flat order, so the plan is deterministic.
    auto smaller = [](const piece& a, const piece& b) {
      return a.size != b.size ? a.size < b.size : a.flat_offset > b.flat_offset;
    };
    std::priority_queue<piece, std::vector<piece>, decltype(smaller)> queue(smaller);
    for (std::uint32_t t = 0; t < layout.tensor_count(); ++t) {
      const auto& info = layout[t];
      for (std::size_t begin = 0; begin < info.size; begin += target)
        queue.push({t, info.offset + begin, std::min(target, info.size - begin)});
    }

    fragment_plan plan;
    plan.fragments_.resize(count);
    auto& frags = plan.fragments_;
    auto add = [&](fragment& f, std::uint32_t tensor, std::size_t flat_offset, std::size_t size) {
      f.slices_.push_back({tensor, flat_offset, 0, size, layout[tensor].role});
      f.size_ += size;
    };
    while (!queue.empty()) {
      const piece pc = queue.top();
      queue.pop();
      auto& f = *std::min_element(frags.begin(), frags.end(),
                                  [](const fragment& a, const fragment& b) { return a.size_ < b.size_; });
      if (f.size_ + pc.size <= limit) {
        add(f, pc.tensor, pc.flat_offset, pc.size);
      } else {
        // The lightest fragment holds less than total / P ≤ T while pieces
        // remain, so `take` is at least 1.
        const std::size_t take = target - f.size_;
        add(f, pc.tensor, pc.flat_offset, take);
        queue.push({pc.tensor, pc.flat_offset + take, pc.size - take});
      }
    }
    // Rounding can leave a fragment empty (10 elements in 6 fragments of at
    // most 2); then some fragment holds a slice of at least 2 elements.
    for (auto& empty : frags) {
      if (empty.size_ != 0) continue;
      auto& heavy = *std::max_element(frags.begin(), frags.end(),
                                      [](const fragment& a, const fragment& b) { return a.size_ < b.size_; });
      auto& slice = *std::max_element(heavy.slices_.begin(), heavy.slices_.end(),
                                      [](const fragment_slice& a, const fragment_slice& b) { return a.size < b.size; });
      const std::size_t keep = slice.size / 2 + slice.size % 2;
      add(empty, slice.tensor, slice.flat_offset + keep, slice.size - keep);
      heavy.size_ -= slice.size - keep;
      slice.size = keep;
    }
    for (auto& f : frags) {
      std::sort(f.slices_.begin(), f.slices_.end(),
                [](const fragment_slice& a, const fragment_slice& b) { return a.flat_offset < b.flat_offset; });
      std::vector<fragment_slice> joined;
      for (const auto& sl : f.slices_) {
        if (!joined.empty() && joined.back().tensor == sl.tensor &&
            joined.back().flat_offset + joined.back().size == sl.flat_offset)
          joined.back().size += sl.size;
        else
          joined.push_back(sl);
      }
      std::size_t packed = 0;
      for (auto& sl : joined) {
        sl.packed_offset = packed;
        packed += sl.size;
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
  fragment_schedule(std::uint32_t sync_period, std::uint32_t fragments) : period_(sync_period), fragments_(fragments) {
    if (sync_period == 0) throw std::invalid_argument("diloco::fragment_schedule: sync period H must be at least 1");
    if (fragments == 0) throw std::invalid_argument("diloco::fragment_schedule: fragment count P must be at least 1");
  }

  std::uint32_t sync_period() const noexcept { return period_; }
  std::uint32_t fragments() const noexcept { return fragments_; }

  std::uint64_t offset(std::uint32_t p) const noexcept { return static_cast<std::uint64_t>(p) * period_ / fragments_; }

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
