// Mixtral GGUFs from before llama.cpp stacked the experts (one 2-D tensor per expert,
// blk.N.ffn_gate.E.weight ...) load as the stacked file they were rewritten from and give
// bit-identical logits; a missing or mismatched expert is a one-line error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "gguf/gguf.h"
#include "kv/kv_store.h"
#include "model/model.h"
#include "tools/synth.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

std::vector<float> logits_of(const std::string& path) {
  auto file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  std::unique_ptr<Model> m = Model::load(file);
  const ModelConfig& c = m->config();
  ContiguousKvCache kv(c.n_layers, c.n_kv_heads, c.head_dim, 32, 1);
  ThreadPool pool(1);
  Batch b;
  for (int i = 0; i < 9; ++i) b.add((i * 37 + 5) % static_cast<int32_t>(c.n_vocab), i, 0, true);
  std::vector<float> logits;
  m->forward(b, kv, pool, logits);
  return logits;
}

// Rewrites `src` with each 3-D ffn_*_exps tensor as n_expert 2-D tensors; `skip` names an
// expert tensor to leave out.
void write_legacy(const std::string& src, const std::string& dst, const std::string& skip = "") {
  const gguf::GgufFile in = gguf::GgufFile::open(src);
  gguf::GgufWriter w;
  for (const auto& [key, value] : in.metadata()) w.set(key, value);
  for (const gguf::TensorInfo& t : in.tensors()) {
    const size_t at = t.name.find("_exps.weight");
    if (at == std::string::npos) {
      w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
      continue;
    }
    const std::string stem = t.name.substr(0, at);  // blk.N.ffn_gate
    const size_t per = static_cast<size_t>(t.n_bytes / t.dims[2]);
    for (int64_t e = 0; e < t.dims[2]; ++e) {
      const std::string name = stem + "." + std::to_string(e) + ".weight";
      if (name == skip) continue;
      w.add_tensor(name, t.type, {t.dims[0], t.dims[1]},
                   std::vector<uint8_t>(t.data + e * per, t.data + (e + 1) * per));
    }
  }
  w.write(dst);
}

TEST(LegacyMixtral, PerExpertTensorsLoadAsTheStackedFileAndGiveTheSameLogits) {
  const fs::path dir = fs::temp_directory_path() / ("pagoda_legacy_mixtral_" + std::to_string(getpid()));
  fs::create_directories(dir);
  SynthSpec s;
  s.arch = "mixtral";
  s.dim = 64;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.ffn_dim = 64;
  s.n_expert = 4;
  s.n_expert_used = 2;
  s.n_vocab = 128;
  s.type = GgmlType::Q8_0;
  const std::string stacked = (dir / "stacked.gguf").string(), legacy = (dir / "legacy.gguf").string();
  write_synthetic_model(s, stacked);
  write_legacy(stacked, legacy);
  EXPECT_EQ(gguf::GgufFile::open(legacy).find_tensor("blk.0.ffn_gate_exps.weight"), nullptr);
  EXPECT_EQ(logits_of(legacy), logits_of(stacked));
  // An expert missing is an error naming it.
  const std::string broken = (dir / "broken.gguf").string();
  write_legacy(stacked, broken, "blk.1.ffn_up.3.weight");
  try {
    (void)logits_of(broken);
    ADD_FAILURE() << "loaded a file with an expert missing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.ffn_up.3.weight is missing"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda
