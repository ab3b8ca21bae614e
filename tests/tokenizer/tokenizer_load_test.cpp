// Loading: tiny hand-made tokenizer.json and GGUF vocabularies whose ids can be
// worked out by hand (merge order by rank / by score, unknown-token fusing,
// added tokens, BOS/EOS from the post-processor and the config), and the
// one-line pagoda::Error for every malformed or unsupported description.
#include <gtest/gtest.h>

#include "common/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace pagoda {
namespace {

using testing_tok::write_temp;
using testing_tok::write_temp_gguf;
using Ids = std::vector<TokenId>;

// Metaspace-style BPE (like older Llama 2 tokenizer.json files):
//   0 <unk>  1 <s>  2 </s>  3 ▁  4 a  5 b  6 ▁a  7 ab  8 ▁ab  (9: no entry)  10 <tool> (added, not special)
//   merges by rank: 0 "▁ a", 1 "a b", 2 "▁a b"
const char* kMetaspaceJson = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true, "lstrip": false, "rstrip": false},
    {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true},
    {"id": 10, "content": "<tool>", "special": false}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
  "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": false,
    "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "a": 4, "b": 5, "\u2581a": 6, "ab": 7, "\u2581ab": 8},
    "merges": ["\u2581 a", "a b", ["\u2581a", "b"]]}
})";

std::unique_ptr<Tokenizer> metaspace_tokenizer(const std::string& config = "") {
  const std::string json = write_temp("metaspace.json", kMetaspaceJson);
  const std::string cfg = config.empty() ? "" : write_temp("metaspace_config.json", config);
  return Tokenizer::from_hf_json(json, cfg);
}

TEST(HfJson, MergesApplyInRankOrder) {
  auto tok = metaspace_tokenizer();
  // ▁ a b: "▁ a" (rank 0) beats "a b" (rank 1), then "▁a b" (rank 2).
  EXPECT_EQ(tok->encode("ab", false, false), Ids{8});
  // Metaspace splits words before each ▁.
  EXPECT_EQ(tok->encode("a b", false, false), (Ids{6, 3, 5}));
  EXPECT_EQ(tok->model_name(), "llama");
}

TEST(HfJson, UnknownCharactersFuseIntoOneUnk) {
  auto tok = metaspace_tokenizer();
  EXPECT_EQ(tok->encode("xyz", false, false), (Ids{3, 0}));
  EXPECT_EQ(tok->encode("xaz", false, false), (Ids{3, 0, 4, 0}));
}

TEST(HfJson, AddedTokensSplitTheTextAndEachRunGetsItsPrefix) {
  auto tok = metaspace_tokenizer();
  EXPECT_EQ(tok->encode("a<tool>b", false, false), (Ids{6, 10, 3, 5}));
  EXPECT_EQ(tok->encode("a</s>", false, true), (Ids{6, 2}));
}

TEST(HfJson, TemplateProcessingSuppliesBos) {
  auto tok = metaspace_tokenizer();
  EXPECT_TRUE(tok->add_bos());
  EXPECT_FALSE(tok->add_eos());
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), -1);
  EXPECT_EQ(tok->encode("ab", true, false), (Ids{1, 8}));
}

TEST(HfJson, ConfigOverridesThePostProcessor) {
  auto tok = metaspace_tokenizer(
      R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
          "add_bos_token": false, "add_eos_token": true})");
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->encode("ab", true, false), (Ids{8, 2}));
  EXPECT_TRUE(tok->is_eog(2));
}

TEST(HfJson, MetaspaceDecoderDropsTheAddedPrefixSpace) {
  auto tok = metaspace_tokenizer();
  EXPECT_EQ(tok->decode(Ids{8}), "ab");
  EXPECT_EQ(tok->decode(Ids{6, 3, 5}), "a b");
  EXPECT_EQ(tok->decode(Ids{1, 8}), "<s>ab");
  EXPECT_EQ(tok->decode(Ids{1, 8}, true), "ab");
  EXPECT_EQ(tok->decode(Ids{6, 10, 3, 5}), "a<tool> b");
}

TEST(HfJson, IdsWithoutAnEntryAreEmptyTokens) {
  auto tok = metaspace_tokenizer();
  EXPECT_EQ(tok->n_vocab(), 11);
  EXPECT_EQ(tok->token_text(9), "");
  EXPECT_EQ(tok->token_to_piece(9), "");
}

// ---- malformed tokenizer.json -------------------------------------------------

