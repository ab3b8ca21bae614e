#include "cache/block_hash.h"

#include <openssl/sha.h>

#include <string>
#include <bit>

#include "common/error.h"

namespace pagoda {

namespace {

void put_u64(std::string& out, uint64_t x) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
}

void put_str(std::string& out, std::string_view s) {
  put_u64(out, s.size());
  out.append(s);
}

}  // namespace

std::string BlockHash::hex() const {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : bytes) {
    s.push_back(d[b >> 4]);
    s.push_back(d[b & 15]);
  }
  return s;
}

BlockHash namespace_hash(std::string_view model_id, KvType k_type, KvType v_type, int64_t block_size,
                         std::string_view cache_key) {
  std::string msg;
  put_str(msg, "pagoda.prefix-cache.v1");
  put_str(msg, model_id);
  put_str(msg, kv_type_name(k_type));
  put_str(msg, kv_type_name(v_type));
  put_u64(msg, static_cast<uint64_t>(block_size));
  put_str(msg, cache_key);
  BlockHash h;
  SHA256(reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), h.bytes.data());
  return h;
}

BlockHash block_hash(const BlockHash& parent, std::span<const int32_t> tokens) {
  constexpr size_t kMaxTokens = 256;
  PAGODA_CHECK(tokens.size() <= kMaxTokens, "block_hash: more than 256 tokens in one block");
  // parent ‖ u32 count ‖ i32 tokens, little-endian (x86-64 and aarch64 are, so the
  // tokens are copied as they lie in memory).
  static_assert(std::endian::native == std::endian::little, "token bytes are hashed in memory order");
  uint8_t buf[32 + 4 + 4 * kMaxTokens];
  std::memcpy(buf, parent.bytes.data(), 32);
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  std::memcpy(buf + 32, &n, 4);
  std::memcpy(buf + 36, tokens.data(), 4 * tokens.size());
  BlockHash h;
  SHA256(buf, 36 + 4 * tokens.size(), h.bytes.data());
  return h;
}

}  // namespace pagoda
