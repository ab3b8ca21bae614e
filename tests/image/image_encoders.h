// Test images made at run time with the libraries' own encoders (libpng, libjpeg, libwebp),
// so no binary fixture is checked in. Encoder failures abort: they are bugs in the test.
#pragma once

#include <jpeglib.h>
#include <png.h>
#include <webp/encode.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "image/image.h"

namespace pagoda::test {

struct PngSpec {
  int width = 0;
  int height = 0;
  int depth = 8;
  int color = PNG_COLOR_TYPE_RGB;
  bool interlace = false;
  std::vector<png_color> palette = {};  // PNG_COLOR_TYPE_PALETTE only
  std::vector<png_byte> trns = {};      // palette alpha, if any
};

inline int png_channels(int color) {
  switch (color) {
    case PNG_COLOR_TYPE_GRAY: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;  // palette indices
  }
}

inline size_t png_row_bytes(const PngSpec& s) {
  return (size_t(s.width) * png_channels(s.color) * s.depth + 7) / 8;
}

// `rows`: height rows of png_row_bytes(spec) bytes each, in PNG's sample layout (packed
// low depths, big-endian 16-bit samples).
inline std::vector<uint8_t> encode_png(const PngSpec& s, const std::vector<uint8_t>& rows) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(
      PNG_LIBPNG_VER_STRING, nullptr,
      [](png_structp, png_const_charp msg) {
        std::fprintf(stderr, "test PNG encoder: %s\n", msg);
        std::abort();
      },
      nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, size_t n) {
        auto* v = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(p));
        v->insert(v->end(), data, data + n);
      },
      [](png_structp) {});
  png_set_IHDR(png, info, s.width, s.height, s.depth, s.color,
               s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.trns.empty()) {
    png_set_tRNS(png, info, s.trns.data(), static_cast<int>(s.trns.size()), nullptr);
  }
  png_write_info(png, info);
  std::vector<png_bytep> row_ptrs(s.height);
  for (int y = 0; y < s.height; ++y) {
    row_ptrs[y] = const_cast<png_bytep>(rows.data() + y * png_row_bytes(s));
  }
  png_write_image(png, row_ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// `pixels`: width * height * components samples (components 1 = gray, 3 = RGB).
inline std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& pixels, int width, int height,
                                        int components, int quality, bool progressive = false) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels.data() + size_t(cinfo.next_scanline) * width * components);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(buf, buf + size);
  std::free(buf);
  return out;
}

inline std::vector<uint8_t> encode_webp(const RgbImage& img, bool lossless, float quality = 90) {
  uint8_t* buf = nullptr;
  const int w = static_cast<int>(img.width), h = static_cast<int>(img.height);
  const size_t size = lossless ? WebPEncodeLosslessRGB(img.pixels.data(), w, h, w * 3, &buf)
                               : WebPEncodeRGB(img.pixels.data(), w, h, w * 3, quality, &buf);
  if (size == 0) {
    std::fprintf(stderr, "test WebP encoder failed\n");
    std::abort();
  }
  std::vector<uint8_t> out(buf, buf + size);
  WebPFree(buf);
  return out;
}

inline RgbImage random_image(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  RgbImage img{width, height, std::vector<uint8_t>(size_t(width) * height * 3)};
  for (auto& b : img.pixels) b = static_cast<uint8_t>(rng());
  return img;
}

// Smooth colours (what JPEG is made for), so a lossy round trip stays close.
inline RgbImage gradient_image(int width, int height) {
  RgbImage img{width, height, std::vector<uint8_t>(size_t(width) * height * 3)};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &img.pixels[(size_t(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / (width - 1));
      p[1] = static_cast<uint8_t>(y * 255 / (height - 1));
      p[2] = static_cast<uint8_t>((x + y) * 255 / (width + height - 2));
    }
  }
  return img;
}

inline std::vector<uint8_t> encode_png_rgb(const RgbImage& img, bool interlace = false) {
  PngSpec s;
  s.width = static_cast<int>(img.width);
  s.height = static_cast<int>(img.height);
  s.interlace = interlace;
  return encode_png(s, img.pixels);
}

// Standard base64 with padding (the independent encoder the data-URL tests send with).
inline std::string base64(const std::vector<uint8_t>& b) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < b.size(); i += 3) {
    const uint32_t n = (uint32_t{b[i]} << 16) | (i + 1 < b.size() ? uint32_t{b[i + 1]} << 8 : 0) |
                       (i + 2 < b.size() ? uint32_t{b[i + 2]} : 0);
    out += k[(n >> 18) & 63];
    out += k[(n >> 12) & 63];
    out += i + 1 < b.size() ? k[(n >> 6) & 63] : '=';
    out += i + 2 < b.size() ? k[n & 63] : '=';
  }
  return out;
}

// The image as a PNG in a data: URL, as a chat request carries it.
inline std::string png_data_url(const RgbImage& img, bool interlace = false) {
  return "data:image/png;base64," + base64(encode_png_rgb(img, interlace));
}

}  // namespace pagoda::test
