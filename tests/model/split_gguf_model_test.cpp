// A split GGUF (gguf-split's layout) loads as the model it was split from: stories260K
// cut into three parts gives bit-identical logits to the single file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "gguf/gguf.h"
#include "kv/kv_store.h"
#include "model/model.h"

namespace pagoda {
namespace {

const std::string kStories = std::string(PAGODA_SHARED_DIR) + "/models/stories260K/stories260K.gguf";

std::vector<float> logits_of(const std::string& path) {
  auto file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  std::unique_ptr<Model> m = Model::load(file);
  ContiguousKvCache kv(m->config().n_layers, m->config().n_kv_heads, m->config().head_dim, 64, 1);
  ThreadPool pool(1);
  Batch b;
  const int32_t tokens[] = {1, 403, 407, 261, 378, 404, 297};
  for (int i = 0; i < 7; ++i) b.add(tokens[i], i, 0, true);
  std::vector<float> logits;
  m->forward(b, kv, pool, logits);
  return logits;
}

TEST(SplitGgufModel, StoriesInThreePartsGivesTheSameLogits) {
  if (!std::filesystem::exists(kStories)) GTEST_SKIP() << "no " << kStories;
  const gguf::GgufFile src = gguf::GgufFile::open(kStories);
  const auto dir = std::filesystem::temp_directory_path() / ("pagoda_split_model_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const size_t n = src.tensors().size();
  const int parts = 3;
  std::string first;
  for (int k = 0; k < parts; ++k) {
    gguf::GgufWriter w;
    if (k == 0)
      for (const auto& [key, value] : src.metadata()) w.set(key, value);
    w.set("split.no", gguf::Value::u32(static_cast<uint32_t>(k)));
    w.set("split.count", gguf::Value::u32(parts));
    if (k == 0) w.set("split.tensors.count", gguf::Value::i32(static_cast<int32_t>(n)));
    for (size_t i = n * k / parts; i < n * (k + 1) / parts; ++i) {
      const gguf::TensorInfo& t = src.tensors()[i];
      w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
    char name[64];
    std::snprintf(name, sizeof name, "stories-%05d-of-%05d.gguf", k + 1, parts);
    w.write((dir / name).string());
    if (k == 0) first = (dir / name).string();
  }
  EXPECT_EQ(logits_of(first), logits_of(kStories));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
