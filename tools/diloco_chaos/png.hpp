#pragma once
// A raster image with rectangle, line and 5x7 bitmap-text drawing, encoded as an 8-bit RGB PNG
// (PNG spec, ISO/IEC 15948). Needs only zlib.

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace diloco_chaos {

/// One 8-bit-per-channel sRGB color.
struct rgb {
  std::uint8_t r, g, b;
  friend bool operator==(const rgb&, const rgb&) = default;
};

namespace detail {

/// A 5-wide, 7-tall glyph: one byte per row, top row first, bit 4 is the leftmost column.
struct glyph {
  char c;
  std::array<std::uint8_t, 7> rows;
};

inline constexpr glyph glyphs[] = {
    {'0', {0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110}},
    {'1', {0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'2', {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111}},
    {'3', {0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110}},
    {'4', {0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010}},
    {'5', {0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110}},
    {'6', {0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110}},
    {'7', {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000}},
    {'8', {0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110}},
    {'9', {0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100}},
    {'A', {0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001}},
    {'B', {0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110}},
    {'C', {0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110}},
    {'D', {0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100}},
    {'E', {0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111}},
    {'F', {0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000}},
    {'G', {0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111}},
    {'H', {0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001}},
    {'I', {0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110}},
    {'J', {0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100}},
    {'K', {0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001}},
    {'L', {0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111}},
    {'M', {0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001}},
    {'N', {0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001}},
    {'O', {0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110}},
    {'P', {0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000}},
    {'Q', {0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101}},
    {'R', {0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001}},
    {'S', {0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110}},
    {'T', {0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100}},
    {'U', {0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110}},
    {'V', {0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100}},
    {'W', {0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010}},
    {'X', {0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001}},
    {'Y', {0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100}},
    {'Z', {0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111}},
    {' ', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000}},
    {'.', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b01100}},
    {',', {0b00000, 0b00000, 0b00000, 0b00000, 0b01100, 0b00100, 0b01000}},
    {':', {0b00000, 0b01100, 0b01100, 0b00000, 0b01100, 0b01100, 0b00000}},
    {'-', {0b00000, 0b00000, 0b00000, 0b11111, 0b00000, 0b00000, 0b00000}},
    {'_', {0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b00000, 0b11111}},
    {'/', {0b00001, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b10000}},
    {'%', {0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011}},
    {'(', {0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010}},
    {')', {0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000}},
    {'=', {0b00000, 0b00000, 0b11111, 0b00000, 0b11111, 0b00000, 0b00000}},
    {'+', {0b00000, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0b00000}},
    {'<', {0b00010, 0b00100, 0b01000, 0b10000, 0b01000, 0b00100, 0b00010}},
    {'>', {0b01000, 0b00100, 0b00010, 0b00001, 0b00010, 0b00100, 0b01000}},
    {'#', {0b01010, 0b01010, 0b11111, 0b01010, 0b11111, 0b01010, 0b01010}},
    {'?', {0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b00000, 0b00100}},
};

/// The glyph for `c`; lowercase letters map to uppercase, anything else unknown to '?'.
inline const glyph& glyph_of(char c) noexcept {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const glyph& g : glyphs)
    if (g.c == c) return g;
  return glyphs[std::size(glyphs) - 1];
}

/// Appends `v` as 4 big-endian bytes.
inline void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

/// Appends one PNG chunk: length, 4-letter type, data, CRC-32 of type and data.
inline void put_chunk(std::vector<std::uint8_t>& out, const char (&type)[5], const std::vector<std::uint8_t>& data) {
  put_u32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t type_at = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(0L, out.data() + type_at, static_cast<uInt>(out.size() - type_at));
  put_u32(out, static_cast<std::uint32_t>(crc));
}

}  // namespace detail

/// A width x height RGB raster, row-major, (0, 0) at the top left. Drawing outside it is clipped.
class image {
 public:
  /// Glyph cell size in pixels at scale 1 (5x7 glyph plus one column of spacing).
  static constexpr int glyph_advance = 6;
  static constexpr int glyph_height = 7;

  /// Throws std::invalid_argument unless both sides are positive.
  image(int width, int height, rgb background) : width_(width), height_(height) {
    if (width <= 0 || height <= 0)
      throw std::invalid_argument("diloco_chaos::image: size must be positive, got " + std::to_string(width) + "x" +
                                  std::to_string(height));
    pixels_.assign(static_cast<std::size_t>(width) * static_cast<std::size_t>(height), background);
  }

  int width() const noexcept { return width_; }
  int height() const noexcept { return height_; }