// Loads `json` and returns the error message; fails the test if it loads.
std::string hf_error(const std::string& name, const std::string& json) {
  const std::string path = write_temp(name, json);
  try {
    Tokenizer::from_hf_json(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << name << " loaded without an error";
  return "";
}

void expect_one_line_naming(const std::string& msg, const std::string& needle) {
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(HfJsonErrors, MissingModelIsOneLine) {
  expect_one_line_naming(hf_error("nomodel.json", R"({"version": "1.0"})"), "no \"model\" object");
}

TEST(HfJsonErrors, BadMergesAreOneLine) {
  expect_one_line_naming(
      hf_error("merge_form.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}})"),
      "model.merges: entry 0 'ab' is not of the form 'left right'");
  expect_one_line_naming(
      hf_error("merge_pair.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a"]]}})"),
      "model.merges: entry 0 has 1 parts");
  expect_one_line_naming(
      hf_error("merge_unknown.json",
               R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})"),
      "'ab' is not in the vocabulary");
  expect_one_line_naming(
      hf_error("merge_number.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})"),
      "model.merges: entry 0 is not a string");
  expect_one_line_naming(hf_error("merge_missing.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}}})"),
                         "model.merges is missing");
}

TEST(HfJsonErrors, BadVocabIsOneLine) {
  expect_one_line_naming(
      hf_error("vocab_str.json", R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})"),
      "the id of 'a' is not an integer");
  expect_one_line_naming(
      hf_error("vocab_dup.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}})"),
      "id 0 is used by both 'a' and 'b'");
  expect_one_line_naming(
      hf_error("vocab_neg.json", R"({"model": {"type": "BPE", "vocab": {"a": -3}, "merges": []}})"),
      "has id -3");
}

TEST(HfJsonErrors, UnsupportedComponentsAreNamed) {
  expect_one_line_naming(
      hf_error("unigram.json", R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})"),
      "unsupported model type 'Unigram'");
  expect_one_line_naming(
      hf_error("nfkc.json", R"({"normalizer": {"type": "NFKC"},
                               "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
      "unsupported normalizer type 'NFKC'");
  expect_one_line_naming(
      hf_error("bert_pre.json", R"({"pre_tokenizer": {"type": "BertPreTokenizer"},
                                   "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
      "unsupported pre_tokenizer type 'BertPreTokenizer'");
  expect_one_line_naming(
      hf_error("bad_regex.json",
               R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"},
                   "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
      "regex '(a'");
}

TEST(HfJsonErrors, InvalidJsonAndMissingFilesAreOneLine) {
  expect_one_line_naming(hf_error("truncated.json", R"({"model": {"type": "BPE", "vocab": {"a": 0)"),
                         "invalid JSON");
  try {
    Tokenizer::from_hf_json(::testing::TempDir() + "pagoda_tok_does_not_exist.json");
    ADD_FAILURE() << "a missing file loaded";
  } catch (const Error& e) {
    expect_one_line_naming(e.what(), "does_not_exist.json");
  }
}

TEST(HfJsonErrors, ConfigNamingAnUnknownTokenIsAnError) {
  try {
    metaspace_tokenizer(R"({"bos_token": "<nope>"})");
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    expect_one_line_naming(e.what(), "bos_token '<nope>' is not in the vocabulary");
  }
}

// ---- GGUF ---------------------------------------------------------------------

// An SPM vocabulary: <unk> <s> </s>, the 256 byte tokens (ids 3..258), then
// pieces with hand-picked scores, and one user-defined token.
void fill_spm(gguf::GgufWriter& w) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\xE2\x96\x81", -10},        // 259 ▁
      {"a", -10},                   // 260
      {"b", -10},                   // 261
      {"c", -10},                   // 262
      {"\xE2\x96\x81" "a", -5},     // 263 ▁a
      {"ab", -1},                   // 264 ab   (best pair)
      {"bc", -2},                   // 265 bc
      {"\xE2\x96\x81" "ab", -3},    // 266 ▁ab
      {"<tool>", 0},                // 267 user-defined
  };
  for (const auto& [text, score] : pieces) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(text == "<tool>" ? 4 : 1);
  }
  w.set("general.architecture", gguf::Value::str("llama"));
  w.set("tokenizer.ggml.model", gguf::Value::str("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(1));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(2));
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::u32(0xFFFFFFFFu));  // "none"
}

