// Shared by the per-format decoders (decode_*.cpp); not part of the module's contract.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "image/image.h"

namespace pagoda::image_detail {

// Throws pagoda::Error naming `format` when width x height breaks `limits` (or a side is 0).
// Every decoder calls it with the header's dimensions before allocating pixels.
void check_dimensions(std::string_view format, int64_t width, int64_t height,
                      const ImageLimits& limits);

RgbImage decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits);
RgbImage decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits);
RgbImage decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits);

}  // namespace pagoda::image_detail