  /// The pixel at (x, y); throws std::out_of_range outside the image.
  rgb at(int x, int y) const {
    if (!contains(x, y)) throw std::out_of_range("diloco_chaos::image::at: pixel outside the image");
    return pixels_[index(x, y)];
  }

  /// Sets one pixel; ignored outside the image.
  void set(int x, int y, rgb c) noexcept {
    if (contains(x, y)) pixels_[index(x, y)] = c;
  }

  /// Fills the pixels with x0 <= x < x1 and y0 <= y < y1, clipped; empty when x1 <= x0 or y1 <= y0.
  void fill_rect(int x0, int y0, int x1, int y1, rgb c) noexcept {
    x0 = std::max(x0, 0), y0 = std::max(y0, 0), x1 = std::min(x1, width_), y1 = std::min(y1, height_);
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) pixels_[index(x, y)] = c;
  }

  /// Draws the segment from (x0, y0) to (x1, y1), both ends included (Bresenham), clipped per pixel:
  /// costs O(max(|x1 - x0|, |y1 - y0|)) even when mostly outside.
  void line(int x0, int y0, int x1, int y1, rgb c) noexcept {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    for (int err = dx + dy;;) {
      set(x0, y0, c);
      if (x0 == x1 && y0 == y1) return;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }

  /// Width in pixels of `s` drawn by text() at `scale`.
  static int text_width(std::string_view s, int scale = 1) noexcept {
    return s.empty() ? 0 : (static_cast<int>(s.size()) * glyph_advance - 1) * scale;
  }

  /// Draws `s` on one line with its top-left corner at (x, y), each font pixel a scale x scale block.
  /// Lowercase renders as uppercase; characters without a glyph render as '?'.
  void text(int x, int y, std::string_view s, rgb c, int scale = 1) noexcept {
    for (char ch : s) {
      const detail::glyph& g = detail::glyph_of(ch);
      for (int row = 0; row < glyph_height; ++row)
        for (int col = 0; col < 5; ++col)
          if (g.rows[static_cast<std::size_t>(row)] & (0b10000 >> col))
            fill_rect(x + col * scale, y + row * scale, x + (col + 1) * scale, y + (row + 1) * scale, c);
      x += glyph_advance * scale;
    }
  }

  /// The image as PNG bytes: 8-bit RGB (color type 2), no interlace, filter 0 on every scanline.
  /// Throws std::runtime_error if zlib fails.
  std::vector<std::uint8_t> encode_png() const {
    std::vector<std::uint8_t> raw;
    raw.reserve(static_cast<std::size_t>(height_) * (1 + 3 * static_cast<std::size_t>(width_)));
    for (int y = 0; y < height_; ++y) {
      raw.push_back(0);
      for (int x = 0; x < width_; ++x) {
        const rgb p = pixels_[index(x, y)];
        raw.insert(raw.end(), {p.r, p.g, p.b});
      }
    }
    uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
    std::vector<std::uint8_t> packed(packed_size);
    if (compress2(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size()), Z_BEST_COMPRESSION) != Z_OK)
      throw std::runtime_error("diloco_chaos::image::encode_png: zlib compress2 failed");
    packed.resize(packed_size);

    std::vector<std::uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    std::vector<std::uint8_t> ihdr;
    detail::put_u32(ihdr, static_cast<std::uint32_t>(width_));
    detail::put_u32(ihdr, static_cast<std::uint32_t>(height_));
    ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // bit depth, color type, compression, filter, interlace
    detail::put_chunk(out, "IHDR", ihdr);
    detail::put_chunk(out, "IDAT", packed);
    detail::put_chunk(out, "IEND", {});
    return out;
  }

  /// Writes encode_png() to `path` through `path` + ".tmp" and a rename, so readers never see a partial
  /// file. Throws std::runtime_error naming the path and the OS error on failure.
  void write_png(const std::filesystem::path& path) const {
    const std::vector<std::uint8_t> bytes = encode_png();
    const std::filesystem::path tmp = path.string() + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail(tmp, errno);
    const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    const int write_err = errno;
    if (std::fclose(f) != 0 || !written) {
      const int err = written ? errno : write_err;
      std::remove(tmp.c_str());
      fail(tmp, err);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      std::remove(tmp.c_str());
      fail(path, err);
    }
  }

 private:
  [[noreturn]] static void fail(const std::filesystem::path& p, int err) {
    throw std::runtime_error("diloco_chaos::image::write_png: " + p.string() + ": " +
                             std::generic_category().message(err));
  }
  bool contains(int x, int y) const noexcept { return x >= 0 && y >= 0 && x < width_ && y < height_; }
  std::size_t index(int x, int y) const noexcept {
    return static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x);
  }

  int width_, height_;
  std::vector<rgb> pixels_;
};

}  // namespace diloco_chaos
