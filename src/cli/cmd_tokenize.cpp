// `pagoda tokenize`: token ids and pieces of a text, from a GGUF (vocab-only
// files included) or a Hugging Face tokenizer.json.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "common/text_file.h"

namespace pagoda::cli {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

Runner add_tokenize(CLI::App& app) {
  struct Opts {
    std::string model, file, text;
    bool ids_only = false, no_bos = false, no_parse_special = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("-m,--model", o->model, "GGUF file or tokenizer.json")->required();
  app.add_option("--file", o->file, "Read the text from this file");
  app.add_option("text", o->text, "Text to tokenize");
  app.add_flag("--ids-only", o->ids_only, "Print only the ids, space-separated, on one line");
  app.add_flag("--no-bos", o->no_bos, "Do not add BOS/EOS");
  app.add_flag("--no-parse-special", o->no_parse_special, "Treat special-token text as plain text");
  return [o] {
    std::string text = o->text;
    if (!o->file.empty()) text = read_text_file(o->file);
    std::unique_ptr<Tokenizer> tok;
    o->model = resolve_model_path(o->model);  // hf://... -> the cached file or snapshot directory
    if (std::filesystem::is_directory(o->model)) o->model += "/tokenizer.json";
    if (ends_with(o->model, ".json")) {
      std::string cfg = o->model.substr(0, o->model.find_last_of('/') + 1) + "tokenizer_config.json";
      std::ifstream probe(cfg);
      tok = Tokenizer::from_hf_json(o->model, probe ? cfg : "");
    } else {
      gguf::GgufFile f = gguf::GgufFile::open(o->model);
      tok = Tokenizer::from_gguf(f);
    }
    std::vector<TokenId> ids = tok->encode(text, !o->no_bos, !o->no_parse_special);
    if (o->ids_only) {
      for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
      std::printf("\n");
      return 0;
    }
    for (TokenId id : ids) std::printf("%6d -> '%s'\n", id, tok->token_text(id).c_str());
    return 0;
  };
}

}  // namespace pagoda::cli
