// Weights resident once: after loading a quantized GGUF and running a forward pass,
// the process holds the weights about once — the repacked copies, not also the file
// pages they were repacked from, and no copy rounded up to whole 2 MiB huge pages.
// Measured as RSS growth (/proc/self/status), not taken from the model's own
// accounting; the accounting (Model::resident_weight_bytes) is checked against it.
//
// Before the fix this model (42.5 MB of Q4_0 tensors) grew RSS by ~2.3x its tensor
// bytes: every file page stayed mapped beside the copy, and each 2.5 MiB FFN copy
// took two full huge pages.
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/process_memory.h"
#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "kv/kv_store.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "model/synth.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
constexpr double kMiB = 1048576.0;

// What else a load + 8-token forward legitimately makes resident, besides the
// weights: the KV cache below (4 layers x 64 positions x 2 x 256 f32 = 0.5 MiB),
// activation scratch and logits (~0.3 MiB), parsed metadata and vocabulary
// (~0.1 MiB), the pool's thread stacks, and the file pages at the edges of each
// dropped tensor (up to 2 x 4 KiB x 30 tensors) and of the norms. 4 MiB covers it
// with room; the failure this catches is tens of MiB.
constexpr double kAllowanceBytes = 4 * kMiB;

class ResidentWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_resident_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loads `spec` written as GGUF, runs one forward, returns (RSS growth, model).
  struct Measured {
    double rss_growth = 0, anon_growth = 0, file_growth = 0;
    size_t file_tensor_bytes = 0, resident_weight_bytes = 0;
  };
  Measured load_and_run(const SynthSpec& spec) {
    const std::string path = (dir_ / "m.gguf").string();
    write_synthetic_model(spec, path);
    ThreadPool pool(2);
    ContiguousKvCache kv(spec.n_layers, spec.n_kv_heads, spec.dim / spec.n_heads, 64, 1);
    std::vector<float> logits;
    Batch batch;
    for (int i = 0; i < 8; ++i) batch.add(1 + 37 * i, i, 0, i == 7);

    // Hand the heap the model writer freed back to the kernel, so allocations made
    // by the load fault in fresh pages and count (else the repacked copies under
    // 2 MiB, which come from the heap, reuse them: 6 MiB of 38 went unseen).
    malloc_trim(0);
    const ProcessMemory before = read_process_memory();
    EXPECT_TRUE(before.available);
    auto file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
    std::unique_ptr<Model> m = Model::load(file);
    m->forward(batch, kv, pool, logits);
    const ProcessMemory after = read_process_memory();

    EXPECT_EQ(logits.size(), static_cast<size_t>(spec.n_vocab));
    Measured r;
    r.rss_growth = static_cast<double>(after.rss_bytes) - static_cast<double>(before.rss_bytes);
    r.anon_growth = static_cast<double>(after.anon_bytes) - static_cast<double>(before.anon_bytes);
    r.file_growth = static_cast<double>(after.file_bytes) - static_cast<double>(before.file_bytes);
    r.file_tensor_bytes = m->file_tensor_bytes();
    r.resident_weight_bytes = m->resident_weight_bytes();
    std::printf("RSS growth %.1f MiB (anonymous %.1f, file %.1f); tensors %.1f MiB; accounted %.1f MiB\n",
                r.rss_growth / kMiB, r.anon_growth / kMiB, r.file_growth / kMiB, r.file_tensor_bytes / kMiB,
                r.resident_weight_bytes / kMiB);
    return r;
  }

  fs::path dir_;
};

// A Llama shape whose FFN matrices (4608 x 1024 Q4_0 = 2.53 MiB) are over one huge
// page with a partial tail: 42.5 MB of tensors in all.
SynthSpec q4_llama() {
  SynthSpec s;
  s.arch = "llama";
  s.dim = 1024;
  s.n_layers = 4;
  s.n_heads = 16;
  s.n_kv_heads = 4;
  s.ffn_dim = 4608;
  s.n_vocab = 4096;
  s.ctx_len = 256;
  s.type = GgmlType::Q4_0;
  return s;
}

