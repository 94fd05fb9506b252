// `diloco::mpi::communicator` on real MPI processes, started by mpirun (see
// tests/mpi/CMakeLists.txt):
//
//   collectives ops      every collective against values computed here by
//                        formula, on any number of ranks; then a rank that
//                        stops answering ends the unit within a deadline
//   collectives killed   rank 1 SIGKILLs itself while rank 0 waits in a
//                        collective with a minute's deadline: mpirun must end
//                        the unit long before that (run_killed.sh checks)
//
// Exit status 0 when every check held on every rank.
#include <diloco/collective/mpi.hpp>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace {

using namespace std::chrono_literals;
using diloco::errc;
using diloco::reduce_op;

int failures = 0;

void check(bool ok, const char* what, std::size_t rank) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "rank %zu: FAILED: %s\n", rank, what);
}

diloco::time_point far() { return diloco::clock::now() + 60s; }

void ops(diloco::mpi::communicator& c) {
  const std::size_t r = c.rank(), ranks = c.size();
  const double sum_of_ranks = double(ranks * (ranks - 1) / 2);

  // all_reduce: rank k holds 10k + i/2, so the sum is 10·Σk + R·i/2.
  constexpr std::size_t n = 100'000;
  std::vector<float> in(n), sum(n), mean(n);
  std::vector<double> in_place(n);
  for (std::size_t i = 0; i < n; ++i) {
    in[i] = float(10 * r) + float(i % 1000) * 0.5f;
    in_place[i] = double(10 * r) + double(i % 1000) * 0.5;
  }
  check(!c.all_reduce(std::span<const float>(in), std::span<float>(sum), reduce_op::sum, far()), "all_reduce sum", r);
  check(!c.all_reduce(std::span<const float>(in), std::span<float>(mean), reduce_op::mean, far()), "all_reduce mean",
        r);
  check(!c.all_reduce(std::span<const double>(in_place), std::span<double>(in_place), reduce_op::sum, far()),
        "all_reduce in place", r);
  bool equal = true;
  for (std::size_t i = 0; i < n; ++i) {
    const double half = double(i % 1000) * 0.5;
    const double expected = 10.0 * sum_of_ranks + double(ranks) * half;
    equal = equal && sum[i] == float(expected) && in_place[i] == expected && mean[i] == float(expected) / float(ranks);
  }
  check(equal, "all_reduce values", r);

  // reduce_scatter: rank k holds k + 100 j at element j; rank r's block i
  // sums to Σk + R·100 (r·block + i).
  constexpr std::size_t block = 333;
  std::vector<double> blocks(ranks * block), mine(block);
  for (std::size_t j = 0; j < blocks.size(); ++j) blocks[j] = double(r) + 100.0 * double(j);
  check(!c.reduce_scatter(std::span<const double>(blocks), std::span<double>(mine), reduce_op::sum, far()),
        "reduce_scatter", r);
  equal = true;
  for (std::size_t i = 0; i < block; ++i)
    equal = equal && mine[i] == sum_of_ranks + double(ranks) * 100.0 * double(r * block + i);
  check(equal, "reduce_scatter values", r);

  // all_gather: block k is rank k's 1000k + i; broadcast from the last rank.
  std::vector<float> own(block), gathered(ranks * block), shared(block);
  for (std::size_t i = 0; i < block; ++i) own[i] = float(1000 * r + i);
  shared = own;
  check(!c.all_gather(std::span<const float>(own), std::span<float>(gathered), far()), "all_gather", r);
  check(!c.broadcast(std::span<float>(shared), ranks - 1, far()), "broadcast", r);
  check(!c.barrier(far()), "barrier", r);
  equal = true;
  for (std::size_t k = 0; k < ranks; ++k)
    for (std::size_t i = 0; i < block; ++i)
      equal = equal && gathered[k * block + i] == float(1000 * k + i) && shared[i] == float(1000 * (ranks - 1) + i);
  check(equal, "all_gather and broadcast values", r);

  // A rank that stops answering: the last rank calls with sizes that do
  // not fit (refused, its communicator broken), the others wait in a
  // collective that can never complete and get timed_out at their deadline.
  diloco::mpi::communicator fresh;
  std::vector<float> x(10), y(10);
  if (r + 1 == ranks) {
    std::vector<float> too_short(9);
    check(fresh.all_reduce(std::span<const float>(x), std::span<float>(too_short), reduce_op::sum, far()) ==
              std::make_error_code(std::errc::invalid_argument),
          "sizes that do not fit are refused", r);
    check(fresh.barrier(far()) == make_error_code(errc::rank_lost), "a broken communicator stays broken", r);
  } else {
    const auto started = diloco::clock::now();
    const auto e = fresh.all_reduce(std::span<const float>(x), std::span<float>(y), reduce_op::sum, started + 300ms);
    check(e == make_error_code(errc::timed_out), "a collective that cannot complete times out", r);
    check(diloco::clock::now() - started < 30s, "the timeout comes at the deadline, not much later", r);
    check(fresh.barrier(far()) == make_error_code(errc::rank_lost), "after a timeout the unit has ended", r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  diloco::mpi::environment mpi(argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "ops" && mode != "killed") {
    std::fprintf(stderr, "usage: collectives ops|killed (under mpirun)\n");
    return 2;
  }
  int verdict = 0;
  {
    diloco::mpi::communicator c;
    if (mode == "killed") {
      std::vector<float> x(1000, 1.0f), y(1000);
      if (c.rank() == 1) std::raise(SIGKILL);
      const auto e = c.all_reduce(std::span<const float>(x), std::span<float>(y), reduce_op::sum, far());
      // mpirun ends this rank before its deadline; if it does not, say so.
      std::printf("rank %zu: came back from the collective ('%s') after its peer was killed\n", c.rank(),
                  e.message().c_str());
      return 3;
    }
    ops(c);
    // Every rank's verdict, over a communicator that still works.
    int mine = failures, total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (c.rank() == 0) std::printf("%d rank(s), %d failure(s)\n", int(c.size()), total);
    verdict = total == 0 ? 0 : 1;
  }
  return verdict;
}
