// src/image: decoding hostile bytes (PNG, JPEG, WebP) into RGB8 the way stb_image does,
// data URLs and base64, and llama.cpp's preprocessing (bilinear, fit-and-pad, normalize).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "image/image.h"
#include "image/image_encoders.h"

namespace pagoda {
namespace {

using namespace std::string_view_literals;  // the magics hold NUL bytes

using test::encode_jpeg;
using test::encode_png;
using test::encode_png_rgb;
using test::encode_webp;
using test::PngSpec;

std::span<const uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The pagoda::Error message `f` throws, or "" when it returns.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string decode_error(std::span<const uint8_t> bytes, const ImageLimits& limits = {}) {
  return error_of([&] { decode_image(bytes, limits); });
}

#define EXPECT_ERROR_HAS(expr, needle)                                         \
  do {                                                                         \
    const std::string message_ = (expr);                                       \
    EXPECT_NE(message_.find(needle), std::string::npos) << "message: " << message_; \
  } while (0)

// --- Sniffing ---------------------------------------------------------------------------

TEST(SniffImageFormat, RecognisesEachMagic) {
  EXPECT_EQ(sniff_image_format(bytes_of("\x89PNG\r\n\x1a\nrest")), "png");
  EXPECT_EQ(sniff_image_format(bytes_of("\xff\xd8\xff\xe0")), "jpeg");
  EXPECT_EQ(sniff_image_format(bytes_of("RIFF\x10\0\0\0WEBPVP8L"sv)), "webp");
  EXPECT_EQ(sniff_image_format(bytes_of("GIF89a...")), "gif");
  EXPECT_EQ(sniff_image_format(bytes_of("GIF87a...")), "gif");
  EXPECT_EQ(sniff_image_format(bytes_of("BM\x36\0\0\0"sv)), "bmp");
  EXPECT_EQ(sniff_image_format(bytes_of("RIFF\x10\0\0\0WAVE"sv)), "");
  EXPECT_EQ(sniff_image_format(bytes_of("\x89PN")), "");
  EXPECT_EQ(sniff_image_format({}), "");
}

// --- PNG --------------------------------------------------------------------------------

TEST(DecodePng, RgbRoundTripIsExact) {
  const RgbImage src = test::random_image(37, 23, 1);
  const RgbImage got = decode_image(encode_png_rgb(src));
  EXPECT_EQ(got.width, 37);
  EXPECT_EQ(got.height, 23);
  EXPECT_EQ(got.pixels, src.pixels);
}

TEST(DecodePng, InterlacedRoundTripIsExact) {
  const RgbImage src = test::random_image(19, 13, 2);
  const std::vector<uint8_t> png = encode_png_rgb(src, /*interlace=*/true);
  EXPECT_EQ(png[8 + 8 + 12], 1) << "the encoder did not write an Adam7 image";
  EXPECT_EQ(decode_image(png).pixels, src.pixels);
}

TEST(DecodePng, RgbaDropsAlphaWithoutCompositing) {
  PngSpec s{.width = 3, .height = 1, .color = PNG_COLOR_TYPE_RGB_ALPHA};
  const std::vector<uint8_t> rgba = {10, 20, 30, 0, 40, 50, 60, 128, 70, 80, 90, 255};
  const RgbImage got = decode_image(encode_png(s, rgba));
  EXPECT_EQ(got.pixels, (std::vector<uint8_t>{10, 20, 30, 40, 50, 60, 70, 80, 90}));
}

TEST(DecodePng, GrayIsReplicatedIntoRgb) {
  PngSpec s{.width = 3, .height = 1, .color = PNG_COLOR_TYPE_GRAY};
  const RgbImage got = decode_image(encode_png(s, {0, 77, 255}));
  EXPECT_EQ(got.pixels, (std::vector<uint8_t>{0, 0, 0, 77, 77, 77, 255, 255, 255}));
}

TEST(DecodePng, GrayAlphaKeepsGrayAndDropsAlpha) {
  PngSpec s{.width = 2, .height = 1, .color = PNG_COLOR_TYPE_GRAY_ALPHA};
  const RgbImage got = decode_image(encode_png(s, {9, 0, 200, 100}));
  EXPECT_EQ(got.pixels, (std::vector<uint8_t>{9, 9, 9, 200, 200, 200}));
}

TEST(DecodePng, OneBitGrayScalesToFullRange) {
  PngSpec s{.width = 4, .height = 1, .depth = 1, .color = PNG_COLOR_TYPE_GRAY};
  const RgbImage got = decode_image(encode_png(s, {0b1010'0000}));
  EXPECT_EQ(got.pixels, (std::vector<uint8_t>{255, 255, 255, 0, 0, 0, 255, 255, 255, 0, 0, 0}));
}

TEST(DecodePng, PaletteIsExpandedAndItsTransparencyDropped) {
  PngSpec s{.width = 3, .height = 2, .depth = 4, .color = PNG_COLOR_TYPE_PALETTE};
  s.palette = {{255, 0, 0}, {0, 255, 0}, {1, 2, 3}};
  s.trns = {0, 128};  // entries 0 and 1 (partly) transparent
  // Indices 0 1 2 / 2 1 0, packed two a byte; the last nibble of each row is padding.
  const RgbImage got = decode_image(encode_png(s, {0x01, 0x20, 0x21, 0x00}));
  EXPECT_EQ(got.pixels, (std::vector<uint8_t>{255, 0, 0, 0, 255, 0, 1, 2, 3,  //
                                              1, 2, 3, 0, 255, 0, 255, 0, 0}));
}

TEST(DecodePng, SixteenBitKeepsTheHighByte) {
  PngSpec rgb{.width = 1, .height = 1, .depth = 16, .color = PNG_COLOR_TYPE_RGB};
  // Low bytes over 0x80 would round up the high byte under scaling: stb_image truncates.
  EXPECT_EQ(decode_image(encode_png(rgb, {0xAB, 0xCD, 0x12, 0xFF, 0x00, 0x80})).pixels,
            (std::vector<uint8_t>{0xAB, 0x12, 0x00}));
  PngSpec gray{.width = 2, .height = 1, .depth = 16, .color = PNG_COLOR_TYPE_GRAY};
  EXPECT_EQ(decode_image(encode_png(gray, {0x7F, 0xFF, 0x01, 0x02})).pixels,
            (std::vector<uint8_t>{0x7F, 0x7F, 0x7F, 0x01, 0x01, 0x01}));
  PngSpec rgba{.width = 1, .height = 1, .depth = 16, .color = PNG_COLOR_TYPE_RGB_ALPHA};
  EXPECT_EQ(decode_image(encode_png(rgba, {1, 0xFF, 2, 0xFF, 3, 0xFF, 0, 0})).pixels,
            (std::vector<uint8_t>{1, 2, 3}));
}

// --- JPEG and WebP ----------------------------------------------------------------------

double mean_abs_error(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) sum += std::abs(int(a[i]) - int(b[i]));
  return sum / double(a.size());
}

TEST(DecodeJpeg, DecodesCloseToTheSource) {
  const RgbImage src = test::gradient_image(64, 48);
  for (bool progressive : {false, true}) {
    const RgbImage got = decode_image(encode_jpeg(src.pixels, 64, 48, 3, 95, progressive));
    ASSERT_EQ(got.width, 64);
    ASSERT_EQ(got.height, 48);
    EXPECT_LT(mean_abs_error(got.pixels, src.pixels), 2.0) << "progressive " << progressive;
  }
}

TEST(DecodeJpeg, GrayscaleIsReplicatedIntoRgb) {
  std::vector<uint8_t> gray(16 * 16);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>(i);
  const RgbImage got = decode_image(encode_jpeg(gray, 16, 16, 1, 95));
  std::vector<uint8_t> want;
  for (size_t i = 0; i < got.pixels.size(); i += 3) {
    EXPECT_EQ(got.pixels[i], got.pixels[i + 1]);
    EXPECT_EQ(got.pixels[i], got.pixels[i + 2]);
    want.insert(want.end(), 3, gray[i / 3]);
  }
  EXPECT_LT(mean_abs_error(got.pixels, want), 2.0);
}

TEST(DecodeWebp, LosslessRoundTripIsExact) {
  const RgbImage src = test::random_image(29, 17, 3);
  const RgbImage got = decode_image(encode_webp(src, /*lossless=*/true));
  EXPECT_EQ(got.width, 29);
  EXPECT_EQ(got.height, 17);
  EXPECT_EQ(got.pixels, src.pixels);
}

TEST(DecodeWebp, LossyDecodesCloseToTheSource) {
  const RgbImage src = test::gradient_image(64, 48);
  const RgbImage got = decode_image(encode_webp(src, /*lossless=*/false, 95));
  EXPECT_LT(mean_abs_error(got.pixels, src.pixels), 4.0);
}

// --- Hostile bytes ----------------------------------------------------------------------

TEST(DecodeImage, TruncatedFilesAreErrors) {
  const RgbImage src = test::gradient_image(64, 48);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> files = {
      {"PNG", encode_png_rgb(test::random_image(64, 48, 4))},
      {"JPEG", encode_jpeg(src.pixels, 64, 48, 3, 90)},
      {"WebP", encode_webp(test::random_image(64, 48, 5), /*lossless=*/true)},
  };
  for (const auto& [name, file] : files) {
    for (size_t keep : {file.size() / 2, file.size() - 20, size_t{40}, size_t{12}}) {
      const std::string message = decode_error(std::span(file).first(keep));
      EXPECT_EQ(message.rfind(name + " image", 0), 0u) << name << " cut to " << keep << ": " << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
    EXPECT_ERROR_HAS(decode_error(std::span(file).first(file.size() / 2)), "truncated");
  }
}

TEST(DecodeImage, RandomGarbageIsAnError) {
  std::mt19937 rng(7);
  for (std::string_view magic : {""sv, "\x89PNG\r\n\x1a\n"sv, "\xff\xd8\xff"sv, "RIFF\x40\0\0\0WEBPVP8 "sv}) {
    for (int i = 0; i < 50; ++i) {
      std::vector<uint8_t> bytes(magic.begin(), magic.end());
      for (size_t n = rng() % 300; n > 0; --n) bytes.push_back(static_cast<uint8_t>(rng()));
      EXPECT_FALSE(decode_error(bytes).empty());
    }
  }
}

uint32_t crc32(const uint8_t* data, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// The signature and a valid IHDR (CRC included) claiming width x height RGB8, then an
// IDAT of a few zlib bytes: the ~60-byte file of a decompression bomb.
std::vector<uint8_t> png_bomb(uint32_t width, uint32_t height) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_be32(out, 13);
  const size_t type_at = out.size();
  out.insert(out.end(), {'I', 'H', 'D', 'R'});
  put_be32(out, width);
  put_be32(out, height);
  out.insert(out.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, no interlace
  put_be32(out, crc32(out.data() + type_at, out.size() - type_at));
  put_be32(out, 8);
  const size_t idat_at = out.size();
  out.insert(out.end(), {'I', 'D', 'A', 'T', 0x78, 0x9c, 0xed, 0xc1, 0x01, 0x0d, 0x00, 0x00});
  put_be32(out, crc32(out.data() + idat_at, out.size() - idat_at));
  return out;
}

TEST(DecodeImage, PngBombFailsFastOnTheHeader) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_ERROR_HAS(decode_error(png_bomb(100000, 100000)),
                   "PNG image is 100000x100000 pixels: a side is over the limit of 16384");
  EXPECT_ERROR_HAS(decode_error(png_bomb(16384, 16384)),
                   "PNG image is 16384x16384 pixels: 268435456 pixels, over the limit of 33554432");
  EXPECT_ERROR_HAS(decode_error(png_bomb(0xFFFFFFFFu, 1)), "a side is over the limit");
  EXPECT_ERROR_HAS(decode_error(png_bomb(0, 5)), "PNG image is 0x5 pixels: it has no pixels");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Microseconds; decoding 268M pixels before the check would take seconds.
  EXPECT_LT(seconds, 2.0) << "the limits were not checked before allocating";
}

TEST(DecodeImage, EveryFormatChecksTheLimitsFromItsHeader) {
  const RgbImage src = test::gradient_image(40, 20);
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> files = {
      {"PNG", encode_png_rgb(src)},
      {"JPEG", encode_jpeg(src.pixels, 40, 20, 3, 90)},
      {"WebP", encode_webp(src, /*lossless=*/true)},
  };
  for (const auto& [name, file] : files) {
    EXPECT_EQ(decode_error(file), "") << name;
    EXPECT_EQ(decode_error(file, {.max_side = 32}),
              name + " image is 40x20 pixels: a side is over the limit of 32");
    EXPECT_EQ(decode_error(file, {.max_pixels = 799}),
              name + " image is 40x20 pixels: 800 pixels, over the limit of 799");
    EXPECT_EQ(decode_error(file, {.max_bytes = file.size() - 1}),
              "image is " + std::to_string(file.size()) + " bytes, over the limit of " +
                  std::to_string(file.size() - 1));
  }
}

TEST(DecodeImage, JpegClaimingHugeDimensionsFailsOnTheHeader) {
  const RgbImage src = test::gradient_image(16, 16);
  std::vector<uint8_t> jpeg = encode_jpeg(src.pixels, 16, 16, 3, 90);
  // SOF0: FF C0, length (2), precision (1), height (2), width (2).
  size_t sof = 2;
  while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, jpeg.size());
  jpeg[sof + 5] = 0xEA, jpeg[sof + 6] = 0x60;  // height 60000
  jpeg[sof + 7] = 0xEA, jpeg[sof + 8] = 0x60;  // width 60000
  EXPECT_EQ(decode_error(jpeg), "JPEG image is 60000x60000 pixels: a side is over the limit of 16384");
}

TEST(DecodeImage, UnsupportedFormatsSaySo) {
  EXPECT_EQ(decode_error(bytes_of("GIF89a\x01\0\x01\0\0\0\0;"sv)),
            "unsupported image format gif: send PNG, JPEG or WebP");
  EXPECT_EQ(decode_error(bytes_of("BM\x36\0\0\0\0\0\0\0"sv)),
            "unsupported image format bmp: send PNG, JPEG or WebP");
  EXPECT_EQ(decode_error(bytes_of("<svg xmlns=...")),
            "unsupported image format: the bytes are not PNG, JPEG or WebP");
  EXPECT_EQ(decode_error({}), "image is empty (0 bytes)");
}

// Bit flips and truncations of valid files: whatever happens, no crash, and anything
// refused is a pagoda::Error. (ASan, in the asan preset, checks the memory side.)
TEST(DecodeImage, FuzzedFilesNeverCrash) {
  const RgbImage smooth = test::gradient_image(24, 16);
  const RgbImage noisy = test::random_image(24, 16, 9);
  PngSpec palette{.width = 24, .height = 16, .depth = 8, .color = PNG_COLOR_TYPE_PALETTE};
  for (int i = 0; i < 256; ++i) palette.palette.push_back({png_byte(i), png_byte(255 - i), png_byte(i / 2)});
  std::vector<uint8_t> indices(24 * 16);
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<uint8_t>(i * 7);
  const std::vector<std::vector<uint8_t>> seeds = {
      encode_png_rgb(noisy),
      encode_png_rgb(smooth, /*interlace=*/true),
      encode_png(palette, indices),
      encode_jpeg(smooth.pixels, 24, 16, 3, 80),
      encode_jpeg(smooth.pixels, 24, 16, 3, 80, /*progressive=*/true),
      encode_webp(noisy, /*lossless=*/true),
      encode_webp(smooth, /*lossless=*/false),
  };
  // Small limits keep a flipped dimension from costing a large allocation per case.
  const ImageLimits limits{.max_pixels = 1 << 18, .max_side = 1024};
  std::mt19937 rng(20261205);
  int decoded = 0, refused = 0;
  for (int iter = 0; iter < 6000; ++iter) {
    std::vector<uint8_t> bytes = seeds[iter % seeds.size()];
    const unsigned mode = rng() % 3;
    if (mode != 1) {  // flip 1..8 bits
      for (unsigned n = 1 + rng() % 8; n > 0; --n) bytes[rng() % bytes.size()] ^= uint8_t(1u << (rng() % 8));
    }
    if (mode != 0) bytes.resize(rng() % bytes.size());  // truncate
    try {
      const RgbImage img = decode_image(bytes, limits);
      ASSERT_EQ(img.pixels.size(), size_t(img.width * img.height * 3));
      ++decoded;
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(decoded, 0);
  EXPECT_GT(refused, 0);
}

// --- base64 and data URLs ---------------------------------------------------------------

std::string as_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

std::string base64_error(std::string_view text, size_t max_bytes = 1000) {
  return error_of([&] { base64_decode(text, max_bytes); });
}

TEST(Base64, DecodesWithAndWithoutPaddingAndIgnoresWhitespace) {
  EXPECT_EQ(as_string(base64_decode("", 10)), "");
  EXPECT_EQ(as_string(base64_decode("Zm9vYmFy", 10)), "foobar");
  EXPECT_EQ(as_string(base64_decode("Zm9vYg==", 10)), "foob");
  EXPECT_EQ(as_string(base64_decode("Zm9vYg", 10)), "foob");
  EXPECT_EQ(as_string(base64_decode("Zm9vYmE=", 10)), "fooba");
  EXPECT_EQ(as_string(base64_decode("Zm9vYmE", 10)), "fooba");
  EXPECT_EQ(as_string(base64_decode(" Zm9v\r\nYmE9\tPz8/\n", 10)), "fooba=???");
  EXPECT_EQ(base64_decode("+/+/", 10), (std::vector<uint8_t>{0xfb, 0xff, 0xbf}));
}

TEST(Base64, RefusesBadInput) {
  EXPECT_EQ(base64_error("Zm9v*mFy"), "base64: invalid character '*' at offset 4");
  EXPECT_EQ(base64_error("Zm9v-_"), "base64: invalid character '-' at offset 4");  // URL-safe alphabet
  EXPECT_EQ(base64_error("Zm\x80v"), "base64: invalid character byte 0x80 at offset 2");
  EXPECT_EQ(base64_error("Zm9vY"), "base64: truncated (a lone character in the last group)");
  EXPECT_EQ(base64_error("Zg==Zg=="), "base64: data after '=' padding, at offset 4");
  EXPECT_EQ(base64_error("Zg==="), "base64: more than two '=' at offset 4");
  EXPECT_EQ(base64_error("Zm9=", 10), "");
  EXPECT_EQ(base64_error("Zm=", 10), "base64: wrong '=' padding");
  EXPECT_EQ(base64_error("Zm9vYmFy", 5), "base64: decodes to 6 bytes, over the limit of 5");
  EXPECT_EQ(base64_error("Zm9vYmFy", 6), "");
}

std::string data_url_error(std::string_view url, size_t max_bytes = 1000) {
  return error_of([&] { parse_data_url(url, max_bytes); });
}

TEST(DataUrl, DecodesBase64AndKeepsTheMediaType) {
  DataUrl d = parse_data_url("data:image/png;base64,Zm9vYmFy", 100);
  EXPECT_EQ(d.media_type, "image/png");
  EXPECT_EQ(as_string(d.bytes), "foobar");
  d = parse_data_url("DATA:image/jpeg;name=a.jpg;BASE64,Zm9v", 100);
  EXPECT_EQ(d.media_type, "image/jpeg;name=a.jpg");
  EXPECT_EQ(as_string(d.bytes), "foo");
  d = parse_data_url("data:;base64,", 100);
  EXPECT_EQ(d.media_type, "");
  EXPECT_TRUE(d.bytes.empty());
}

TEST(DataUrl, RefusesWhatIsNotABase64DataUrl) {
  EXPECT_EQ(data_url_error("https://example.com/cat.png"),
            "not a data URL: expected data:<media type>;base64,<data>");
  EXPECT_EQ(data_url_error("data:image/png;base64Zm9v"), "data URL has no ',' before its data");
  EXPECT_EQ(data_url_error("data:image/png,%89PNG"),
            "data URL is not base64: only data:<media type>;base64,<data> is accepted");
  EXPECT_EQ(data_url_error("data:image/png;base64,Zm9v!"),
            "data URL: base64: invalid character '!' at offset 4");
  EXPECT_EQ(data_url_error("data:image/png;base64,Zm9vYmFy", 5),
            "data URL: base64: decodes to 6 bytes, over the limit of 5");
}

TEST(DataUrl, CarriesAnImageEndToEnd) {
  const RgbImage src = test::random_image(5, 4, 11);
  const std::vector<uint8_t> png = encode_png_rgb(src);
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < png.size(); i += 3) {
    uint32_t v = uint32_t(png[i]) << 16;
    if (i + 1 < png.size()) v |= uint32_t(png[i + 1]) << 8;
    if (i + 2 < png.size()) v |= png[i + 2];
    const size_t chars = std::min<size_t>(4, (png.size() - i) * 4 / 3 + 1);
    for (size_t k = 0; k < chars; ++k) b64 += kAlphabet[(v >> (18 - 6 * k)) & 63];
  }
  const DataUrl d = parse_data_url("data:image/png;base64," + b64, 1 << 20);
  EXPECT_EQ(d.bytes, png);
  EXPECT_EQ(decode_image(d.bytes).pixels, src.pixels);
}

// --- Preprocessing ----------------------------------------------------------------------

// Every channel the same value: keeps the expected images short to write.
RgbImage gray_image(int64_t width, int64_t height, const std::vector<uint8_t>& values) {
  RgbImage img{width, height, {}};
  for (uint8_t v : values) img.pixels.insert(img.pixels.end(), 3, v);
  return img;
}

TEST(ResizeBilinear, TwoByTwoToThreeByThreeByHand) {
  // llama.cpp: ratio (2-1)/(3-1) = 0.5, so output x = 0, 1, 2 samples source x = 0, 0.5, 1.
  // Middle row (y = 0.5): left lerp(0, 200, .5) = 100; centre top 50, bottom 200 + 55 * .5 =
  // 227.5, lerp = 138.75 -> 138; right lerp(100, 255, .5) = 177.5 -> 177. Bottom row: 200,
  // 227.5 -> 227, 255.
  const RgbImage src = gray_image(2, 2, {0, 100, 200, 255});
  const RgbImage got = resize_bilinear(src, 3, 3);
  EXPECT_EQ(got.width, 3);
  EXPECT_EQ(got.height, 3);
  EXPECT_EQ(got.pixels, gray_image(3, 3, {0, 50, 100, 100, 138, 177, 200, 227, 255}).pixels);
}

TEST(ResizeBilinear, ChannelsAreIndependentAndSingleRowsSampleTheFirst) {
  RgbImage src{2, 1, {0, 10, 255, 100, 30, 55}};
  EXPECT_EQ(resize_bilinear(src, 3, 1).pixels,
            (std::vector<uint8_t>{0, 10, 255, 50, 20, 155, 100, 30, 55}));
  // Target width 1: ratio 0, the first column; downscaling 3 -> 2 takes columns 0 and 2.
  EXPECT_EQ(resize_bilinear(gray_image(3, 1, {7, 8, 9}), 1, 1).pixels, gray_image(1, 1, {7}).pixels);
  EXPECT_EQ(resize_bilinear(gray_image(3, 1, {7, 8, 9}), 2, 1).pixels, gray_image(2, 1, {7, 9}).pixels);
  EXPECT_EQ(resize_bilinear(gray_image(1, 1, {42}), 2, 2).pixels, gray_image(2, 2, {42, 42, 42, 42}).pixels);
}

TEST(FitAndPad, WideImageIsCentredOnBlack) {
  // 9x3 into 5x5: scale min(5/9, 5/3) = 5/9; sides ceil(5.0) = 5 and ceil(1.67) = 2; the
  // ratios (8/4, 2/1) land on source pixels (2x, 2y); offset ((5-5)/2, (5-2)/2) = (0, 1).
  std::vector<uint8_t> values(27);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(10 + i);
  const RgbImage got = fit_and_pad(gray_image(9, 3, values), 5, 5);
  EXPECT_EQ(got.width, 5);
  EXPECT_EQ(got.height, 5);
  EXPECT_EQ(got.pixels, gray_image(5, 5, {0,  0,  0,  0,  0,    //
                                          10, 12, 14, 16, 18,   //
                                          28, 30, 32, 34, 36,   //
                                          0,  0,  0,  0,  0,    //
                                          0,  0,  0,  0,  0})
                            .pixels);
}

TEST(FitAndPad, TallImageIsCentredOnThePadColour) {
  // 1x2 into 4x4: scale 2, a 2x4 image of the one column at x offset 1.
  const RgbImage got = fit_and_pad(gray_image(1, 2, {100, 200}), 4, 4, {1, 2, 3});
  RgbImage want{4, 4, {}};
  const uint8_t column[4] = {100, 133, 166, 200};  // y * 1/3: lerp(100, 200, 0.333..) = 133.3
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) {
      if (x == 1 || x == 2) {
        want.pixels.insert(want.pixels.end(), 3, column[y]);
      } else {
        want.pixels.insert(want.pixels.end(), {1, 2, 3});
      }
    }
  }
  EXPECT_EQ(got.pixels, want.pixels);
}

TEST(FitAndPad, AnImageOfTheTargetSizeIsUnchanged) {
  const RgbImage src = test::random_image(6, 4, 12);
  const RgbImage got = fit_and_pad(src, 6, 4);
  EXPECT_EQ(got.width, 6);
  EXPECT_EQ(got.height, 4);
  EXPECT_EQ(got.pixels, src.pixels);
}

TEST(NormalizePlanar, WritesPlanesInLlamaCppsArithmetic) {
  const RgbImage img{2, 1, {0, 51, 255, 128, 1, 254}};
  std::vector<float> out(6, -99.0f);
  normalize_planar(img, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}, out.data());
  EXPECT_EQ(out[0], -1.0f);  // R of pixel 0
  EXPECT_EQ(out[1], (128 / 255.0f - 0.5f) / 0.5f);  // R of pixel 1
  EXPECT_EQ(out[2], (51 / 255.0f - 0.5f) / 0.5f);   // G plane
  EXPECT_EQ(out[3], (1 / 255.0f - 0.5f) / 0.5f);
  EXPECT_EQ(out[4], 1.0f);  // B plane
  EXPECT_EQ(out[5], (254 / 255.0f - 0.5f) / 0.5f);
  EXPECT_NEAR(out[2], -0.6f, 1e-6f);

  const std::array<float, 3> mean = {0.48145466f, 0.4578275f, 0.40821073f};  // CLIP's
  const std::array<float, 3> std = {0.26862954f, 0.26130258f, 0.27577711f};
  normalize_planar(img, mean, std, out.data());
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 2; ++i) {
      const float unit = float(img.pixels[i * 3 + c]) / 255.0f;
      EXPECT_EQ(out[c * 2 + i], (unit - mean[c]) / std[c]) << c << " " << i;
    }
  }
}

TEST(ImageContentHash, NamesTheContent) {
  const RgbImage a = test::random_image(3, 2, 13);
  EXPECT_EQ(image_content_hash(a), image_content_hash(RgbImage(a)));
  RgbImage one_pixel = a;
  one_pixel.pixels[7] ^= 1;
  EXPECT_NE(image_content_hash(a), image_content_hash(one_pixel));
  const RgbImage transposed{2, 3, a.pixels};  // the same bytes, other dimensions
  EXPECT_NE(image_content_hash(a), image_content_hash(transposed));
}

TEST(ImageContentHash, IsSha256OfLittleEndianSidesThenPixels) {
  const RgbImage img{1, 1, {0xAA, 0xBB, 0xCC}};
  // sha256(01 00*7 01 00*7 aa bb cc), by Python's hashlib.
  const std::array<uint8_t, 32> h = image_content_hash(img);
  std::string hex;
  for (uint8_t b : h) {
    static const char* digits = "0123456789abcdef";
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  EXPECT_EQ(hex, "18cdf88d14c439fa64307a223c75554fcc1fab3588066d66e8e95295b50fdbfb");
}

}  // namespace
}  // namespace pagoda
