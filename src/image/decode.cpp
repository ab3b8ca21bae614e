// Format sniffing, the size and dimension limits, and the dispatch to a decoder.
#include <cstring>
#include <string>

#include "common/error.h"
#include "image/decode_internal.h"
#include "image/image.h"

namespace pagoda {

namespace {

bool starts_with(std::span<const uint8_t> bytes, size_t offset, std::string_view magic) {
  return bytes.size() >= offset + magic.size() &&
         std::memcmp(bytes.data() + offset, magic.data(), magic.size()) == 0;
}

}  // namespace

std::string_view sniff_image_format(std::span<const uint8_t> bytes) {
  if (starts_with(bytes, 0, "\x89PNG\r\n\x1a\n")) return "png";
  if (starts_with(bytes, 0, "\xff\xd8\xff")) return "jpeg";
  if (starts_with(bytes, 0, "RIFF") && starts_with(bytes, 8, "WEBP")) return "webp";
  if (starts_with(bytes, 0, "GIF87a") || starts_with(bytes, 0, "GIF89a")) return "gif";
  if (starts_with(bytes, 0, "BM")) return "bmp";
  return "";
}

namespace image_detail {

void check_dimensions(std::string_view format, int64_t width, int64_t height,
                      const ImageLimits& limits) {
  const std::string what = std::string(format) + " image is " + std::to_string(width) + "x" +
                           std::to_string(height) + " pixels";
  if (width <= 0 || height <= 0) throw Error(what + ": it has no pixels");
  if (width > limits.max_side || height > limits.max_side) {
    throw Error(what + ": a side is over the limit of " + std::to_string(limits.max_side));
  }
  // Both sides are at most max_side here, so the product cannot overflow.
  if (width * height > limits.max_pixels) {
    throw Error(what + ": " + std::to_string(width * height) + " pixels, over the limit of " +
                std::to_string(limits.max_pixels));
  }
}

}  // namespace image_detail

RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  if (bytes.empty()) throw Error("image is empty (0 bytes)");
  if (bytes.size() > limits.max_bytes) {
    throw Error("image is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                std::to_string(limits.max_bytes));
  }
  const std::string_view format = sniff_image_format(bytes);
  if (format == "png") return image_detail::decode_png(bytes, limits);
  if (format == "jpeg") return image_detail::decode_jpeg(bytes, limits);
  if (format == "webp") return image_detail::decode_webp(bytes, limits);
  if (!format.empty()) {
    throw Error("unsupported image format " + std::string(format) + ": send PNG, JPEG or WebP");
  }
  throw Error("unsupported image format: the bytes are not PNG, JPEG or WebP");
}

}  // namespace pagoda
