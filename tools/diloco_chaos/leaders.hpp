// diloco_chaos --standby: an etcd server for the run, started as a user
// would start one, and which syncer of each shard leads it, read from the
// shard's leadership key (docs/chaos.md, "Standby syncers").
//
// Compiled apart (leaders.cpp): diloco::etcd is built on Boost.Asio.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace diloco_chaos {

class leaders {
 public:
  /// Starts `etcd_program` serving clients at `host` (an address of this
  /// machine's) on a free port, its data in `directory` and its output in
  /// `log`, and waits (at most 30 s) until it answers. `endpoints[shard][slot]` is where each syncer serves learners,
  /// what its leadership key names while it leads. Throws
  /// `std::runtime_error` if etcd does not start.
  leaders(const std::string& etcd_program, const std::filesystem::path& directory, const std::filesystem::path& log,
          std::vector<std::vector<std::string>> endpoints, const std::string& host = "127.0.0.1");
  ~leaders();  ///< stops etcd
  leaders(const leaders&) = delete;
  leaders& operator=(const leaders&) = delete;

  /// http://HOST:PORT, for the syncers' --etcd.
  const std::string& url() const noexcept;

  /// The slot whose syncer leads `shard` now, by the key
  /// /diloco/shard-S/leader (diloco_syncer's default): nothing when none
  /// does, or etcd does not answer.
  std::optional<std::uint32_t> leader_slot(std::uint32_t shard);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace diloco_chaos
