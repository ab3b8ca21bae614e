// WebP through libwebp: the bitstream's features give the dimensions, checked against the
// limits before the output is allocated; the decoder then writes RGB into that buffer
// (alpha dropped, as for PNG).
#include <webp/decode.h>

#include <string>

#include "common/error.h"
#include "image/decode_internal.h"

namespace pagoda::image_detail {

namespace {

const char* status_text(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "truncated (the data ends early)";
    default: return "unknown error";
  }
}

}  // namespace

RgbImage decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status != VP8_STATUS_OK) {
    throw Error(std::string("WebP image cannot be decoded: ") + status_text(status));
  }
  if (features.has_animation) throw Error("WebP image is animated: send a still image");
  check_dimensions("WebP", features.width, features.height, limits);
  RgbImage out;
  out.width = features.width;
  out.height = features.height;
  out.pixels.resize(size_t(out.width) * size_t(out.height) * 3);
  // The advanced API, for its status code: the simple WebPDecodeRGBInto says only "failed".
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) throw Error("WebP image: libwebp version mismatch");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = out.pixels.data();
  config.output.u.RGBA.stride = static_cast<int>(out.width * 3);
  config.output.u.RGBA.size = out.pixels.size();
  const VP8StatusCode decoded = WebPDecode(bytes.data(), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);  // frees nothing of ours (external memory)
  if (decoded != VP8_STATUS_OK) {
    throw Error(std::string("WebP image cannot be decoded: ") + status_text(decoded));
  }
  return out;
}

}  // namespace pagoda::image_detail