std::unique_ptr<Tokenizer> load_gguf(const std::string& name, const gguf::GgufWriter& w);

std::unique_ptr<Tokenizer> load_spm(const std::string& name) {
  gguf::GgufWriter w;
  fill_spm(w);
  return load_gguf(name, w);
}

std::unique_ptr<Tokenizer> load_gguf(const std::string& name, const gguf::GgufWriter& w) {
  return Tokenizer::from_gguf(gguf::GgufFile::open(write_temp_gguf(name, w)));
}

TEST(Gguf, SpmMergesTheBestScoringPairFirst) {
  auto tok = load_spm("spm.gguf");
  // ▁ a b c: "ab" (-1) first, then "▁ab" (-3) beats "bc" (no longer adjacent).
  EXPECT_EQ(tok->encode("abc", false, false), (Ids{266, 262}));
  EXPECT_EQ(tok->decode(Ids{266, 262}), "abc");
}

TEST(Gguf, SpmUsesByteTokensForCharactersOutsideTheVocabulary) {
  auto tok = load_spm("spm.gguf");
  // 'z' -> <0x7A> = 3 + 0x7A; 'é' -> <0xC3> <0xA9>.
  EXPECT_EQ(tok->encode("z\xC3\xA9", false, false), (Ids{259, 3 + 0x7A, 3 + 0xC3, 3 + 0xA9}));
}

TEST(Gguf, UserDefinedTokensMatchWithoutParseSpecial) {
  auto tok = load_spm("spm.gguf");
  EXPECT_EQ(tok->encode("a<tool>a", false, false), (Ids{263, 267, 263}));
  EXPECT_EQ(tok->encode("<s>a", true, true), (Ids{1, 1, 263}));
  EXPECT_FALSE(tok->is_special(267));
  EXPECT_TRUE(tok->is_special(1));
}

TEST(Gguf, AddSpacePrefixFalseDisablesThePrefixAndTheStrip) {
  gguf::GgufWriter w;
  fill_spm(w);
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::boolean(false));
  auto tok = load_gguf("spm_noprefix.gguf", w);
  EXPECT_EQ(tok->encode("ab", false, false), (Ids{264}));
  EXPECT_EQ(tok->decode(Ids{266}), " ab");
  EXPECT_FALSE(tok->strips_leading_space());
}

std::string gguf_error(const std::string& name, const gguf::GgufWriter& w) {
  try {
    load_gguf(name, w);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << name << " loaded without an error";
  return "";
}

TEST(GgufErrors, NoTokenizerMetadataIsAnError) {
  gguf::GgufWriter w;
  w.set("general.architecture", gguf::Value::str("llama"));
  expect_one_line_naming(gguf_error("notok.gguf", w), "no tokenizer metadata");
}

TEST(GgufErrors, UnsupportedModelOrPreTokenizerIsNamed) {
  gguf::GgufWriter w;
  fill_spm(w);
  w.set("tokenizer.ggml.model", gguf::Value::str("bert"));
  expect_one_line_naming(gguf_error("bert.gguf", w), "unsupported tokenizer.ggml.model 'bert'");

  gguf::GgufWriter b;
  b.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  b.set("tokenizer.ggml.pre", gguf::Value::str("no-such-pre"));
  b.set("tokenizer.ggml.tokens", gguf::Value::str_array({"a", "b", "ab"}));
  b.set("tokenizer.ggml.merges", gguf::Value::str_array({"a b"}));
  expect_one_line_naming(gguf_error("pre.gguf", b), "unsupported tokenizer.ggml.pre 'no-such-pre'");
  b.set("tokenizer.ggml.pre", gguf::Value::str("gpt-2"));
  b.set("tokenizer.ggml.merges", gguf::Value::str_array({"ab"}));
  expect_one_line_naming(gguf_error("merge.gguf", b), "tokenizer.ggml.merges[0] is not 'left right'");
}

TEST(GgufErrors, InconsistentArraysAndIdsAreErrors) {
  gguf::GgufWriter w;
  fill_spm(w);
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array({0, 0}));
  expect_one_line_naming(gguf_error("scores.gguf", w), "tokenizer.ggml.scores has 2 entries");

  gguf::GgufWriter nobos;
  fill_spm(nobos);
  nobos.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(0xFFFFFFFFu));
  nobos.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));
  expect_one_line_naming(gguf_error("nobos.gguf", nobos), "add_bos is set but there is no BOS token");
}

}  // namespace
}  // namespace pagoda
