// Synthetic random-weight multimodal projectors ("mmproj" GGUFs), as llama.cpp's converter
// writes them (convert_hf_to_gguf.py --mmproj) and its tools/mtmd clip loader reads them.
//
// Gemma 3's: a SigLIP vision encoder (patch embedding, learned position embeddings,
// pre-norm LayerNorm blocks with biased q/k/v/out and a GELU FFN, a final LayerNorm) and the
// gemma3 projector (n_merge x n_merge average pool over the patch grid, RMS norm times
// mm.soft_emb_norm.weight, projection to the text model's width). Weights as synth's
// (tools/synth.h): seeded, matrices 1/sqrt(fan_in), norms 1 with a small jitter, biases
// std 0.1, position embeddings std 0.5.
// Contract: write_synthetic_mmproj() throws pagoda::Error for an invalid spec (a projector
// other than gemma3, a non-positive size, image_size not a multiple of patch_size, patches
// per side not a multiple of n_merge, heads not dividing dim, a matrix width not a multiple
// of the type's block) or an unwritable path.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/types.h"

namespace pagoda {

// Defaults: SigLIP-400M at 896 px as in Gemma 3 4B / 12B / 27B (4096 patches pooled to
// 256 image tokens).
struct MmprojSpec {
  std::string projector = "gemma3";
  int64_t image_size = 896;
  int64_t patch_size = 14;
  int64_t dim = 1152;
  int64_t ffn_dim = 4304;
  int64_t n_layers = 27;
  int64_t n_heads = 16;
  int64_t n_merge = 4;  // pooling kernel per side; clip.vision.projector.scale_factor when != 4
  int64_t text_dim = 0;  // the language model's embedding width (clip.vision.projection_dim)
  // The encoder's matrices (q/k/v/out, ffn_up/down). As the converter forces them:
  // v.patch_embd.weight and v.position_embd.weight F32, mm.input_projection.weight F16;
  // norms and biases F32.
  GgmlType type = GgmlType::F16;
  float eps = 1e-6f;  // the LayerNorms' and the projector's RMS norm's
  uint64_t seed = 1;
  std::string name = "synthetic mmproj";
};

// Throws pagoda::Error for an invalid spec (the contract's list); write_synthetic_mmproj
// calls it first.
void check_mmproj_spec(const MmprojSpec& spec);
void write_synthetic_mmproj(const MmprojSpec& spec, const std::string& path);

}  // namespace pagoda
