// VisionEncoder — a multimodal projector file (an "mmproj" GGUF as llama.cpp writes it:
// `clip.*` keys, `v.*` and `mm.*` tensors) and its forward pass: normalized pixels in, one
// row per image token out, in the language model's embedding space.
//
// Supported projectors:
// - `gemma3` (Gemma 3): a SigLIP ViT — patch embedding, learned positions, pre-norm blocks
//   with LayerNorm, full bidirectional attention and a GELU MLP, a final LayerNorm — then an
//   n_merge x n_merge average pool of the patch grid, an RMS norm and a linear map to the
//   text width. Fixed input: image_size x image_size.
// - `gemma4v` (Gemma 4): a ViT with RMS norms, per-head q/k norms and an unweighted v norm,
//   2-D RoPE (the first half of each head rotated by the patch's column, the second by its
//   row), learned column and row position tables, post-attention and post-FFN norms, a gated
//   GELU MLP and a per-layer output scale; then the pool, a sqrt(width) scale, an optional
//   standardization (x - std_bias) * std_scale, an RMS norm and the map to the text width.
//   Matrices may carry clamps (Gemma4ClippableLinear: `.input_min/max`, `.output_min/max`
//   scalars). Dynamic input: the image's own aspect, sides a multiple of patch x n_merge,
//   between 40 and 280 tokens (llama.cpp's limits).
// - `qwen3vl_merger` (Qwen 3.5 / 3.6; Qwen3-VL's without its deepstack layers, which are
//   refused): the two temporal slices of the patch convolution (summed: a still image is
//   both frames), learned positions on a square grid resized bilinearly (corners aligned) to
//   the image's patch grid, pre-norm LayerNorm blocks with biased fused qkv, 2-D RoPE (the
//   first half of each head's NEOX pairs by the patch's row, the second by its column), a
//   final LayerNorm, then the merger: the rows of each 2 x 2 block side by side, mm.0, GELU,
//   mm.2. Patches run in block order (the four of a block adjacent), so the output rows are
//   the blocks row-major. Dynamic input: the image's aspect, sides a multiple of 2 patches,
//   8 to 4096 tokens (llama.cpp's limits). Causal in the language model, whose M-RoPE
//   places each output row at (row, column) of the grid: uses_mrope(), tokens_grid().
// Others are refused at load by name.
//
// Contract:
// - load() validates every key and tensor (present, shape, a matrix type the kernels take)
//   and throws pagoda::Error naming the file and what is wrong. The GgufFile is kept alive;
//   matrices are WeightMatrix views or repacked copies (kernels/matmul.h).
// - input_size(w, h) is the size an image of w x h pixels is fitted into (keeping its aspect,
//   padded: image/image.h fit_and_pad) before encode(); tokens_for() the rows it gives.
// - encode() takes [3][height][width] f32 pixels of that size, normalized with the config's
//   mean / std, and writes [tokens_for(width, height)][text_dim] f32. Called from one thread
//   at a time (it owns scratch); kernels fan out over `pool`. Deterministic for a pool size.
// - Image tokens attend to each other both ways in the language model for gemma3 and gemma4v
//   (llama.cpp's mtmd_decode_use_non_causal), causally for qwen3vl_merger:
//   bidirectional_image_tokens().
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/matmul.h"

