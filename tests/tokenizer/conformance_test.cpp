// Tokenizer conformance: exact token ids from the reference tokenizers.
//
// - llama.cpp's test vectors (shared/models/ggml-vocab/*.inp/.out, produced
//   with HF tokenizers for test-tokenizer-0): the SPM and GPT-2 vocab-only
//   GGUFs, and the Llama 3 / Qwen2 vectors with their tokenizer.json files —
//   and the same two tokenizer.json vocabularies rewritten as GGUF with
//   tokenizer.ggml.pre = llama-bpe / qwen2, to pin the GGUF regex path too.
// - For every vector: decode(encode(text)) == text.
// - stories260K (llama2.c's tiny SPM model) and Mistral's tokenizer.json.
//
// .inp format (as llama.cpp's test-tokenizer-0 reads it): test strings joined
// by "\n__ggml_vocab_test__\n", the file ending with one more separator; .out:
// one line of space-separated ids per string, no BOS.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

const std::string kShared = PAGODA_SHARED_DIR;
const std::string kVocabDir = kShared + "/models/ggml-vocab/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct TestVector {
  std::string text;
  std::vector<TokenId> ids;
};

std::vector<TestVector> load_vectors(const std::string& base) {
  const std::string inp = read_file(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    texts.push_back(inp.substr(pos, next - pos));
  }
  EXPECT_EQ(pos, inp.size()) << base << ".inp should end with a separator";

  std::istringstream out(read_file(base + ".out"));
  std::vector<TestVector> vectors;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    std::istringstream ids(line);
    TestVector v;
    v.text = i < texts.size() ? texts[i] : "";
    for (TokenId id; ids >> id;) v.ids.push_back(id);
    vectors.push_back(std::move(v));
  }
  EXPECT_EQ(vectors.size(), texts.size()) << base << ": .inp and .out disagree on the count";
  return vectors;
}

std::string ids_to_string(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) {
    if (!s.empty()) s.push_back(' ');
    s += std::to_string(id);
  }
  return s;
}

// Checks every vector; prints each mismatch and the pass count.
void expect_conformance(const Tokenizer& tok, const std::string& base, const std::string& label) {
  const auto vectors = load_vectors(base);
  ASSERT_FALSE(vectors.empty());
  size_t passed = 0, round_trips = 0;
  for (const TestVector& v : vectors) {
    const auto got = tok.encode(v.text, /*add_special=*/false, /*parse_special=*/false);
    if (got == v.ids) {
      ++passed;
    } else {
      ADD_FAILURE() << label << ": text '" << v.text << "'\n  want " << ids_to_string(v.ids)
                    << "\n  got  " << ids_to_string(got);
    }
    const std::string back = tok.decode(got);
    if (back == v.text) {
      ++round_trips;
    } else {
      ADD_FAILURE() << label << ": decode(encode('" << v.text << "')) = '" << back << "'";
    }
  }
  std::printf("[conformance] %s: %zu/%zu ids match, %zu/%zu round-trip\n", label.c_str(), passed,
              vectors.size(), round_trips, vectors.size());
}

TEST(Conformance, LlamaSpmGgufMatchesLlamaCpp) {
  auto file = gguf::GgufFile::open(kVocabDir + "ggml-vocab-llama-spm.gguf");
  auto tok = Tokenizer::from_gguf(file);
  EXPECT_EQ(tok->model_name(), "llama");
  EXPECT_EQ(tok->n_vocab(), 32000);
  expect_conformance(*tok, kVocabDir + "ggml-vocab-llama-spm.gguf", "llama-spm (gguf)");
}

TEST(Conformance, Gpt2GgufMatchesLlamaCpp) {
  auto file = gguf::GgufFile::open(kVocabDir + "ggml-vocab-gpt-2.gguf");
  auto tok = Tokenizer::from_gguf(file);
  EXPECT_EQ(tok->model_name(), "gpt2");
  EXPECT_EQ(tok->n_vocab(), 50257);
  expect_conformance(*tok, kVocabDir + "ggml-vocab-gpt-2.gguf", "gpt-2 (gguf)");
}

TEST(Conformance, Llama3TokenizerJsonMatchesLlamaBpeVectors) {
  auto tok = Tokenizer::from_hf_json(kShared + "/models/llama3-tokenizer/tokenizer.json",
                                     kShared + "/models/llama3-tokenizer/tokenizer_config.json");
  EXPECT_EQ(tok->model_name(), "gpt2");
  EXPECT_EQ(tok->n_vocab(), 128256);
  expect_conformance(*tok, kVocabDir + "ggml-vocab-llama-bpe.gguf", "llama-bpe (tokenizer.json)");
}

