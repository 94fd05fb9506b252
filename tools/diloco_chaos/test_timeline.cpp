// Checks png.hpp and timeline.hpp by decoding their PNG output with a separate minimal decoder (chunk walk,
// CRC-32 and inflate through zlib) and probing pixels at positions computed from the documented layout.
// Usage: diloco_chaos_timeline_test [sample.png]  (writes a sample timeline there when given)

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "timeline.hpp"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::printf("FAIL: %s\n", what.c_str());
  }
}

/// An RGB8 image decoded from PNG bytes; `error` is non-empty when decoding failed.
struct decoded {
  std::uint32_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // width * height * 3
  std::string error;
  diloco_chaos::rgb at(std::uint32_t x, std::uint32_t y) const {
    const std::size_t i = (std::size_t{y} * width + x) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

std::uint32_t read_u32(const std::vector<std::uint8_t>& b, std::size_t at) {
  return std::uint32_t{b[at]} << 24 | std::uint32_t{b[at + 1]} << 16 | std::uint32_t{b[at + 2]} << 8 | b[at + 3];
}

/// Accepts only what the encoder promises: 8-bit RGB, no interlace, filter type 0 on every row.
decoded decode_png(const std::vector<std::uint8_t>& b) {
  decoded d;
  const std::uint8_t signature[] = {137, 80, 78, 71, 13, 10, 26, 10};
  if (b.size() < 8 || !std::equal(signature, signature + 8, b.begin())) return d.error = "bad signature", d;
  std::vector<std::uint8_t> idat;
  std::vector<std::string> order;
  for (std::size_t at = 8; at < b.size();) {
    if (at + 12 > b.size()) return d.error = "truncated chunk header", d;
    const std::uint32_t length = read_u32(b, at);
    if (at + 12 + length > b.size()) return d.error = "truncated chunk", d;
    const std::string type(b.begin() + static_cast<long>(at) + 4, b.begin() + static_cast<long>(at) + 8);
    const uLong crc = crc32(crc32(0L, Z_NULL, 0), b.data() + at + 4, 4 + length);
    if (crc != read_u32(b, at + 8 + length)) return d.error = "CRC mismatch in " + type, d;
    const std::uint8_t* data = b.data() + at + 8;
    if (type == "IHDR") {
      if (length != 13) return d.error = "IHDR length", d;
      d.width = read_u32(b, at + 8);
      d.height = read_u32(b, at + 12);
      if (data[8] != 8 || data[9] != 2 || data[10] != 0 || data[11] != 0 || data[12] != 0)
        return d.error = "IHDR is not 8-bit RGB, deflate, filter 0, no interlace", d;
    }
    if (type == "IDAT") idat.insert(idat.end(), data, data + length);
    order.push_back(type);
    at += 12 + length;
  }
  if (order.size() < 3 || order.front() != "IHDR" || order.back() != "IEND") return d.error = "chunk order", d;
  const std::size_t row = 1 + std::size_t{d.width} * 3;
  std::vector<std::uint8_t> raw(row * d.height + 1);  // one spare byte to detect excess data
  uLongf raw_size = raw.size();
  if (uncompress(raw.data(), &raw_size, idat.data(), idat.size()) != Z_OK) return d.error = "inflate failed", d;
  if (raw_size != row * d.height) return d.error = "inflated size " + std::to_string(raw_size), d;
  for (std::uint32_t y = 0; y < d.height; ++y) {
    if (raw[y * row] != 0) return d.error = "row filter is not 0", d;
    const auto begin = raw.begin() + static_cast<long>(y * row);
    d.rgb.insert(d.rgb.end(), begin + 1, begin + static_cast<long>(row));
  }
  return d;
}

std::string str(diloco_chaos::rgb c) {
  return "(" + std::to_string(c.r) + "," + std::to_string(c.g) + "," + std::to_string(c.b) + ")";
}

void check_pixel(const decoded& d, int x, int y, diloco_chaos::rgb want, const std::string& what) {
  const diloco_chaos::rgb got = d.at(static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(y));
  check(got == want, what + " at (" + std::to_string(x) + "," + std::to_string(y) + "): got " + str(got) +
                         ", want " + str(want));
}

void test_png() {
  using diloco_chaos::rgb;
  const rgb bg{10, 20, 30}, red{255, 0, 0}, white{255, 255, 255}, green{0, 200, 0};
  diloco_chaos::image img(9, 6, bg);
  img.fill_rect(2, 1, 5, 3, red);       // x in [2, 5), y in [1, 3)
  img.fill_rect(-10, -10, 1, 1, white);  // clipped to (0, 0)
  img.line(-3, 5, 20, 5, green);         // clipped to row 5
  img.line(8, 0, 6, 2, green);           // diagonal: (8,0) (7,1) (6,2)
  const decoded d = decode_png(img.encode_png());
  check(d.error.empty(), "decode small image: " + d.error);
  if (!d.error.empty()) return;
  check(d.width == 9 && d.height == 6, "IHDR size " + std::to_string(d.width) + "x" + std::to_string(d.height));
  check_pixel(d, 2, 1, red, "fill_rect first corner");
  check_pixel(d, 4, 2, red, "fill_rect last pixel");
  check_pixel(d, 5, 1, bg, "fill_rect excludes x1");
  check_pixel(d, 2, 3, bg, "fill_rect excludes y1");
  check_pixel(d, 1, 1, bg, "background left of rect");
  check_pixel(d, 0, 0, white, "clipped fill_rect");
  check_pixel(d, 1, 0, bg, "clipped fill_rect stops at x1");
  check_pixel(d, 0, 5, green, "clipped line start");
  check_pixel(d, 8, 5, green, "clipped line end");
  check_pixel(d, 7, 1, green, "diagonal line middle");
  check_pixel(d, 6, 2, green, "diagonal line end");
  check_pixel(d, 7, 2, bg, "beside diagonal line");

  diloco_chaos::image glyphs(20, 9, bg);
  glyphs.text(1, 1, "-1", white);  // '-' is row 3 full; '1' has its top at column 2 of its cell
  const decoded g = decode_png(glyphs.encode_png());
  check(g.error.empty(), "decode glyph image: " + g.error);
  if (!g.error.empty()) return;
  for (int x = 1; x < 6; ++x) check_pixel(g, x, 4, white, "'-' row");
  check_pixel(g, 1, 3, bg, "above '-'");
  check_pixel(g, 9, 1, white, "top of '1'");
  check_pixel(g, 7, 1, bg, "left of top of '1'");
  check(diloco_chaos::image::text_width("-1", 2) == 22, "text_width");

  const auto dir = std::filesystem::temp_directory_path() / ("diloco_png_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  img.write_png(dir / "a.png");
  std::ifstream in(dir / "a.png", std::ios::binary);
  const std::vector<std::uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
  check(bytes == img.encode_png(), "write_png writes encode_png's bytes");
  check(!std::filesystem::exists(dir / "a.png.tmp"), "write_png leaves no temp file");
  std::string message;
  try {
    img.write_png(dir / "missing" / "b.png");
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  check(message.find("missing") != std::string::npos && message.find("No such file") != std::string::npos,
        "write_png error names the path and errno text: '" + message + "'");
  std::filesystem::remove_all(dir);
}

diloco_chaos::timeline sample() {
  using enum diloco_chaos::lane_state;
  diloco_chaos::timeline t;
  t.title = "chaos: syncer kill at t=60s (2 learners, 2 fragments)";
  t.duration_s = 100;
  t.lanes = {{"learner 0", {{0, 40, up}, {40, 50, down}, {50, 55, restarting}, {55, 100, up}}},
             {"learner 1", {{0, 60, up}, {60, 80, waiting}, {80, 100, up}}},
             {"syncer", {{0, 60, up}, {60, 62, down}, {62, 70, restarting}, {70, 80, paused}, {80, 100, up}}}};
  t.fragments = 2;
  for (std::uint64_t k = 0; k < 10; ++k) {
    const double t0 = 10.0 * static_cast<double>(k);
    if (t0 >= 60 && t0 < 80) continue;  // no syncs while the syncer is away
    t.revisions.push_back({t0, 0, k});
    t.revisions.push_back({t0 + 5, 1, 2 * k + 1});
  }
  t.marks_s = {60};
  return t;
}

void test_timeline(const char* sample_path) {
  using diloco_chaos::lane_state;
  const diloco_chaos::timeline t = sample();
  const diloco_chaos::timeline_geometry g = diloco_chaos::layout(t);
  const diloco_chaos::image img = diloco_chaos::render(t);
  if (sample_path) img.write_png(sample_path);
  const decoded d = decode_png(img.encode_png());
  check(d.error.empty(), "decode timeline: " + d.error);
  if (!d.error.empty()) return;
  check(d.width == 1200 && static_cast<int>(d.height) == g.height, "timeline size");
  check(g.x_of(0) == g.plot_left && g.x_of(100) == g.plot_right && g.x_of(-5) == g.plot_left &&
            g.x_of(1e9) == g.plot_right,
        "x_of maps [0, duration] onto [plot_left, plot_right] and clamps");
  check(g.x_of(50) == g.plot_left + (g.plot_right - g.plot_left + 1) / 2, "x_of(duration / 2) is mid-plot");
  check(g.lane_bottom(2) < g.revisions_top && g.lane_bottom(0) <= g.lane_top(1), "lanes stack above the plot");
  check(g.y_of(0) == g.revisions_bottom && g.y_of(g.axis_max) == g.revisions_top && g.axis_max >= 19,
        "y_of maps [0, axis_max] onto [revisions_bottom, revisions_top]");

  const auto state = [](lane_state s) { return diloco_chaos::state_color(s); };
  const auto mid = [&](std::size_t lane) { return (g.lane_top(lane) + g.lane_bottom(lane)) / 2; };
  check_pixel(d, g.x_of(20), mid(0), state(lane_state::up), "learner 0 up");
  check_pixel(d, g.x_of(45), mid(0), state(lane_state::down), "learner 0 down");
  check_pixel(d, g.x_of(52.5), mid(0), state(lane_state::restarting), "learner 0 restarting");
  check_pixel(d, g.x_of(70), mid(1), state(lane_state::waiting), "learner 1 waiting");
  check_pixel(d, g.x_of(75), g.lane_top(2), state(lane_state::paused), "syncer paused, top row");
  check_pixel(d, g.x_of(75), g.lane_bottom(2) - 1, state(lane_state::paused), "syncer paused, bottom row");
  check_pixel(d, g.x_of(75), g.lane_bottom(2), {255, 255, 255}, "below the syncer bar");
  check_pixel(d, g.x_of(90), mid(2), state(lane_state::up), "syncer up again");

  const diloco_chaos::rgb up = state(lane_state::up), down = state(lane_state::down),
                          restarting = state(lane_state::restarting);
  check(up.g > up.r && up.g > up.b && down.r > down.g && down.r > down.b && restarting.b > restarting.r &&
            restarting.b > restarting.g,
        "up is green, down red, restarting blue");
  for (int a = 0; a < 5; ++a)
    for (int b = a + 1; b < 5; ++b)
      check(state(lane_state(a)) != state(lane_state(b)), "state colors are distinct");

  // Fragment 0 holds revision 2 over [20, 30) and 5 over [50, 80); fragment 1 holds 3 over [15, 25), 7 over [35, 45).
  const diloco_chaos::rgb f0 = diloco_chaos::fragment_color(0), f1 = diloco_chaos::fragment_color(1);
  check(f0 != f1, "fragment colors are distinct");
  check_pixel(d, g.x_of(22), g.y_of(2), f0, "fragment 0 at revision 2");
  check_pixel(d, g.x_of(70), g.y_of(5), f0, "fragment 0 holds revision 5 while the syncer is away");
  check_pixel(d, g.x_of(22), g.y_of(3), f1, "fragment 1 at revision 3");
  check_pixel(d, g.x_of(40), g.y_of(7), f1, "fragment 1 at revision 7");
  check_pixel(d, g.x_of(30), (g.y_of(2) + g.y_of(3)) / 2, f0, "fragment 0 step from 2 to 3");
  check_pixel(d, g.x_of(22), g.y_of(4) + 3, {255, 255, 255}, "no line between the fragments");

  bool title_ink = false;
  for (int y = 0; y < g.lanes_top && !title_ink; ++y)
    for (int x = 0; x < 400 && !title_ink; ++x) title_ink = d.at(x, y) == diloco_chaos::ink;
  check(title_ink, "title drawn above the lanes");

  diloco_chaos::timeline empty{"empty", 5, {}, {}, 0, {}};
  const decoded e = decode_png(diloco_chaos::render(empty, 400).encode_png());
  check(e.error.empty() && e.width == 400, "empty timeline renders: " + e.error);

  for (double bad : {0.0, -1.0, std::nan("")}) {
    empty.duration_s = bad;
    std::string message;
    try {
      diloco_chaos::render(empty);
    } catch (const std::invalid_argument& ex) {
      message = ex.what();
    }
    check(message.find("duration_s must be finite and > 0") != std::string::npos,
          "duration " + std::to_string(bad) + " rejected: '" + message + "'");
  }
  diloco_chaos::timeline stray = sample();
  stray.revisions.push_back({1, 2, 1});
  bool rejected = false;
  try {
    diloco_chaos::render(stray);
  } catch (const std::invalid_argument&) {
    rejected = true;
  }
  check(rejected, "revision point with fragment >= fragments rejected");
}

}  // namespace

int main(int argc, char** argv) {
  test_png();
  test_timeline(argc > 1 ? argv[1] : nullptr);
  if (failures) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