namespace pagoda {

enum class VisionProjector { Gemma3, Gemma4V, Qwen3VL };

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
  // gemma4v, qwen3vl_merger: the image keeps its aspect within [min_pixels, max_pixels]
  // (sides a multiple of patch_size * n_merge), RoPE over patch columns and rows with this
  // base; gemma4v: position tables of pos_table entries per axis; qwen3vl_merger: a
  // pos_table x pos_table grid of learned positions.
  bool dynamic_size = false;
  int64_t min_pixels = 0, max_pixels = 0;
  float rope_theta = 100.0f;
  int64_t pos_table = 0;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t patches_per_side() const { return image_size / patch_size; }
  int64_t n_patches() const { return patches_per_side() * patches_per_side(); }
  // Rows of the fixed-size image (gemma3), or the most a dynamic one gives (gemma4v).
  int64_t tokens_per_image() const {
    if (dynamic_size) return max_pixels / (patch_size * patch_size * n_merge * n_merge);
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
  bool bidirectional_image_tokens() const { return config_.projector != VisionProjector::Qwen3VL; }
  // The language model places image rows by M-RoPE (qwen3vl_merger): row i of an image
  // whose tokens_grid is (nx, ny) sits at (row i / nx, column i % nx).
  bool uses_mrope() const { return config_.projector == VisionProjector::Qwen3VL; }
  // The output rows' grid (columns, rows) for an input of that size.
  std::pair<int64_t, int64_t> tokens_grid(int64_t width, int64_t height) const;
  // The text the chat template's image marker becomes around the image's tokens, as
  // llama.cpp's libmtmd writes it for this projector (gemma3: "<start_of_image>" before,
  // "<end_of_image>" after; tokenized as ordinary text with the model's tokenizer).
  std::string image_begin_text() const;
  std::string image_end_text() const;
  // Bytes of weights this encoder reads per image (the file's tensors, counted once).
  size_t weight_bytes() const;

  // The size (width, height) an image of width x height pixels is fitted into.
  std::pair<int64_t, int64_t> input_size(int64_t width, int64_t height) const;
  // Rows encode() gives for an input of that size.
  int64_t tokens_for(int64_t width, int64_t height) const;
  // pixels: [3][height][width] of input_size()'s size; out resized to [tokens_for][text_dim].
  void encode(const float* pixels, int64_t width, int64_t height, ThreadPool& pool, std::vector<float>& out);
  // The fixed-size projectors' image (gemma3): encode(pixels, image_size, image_size, ...).
  void encode(const float* pixels, ThreadPool& pool, std::vector<float>& out) {
    encode(pixels, config_.image_size, config_.image_size, pool, out);
  }

 private:
  struct Layer;
  struct Scratch;
  VisionEncoder() = default;
  struct Linear;
  void attention(int64_t T, ThreadPool& pool);
  // y[T, rows] = clamp(x) · Wᵀ (+ bias), clamped (see Linear).
  void linear(const Linear& l, const float* x, int64_t T, float* y, ThreadPool& pool);
  // Loads the layers and the projector tensors of each type (vision_encoder.cpp).
  void load_gemma3();
  void load_gemma4v();
  void load_qwen3vl();
  std::pair<int64_t, int64_t> patch_at(int64_t t, int64_t n_x) const;  // row t's patch (row, column)
  void rope_tables_2d(int64_t T, int64_t n_x, ThreadPool& pool);  // gemma4v, qwen3vl_merger: once an image
  void rope_2d(int64_t T, ThreadPool& pool);  // q and k rotated in place by those tables

  std::shared_ptr<const gguf::GgufFile> file_;
  VisionConfig config_;
  WeightMatrix patch_embd_;            // [dim, 3 * patch * patch]
  std::vector<float> patch_bias_;      // [dim] (gemma3, qwen3vl_merger; empty for gemma4v)
  std::vector<float> pos_embd_;        // gemma3 [n_patches, dim]; gemma4v [2][pos_table][dim];
                                       // qwen3vl_merger [pos_table²][dim]
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<float> post_ln_w_, post_ln_b_;  // [dim] (gemma3)
  std::vector<float> soft_emb_norm_;   // [dim] (gemma3)
  std::vector<float> std_bias_, std_scale_;  // [dim] (gemma4v, optional)
  std::vector<float> input_proj_t_;    // gemma3: [text_dim, dim] f32 (the file's [dim][text_dim] transposed)
  std::unique_ptr<Linear> input_proj_;  // [text_dim, dim]
  std::vector<float> rope_inv_freq_;   // gemma4v, qwen3vl_merger: [head_dim / 4]
  std::vector<float> patch_w_sum_;     // qwen3vl_merger: the two temporal slices summed, f32
  std::unique_ptr<Linear> merger_fc1_, merger_fc2_;  // qwen3vl_merger: mm.0, mm.2
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace pagoda
