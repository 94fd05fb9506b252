// Exponential moving average of a duration or any other measurement.
#pragma once

namespace diloco::detail {

/// `value ← decay·value + (1−decay)·x`, starting at the first sample.
class ema {
 public:
  explicit ema(double decay = 0.8) noexcept : decay_(decay) {}

  void add(double x) noexcept {
    value_ = known_ ? decay_ * value_ + (1.0 - decay_) * x : x;
    known_ = true;
  }
  bool known() const noexcept { return known_; }
  double value() const noexcept { return known_ ? value_ : 0.0; }

 private:
  double decay_;
  double value_ = 0.0;
  bool known_ = false;
};

}  // namespace diloco::detail
