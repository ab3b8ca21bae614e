// Gemma 4's GGUF vocabulary (tokenizer.ggml.model "gemma4"), read as llama.cpp b10587 reads
// it: BPE merges over raw UTF-8 with spaces as '▁', cut only into runs of newlines and of
// the rest, <0xNN> byte fallback, a run of newlines that is a token taken whole, BOS
// always added. No Gemma 4 vocabulary is available offline, so the test builds one of the
// same kind from Mistral 7B's SentencePiece-BPE tokenizer.json (its tokens, byte tokens and
// merges, written as a "gemma4" GGUF), and the expected ids are what the peer's
// llama-tokenize (b10587) gives on that file wrapped in a synth model
// (`pagoda synth --vocab-from`; see PAGODA_GEMMA4_VOCAB_OUT below).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using gguf::Value;

const std::string kMistral = std::string(PAGODA_SHARED_DIR) + "/models/mistral-7b-v0.1-tokenizer/tokenizer.json";

// Mistral's tokenizer.json as a "gemma4" GGUF vocabulary (what Gemma4Model.set_vocab writes:
// tokens, scores, types, merges, no space prefix).
void write_gemma4_vocab(const std::string& path) {
  std::ifstream in(kMistral);
  const nlohmann::json tj = nlohmann::json::parse(in);
  const auto& vocab = tj["model"]["vocab"];
  std::vector<std::string> tokens(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) tokens[it.value().get<size_t>()] = it.key();
  std::vector<int32_t> types(tokens.size(), 1);
  std::vector<float> scores(tokens.size(), 0.0f);
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i].size() == 6 && tokens[i].starts_with("<0x") && tokens[i].back() == '>') types[i] = 6;
  for (const auto& a : tj["added_tokens"]) types[a["id"].get<size_t>()] = a["id"] == 0 ? 2 : 3;
  std::vector<std::string> merges;
  for (const auto& m : tj["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  gguf::GgufWriter w;
  w.set("general.architecture", Value::str("gemma4"));
  w.set("tokenizer.ggml.model", Value::str("gemma4"));
  w.set("tokenizer.ggml.tokens", Value::str_array(tokens));
  w.set("tokenizer.ggml.scores", Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", Value::i32_array(types));
  w.set("tokenizer.ggml.merges", Value::str_array(merges));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(2));
  w.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
  w.set("tokenizer.ggml.add_space_prefix", Value::boolean(false));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));  // overridden to true, as llama.cpp does
  w.write(path);
}

TEST(Gemma4Vocab, EncodesAsLlamaCppDoes) {
  if (!fs::exists(kMistral)) GTEST_SKIP() << kMistral << " not found";
  const char* keep = std::getenv("PAGODA_GEMMA4_VOCAB_OUT");  // write the file there, for llama-tokenize
  const std::string path = keep ? keep : (fs::temp_directory_path() / ("pagoda_gemma4_vocab_" + std::to_string(::getpid()) + ".gguf")).string();
  write_gemma4_vocab(path);
  const gguf::GgufFile f = gguf::GgufFile::open(path);
  const std::unique_ptr<Tokenizer> t = Tokenizer::from_gguf(f);
  if (!keep) fs::remove(path);
  EXPECT_TRUE(t->add_bos());
  struct Case {
    std::string text;
    std::vector<TokenId> ids;  // llama-tokenize --ids, BOS first
  };
  const std::vector<Case> cases = {
#include "gemma4_vocab_cases.inc"
  };
  for (const Case& c : cases) {
    EXPECT_EQ(t->encode(c.text, true, false), c.ids) << "'" << c.text << "'";
    // Decoding gives the text back (BOS dropped).
    std::vector<TokenId> body(c.ids.begin() + 1, c.ids.end());
    EXPECT_EQ(t->decode(body, false), c.text) << "'" << c.text << "'";
  }
}

}  // namespace
}  // namespace pagoda
