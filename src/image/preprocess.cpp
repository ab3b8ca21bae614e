// The vision encoder's preprocessing, as llama.cpp b10587's libmtmd does it for fixed-size
// projectors such as Gemma 3's (img_tool::resize with PAD_CEIL and RESIZE_ALGO_BILINEAR,
// then clip_image_f32's from_u8 and normalize). The float arithmetic follows its order
// operation by operation, so pixels and tensors are bit-identical to what llama.cpp feeds
// the same model (with -ffp-contract=off, which ISO C++ mode gives).
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "image/image.h"

namespace pagoda {

namespace {

void check_image(const RgbImage& img, const char* what) {
  PAGODA_CHECK(img.width > 0 && img.height > 0 &&
                   img.pixels.size() == size_t(img.width) * size_t(img.height) * 3,
               std::string(what) + ": not a non-empty RGB8 image");
}

float lerp(float from, float to, float t) { return from + (to - from) * t; }

}  // namespace

RgbImage resize_bilinear(const RgbImage& src, int64_t width, int64_t height) {
  check_image(src, "resize_bilinear");
  PAGODA_CHECK(width > 0 && height > 0, "resize_bilinear: target size must be positive");
  RgbImage dst;
  dst.width = width;
  dst.height = height;
  dst.pixels.resize(size_t(width) * size_t(height) * 3);
  // Corner-aligned grid: the first and last output pixels sit on the first and last source
  // pixels. A single output row or column samples the source's first.
  const float x_ratio = width > 1 ? static_cast<float>(src.width - 1) / static_cast<float>(width - 1) : 0.0f;
  const float y_ratio = height > 1 ? static_cast<float>(src.height - 1) / static_cast<float>(height - 1) : 0.0f;
  const auto at = [&](int64_t x, int64_t y) { return &src.pixels[size_t(y * src.width + x) * 3]; };
  for (int64_t y = 0; y < height; ++y) {
    const float py = static_cast<float>(y) * y_ratio;
    const int64_t y0 = std::min(static_cast<int64_t>(py), src.height - 1);
    const int64_t y1 = std::min(y0 + 1, src.height - 1);
    const float yf = py - static_cast<float>(y0);
    for (int64_t x = 0; x < width; ++x) {
      const float px = static_cast<float>(x) * x_ratio;
      const int64_t x0 = std::min(static_cast<int64_t>(px), src.width - 1);
      const int64_t x1 = std::min(x0 + 1, src.width - 1);
      const float xf = px - static_cast<float>(x0);
      const uint8_t* p00 = at(x0, y0);
      const uint8_t* p10 = at(x1, y0);
      const uint8_t* p01 = at(x0, y1);
      const uint8_t* p11 = at(x1, y1);
      uint8_t* out = &dst.pixels[size_t(y * width + x) * 3];
      for (int c = 0; c < 3; ++c) {
        const float top = lerp(static_cast<float>(p00[c]), static_cast<float>(p10[c]), xf);
        const float bottom = lerp(static_cast<float>(p01[c]), static_cast<float>(p11[c]), xf);
        out[c] = static_cast<uint8_t>(lerp(top, bottom, yf));  // truncates, as llama.cpp does
      }
    }
  }
  return dst;
}

RgbImage fit_and_pad(const RgbImage& src, int64_t width, int64_t height,
                     std::array<uint8_t, 3> pad_color) {
  check_image(src, "fit_and_pad");
  PAGODA_CHECK(width > 0 && height > 0, "fit_and_pad: target size must be positive");
  if (src.width == width && src.height == height) return src;
  const float scale = std::min(static_cast<float>(width) / static_cast<float>(src.width),
                               static_cast<float>(height) / static_cast<float>(src.height));
  const int64_t fit_w = std::min(static_cast<int64_t>(std::ceil(static_cast<float>(src.width) * scale)), width);
  const int64_t fit_h = std::min(static_cast<int64_t>(std::ceil(static_cast<float>(src.height) * scale)), height);
  const RgbImage fitted = resize_bilinear(src, fit_w, fit_h);

  RgbImage dst;
  dst.width = width;
  dst.height = height;
  dst.pixels.resize(size_t(width) * size_t(height) * 3);
  for (size_t i = 0; i < dst.pixels.size(); i += 3) {
    std::copy(pad_color.begin(), pad_color.end(), dst.pixels.begin() + static_cast<ptrdiff_t>(i));
  }
  const int64_t off_x = (width - fit_w) / 2;
  const int64_t off_y = (height - fit_h) / 2;
  for (int64_t y = 0; y < fit_h; ++y) {
    const auto row = fitted.pixels.begin() + static_cast<ptrdiff_t>(y * fit_w * 3);
    std::copy(row, row + fit_w * 3,
              dst.pixels.begin() + static_cast<ptrdiff_t>(((y + off_y) * width + off_x) * 3));
  }
  return dst;
}

void normalize_planar(const RgbImage& img, const std::array<float, 3>& mean,
                      const std::array<float, 3>& std, float* out) {
  check_image(img, "normalize_planar");
  const size_t plane = size_t(img.width) * size_t(img.height);
  for (size_t i = 0; i < plane; ++i) {
    for (size_t c = 0; c < 3; ++c) {
      const float unit = static_cast<float>(img.pixels[i * 3 + c]) / 255.0f;  // from_u8
      out[c * plane + i] = (unit - mean[c]) / std[c];                          // normalize
    }
  }
}

std::array<uint8_t, 32> image_content_hash(const RgbImage& img) {
  uint8_t dims[16];
  for (int i = 0; i < 8; ++i) {
    dims[i] = static_cast<uint8_t>(static_cast<uint64_t>(img.width) >> (8 * i));
    dims[8 + i] = static_cast<uint8_t>(static_cast<uint64_t>(img.height) >> (8 * i));
  }
  std::array<uint8_t, 32> digest{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  PAGODA_CHECK(ctx != nullptr, "image_content_hash: EVP_MD_CTX_new failed");
  const bool ok = EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(ctx, dims, sizeof dims) == 1 &&
                  EVP_DigestUpdate(ctx, img.pixels.data(), img.pixels.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx, digest.data(), nullptr) == 1;
  EVP_MD_CTX_free(ctx);
  PAGODA_CHECK(ok, "image_content_hash: SHA-256 failed");
  return digest;
}

}  // namespace pagoda
