// `pagoda convert DIR -o model.gguf [--type T]`: a Hugging Face model directory
// (config.json + safetensors + tokenizer.json) to one GGUF file that pagoda and
// llama.cpp load: llama.cpp's tensor names and layout (permuted llama Q/K),
// tokenizer.ggml.* metadata and the chat template (tools/hf_convert.h).
#include <cstdio>

#include "cli/commands.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "model/hf_model.h"
#include "tools/hf_convert.h"

namespace pagoda::cli {

Runner add_convert(CLI::App& app) {
  struct Opts {
    std::string dir, out, type;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("dir", o->dir, "Hugging Face model directory (config.json, *.safetensors, tokenizer.json) or hf://OWNER/REPO")
      ->required();
  app.add_option("-o,--output", o->out, "GGUF file to write")->required();
  app.add_option("--type", o->type,
                 "Weight matrices as f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, "
                 "iq4_nl, iq4_xs or mxfp4 (default: as stored); norms stay f32");
  return [o] {
    std::optional<GgmlType> type;
    if (!o->type.empty()) type = parse_weight_type(o->type, "--type");
    o->dir = resolve_model_path(o->dir);  // hf://OWNER/REPO -> the cached snapshot directory
    if (!is_model_directory(o->dir)) throw Error(o->dir + ": not a directory (convert reads a Hugging Face model directory)");
    const double t0 = now_seconds();
    HfModelDir dir = HfModelDir::open(o->dir);
    convert_hf_to_gguf(dir, o->out, type);
    std::fprintf(stderr, "wrote %s (%s) in %.2f s\n", o->out.c_str(), dir.config.summary().c_str(),
                 now_seconds() - t0);
    return 0;
  };
}

}  // namespace pagoda::cli
