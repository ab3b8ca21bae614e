// Images for vision encoders: untrusted bytes from an HTTP request (raw or in a data URL)
// decoded into RGB8 pixels, and the encoder's preprocessing (Gemma 3's SigLIP: fixed size,
// bilinear, black padding) done exactly as llama.cpp b10587's libmtmd does it, so the same
// image gives the same input tensor.
//
// Decoding follows what llama.cpp gets from stb_image asked for 3 channels: alpha is dropped
// (not composited onto a background), grayscale is replicated into R, G and B, 16-bit samples
// keep their high byte, palettes are expanded; no gamma, ICC profile or EXIF orientation is
// applied (a rotated phone photo arrives as stored). PNG pixels therefore match llama.cpp's
// exactly; JPEG pixels are close but not identical (libjpeg-turbo and stb_image have their own
// IDCT and chroma upsampling); WebP llama.cpp cannot read at all.
//
// Every decoder is fed hostile bytes: errors are pagoda::Error with one line, dimensions are
// checked against ImageLimits from the header before any pixel buffer is allocated, and no
// input can make a decoder allocate without bound. Thread-safe: no shared state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

// RGB8, row-major, 3 bytes a pixel, no row padding: pixels.size() == width * height * 3.
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;
};

struct ImageLimits {
  size_t max_bytes = 20u << 20;      // the encoded file
  int64_t max_pixels = 33'554'432;   // width * height (a 96 MiB RGB buffer)
  int64_t max_side = 16384;          // width and height each
};

// "png" | "jpeg" | "webp" | "gif" | "bmp" from the magic bytes, "" when none matches.
std::string_view sniff_image_format(std::span<const uint8_t> bytes);

// Decodes PNG (interlaced too), JPEG (baseline, progressive; grayscale or YCbCr, not CMYK)
// or WebP (still, lossy or lossless; not animated) into RGB8. Throws pagoda::Error for bytes
// over max_bytes, an unsupported format ("unsupported image format gif: send PNG, JPEG or
// WebP"), truncated or corrupt data, a zero side, or dimensions over max_side / max_pixels.
RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits = {});

// data:[<media type>][;base64],<data> (RFC 2397). Only base64 data is accepted: images sent
// percent-encoded are refused. media_type is what the URL says before ";base64" (parameters
// such as ";name=x" included), "" when it says nothing.
struct DataUrl {
  std::string media_type;
  std::vector<uint8_t> bytes;
};
// Throws pagoda::Error when `url` is not a data URL, has no comma, is not base64, has bad
// base64, or would decode to more than max_bytes (known from the encoded length, before
// anything is allocated).
DataUrl parse_data_url(std::string_view url, size_t max_bytes);

// Standard alphabet (A-Z a-z 0-9 + /), '=' padding optional, ASCII whitespace anywhere
// ignored. Throws pagoda::Error on any other character, misplaced padding, a dangling
// single character, or output over max_bytes (checked before allocating).
std::vector<uint8_t> base64_decode(std::string_view text, size_t max_bytes);

// Bilinear resize with llama.cpp's sampling grid (corners aligned: source x = x * (sw - 1) /
// (tw - 1)), float arithmetic in its order, truncation to uint8. width, height > 0.
RgbImage resize_bilinear(const RgbImage& src, int64_t width, int64_t height);

// llama.cpp's PAD_CEIL resize: fits src inside width x height keeping its aspect ratio (each
// side ceil(side * scale), capped at the target), resizes bilinearly, and centres it on a
// pad_color canvas at offset ((width - w) / 2, (height - h) / 2), rounded down. An image
// already width x height is returned unchanged.
RgbImage fit_and_pad(const RgbImage& src, int64_t width, int64_t height,
                     std::array<uint8_t, 3> pad_color = {0, 0, 0});

// Writes 3 * height * width floats, planar: out[(c * height + y) * width + x] =
// (pixel / 255 - mean[c]) / std[c], in float, in that order (llama.cpp's from_u8 then
// normalize), so the values are bit-identical to its.
void normalize_planar(const RgbImage& img, const std::array<float, 3>& mean,
                      const std::array<float, 3>& std, float* out);

// SHA-256 of width and height (int64 little-endian) then the pixels: the identity of an
// image's content, by which the prefix cache keys the tokens that stand for it.
std::array<uint8_t, 32> image_content_hash(const RgbImage& img);

}  // namespace pagoda
