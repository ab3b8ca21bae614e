// `pagoda synth`: write a random-weight model of a real shape.
#include <cstdio>
#include <tuple>

#include "cli/commands.h"
#include "common/error.h"
#include "tools/synth.h"
#include "tools/synth_mmproj.h"

namespace pagoda::cli {

Runner add_synth(CLI::App& app) {
  struct Opts {
    std::string arch = "llama", shape, type = "f32", out, rope_scaling = "none", vocab_from, pooling;
    int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0, head_dim = 0;
    int64_t sliding_window = -1;
    float attn_softcap = -1.0f, final_softcap = -1.0f;
    int64_t experts = 0, experts_used = 0, expert_ffn = 0, shared_ffn = 0, kv_shared = -1;
    bool tied = false;
    uint64_t seed = 1;
    std::string mmproj, mmproj_type = "f16";
    bool mmproj_no_std = false, mmproj_no_clamps = false;
    MmprojSpec mm;  // the projector's shape flags (text_dim from the model's width)
  };
  auto o = std::make_shared<Opts>();
  std::string shapes;
  for (const auto& s : synth_shape_names()) shapes += (shapes.empty() ? "" : "|") + s;
  app.add_option("--arch", o->arch, "Architecture: " + synth_arch_names())->capture_default_str();
  app.add_option("--shape", o->shape, "Named shape: " + shapes + " (other flags override it)");
  app.add_option("--type", o->type, "Weight type: f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q4_k_m (Q4_K with Q6_K where llama.cpp's Q4_K_M puts it)|q5_k|q6_k|iq4_nl|iq4_xs|mxfp4")
      ->capture_default_str();
  app.add_option("-o,--output", o->out, "Output GGUF path")->required();
  app.add_option("--dim", o->dim, "Embedding width");
  app.add_option("--layers", o->layers, "Layers");
  app.add_option("--heads", o->heads, "Attention heads");
  app.add_option("--kv-heads", o->kv_heads, "KV heads");
  app.add_option("--head-dim", o->head_dim, "Head dim (default dim/heads)");
  app.add_option("--ffn", o->ffn, "Feed-forward width");
  app.add_option("--vocab", o->vocab, "Vocabulary size");
  app.add_option("--experts", o->experts, "Experts per layer (qwen3moe, mixtral, olmoe, qwen35moe; default 8)");
  app.add_option("--experts-used", o->experts_used, "Experts each token uses (default 2)");
  app.add_option("--expert-ffn", o->expert_ffn,
                 "One expert's FFN width (qwen3moe: default --ffn; qwen35moe: default dim / 4)");
  app.add_option("--shared-ffn", o->shared_ffn, "The shared expert's FFN width (qwen35moe; default --expert-ffn)");
  app.add_option("--ctx", o->ctx, "Context length");
  app.add_option("--kv-shared", o->kv_shared,
                 "Layers at the end that reuse earlier layers' K/V (gemma4; default the shape's)");
  app.add_flag("--tied", o->tied, "Tie output to token embeddings (no output.weight)");
  app.add_option("--rope-scaling", o->rope_scaling, "none|linear|llama3|yarn|longrope (phi3)")->capture_default_str();
  app.add_option("--sliding-window", o->sliding_window,
                 "Window of the local layers (gemma2/gemma3; default the real models': 4096 / 1024, 0: none)");
  app.add_option("--attn-softcap", o->attn_softcap, "Attention logit soft-cap (gemma2; default 50, 0: none)");
  app.add_option("--final-softcap", o->final_softcap, "Final logit soft-cap (gemma2 default 30, gemma3 none)");
  app.add_option("--seed", o->seed, "Weight seed")->capture_default_str();
  app.add_option("--vocab-from", o->vocab_from,
                 "Copy the tokenizer (and chat template) from this GGUF, or from a Hugging Face BPE tokenizer.json "
                 "or its directory (with the tokenizer_config.json beside it, if any, and its chat template)");
  app.add_option("--pooling", o->pooling,
                 "Write {arch}.pooling_type (none|mean|cls|last|rank); rank adds a reranker head cls.output.weight")
      ->check(CLI::IsMember({"none", "mean", "cls", "last", "rank"}));
  app.add_option("--mmproj", o->mmproj,
                 "Also write a random-weight vision projector (llama.cpp's mmproj GGUF) for the model to this "
                 "path: --arch gemma3 (a SigLIP encoder and Gemma 3's projector; defaults SigLIP-400M at "
                 "896 px, Gemma 3 4B-27B's) or gemma4 (Gemma 4's gemma4v projector; defaults E2B / E4B's "
                 "tower: 768 wide, 16 layers, 12 heads, FFN 3072, 16 px patches, merge 3, position tables "
                 "of 10240) or qwen35 / qwen35moe (Qwen 3.5's qwen3vl_merger projector: 1152 wide, 27 layers, "
                 "16 heads, FFN 4304, 16 px patches, merge 2, a 48 x 48 position grid: image size 768); the "
                 "--mmproj-* flags shape it (defaults shown: gemma3's)");
  // The projector's shape: flag, field, help (defaults shown: MmprojSpec's).
  static const std::tuple<const char*, int64_t MmprojSpec::*, const char*> kMmprojSizes[] = {
      {"--mmproj-image-size", &MmprojSpec::image_size, "image side in pixels"},
      {"--mmproj-patch", &MmprojSpec::patch_size, "patch side in pixels"},
      {"--mmproj-dim", &MmprojSpec::dim, "encoder width"},
      {"--mmproj-ffn", &MmprojSpec::ffn_dim, "encoder feed-forward width"},
      {"--mmproj-layers", &MmprojSpec::n_layers, "encoder layers"},
      {"--mmproj-heads", &MmprojSpec::n_heads, "encoder attention heads"},
      {"--mmproj-merge", &MmprojSpec::n_merge,
       "patches pooled per side into one image token (must divide the patches per side)"},
  };
  // The flags given, copied over gemma4's or qwen35's defaults (their shown defaults are gemma3's).
  auto given = std::make_shared<std::vector<std::pair<CLI::Option*, int64_t MmprojSpec::*>>>();
  for (const auto& [flag, field, help] : kMmprojSizes)
    given->emplace_back(app.add_option(flag, o->mm.*field, std::string("Projector: ") + help)->capture_default_str(),
                        field);
  given->emplace_back(app.add_option("--mmproj-pos-size", o->mm.pos_size,
                                     "Projector (gemma4): rows of each position table (x and y)")
                          ->capture_default_str(),
                      &MmprojSpec::pos_size);
  app.add_flag("--mmproj-no-std", o->mmproj_no_std, "Projector (gemma4): no v.std_bias / v.std_scale (as E2B / E4B)");
  app.add_flag("--mmproj-no-clamps", o->mmproj_no_clamps, "Projector (gemma4): no clamp scalars");
  app.add_option("--mmproj-type", o->mmproj_type, "Projector: the encoder's matrix type")->capture_default_str();
  return [o, given] {
    SynthSpec s;
    if (!o->shape.empty()) {
      auto named = synth_shape(o->shape);
      if (!named) throw Error("synth: unknown shape '" + o->shape + "'");
      s = *named;
    }
    if (!o->shape.empty() && o->arch != "llama") s.arch = o->arch;
    if (o->shape.empty()) s.arch = o->arch;
    if (o->shape == "tiny") s = resolved_for_row(s, /*tiny_shape=*/true);  // hybrid rows: 4 layers
    // q4_k_m: Q4_K with llama.cpp's Q4_K_M mix (SynthSpec::q4_k_m).
    s.q4_k_m = o->type == "q4_k_m";
    auto t = parse_type_name(s.q4_k_m ? std::string("q4_k") : o->type);
    if (!t) throw Error("synth: unknown type '" + o->type + "' (supported: " + supported_weight_types() + ")");
    s.type = *t;
    if (o->dim) s.dim = o->dim;
    if (o->layers) s.n_layers = o->layers;
    if (o->heads) s.n_heads = o->heads;
    if (o->kv_heads) s.n_kv_heads = o->kv_heads;
    if (o->head_dim) s.head_dim = o->head_dim;
    if (o->ffn) s.ffn_dim = o->ffn;
    if (o->vocab) s.n_vocab = o->vocab;
    if (o->experts) s.n_expert = o->experts;
    if (o->experts_used) s.n_expert_used = o->experts_used;
    if (o->expert_ffn) s.expert_ffn_dim = o->expert_ffn;
    if (o->shared_ffn) s.shared_expert_ffn_dim = o->shared_ffn;
    if (o->ctx) s.ctx_len = o->ctx;
    if (o->kv_shared >= 0) s.kv_shared = o->kv_shared;
    if (o->tied) s.tied_embeddings = true;
    if (o->rope_scaling != "none") s.rope_scaling = o->rope_scaling;
    if (o->sliding_window >= 0) s.sliding_window = o->sliding_window;
    if (o->attn_softcap >= 0) s.attn_softcap = o->attn_softcap;
    if (o->final_softcap >= 0) s.final_softcap = o->final_softcap;
    s.seed = o->seed;
    s.vocab_from = o->vocab_from;
    s.pooling = o->pooling;
    MmprojSpec mm = o->mm;
    if (!o->mmproj.empty()) {  // checked before the model is written
      if (s.arch != "gemma3" && s.arch != "gemma4" && s.arch != "qwen35" && s.arch != "qwen35moe")
        throw Error("synth: --mmproj writes Gemma 3's, Gemma 4's and Qwen 3.5's projectors only (--arch gemma3, gemma4, "
                    "qwen35 or qwen35moe), not " + s.arch + "'s");
      if (s.arch != "gemma3") {  // another family's defaults, then the size flags given
        mm = s.arch == "gemma4" ? gemma4v_mmproj_spec() : qwen3vl_mmproj_spec();
        for (const auto& [opt, field] : *given)
          if (opt->count() > 0) mm.*field = o->mm.*field;
      }
      mm.std_scale = !o->mmproj_no_std;  // gemma4v's options (the others ignore them)
      mm.clamps = !o->mmproj_no_clamps;
      auto mt = parse_type_name(o->mmproj_type);
      if (!mt) throw Error("synth: unknown --mmproj-type '" + o->mmproj_type + "'");
      mm.type = *mt;
      mm.text_dim = s.dim;
      mm.seed = s.seed;
      check_mmproj_spec(mm);
    }
    write_synthetic_model(s, o->out);
    std::fprintf(stderr, "wrote %s (%s, %s)\n", o->out.c_str(), s.arch.c_str(), type_name(s.type));
    if (!o->mmproj.empty()) {
      write_synthetic_mmproj(mm, o->mmproj);
      std::fprintf(stderr, "wrote %s (clip, %s projector, %s)\n", o->mmproj.c_str(), mm.projector.c_str(),
                   type_name(mm.type));
    }
    return 0;
  };
}

}  // namespace pagoda::cli
