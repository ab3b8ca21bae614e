// base64 and data: URLs, the way images arrive inside JSON request bodies.
#include <array>
#include <cstdio>
#include <string>

#include "common/error.h"
#include "image/image.h"

namespace pagoda {

namespace {

constexpr int kNotBase64 = -1;

constexpr std::array<int8_t, 256> make_sextets() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = kNotBase64;
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr std::array<int8_t, 256> kSextets = make_sextets();

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string describe_char(char c, size_t offset) {
  char buf[64];
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x21 && u < 0x7f) {
    std::snprintf(buf, sizeof buf, "'%c' at offset %zu", c, offset);
  } else {
    std::snprintf(buf, sizeof buf, "byte 0x%02x at offset %zu", u, offset);
  }
  return buf;
}

bool iequals_prefix(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char c = text[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != prefix[i]) return false;
  }
  return true;
}

}  // namespace

std::vector<uint8_t> base64_decode(std::string_view text, size_t max_bytes) {
  // First pass: validate and count, so the output size is known (and checked against
  // max_bytes) before anything is allocated.
  size_t digits = 0, padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (is_space(c)) continue;
    if (c == '=') {
      if (++padding > 2) throw Error("base64: more than two '=' at offset " + std::to_string(i));
      continue;
    }
    if (padding > 0) throw Error("base64: data after '=' padding, at offset " + std::to_string(i));
    if (kSextets[static_cast<uint8_t>(c)] == kNotBase64) {
      throw Error("base64: invalid character " + describe_char(c, i));
    }
    ++digits;
  }
  if (digits % 4 == 1) throw Error("base64: truncated (a lone character in the last group)");
  if (padding > 0 && (digits + padding) % 4 != 0) throw Error("base64: wrong '=' padding");
  const size_t size = digits / 4 * 3 + (digits % 4 == 0 ? 0 : digits % 4 - 1);
  if (size > max_bytes) {
    throw Error("base64: decodes to " + std::to_string(size) + " bytes, over the limit of " +
                std::to_string(max_bytes));
  }

  std::vector<uint8_t> out;
  out.reserve(size);
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    const int8_t v = kSextets[static_cast<uint8_t>(c)];
    if (v == kNotBase64) continue;  // whitespace and padding, already validated
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  return out;
}

DataUrl parse_data_url(std::string_view url, size_t max_bytes) {
  if (!iequals_prefix(url, "data:")) {
    throw Error("not a data URL: expected data:<media type>;base64,<data>");
  }
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) throw Error("data URL has no ',' before its data");
  std::string_view meta = url.substr(5, comma - 5);
  constexpr std::string_view kBase64 = ";base64";
  if (meta.size() < kBase64.size() ||
      !iequals_prefix(meta.substr(meta.size() - kBase64.size()), kBase64)) {
    throw Error("data URL is not base64: only data:<media type>;base64,<data> is accepted");
  }
  DataUrl result;
  result.media_type = std::string(meta.substr(0, meta.size() - kBase64.size()));
  try {
    result.bytes = base64_decode(url.substr(comma + 1), max_bytes);
  } catch (const Error& e) {
    throw Error(std::string("data URL: ") + e.what());
  }
  return result;
}

}  // namespace pagoda
