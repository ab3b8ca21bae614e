// ImageInputs — a request's images, from URL to the rows the engine feeds (Request::images):
// data: URL -> bytes -> pixels (image/image.h, under the byte and pixel limits) -> the
// projector's preprocessing -> the vision encoder, with the encoder's output cached by the
// image's content.
//
// Contract:
// - prepare(url): throws ApiError 400 naming the limit or the problem for a URL that is not
//   a data: URL or, with options.fetch_url (serve --allow-image-urls), an http(s) URL it
//   fetched (a failure: "cannot fetch the image from HOST: REASON"; without it http(s) URLs
//   are refused), bytes over max_image_bytes, an undecodable or unsupported image,
//   dimensions over max_image_pixels. Never crashes on hostile bytes.
// - The rows of an image are keyed by the SHA-256 of its decoded pixels and the
//   preprocessing settings (the projector's file, image size, mean, std); its placeholder
//   ids (negative, never a token) are derived from that key, so the prefix cache shares an
//   image's K/V exactly between requests sending the same picture, whatever its encoding.
// - The encoder cache holds at most cache_bytes of rows (each entry booked at its rows'
//   bytes plus its placeholder ids), least recently used evicted first; 0: off.
// - Thread-safe: HTTP threads call prepare() concurrently; decoding runs on the caller's
//   thread, encoding one image at a time on the encoder's own thread pool (a mutex); a
//   request that waited for another encoding the same image takes its cached rows.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/thread_pool.h"
#include "engine/engine.h"
#include "server/openai_protocol.h"
#include "tokenizer/tokenizer.h"
#include "vision/vision_encoder.h"

namespace pagoda::server {

struct ImageInputOptions {
  uint64_t max_image_bytes = 20ull << 20;   // --image-max-bytes: one image's bytes (decoded from base64)
  int64_t max_image_pixels = 33'554'432;    // --image-max-pixels: width x height
  int max_images = 8;                       // --max-images: per request
  uint64_t cache_bytes = 256ull << 20;      // --image-cache-bytes: encoder outputs kept
  int threads = 1;                          // the encoder's kernel threads
  // --allow-image-urls: the bytes at an http(s) URL, at most max_bytes of them; throws
  // std::exception with the reason. Empty: such URLs are refused. Runs on the caller's thread.
  std::function<std::vector<uint8_t>(const std::string& url, uint64_t max_bytes)> fetch_url;
};

struct ImageInputStats {
  int64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t capacity_bytes = 0;
  int64_t hits = 0;      // images whose rows came from the cache
  int64_t encoded = 0;   // images encoded
  double encode_ms = 0;  // total time in the encoder
};

class ImageInputs {
 public:
  ImageInputs(std::unique_ptr<VisionEncoder> encoder, ImageInputOptions options);
  ~ImageInputs();

  struct Prepared {
    std::shared_ptr<const std::vector<float>> rows;  // [n_tokens, text width]
    std::shared_ptr<const std::vector<int32_t>> placeholders;  // [n_tokens], negative
    int64_t grid_x = 0, grid_y = 0;  // the rows' grid (VisionEncoder::tokens_grid)
  };
  // Throws ApiError (see contract).
  Prepared prepare(const std::string& url);
  // The same for an image's file bytes (pagoda generate --image).
  Prepared prepare_bytes(std::span<const uint8_t> bytes);

  const VisionEncoder& encoder() const { return *encoder_; }
  const ImageInputOptions& options() const { return options_; }
  ImageInputStats stats() const;

 private:
  struct Entry {
    std::string key;
    Prepared value;
    uint64_t bytes = 0;
  };
  std::unique_ptr<VisionEncoder> encoder_;
  ImageInputOptions options_;
  std::string settings_;  // what besides the pixels decides the rows (hashed into the key)
  mutable std::mutex mu_;  // the cache and stats
  std::list<Entry> lru_;   // front: most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  ImageInputStats stats_;
  std::mutex encode_mu_;  // one encode at a time (the encoder's scratch)
  ThreadPool pool_;
};

// A prompt whose text holds kImageMarker once per image: the text split at the markers,
// each piece's ids from tokenize_piece(piece, index) (index 0: the first piece, which may
// start with BOS), and each image as the projector's begin text, its placeholder ids and
// its end text, each tokenized apart (as llama.cpp's libmtmd does). Throws ApiError 400 when
// the markers and the images differ in number, or an image is bad.
struct PromptWithImages {
  std::vector<int32_t> ids;
  std::vector<ImageSpan> images;
};
PromptWithImages assemble_prompt(const std::string& text, const std::vector<ImageInputs::Prepared>& images,
                                 const VisionEncoder& encoder, const Tokenizer& tok,
                                 const std::function<std::vector<int32_t>(const std::string&, size_t)>& tokenize_piece);

}  // namespace pagoda::server