TEST_F(ResidentWeights, Q4_0ModelIsResidentAboutOnce) {
  const Measured r = load_and_run(q4_llama());
  ASSERT_GT(r.file_tensor_bytes, size_t{40} << 20);
  const double limit = 1.05 * static_cast<double>(r.file_tensor_bytes) + kAllowanceBytes;
  EXPECT_LE(r.rss_growth, limit) << "RSS grew " << r.rss_growth / kMiB << " MiB (anonymous "
                                 << r.anon_growth / kMiB << ", file " << r.file_growth / kMiB << ") for "
                                 << r.file_tensor_bytes / kMiB << " MiB of tensors";
  // The file pages of the repacked matrices are gone; what stays is the embedding
  // rows read and page edges (the embedding is 2.3 MiB: 4096 rows).
  EXPECT_LE(r.file_growth, 0.1 * static_cast<double>(r.file_tensor_bytes) + kAllowanceBytes);
  // The accounting agrees with the measurement: it counts the whole embedding,
  // which the forward only touched 8 rows of.
  EXPECT_LE(static_cast<double>(r.resident_weight_bytes), 1.05 * static_cast<double>(r.file_tensor_bytes));
  EXPECT_LE(r.rss_growth, static_cast<double>(r.resident_weight_bytes) + kAllowanceBytes);
}

TEST_F(ResidentWeights, Q4_KModelIsResidentAboutOnce) {
  // Q4_K's repacked form widens the 6-bit scales to bytes: 148 bytes per 144 (+2.8%).
  SynthSpec s = q4_llama();
  s.type = GgmlType::Q4_K;
  const Measured r = load_and_run(s);
  EXPECT_LE(r.rss_growth, 1.05 * static_cast<double>(r.file_tensor_bytes) + kAllowanceBytes)
      << "RSS grew " << r.rss_growth / kMiB << " MiB";
  EXPECT_LE(static_cast<double>(r.resident_weight_bytes), 1.05 * static_cast<double>(r.file_tensor_bytes));
}

TEST_F(ResidentWeights, QuantizeAtLoadHoldsOneCopy) {
  // Written Q8_0, loaded as --quantize q4_0 does: requantize() makes Q4_0 copies,
  // Model::load repacks them and frees the copies; the Q8_0 file pages read to
  // re-encode are dropped. Before, all three stayed (~3.9x the Q4_0 bytes).
  SynthSpec s = q4_llama();
  s.type = GgmlType::Q8_0;
  const std::string path = (dir_ / "q8.gguf").string();
  write_synthetic_model(s, path);
  ThreadPool pool(2);
  ContiguousKvCache kv(s.n_layers, s.n_kv_heads, s.dim / s.n_heads, 64, 1);
  std::vector<float> logits;
  Batch batch;
  for (int i = 0; i < 8; ++i) batch.add(1 + 37 * i, i, 0, i == 7);

  malloc_trim(0);
  const ProcessMemory before = read_process_memory();
  auto file = std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(path));
  std::unique_ptr<Model> m =
      Model::load(ModelConfig::from_gguf(*file), requantize(gguf_weight_source(file), GgmlType::Q4_0));
  m->forward(batch, kv, pool, logits);
  const ProcessMemory after = read_process_memory();
  const double growth = static_cast<double>(after.rss_bytes) - static_cast<double>(before.rss_bytes);
  const double q4_bytes = static_cast<double>(m->file_tensor_bytes());  // the re-encoded tensors
  std::printf("quantize at load: RSS growth %.1f MiB (anonymous %.1f, file %.1f) for %.1f MiB of Q4_0\n",
              growth / kMiB, (static_cast<double>(after.anon_bytes) - before.anon_bytes) / kMiB,
              (static_cast<double>(after.file_bytes) - before.file_bytes) / kMiB, q4_bytes / kMiB);
  EXPECT_LT(q4_bytes, 45.0 * kMiB);  // Q4_0, not the Q8_0 file's 76 MiB
  EXPECT_LE(growth, 1.05 * q4_bytes + kAllowanceBytes) << "RSS grew " << growth / kMiB << " MiB";
}

TEST_F(ResidentWeights, TiedEmbeddingsAreResidentOnceUntilTheirRowsAreRead) {
  // token_embd is repacked for the output projection and still read row by row
  // for the embedding: its file pages are dropped after repacking and only the
  // rows of tokens used (8 here) fault back in. The accounting counts the whole
  // table twice (an upper bound: every token seen).
  SynthSpec s = q4_llama();
  s.tied_embeddings = true;
  const Measured r = load_and_run(s);
  const double embd = 4096.0 * 1024 / 32 * 18;
  EXPECT_LE(r.rss_growth, 1.05 * static_cast<double>(r.file_tensor_bytes) + kAllowanceBytes)
      << "RSS grew " << r.rss_growth / kMiB << " MiB";
  EXPECT_GE(static_cast<double>(r.resident_weight_bytes), static_cast<double>(r.file_tensor_bytes) + 0.9 * embd);
}

}  // namespace
}  // namespace pagoda
