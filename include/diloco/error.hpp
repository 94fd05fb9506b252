// Expected failures as values: the error codes of diloco and their category.
//
// Contract violations are assertions; setup mistakes (bad options, a layout that
// does not match) throw `std::invalid_argument`; everything that can happen while
// training (a full queue, a peer that left, a bad message) is an `std::error_code`
// in the category below.
#pragma once

#include <optional>
#include <string>
#include <system_error>
#include <utility>

namespace diloco {

/// Error values returned by transports and the runtime.
enum class errc {
  ok = 0,
  queue_full,       ///< the receiver's bounded queue has no room; retry later
  unknown_peer,     ///< no endpoint with that id is attached
  closed,           ///< the transport or endpoint was closed
  timed_out,        ///< a bounded wait ended without a result
  layout_mismatch,  ///< the peer's parameter layout differs from ours
  bad_config,       ///< the syncer's training configuration is unusable
  superseded,       ///< another process joined as this learner with a newer incarnation
  quarantined,      ///< the syncer refuses this learner's contributions until it rejoins
  ended,            ///< the syncer ended the run (not a failure: training is over)
  cancelled,        ///< the caller asked the call to stop (its `std::stop_token`)
  non_finite,       ///< the learner's outer gradient is NaN or infinite: nothing was sent
  rank_lost,        ///< another rank of this learner unit failed, left or gave up: the unit must end
};

namespace detail {

class error_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "diloco"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::ok: return "success";
      case errc::queue_full: return "receiver queue is full";
      case errc::unknown_peer: return "unknown peer";
      case errc::closed: return "transport closed";
      case errc::timed_out: return "timed out";
      case errc::layout_mismatch: return "parameter layout mismatch";
      case errc::bad_config: return "unusable training configuration";
      case errc::superseded: return "superseded by a newer incarnation of this learner";
      case errc::quarantined: return "quarantined by the syncer (contributions clipped or refused too often)";
      case errc::ended: return "the syncer ended the run";
      case errc::cancelled: return "cancelled by the caller";
      case errc::non_finite: return "outer gradient not finite (NaN or infinite parameters): not sent";
      case errc::rank_lost: return "another rank of this learner unit failed or left: the unit must end";
    }
    return "unknown diloco error";
  }
};

}  // namespace detail

/// The category of every `diloco::errc`.
inline const std::error_category& error_category() noexcept {
  static const detail::error_category_impl instance;
  return instance;
}

inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// A value or the error that prevented it (the shape of C++23's
/// `std::expected<T, std::error_code>`).
template <class T>
class result {
 public:
  result(T value) : value_(std::move(value)) {}
  result(std::error_code error) : error_(error) {}
  result(errc error) : error_(make_error_code(error)) {}

  bool has_value() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  std::error_code error() const noexcept { return error_; }

  /// The value; throws `std::system_error` holding the error if there is none.
  T& value() & {
    if (!value_) throw std::system_error(error_);
    return *value_;
  }
  const T& value() const& {
    if (!value_) throw std::system_error(error_);
    return *value_;
  }
  T& operator*() & noexcept { return *value_; }
  const T& operator*() const& noexcept { return *value_; }
  T* operator->() noexcept { return &*value_; }
  const T* operator->() const noexcept { return &*value_; }

 private:
  std::optional<T> value_;
  std::error_code error_;
};

}  // namespace diloco

template <>
struct std::is_error_code_enum<diloco::errc> : std::true_type {};
