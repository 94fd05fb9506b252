// A minimal `diloco::checkpointable` (docs/concepts/checkpointable.md): a
// running mean, saved with the library's `diloco::serial` helpers. `load`
// reads everything before it changes anything, so that a load that throws
// keeps the state. `main` saves, loads, and feeds `load` a torn copy.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <istream>
#include <ostream>
#include <sstream>

#include <diloco/concepts/checkpointable.hpp>
#include <diloco/serialize.hpp>

class running_mean {
 public:
  void add(double x) {
    ++count_;
    mean_ += (x - mean_) / static_cast<double>(count_);
  }
  std::uint64_t count() const { return count_; }
  double mean() const { return mean_; }

  void save(std::ostream& out) const {
    diloco::serial::write_tag(out, "RMEA", 1);  // refuses, on load, a block of another type or version
    diloco::serial::write_pod(out, count_);
    diloco::serial::write_pod(out, mean_);
  }

  void load(std::istream& in) {
    diloco::serial::expect_tag(in, "RMEA", 1);
    const auto saved_count = diloco::serial::read_pod<std::uint64_t>(in, "count");
    const auto saved_mean = diloco::serial::read_pod<double>(in, "mean");
    if (!std::isfinite(saved_mean)) throw diloco::corrupt_state("running_mean: the mean is not finite");
    count_ = saved_count;
    mean_ = saved_mean;
  }

 private:
  std::uint64_t count_ = 0;
  double mean_ = 0.0;
};

static_assert(diloco::check_checkpointable<running_mean>());

int main() {
  running_mean losses;
  for (double x : {4.0, 3.0, 2.0, 1.0}) losses.add(x);
  std::stringstream saved;
  losses.save(saved);

  running_mean restored;
  restored.load(saved);
  bool ok = restored.count() == 4 && restored.mean() == 2.5;

  std::istringstream torn(saved.str().substr(0, saved.str().size() - 3));
  try {
    restored.load(torn);
    ok = false;
  } catch (const diloco::corrupt_state& e) {
    std::printf("refused: %s\n", e.what());
  }
  ok = ok && restored.count() == 4 && restored.mean() == 2.5;  // as before the failed load
  std::printf("restored %llu values, mean %.2f\n", static_cast<unsigned long long>(restored.count()), restored.mean());
  return ok ? 0 : 1;
}
