// VisionEncoder — a multimodal projector file (an "mmproj" GGUF as llama.cpp writes it:
// `clip.*` keys, `v.*` and `mm.*` tensors) and its forward pass: normalized pixels in, one
// row per image token out, in the language model's embedding space.
//
// Supported projectors: `gemma3` (Gemma 3: a SigLIP ViT — patch embedding, learned
// positions, pre-norm blocks with LayerNorm, full bidirectional attention and a GELU MLP,
// a final LayerNorm — then an n_merge x n_merge average pool of the patch grid, an RMS
// norm and a linear map to the text width). Others are refused at load by name.
//
// Contract:
// - load() validates every key and tensor (present, shape, a matrix type the kernels take)
//   and throws pagoda::Error naming the file and what is wrong. The GgufFile is kept alive;
//   matrices are WeightMatrix views or repacked copies (kernels/matmul.h).
// - encode() takes [3][image_size][image_size] f32 pixels already normalized (the caller
//   resizes and normalizes: vision/image_preprocess.h) and writes
//   [tokens_per_image()][text_dim] f32. Called from one thread at a time (it owns scratch);
//   kernels fan out over `pool`. Deterministic for a given pool size.
// - Image tokens attend to each other both ways in the language model (llama.cpp's
//   mtmd_decode_use_non_causal is true for gemma3): bidirectional_image_tokens() says so.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"

namespace pagoda {

enum class VisionProjector { Gemma3 };

enum class VisionActivation { Gelu, GeluQuick, Silu };

struct VisionConfig {
  VisionProjector projector = VisionProjector::Gemma3;
  std::string projector_name;  // as the file names it ("gemma3")
  int64_t image_size = 0;      // the side the encoder takes (pixels)
  int64_t patch_size = 0;
  int64_t dim = 0;             // the ViT's width
  int64_t ffn_dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  float eps = 1e-6f;           // LayerNorm and the projector's RMS norm
  int64_t n_merge = 4;         // gemma3: pool side (patches per output token per side)
  int64_t text_dim = 0;        // the language model's embedding width
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
  VisionActivation activation = VisionActivation::Gelu;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t patches_per_side() const { return image_size / patch_size; }
  int64_t n_patches() const { return patches_per_side() * patches_per_side(); }
  int64_t tokens_per_image() const {
    const int64_t side = patches_per_side() / n_merge;
    return side * side;
  }
};

class VisionEncoder {
 public:
  // Throws pagoda::Error (see contract).
  static std::unique_ptr<VisionEncoder> load(std::shared_ptr<const gguf::GgufFile> file);
  ~VisionEncoder();
  VisionEncoder(const VisionEncoder&) = delete;
  VisionEncoder& operator=(const VisionEncoder&) = delete;

  const VisionConfig& config() const { return config_; }
  const std::string& path() const { return file_->path(); }
  int64_t tokens_per_image() const { return config_.tokens_per_image(); }
  bool bidirectional_image_tokens() const { return true; }
  // The text the chat template's image marker becomes around the image's tokens, as
  // llama.cpp's libmtmd writes it for this projector (gemma3: "<start_of_image>" before,
  // "<end_of_image>" after; tokenized as ordinary text with the model's tokenizer).
  std::string image_begin_text() const;
  std::string image_end_text() const;
  // Bytes of weights this encoder reads per image (the file's tensors, counted once).
  size_t weight_bytes() const;

  // pixels: [3][image_size][image_size]; out resized to [tokens_per_image][text_dim].
  void encode(const float* pixels, ThreadPool& pool, std::vector<float>& out);

 private:
  struct Layer;
  struct Scratch;
  VisionEncoder() = default;
  void attention(int64_t T, ThreadPool& pool);

  std::shared_ptr<const gguf::GgufFile> file_;
  VisionConfig config_;
  WeightMatrix patch_embd_;            // [dim, 3 * patch * patch]
  std::vector<float> patch_bias_;      // [dim]
  std::vector<float> pos_embd_;        // [n_patches, dim]
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<float> post_ln_w_, post_ln_b_;  // [dim]
  std::vector<float> soft_emb_norm_;   // [dim]
  std::vector<float> input_proj_t_;    // [text_dim, dim] f32 (the file's [dim][text_dim] transposed)
  WeightMatrix input_proj_;            // views input_proj_t_
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace pagoda
