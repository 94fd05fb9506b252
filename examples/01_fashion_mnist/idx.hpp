// Reads the IDX files of (Fashion-)MNIST from gzip, validating everything.
// Format: http://yann.lecun.com/exdb/mnist/ — a big-endian magic (0x0801 for
// unsigned-byte vectors, 0x0803 for unsigned-byte 3-d arrays), big-endian
// dimensions, then the bytes.
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace fashion {

/// Thrown for a missing, unreadable, corrupt or truncated dataset file.
struct dataset_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct images {
  std::uint32_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  ///< count × rows × cols, row-major per image
};

struct labels {
  std::vector<std::uint8_t> values;
};

/// A gzip file read to the byte, every failure an exception naming the file.
class gz_file {
 public:
  explicit gz_file(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (!file_) throw dataset_error("cannot open " + path + ": " + std::strerror(errno));
  }
  ~gz_file() {
    if (file_) gzclose(file_);
  }
  gz_file(const gz_file&) = delete;
  gz_file& operator=(const gz_file&) = delete;

  /// Reads exactly `n` bytes or throws, naming what was being read.
  void read_exact(void* out, std::size_t n, const char* what) {
    auto* p = static_cast<unsigned char*>(out);
    while (n > 0) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30));
      const int got = gzread(file_, p, chunk);
      if (got < 0) throw dataset_error(path_ + ": corrupt gzip data while reading " + what + ": " + error());
      if (got == 0) throw dataset_error(path_ + ": truncated while reading " + what);
      p += got;
      n -= static_cast<std::size_t>(got);
    }
  }

  std::uint32_t read_be32(const char* what) {
    unsigned char b[4];
    read_exact(b, 4, what);
    return (std::uint32_t(b[0]) << 24) | (std::uint32_t(b[1]) << 16) | (std::uint32_t(b[2]) << 8) | b[3];
  }

  /// Throws unless the stream is at its end.
  void expect_end() {
    unsigned char extra;
    const int got = gzread(file_, &extra, 1);
    if (got < 0) throw dataset_error(path_ + ": corrupt gzip data at the end: " + error());
    if (got > 0) throw dataset_error(path_ + ": unexpected trailing bytes after the data");
  }

  const std::string& path() const { return path_; }

 private:
  std::string error() {
    int code = 0;
    const char* msg = gzerror(file_, &code);
    std::string text = msg ? msg : "unknown zlib error";
    // zlib prefixes the path, which our messages already carry.
    if (text.rfind(path_ + ": ", 0) == 0) text.erase(0, path_.size() + 2);
    return text;
  }

  std::string path_;
  gzFile file_;
};

/// Loads an IDX3 unsigned-byte image file (`*-images-idx3-ubyte.gz`).
inline images load_images(const std::string& path) {
  gz_file f(path);
  const std::uint32_t magic = f.read_be32("the magic number");
  if (magic != 0x00000803)
    throw dataset_error(path + ": not an IDX image file (magic 0x" + [&] {
      char b[16];
      std::snprintf(b, sizeof b, "%08x", magic);
      return std::string(b);
    }() + ", expected 0x00000803)");
  images im;
  im.count = f.read_be32("the image count");
  im.rows = f.read_be32("the row count");
  im.cols = f.read_be32("the column count");
  if (im.count == 0 || im.count > 10'000'000 || im.rows == 0 || im.rows > 4096 || im.cols == 0 || im.cols > 4096)
    throw dataset_error(path + ": implausible dimensions " + std::to_string(im.count) + "x" + std::to_string(im.rows) +
                        "x" + std::to_string(im.cols));
  im.pixels.resize(std::size_t(im.count) * im.rows * im.cols);
  f.read_exact(im.pixels.data(), im.pixels.size(), "the pixels");
  f.expect_end();
  return im;
}

/// Loads an IDX1 unsigned-byte label file (`*-labels-idx1-ubyte.gz`); every
/// label must be below `classes`.
inline labels load_labels(const std::string& path, unsigned classes) {
  gz_file f(path);
  const std::uint32_t magic = f.read_be32("the magic number");
  if (magic != 0x00000801) throw dataset_error(path + ": not an IDX label file (expected magic 0x00000801)");
  const std::uint32_t count = f.read_be32("the label count");
  if (count == 0 || count > 10'000'000)
    throw dataset_error(path + ": implausible label count " + std::to_string(count));
  labels l;
  l.values.resize(count);
  f.read_exact(l.values.data(), count, "the labels");
  f.expect_end();
  for (std::size_t i = 0; i < count; ++i)
    if (l.values[i] >= classes)
      throw dataset_error(path + ": label " + std::to_string(l.values[i]) + " at index " + std::to_string(i) +
                          " is not below " + std::to_string(classes));
  return l;
}

/// A split (train or test): images as floats in [0, 1], one column per image.
struct split {
  std::uint32_t count = 0;
  std::uint32_t features = 0;
  std::vector<float> x;  ///< features × count, column-major
  std::vector<std::uint8_t> y;
};

/// Loads `<dir>/<prefix>-images-idx3-ubyte.gz` and the matching labels and
/// checks that they agree.
inline split load_split(const std::string& dir, const std::string& prefix) {
  const auto im = load_images(dir + "/" + prefix + "-images-idx3-ubyte.gz");
  auto lb = load_labels(dir + "/" + prefix + "-labels-idx1-ubyte.gz", 10);
  if (lb.values.size() != im.count)
    throw dataset_error(dir + "/" + prefix + ": " + std::to_string(im.count) + " images but " +
                        std::to_string(lb.values.size()) + " labels");
  split s;
  s.count = im.count;
  s.features = im.rows * im.cols;
  s.x.resize(im.pixels.size());
  for (std::size_t i = 0; i < im.pixels.size(); ++i) s.x[i] = float(im.pixels[i]) * (1.0f / 255.0f);
  s.y = std::move(lb.values);
  return s;
}

}  // namespace fashion
