// The codecs: how the values of a payload are written (docs/protocol.md,
// "Codecs"). One enum names them for the wire, the configuration and the
// codec passes alike; the passes of this folder take the codecs of a float
// model's values (`float_codec`).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace diloco {

/// Element encoding of a payload (docs/protocol.md, "Codecs", has each
/// one's byte layout). The values are the wire's: never renumber them.
enum class codec_id : std::uint8_t {
  none = 0,
  f32 = 1,    ///< IEEE 754 binary32, 4 bytes a value
  f64 = 2,    ///< IEEE 754 binary64, 8 bytes a value
  bytes = 3,  ///< opaque bytes (a `layout` description)
  bf16 = 4,   ///< bfloat16, 2 bytes a value (rounded to nearest even, saturating)
  int8 = 5,   ///< per block: f32 absmax, then one int8 in [−127, 127] a value: x ≈ q/127 · absmax
  fp8 = 6,    ///< per block: f32 absmax, then one E4M3 code a value: x ≈ e4m3(c)/448 · absmax
  int4 = 7,   ///< per block: f32 absmax, then two int4 in [−7, 7] a byte (low nibble first): x ≈ q/7 · absmax
};

/// The largest codec id this build knows.
inline constexpr codec_id last_codec = codec_id::int4;

/// Whether payloads of codec `c` are cut into blocks of `message_header::block` values.
constexpr bool block_scaled(codec_id c) noexcept {
  return c == codec_id::int8 || c == codec_id::fp8 || c == codec_id::int4;
}

}  // namespace diloco

namespace diloco::codec {

/// The codecs a `float` model's values travel in, which `encode`, `valid`,
/// `decode` and the fused passes take: `f32` (full precision) and the
/// compressed ones.
inline constexpr codec_id float_codecs[] = {codec_id::f32, codec_id::bf16, codec_id::int8, codec_id::fp8,
                                            codec_id::int4};

/// Whether `c` is one of `float_codecs`.
constexpr bool float_codec(codec_id c) noexcept { return c == codec_id::f32 || c == codec_id::bf16 || block_scaled(c); }

/// The codec's name on command lines and in reports: "fp32", "bf16", "int8",
/// "fp8", "int4", and "fp64", "bytes", "none".
constexpr std::string_view name(codec_id c) noexcept {
  switch (c) {
    case codec_id::none: return "none";
    case codec_id::f32: return "fp32";
    case codec_id::f64: return "fp64";
    case codec_id::bytes: return "bytes";
    case codec_id::bf16: return "bf16";
    case codec_id::int8: return "int8";
    case codec_id::fp8: return "fp8";
    case codec_id::int4: return "int4";
  }
  return "unknown";
}

/// The float codec named `text` ("fp32", "bf16", "int8", "fp8", "int4").
constexpr std::optional<codec_id> parse(std::string_view text) noexcept {
  for (const codec_id c : float_codecs)
    if (name(c) == text) return c;
  return std::nullopt;
}

}  // namespace diloco::codec
