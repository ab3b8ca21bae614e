// BlockHash: a known SHA-256 answer, chaining, and namespace separation.
#include <gtest/gtest.h>

#include <openssl/sha.h>

#include <vector>

#include "cache/block_hash.h"

namespace pagoda {
namespace {

TEST(BlockHash, IsSha256OfParentCountAndLittleEndianTokens) {
  BlockHash parent;
  for (int i = 0; i < 32; ++i) parent.bytes[i] = static_cast<uint8_t>(i);
  const std::vector<int32_t> toks = {1, 258, -1};
  std::vector<uint8_t> msg(parent.bytes.begin(), parent.bytes.end());
  for (uint8_t b : {3, 0, 0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 255, 255, 255, 255}) msg.push_back(b);
  BlockHash want;
  SHA256(msg.data(), msg.size(), want.bytes.data());
  EXPECT_EQ(block_hash(parent, toks), want);
}

TEST(BlockHash, EmptyInputHasTheKnownSha256) {
  // SHA-256("") — checks the library, so the hex() of other digests can be trusted.
  BlockHash h;
  SHA256(nullptr, 0, h.bytes.data());
  EXPECT_EQ(h.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(BlockHash, ChainsOnTheParentSoEqualBlocksAtDifferentPrefixesDiffer) {
  const BlockHash ns = namespace_hash("m", KvType::F16, KvType::F16, 32, "");
  const std::vector<int32_t> a = {1, 2, 3}, b = {4, 5, 6};
  const BlockHash ha = block_hash(ns, a), hb = block_hash(ns, b);
  EXPECT_NE(block_hash(ha, b), block_hash(hb, b));
  EXPECT_EQ(block_hash(ha, b), block_hash(block_hash(ns, a), b));
  EXPECT_NE(block_hash(ns, std::vector<int32_t>{1, 2}), block_hash(ns, std::vector<int32_t>{1, 2, 0}));
}

TEST(BlockHash, NamespaceSeparatesModelKvTypesBlockSizeAndCacheKey) {
  const BlockHash base = namespace_hash("model", KvType::F16, KvType::F16, 32, "key");
  EXPECT_EQ(base, namespace_hash("model", KvType::F16, KvType::F16, 32, "key"));
  EXPECT_NE(base, namespace_hash("model2", KvType::F16, KvType::F16, 32, "key"));
  EXPECT_NE(base, namespace_hash("model", KvType::Q8, KvType::F16, 32, "key"));
  EXPECT_NE(base, namespace_hash("model", KvType::F16, KvType::Q8, 32, "key"));
  EXPECT_NE(base, namespace_hash("model", KvType::F16, KvType::F16, 16, "key"));
  EXPECT_NE(base, namespace_hash("model", KvType::F16, KvType::F16, 32, ""));
  // Length prefixes: moving a character between fields changes the hash.
  EXPECT_NE(namespace_hash("ab", KvType::F16, KvType::F16, 32, "c"),
            namespace_hash("a", KvType::F16, KvType::F16, 32, "bc"));
}

}  // namespace
}  // namespace pagoda
