// diloco_chaos --standby (leaders.hpp), over diloco::etcd.
#include "leaders.hpp"

#include <signal.h>

#include <chrono>
#include <stdexcept>
#include <thread>
#include <utility>

#include <diloco/coordination/etcd.hpp>
#include <diloco_tools/loopback.hpp>
#include <diloco_tools/process.hpp>
#include <nlohmann/json.hpp>

namespace diloco_chaos {

struct leaders::impl {
  std::string url;
  std::vector<std::vector<std::string>> endpoints;
  std::optional<diloco_tools::child_process> server;
  std::optional<diloco::etcd::client> client;
};

leaders::leaders(const std::string& etcd_program, const std::filesystem::path& directory,
                 const std::filesystem::path& log, std::vector<std::vector<std::string>> endpoints,
                 const std::string& host)
    : impl_(std::make_unique<impl>()) {
  auto& i = *impl_;
  i.endpoints = std::move(endpoints);
  const auto client_port = std::to_string(diloco_tools::free_loopback_port());
  const auto peer = "http://127.0.0.1:" + std::to_string(diloco_tools::free_loopback_port());
  i.url = "http://" + host + ":" + client_port;
  std::filesystem::remove_all(directory);
  i.server = diloco_tools::child_process::spawn(
      {{etcd_program, "--name", "chaos", "--data-dir", directory.string(), "--listen-client-urls", i.url,
        "--advertise-client-urls", i.url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", "chaos=" + peer},
       log,
       log});
  i.client.emplace(i.url, std::chrono::milliseconds(500));
  for (int tries = 0; tries < 300; ++tries) {
    try {
      (void)i.client->get("/diloco/chaos-probe");
      return;
    } catch (const diloco::etcd::error&) {
      if (auto s = i.server->poll()) throw std::runtime_error("etcd ended at its start (" + s->to_string() + ")");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  throw std::runtime_error("etcd did not answer within 30 s at " + i.url);
}

leaders::~leaders() {
  if (impl_->server) {
    impl_->server->signal(SIGTERM);
    if (!impl_->server->wait_for(std::chrono::seconds(10))) (void)impl_->server->kill_and_reap();
  }
}

const std::string& leaders::url() const noexcept { return impl_->url; }

std::optional<std::uint32_t> leaders::leader_slot(std::uint32_t shard) {
  auto& i = *impl_;
  if (shard >= i.endpoints.size()) return std::nullopt;
  try {
    const auto kv = i.client->get("/diloco/shard-" + std::to_string(shard) + "/leader");
    if (!kv) return std::nullopt;
    const auto v = nlohmann::json::parse(kv->value, nullptr, false);
    if (!v.is_object() || !v.contains("endpoint") || !v["endpoint"].is_string()) return std::nullopt;
    const auto endpoint = v["endpoint"].get<std::string>();
    for (std::uint32_t slot = 0; slot < i.endpoints[shard].size(); ++slot)
      if (i.endpoints[shard][slot] == endpoint) return slot;
  } catch (const diloco::etcd::error&) {
  }
  return std::nullopt;
}

}  // namespace diloco_chaos
