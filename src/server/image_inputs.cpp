#include "server/image_inputs.h"

#include <openssl/sha.h>

#include <chrono>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "image/image.h"
#include "server/openai_protocol.h"

namespace pagoda::server {

namespace {

bool starts_with_ci(const std::string& s, const char* prefix) {
  const size_t n = std::strlen(prefix);
  if (s.size() < n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

// splitmix64: spreads a key's bits over each placeholder id.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The host of "scheme://[user@]host[:port]/...", for messages ("[::1]" keeps its brackets).
std::string url_host(const std::string& url) {
  const size_t start = url.find("://") + 3;
  std::string authority = url.substr(start, url.find_first_of("/?#", start) - start);
  if (const size_t at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  const size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) authority.resize(colon);
  return authority.substr(0, 253);
}

}  // namespace

ImageInputs::ImageInputs(std::unique_ptr<VisionEncoder> encoder, ImageInputOptions options)
    : encoder_(std::move(encoder)), options_(options), pool_(std::max(1, options.threads)) {
  const VisionConfig& c = encoder_->config();
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on the chained +.
  settings_.append(encoder_->path()).append("|").append(c.projector_name);
  settings_.append("|").append(std::to_string(c.image_size));
  for (int i = 0; i < 3; ++i)
    settings_.append("|").append(std::to_string(c.mean[i])).append(",").append(std::to_string(c.std[i]));
  stats_.capacity_bytes = options_.cache_bytes;
}

ImageInputs::~ImageInputs() = default;

ImageInputs::Prepared ImageInputs::prepare(const std::string& url) {
  if (starts_with_ci(url, "http://") || starts_with_ci(url, "https://")) {
    if (!options_.fetch_url)
      throw ApiError(400, "remote image URLs are not fetched: send the image inline as a data: URL "
                          "(data:image/png;base64,...)");
    std::vector<uint8_t> bytes;
    try {
      bytes = options_.fetch_url(url, options_.max_image_bytes);
    } catch (const std::exception& e) {
      throw ApiError(400, "cannot fetch the image from " + url_host(url) + ": " + e.what());
    }
    return prepare_bytes(bytes);
  }
  if (!starts_with_ci(url, "data:"))
    throw ApiError(400, "an image URL must be a data: URL (data:image/png;base64,...)");
  DataUrl data;
  try {
    data = parse_data_url(url, options_.max_image_bytes);
  } catch (const Error& e) {
    throw ApiError(400, std::string("image: ") + e.what());
  }
  return prepare_bytes(data.bytes);
}

ImageInputs::Prepared ImageInputs::prepare_bytes(std::span<const uint8_t> bytes) {
  RgbImage img;
  try {
    ImageLimits limits;
    limits.max_bytes = options_.max_image_bytes;
    limits.max_pixels = options_.max_image_pixels;
    img = decode_image(bytes, limits);
  } catch (const Error& e) {
    throw ApiError(400, std::string("image: ") + e.what());
  }
  // The key: the pixels' SHA-256 and the preprocessing settings, hashed together.
  const std::array<uint8_t, 32> content = image_content_hash(img);
  std::string material(reinterpret_cast<const char*>(content.data()), content.size());
  material += settings_;
  std::string key(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(material.data()), material.size(),
         reinterpret_cast<unsigned char*>(key.data()));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->value;
    }
  }
  const VisionConfig& c = encoder_->config();
  const auto [width, height] = encoder_->input_size(img.width, img.height);
  const RgbImage fitted = fit_and_pad(img, width, height);
  std::vector<float> pixels(static_cast<size_t>(3 * width * height));
  normalize_planar(fitted, c.mean, c.std, pixels.data());
  auto rows = std::make_shared<std::vector<float>>();
  // Encodes run one at a time, and each holds the lock until its rows are in the cache: a
  // request that waited here for another bringing the same image finds them cached then
  // instead of encoding them again. (Released before the insert, a waiter could look in
  // between: 2 encodes of 8 concurrent requests were seen under load.)
  std::lock_guard<std::mutex> encoding(encode_mu_);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->value;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  encoder_->encode(pixels.data(), width, height, pool_, *rows);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto ids = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(encoder_->tokens_for(width, height)));
  uint64_t base;
  std::memcpy(&base, key.data(), sizeof base);
  for (size_t i = 0; i < ids->size(); ++i)
    (*ids)[i] = std::numeric_limits<int32_t>::min() + static_cast<int32_t>(mix64(base + i) & 0x7fffffffu);
  const auto [grid_x, grid_y] = encoder_->tokens_grid(width, height);
  Prepared p{std::move(rows), std::move(ids), grid_x, grid_y};
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.encoded;
  stats_.encode_ms += ms;
  const uint64_t booked = p.rows->size() * sizeof(float) + p.placeholders->size() * sizeof(int32_t) + key.size();
  if (booked > options_.cache_bytes || index_.count(key)) return p;
  lru_.push_front(Entry{key, p, booked});
  index_.emplace(key, lru_.begin());
  stats_.bytes += booked;
  ++stats_.entries;
  while (stats_.bytes > options_.cache_bytes) {
    Entry& victim = lru_.back();
    stats_.bytes -= victim.bytes;
    --stats_.entries;
    index_.erase(victim.key);
    lru_.pop_back();
  }
  return p;
}

PromptWithImages assemble_prompt(const std::string& text, const std::vector<ImageInputs::Prepared>& images,
                                 const VisionEncoder& encoder, const Tokenizer& tok,
                                 const std::function<std::vector<int32_t>(const std::string&, size_t)>& tokenize_piece) {
  std::vector<std::string> pieces;
  size_t from = 0;
  const std::string marker = kImageMarker;
  for (size_t at; (at = text.find(marker, from)) != std::string::npos; from = at + marker.size())
    pieces.push_back(text.substr(from, at - from));
  pieces.push_back(text.substr(from));
  if (pieces.size() != images.size() + 1)
    throw ApiError(400, "the text holds the image marker " + marker + " " + std::to_string(pieces.size() - 1) +
                            " times for " + std::to_string(images.size()) +
                            " images (text holding the marker itself, or a chat template that dropped an image)",
                   "messages");
  const std::vector<int32_t> begin = tok.encode(encoder.image_begin_text(), false, true);
  const std::vector<int32_t> end = tok.encode(encoder.image_end_text(), false, true);
  PromptWithImages out;
  out.ids = tokenize_piece(pieces[0], 0);
  for (size_t i = 0; i < images.size(); ++i) {
    const ImageInputs::Prepared& p = images[i];
    out.ids.insert(out.ids.end(), begin.begin(), begin.end());
    ImageSpan span;
    span.offset = static_cast<int64_t>(out.ids.size());
    span.n_tokens = static_cast<int64_t>(p.placeholders->size());
    span.embeddings = p.rows;
    span.bidirectional = encoder.bidirectional_image_tokens();
    if (encoder.uses_mrope()) {
      span.grid_x = p.grid_x;
      span.grid_y = p.grid_y;
    }
    out.images.push_back(std::move(span));
    out.ids.insert(out.ids.end(), p.placeholders->begin(), p.placeholders->end());
    out.ids.insert(out.ids.end(), end.begin(), end.end());
    const std::vector<int32_t> rest = tokenize_piece(pieces[i + 1], i + 1);
    out.ids.insert(out.ids.end(), rest.begin(), rest.end());
  }
  return out;
}

ImageInputStats ImageInputs::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace pagoda::server
