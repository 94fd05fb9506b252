// Checkpoint files: atomic, checksummed, the newest intact one wins.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <diloco/runtime/checkpoint.hpp>

namespace {

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

}  // namespace

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

BOOST_AUTO_TEST_SUITE_END()