TEST(Conformance, Qwen3TokenizerJsonMatchesQwen2Vectors) {
  auto tok = Tokenizer::from_hf_json(kShared + "/models/qwen3-tokenizer/tokenizer.json",
                                     kShared + "/models/qwen3-tokenizer/tokenizer_config.json");
  EXPECT_EQ(tok->n_vocab(), 151669);
  expect_conformance(*tok, kVocabDir + "ggml-vocab-qwen2.gguf", "qwen2 (tokenizer.json)");
}

// Writes a vocab-only GGUF the way llama.cpp's converter would from a
// byte-level tokenizer.json: tokens by id, type 3 for special added tokens,
// merges as "left right".
std::string gguf_from_tokenizer_json(const std::string& json_path, const std::string& pre,
                                     const std::string& out_name, TokenId bos, TokenId eos) {
  auto tok = Tokenizer::from_hf_json(json_path);
  std::vector<std::string> texts;
  std::vector<int32_t> types;
  for (TokenId id = 0; id < tok->n_vocab(); ++id) {
    texts.push_back(tok->token_text(id));
    types.push_back(tok->is_special(id) ? 3 : 1);
  }
  const auto doc = nlohmann::json::parse(read_file(json_path));
  std::vector<std::string> merges;
  for (const auto& m : doc["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::str("llama"));
  w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::str(pre));
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(texts));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array(merges));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(static_cast<uint32_t>(bos)));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(static_cast<uint32_t>(eos)));
  const std::string path = testing::TempDir() + std::to_string(::getpid()) + "_" + out_name;
  w.write(path);
  return path;
}

TEST(Conformance, Llama3AsGgufWithLlamaBpePreMatchesVectors) {
  const std::string path = gguf_from_tokenizer_json(
      kShared + "/models/llama3-tokenizer/tokenizer.json", "llama-bpe", "pagoda_llama3_vocab.gguf",
      /*bos=*/128000, /*eos=*/128001);
  auto file = gguf::GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(file);
  EXPECT_TRUE(tok->add_bos());  // llama.cpp's default for llama-bpe
  expect_conformance(*tok, kVocabDir + "ggml-vocab-llama-bpe.gguf", "llama-bpe (gguf)");
  std::remove(path.c_str());
}

TEST(Conformance, Qwen3AsGgufWithQwen2PreMatchesVectors) {
  const std::string path = gguf_from_tokenizer_json(
      kShared + "/models/qwen3-tokenizer/tokenizer.json", "qwen2", "pagoda_qwen3_vocab.gguf",
      /*bos=*/151643, /*eos=*/151645);
  auto file = gguf::GgufFile::open(path);
  auto tok = Tokenizer::from_gguf(file);
  expect_conformance(*tok, kVocabDir + "ggml-vocab-qwen2.gguf", "qwen2 (gguf)");
  std::remove(path.c_str());
}

TEST(Conformance, Stories260KPromptMatchesLlama2c) {
  auto file = gguf::GgufFile::open(kShared + "/models/stories260K/stories260K.gguf");
  auto tok = Tokenizer::from_gguf(file);
  EXPECT_EQ(tok->n_vocab(), 512);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->add_bos());
  // ▁Once ▁upon ▁a ▁time: each a single vocabulary piece whose merges always
  // win (the README's greedy continuation starts with the same four ids).
  EXPECT_EQ(tok->encode("Once upon a time", true, false),
            (std::vector<TokenId>{1, 403, 407, 261, 378}));
  // The README's greedy ids after BOS decode to Karpathy's reference text.
  const std::vector<TokenId> greedy = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298,
                                       315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410,
                                       408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385};
  EXPECT_EQ(tok->decode(greedy, /*skip_special=*/true),
            "Once upon a time, there was a little girl named Lily. She loved to play outside in "
            "the park. One");
}

TEST(Conformance, MistralTokenizerJsonIsSentencePieceStyle) {
  const std::string dir = kShared + "/models/mistral-7b-v0.1-tokenizer/";
  auto tok = Tokenizer::from_hf_json(dir + "tokenizer.json", dir + "tokenizer_config.json");
  EXPECT_EQ(tok->model_name(), "llama");
  EXPECT_EQ(tok->n_vocab(), 32000);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->token_text(28705), "\xE2\x96\x81");  // '▁', per the README
  EXPECT_EQ(tok->encode("[INST]", false, false), (std::vector<TokenId>{733, 16289, 28793}));
  EXPECT_EQ(tok->encode("[INST]", true, false), (std::vector<TokenId>{1, 733, 16289, 28793}));
  // Every llama.cpp test string survives the round trip (byte fallback included).
  for (const TestVector& v : load_vectors(kVocabDir + "ggml-vocab-llama-spm.gguf")) {
    EXPECT_EQ(tok->decode(tok->encode(v.text, false, false)), v.text);
    EXPECT_EQ(tok->decode(tok->encode(v.text, true, false), /*skip_special=*/true), v.text);
  }
}

}  // namespace
}  // namespace pagoda
