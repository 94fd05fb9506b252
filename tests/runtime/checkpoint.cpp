// Checkpoint files: atomic, checksummed, the newest intact one wins; and a
// syncer checkpoint's body (runtime/syncer/checkpoint.hpp): the model's layout
// and the syncer's state, enough to restart a syncer that knows no model.
#include <boost/test/unit_test.hpp>

#include <unistd.h>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <diloco/diloco.hpp>
#include <diloco/runtime/checkpoint.hpp>
#include <diloco/runtime/syncer/checkpoint.hpp>

namespace runtime_checkpoint_test {

namespace fs = std::filesystem;

struct scratch {
  fs::path dir = fs::temp_directory_path() / ("diloco-checkpoint-" + std::to_string(::getpid()) + "-" +
                                              std::to_string(reinterpret_cast<std::uintptr_t>(this)));
  scratch() { fs::remove_all(dir); }
  ~scratch() { fs::remove_all(dir); }

  std::vector<fs::path> checkpoints() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".bin") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
};

BOOST_AUTO_TEST_SUITE(runtime_checkpoint)

BOOST_FIXTURE_TEST_CASE(the_newest_checkpoint_is_read_back_and_old_ones_pruned, scratch) {
  diloco::checkpoint_store store(dir, 2);
  BOOST_TEST(!store.latest().has_value());
  BOOST_TEST(store.write("first") == 1u);
  BOOST_TEST(store.write("second") == 2u);
  BOOST_TEST(store.write(std::string("third\0with a zero byte", 22)) == 3u);
  BOOST_TEST(checkpoints().size() == 2u);  // keep = 2
  const auto c = store.latest();
  BOOST_TEST_REQUIRE(c.has_value());
  BOOST_TEST(c->sequence == 3u);
  BOOST_TEST(c->body == std::string("third\0with a zero byte", 22));
  // A store reopened on the directory numbers on from there.
  diloco::checkpoint_store again(dir, 2);
  BOOST_TEST(again.write("fourth") == 4u);
}

BOOST_FIXTURE_TEST_CASE(a_corrupt_or_torn_newest_checkpoint_falls_back_to_the_previous, scratch) {
  diloco::checkpoint_store store(dir, 3);
  store.write("older state");
  store.write("newer state");
  const auto newest = checkpoints().back();
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(30);  // inside the body
    f.put('X');
  }
  std::vector<std::string> skipped;
  auto c = store.latest(&skipped);
  BOOST_TEST_REQUIRE(c.has_value());
  BOOST_TEST(c->body == "older state");
  BOOST_TEST_REQUIRE(skipped.size() == 1u);
  BOOST_TEST(skipped[0].find("checksum") != std::string::npos);

  store.write("newest state");
  fs::resize_file(checkpoints().back(), 20);  // torn in its header
  skipped.clear();
  c = store.latest(&skipped);
  BOOST_TEST_REQUIRE(c.has_value());
  BOOST_TEST(c->body == "older state");
  BOOST_TEST(skipped.size() == 2u);

  // A temporary left by a crash in the middle of a write is ignored.
  std::ofstream(dir / "checkpoint-00000000000000000009.bin.tmp") << "partial";
  BOOST_TEST(store.latest()->body == "older state");
}

BOOST_FIXTURE_TEST_CASE(every_truncation_of_a_checkpoint_is_detected, scratch) {
  diloco::checkpoint_store store(dir, 1);
  store.write("a body long enough to cut in many places");
  const auto path = checkpoints().back();
  const auto full = fs::file_size(path);
  std::string bytes(full, '\0');
  std::ifstream(path, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(full));
  for (std::size_t n = 0; n < full; ++n) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(n));
    BOOST_TEST(!store.latest().has_value(), "a checkpoint cut at " << n << " bytes was accepted");
  }
}

using body_syncer = diloco::syncer<diloco::outer::nesterov<float>, diloco::merge::average, diloco::inproc::endpoint>;

diloco::syncer_options two_fragments() {
  diloco::syncer_options o;
  o.training =
      diloco::training_config{.fragments = 2, .sync_period = 10, .overlap = 0, .mixing = 0.0, .lock_step = false};
  o.grace_factor = 0.0;
  return o;
}

diloco::parameter_layout model() {
  diloco::parameter_layout layout;
  layout.add("embed", 3, diloco::tensor_role::embedding);
  layout.add("w", 4);
  return layout;
}

BOOST_AUTO_TEST_CASE(a_checkpoint_body_is_the_layout_then_the_state) {
  const auto layout = model();
  diloco::inproc::hub hub;
  const std::vector<float> initial{1, 2, 3, 4, 5, 6, 7};
  body_syncer s(layout, initial, hub.attach(diloco::syncer_peer), two_fragments());
  const auto body = diloco::checkpoint_body(s);

  // By hand: "embed" is 2 + 5 + 8 + 1 bytes, "w" 2 + 1 + 8 + 1; the u64
  // length 28 comes first.
  std::uint64_t length = 0;
  BOOST_TEST_REQUIRE(body.size() > 8u);
  std::memcpy(&length, body.data(), 8);
  BOOST_TEST(length == 28u);
  BOOST_TEST(body.substr(8 + 2, 5) == "embed");
  std::ostringstream state;
  s.save(state);
  BOOST_TEST(body.substr(8 + 28) == state.str());

  const auto back = diloco::read_checkpoint_body(body);
  BOOST_TEST(back.layout.fingerprint() == layout.fingerprint());
  BOOST_TEST(back.layout.tensor_count() == 2u);
  BOOST_TEST(back.state == state.str());
}

BOOST_FIXTURE_TEST_CASE(a_syncer_restarts_from_a_stored_body_alone, scratch) {
  diloco::inproc::hub hub;
  const std::vector<float> initial{1, 2, 3, 4, 5, 6, 7};
  body_syncer original(model(), initial, hub.attach(diloco::syncer_peer), two_fragments());
  diloco::checkpoint_store store(dir);
  store.write(diloco::checkpoint_body(original));

  const auto latest = store.latest();
  BOOST_TEST_REQUIRE(latest.has_value());
  auto checkpoint = diloco::read_checkpoint_body(latest->body);
  diloco::inproc::hub other;
  body_syncer restarted(checkpoint.layout, std::vector<float>(checkpoint.layout.size(), 0.0f),
                        other.attach(diloco::syncer_peer), two_fragments());
  std::istringstream in(checkpoint.state);
  restarted.load(in);
  BOOST_TEST(restarted.parameters() == initial, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_body_cut_inside_its_layout_or_with_a_bad_layout_is_refused) {
  diloco::inproc::hub hub;
  body_syncer s(model(), std::vector<float>(7, 0.0f), hub.attach(diloco::syncer_peer), two_fragments());
  const auto body = diloco::checkpoint_body(s);
  for (std::size_t n = 0; n < 8 + 28; ++n)
    BOOST_CHECK_THROW(diloco::read_checkpoint_body(std::string_view(body).substr(0, n)), diloco::corrupt_state);
  auto zero_size = body;
  zero_size[8 + 2 + 5] = 0;  // the first tensor's size, 3, becomes 0
  BOOST_CHECK_THROW(diloco::read_checkpoint_body(zero_size), diloco::corrupt_state);
  // A layout larger than allowed.
  BOOST_CHECK_THROW(diloco::read_checkpoint_body(body, 6), diloco::corrupt_state);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace runtime_checkpoint_test
