// PNG through libpng's classic API, set up to give what stb_image gives with 3 channels
// requested (see image.h). libpng reports errors by longjmp: the jump lands in run_png(),
// whose frame holds no object with a destructor; everything that owns memory lives in the
// caller's PngJob, which the jump never skips.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "image/decode_internal.h"

namespace pagoda::image_detail {

namespace {

// Ancillary chunks (iCCP, zTXt, iTXt) are decompressed into buffers of at most this size;
// none of them is used, so a small cap costs nothing and stops a zlib bomb in one.
constexpr png_alloc_size_t kChunkMallocMax = 1u << 20;
constexpr png_uint_32 kChunkCacheMax = 256;

struct PngJob {
  std::span<const uint8_t> bytes;
  size_t pos = 0;
  const ImageLimits* limits = nullptr;
  RgbImage out;
  std::vector<png_bytep> rows;
  char message[200] = {};
};

void read_bytes(png_structp png, png_bytep data, size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->bytes.size() - job->pos) png_error(png, "truncated (the data ends early)");
  std::memcpy(data, job->bytes.data() + job->pos, n);
  job->pos += n;
}

[[noreturn]] void on_error(png_structp png, png_const_charp msg) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof job->message, "%s", msg);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // a client's bad chunk is no log line

// False after libpng reported an error (job->message says which). May throw
// std::bad_alloc from the vector resizes, which are direct calls, not inside libpng.
bool run_png(png_structp png, png_infop info, PngJob* job) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, job, read_bytes);
  png_set_user_limits(png, static_cast<png_uint_32>(job->limits->max_side),
                      static_cast<png_uint_32>(job->limits->max_side));
  png_set_chunk_malloc_max(png, kChunkMallocMax);
  png_set_chunk_cache_max(png, kChunkCacheMax);
  png_read_info(png, info);

  png_uint_32 width = 0, height = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(png, info, &width, &height, &depth, &color, &interlace, nullptr, nullptr);
  if (depth == 16) png_set_strip_16(png);  // keeps the high byte, as stb_image does
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  // Alpha, whether a channel or made from tRNS, is dropped, not composited: stb_image's way.
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != size_t{width} * 3) {
    png_error(png, "unexpected pixel layout after conversion to RGB8");
  }

  job->out.width = width;
  job->out.height = height;
  job->out.pixels.resize(size_t{width} * height * 3);
  job->rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) {
    job->rows[y] = job->out.pixels.data() + size_t{y} * width * 3;
  }
  png_read_image(png, job->rows.data());  // handles the passes of an interlaced image
  return true;
}

// The IHDR's dimensions, read here so a PNG bomb fails on our limits, with our message,
// before libpng does anything.
void check_ihdr(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  if (bytes.size() < 8 + 8 + 13 + 4 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0) {
    throw Error("PNG image cannot be decoded: no IHDR chunk after the signature");
  }
  auto be32 = [&](size_t at) {
    return int64_t{bytes[at]} << 24 | int64_t{bytes[at + 1]} << 16 | int64_t{bytes[at + 2]} << 8 |
           int64_t{bytes[at + 3]};
  };
  check_dimensions("PNG", be32(16), be32(20), limits);
}

struct PngStructs {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngStructs() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

RgbImage decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  check_ihdr(bytes, limits);
  PngJob job;
  job.bytes = bytes;
  job.limits = &limits;
  PngStructs s;
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, on_error, on_warning);
  if (s.png == nullptr) throw Error("PNG image: libpng could not start (out of memory)");
  s.info = png_create_info_struct(s.png);
  if (s.info == nullptr) throw Error("PNG image: libpng could not start (out of memory)");
  if (!run_png(s.png, s.info, &job)) {
    throw Error(std::string("PNG image cannot be decoded: ") + job.message);
  }
  return std::move(job.out);
}

}  // namespace pagoda::image_detail
