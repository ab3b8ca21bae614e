// Synthetic random-weight multimodal projectors ("mmproj" GGUFs), as llama.cpp's converter
// writes them (convert_hf_to_gguf.py --mmproj) and its tools/mtmd clip loader reads them.
//
// Gemma 3's ("gemma3"): a SigLIP vision encoder (patch embedding, learned position embeddings,
// pre-norm LayerNorm blocks with biased q/k/v/out and a GELU FFN, a final LayerNorm) and the
// gemma3 projector (n_merge x n_merge average pool over the patch grid, RMS norm times
// mm.soft_emb_norm.weight, projection to the text model's width).
// Gemma 4's ("gemma4v"): a ViT without biases (patch embedding, two learned position tables
// indexed by the patch's column and row, 2-D RoPE, RMS-norm blocks with q/k norms and
// post-attention / post-FFN norms, a gated FFN, a per-layer output scale), n_merge x n_merge
// average pooling, std bias / scale, RMS norm and the projection; clamp scalars
// (.input_min/.input_max/.output_min/.output_max, Gemma4ClippableLinear) on every layer's
// attn_q / attn_k / attn_v (one input bound, as llama.cpp needs: synth_mmproj.cpp) and
// ffn_down. tests/vision/gemma4v_numpy.py is its numpy reference.
// Qwen 3.5's ("qwen3vl_merger"): add_qwen3vl_tensors in synth_mmproj.cpp; its numpy
// reference is tests/vision/qwen3vl_numpy.py.
// Weights as synth's (tools/synth.h): seeded, matrices 1/sqrt(fan_in), norms 1 with a small
// jitter, biases std 0.1, position embeddings std 0.5.
// Contract: write_synthetic_mmproj() throws pagoda::Error for an invalid spec (a projector
// other than gemma3 / gemma4v / qwen3vl_merger, a non-positive size, for gemma3 image_size not a multiple of
// patch_size or patches per side not a multiple of n_merge, for gemma4v a head width not a
// multiple of 4 (its 2-D RoPE), heads not dividing dim, a matrix width not a multiple of the
// type's block) or an unwritable path.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/types.h"

namespace pagoda {

// Defaults: SigLIP-400M at 896 px as in Gemma 3 4B / 12B / 27B (4096 patches pooled to
// 256 image tokens); gemma4v_mmproj_spec() gives Gemma 4's.
struct MmprojSpec {
  std::string projector = "gemma3";
  int64_t image_size = 896;
  int64_t patch_size = 14;
  int64_t dim = 1152;
  int64_t ffn_dim = 4304;
  int64_t n_layers = 27;
  int64_t n_heads = 16;
  int64_t n_merge = 4;  // pooling kernel per side; clip.vision.projector.scale_factor when not
                        // llama.cpp's default (gemma3 4, gemma4v 3)
  // gemma4v only: rows of each of the two position tables (v.position_embd.weight is
  // [dim, pos_size, 2]: x table then y table), the patches per side an image may have.
  int64_t pos_size = 10240;
  // gemma4v only: write v.std_bias / v.std_scale (the 26B / 31B towers have them, E2B / E4B
  // not) and the clamp scalars.
  bool std_scale = true;
  bool clamps = true;
  int64_t text_dim = 0;  // the language model's embedding width (clip.vision.projection_dim)
  // The encoder's matrices (q/k/v/out, ffn_up/gate/down). v.patch_embd.weight and
  // v.position_embd.weight F32 (the converter forces the position tables), and
  // mm.input_projection.weight F16 (gemma3: forced; gemma4v: the f16 conversion's type);
  // norms, biases, scales and clamp scalars F32.
  GgmlType type = GgmlType::F16;
  float eps = 1e-6f;  // the encoder's and the projector's norms
  uint64_t seed = 1;
  std::string name = "synthetic mmproj";
};

// Throws pagoda::Error for an invalid spec (the contract's list); write_synthetic_mmproj
// calls it first.
void check_mmproj_spec(const MmprojSpec& spec);
// Gemma 4 E2B / E4B's vision tower (HF Gemma4VisionConfig defaults: 768 wide, 16 layers of 12
// heads of 64, FFN 3072, 16 px patches, 3 x 3 pooling, 10240-row position tables), with
// image_size 224 as the converter writes it (unused by the dynamic-resolution path).
MmprojSpec gemma4v_mmproj_spec();
// Qwen 3.5's vision tower (Qwen3-VL's without deepstack: 27 layers 1152 wide of 16 heads,
// FFN 4304, 16 px patches, 2 x 2 merge, a 48 x 48 position grid: image_size 768).
MmprojSpec qwen3vl_mmproj_spec();
void write_synthetic_mmproj(const MmprojSpec& spec, const std::string& path);

}  // namespace pagoda
