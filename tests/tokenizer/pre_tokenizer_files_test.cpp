// The named pre-tokenizers end to end, and the tokenizer.json forms of them:
//
// - tokenizer.json pre_tokenizers written the way the models ship them (Split
//   with the original patterns, Digits, Punctuation, ByteLevel with its own
//   regex) cut llama.cpp's test strings and the probe texts exactly as the
//   GGUF row of the same name, and match_named_pre_tokenizer (what `pagoda
//   convert` uses to write tokenizer.ggml.pre) names that row — also for the
//   real Llama 3 and Qwen3 tokenizer.json files;
// - byte-level GGUF vocabularies with tokenizer.ggml.pre = deepseek-llm /
//   deepseek-coder / tekken give ids worked out by hand, different from
//   "default", and follow the row's flags (add_bos, ignore_merges);
// - an unknown name is one clear error;
// - Gemma's SentencePiece vocabulary (no dummy prefix, byte fallback,
//   <bos>=2 <eos>=1 <pad>=0, <start_of_turn> / <end_of_turn>) as a GGUF and as
//   its tokenizer.json form gives the same hand-derived ids.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "gguf/gguf.h"
#include "tokenizer/hf_json.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_fixtures.h"

namespace pagoda {
namespace {

using json = nlohmann::json;
using tokenizer_detail::NamedPreTokenizer;
using tokenizer_detail::PreTokenizerStep;
using Ids = std::vector<TokenId>;
using testing_tok::kShared;
using testing_tok::write_temp;
using testing_tok::write_temp_gguf;

// ---- tokenizer.json forms ---------------------------------------------------

json split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json digits(bool individual) { return {{"type", "Digits"}, {"individual_digits", individual}}; }
json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}
json sequence(std::vector<json> steps) { return {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}}; }

// DeepSeek's CJK class as the files spell it, with the characters themselves:
// [一-龥ࠀ-一가-퟿]+
const std::string kCjk =
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+";

struct HfForm {
  std::string expected_row;
  json pre_tokenizer;
  bool ignore_merges = false;
};

std::vector<HfForm> hf_forms() {
  const NamedPreTokenizer* ds_llm = tokenizer_detail::find_named_pre_tokenizer("deepseek-llm");
  return {
      // OLMo, GPT-2: ByteLevel with its own regex.
      {"gpt-2", byte_level(true)},
      // SmolLM / StarCoder: every digit alone, then ByteLevel's regex.
      {"starcoder", sequence({digits(true), byte_level(true)})},
      // DeepSeek Coder.
      {"deepseek-coder", sequence({split("[\r\n]"), split(R"(\s?\p{L}+)"), split(R"(\s?\p{P}+)"), split(kCjk),
                                   digits(true), byte_level(false)})},
      // DeepSeek LLM: the letter class is the table's own spelling of it (the
      // file lists ~150 ranges); punctuation and CJK classes with literal characters.
      {"deepseek-llm",
       sequence({split("[\r\n]"), split(std::string(ds_llm->regexes[1])),
                 split("\\s?[!-/:-~\xEF\xBC\x81-\xEF\xBC\x8F\xEF\xBC\x9A-\xEF\xBD\x9E\xE2\x80\x98-\xE2\x80\x9F"
                       "\xE3\x80\x80-\xE3\x80\x82]+"),
                 split(R"(\s+$)"), split(kCjk), digits(false), byte_level(false)})},
      // DeepSeek V3: [一-龥぀-ゟ゠-ヿ]+ with literal characters.
      {"deepseek-v3",
       sequence({split(R"(\p{N}{1,3})"),
                 split("[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+"),
                 split(R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)" "\r\n" R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)" "\r\n" R"(]*|\s*[)" "\r\n" R"(]+|\s+(?!\S)|\s+)"),
                 byte_level(false)})},
      // Mistral Tekken, as in Mistral-Nemo's tokenizer.json.
      {"tekken",
       sequence({split(R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
                 byte_level(false)}),
       /*ignore_merges=*/true},
      // GPT-4o / Llama 4, with the original case-insensitive contractions.
      {"gpt-4o",
       sequence({split(R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
                 byte_level(false)})},
      // Chameleon: Digits and Punctuation steps, then ByteLevel's regex.
      {"chameleon",
       sequence({split("<sentinel:[0-9]+>"), split("(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z"),
                 split("([\t\n]|    |  )"), digits(true),
                 {{"type", "Punctuation"}, {"behavior", "Isolated"}}, byte_level(true)})},
      // Qwen2 / Llama 3 with the original case-insensitive contractions.
      {"qwen2",
       sequence({split(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
                 byte_level(false)})},
      {"llama-bpe",
       sequence({split(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
                 byte_level(false)}),
       /*ignore_merges=*/true},
      // The same regex without ignore_merges is DBRX's row.
      {"dbrx",
       sequence({split(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
                 byte_level(false)})},
  };
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// llama.cpp's tokenizer test strings (shared/models/ggml-vocab/*.inp).
std::vector<std::string> llama_cpp_test_strings() {
  const std::string inp = read_file(kShared + "/models/ggml-vocab/ggml-vocab-llama-bpe.gguf.inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    texts.push_back(inp.substr(pos, next - pos));
  }
  EXPECT_GT(texts.size(), 30u);
  return texts;
}

TEST(HfPreTokenizerForms, CutTextsAsTheGgufRowOfTheSameName) {
  std::vector<std::string> texts = llama_cpp_test_strings();
  for (std::string_view t : tokenizer_detail::pre_tokenizer_probe_texts()) texts.emplace_back(t);
  for (const HfForm& form : hf_forms()) {
    SCOPED_TRACE(form.expected_row);
    const auto hf_steps = tokenizer_detail::parse_hf_pre_tokenizer("form.json", form.pre_tokenizer);
    const auto row_steps =
        tokenizer_detail::pre_tokenizer_steps(*tokenizer_detail::find_named_pre_tokenizer(form.expected_row));
    for (const std::string& text : texts) {
      EXPECT_EQ(tokenizer_detail::pre_tokenize(hf_steps, text, true),
                tokenizer_detail::pre_tokenize(row_steps, text, true))
          << "text: '" << text << "'";
    }
    const NamedPreTokenizer* named = tokenizer_detail::match_named_pre_tokenizer(hf_steps, form.ignore_merges);
    ASSERT_NE(named, nullptr);
    EXPECT_EQ(named->names.front(), form.expected_row);
  }
}

TEST(HfPreTokenizerForms, RealTokenizerJsonFilesAreNamedAsLlamaCppNamesThem) {
  for (const auto& [dir, expected] : std::vector<std::pair<std::string, std::string>>{
           {"llama3-tokenizer", "llama-bpe"}, {"qwen3-tokenizer", "qwen2"}}) {
    SCOPED_TRACE(dir);
    const std::string path = kShared + "/models/" + dir + "/tokenizer.json";
    const tokenizer_detail::TokenizerJson tj = tokenizer_detail::read_tokenizer_json(path);
    bool byte_level = false;
    const auto steps = tokenizer_detail::parse_hf_pre_tokenizer(path, tj.doc.at("pre_tokenizer"), &byte_level);
    EXPECT_TRUE(byte_level);
    const bool ignore_merges = tj.doc.at("model").value("ignore_merges", false);
    const NamedPreTokenizer* named = tokenizer_detail::match_named_pre_tokenizer(steps, ignore_merges);
    ASSERT_NE(named, nullptr);
    EXPECT_EQ(named->names.front(), expected);
  }
}

// A pre-tokenizer no row behaves like (whitespace only) is named by none.
TEST(HfPreTokenizerForms, AnUnknownBehaviourIsNamedByNoRow) {
  const auto steps =
      tokenizer_detail::parse_hf_pre_tokenizer("ws.json", sequence({split(R"(\S+)"), byte_level(false)}));
  EXPECT_EQ(tokenizer_detail::match_named_pre_tokenizer(steps, false), nullptr);
}

// ---- byte-level GGUF vocabularies ---------------------------------------------

// Ids 0..255: the byte-level character of that byte (so an ASCII letter's id is
// its code), then
//   256 "12"  257 "123"  258 "45"  259 "aä" (a + the byte E4, the first of 世)
//   260 "abc" (no merge builds it)  261 <bos>  262 <eos>
// merges by rank: "1 2", "12 3", "4 5", "a ä".
void fill_byte_level(gguf::GgufWriter& w, const std::string& pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(tokenizer_detail::byte_level_encode(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  for (const char* t : {"12", "123", "45", "a\xC3\xA4", "abc"}) {
    tokens.push_back(t);
    types.push_back(1);
  }
  tokens.push_back("<bos>");
  types.push_back(3);
  tokens.push_back("<eos>");
  types.push_back(3);
  w.set("general.architecture", gguf::Value::str("llama"));
  w.set("tokenizer.ggml.model", gguf::Value::str("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::str(pre));
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::str_array({"1 2", "12 3", "4 5", "a \xC3\xA4"}));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(261));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(262));
}

std::unique_ptr<Tokenizer> byte_level_vocab(const std::string& pre) {
  gguf::GgufWriter w;
  fill_byte_level(w, pre);
  return Tokenizer::from_gguf(gguf::GgufFile::open(write_temp_gguf("bl_" + pre + ".gguf", w)));
}

constexpr const char* kWorld = "\xE4\xB8\x96";  // 世 = E4 B8 96

TEST(NamedPreTokenizerGguf, DeepSeekLlmCutsHanOffLatinLetters) {
  // default: "a世" is one GPT-2 letter run, so "a ä" merges: 259, then B8, 96.
  // deepseek-llm: "a" is a cased-letter run and 世 a CJK run: a, E4, B8, 96.
  const std::string text = std::string("a") + kWorld;
  EXPECT_EQ(byte_level_vocab("default")->encode(text, false, false), (Ids{259, 0xB8, 0x96}));
  EXPECT_EQ(byte_level_vocab("deepseek-llm")->encode(text, false, false), (Ids{'a', 0xE4, 0xB8, 0x96}));
  // Digit runs stay whole under deepseek-llm: 12345 -> 123 45.
  EXPECT_EQ(byte_level_vocab("deepseek-llm")->encode("12345", false, false), (Ids{257, 258}));
}

TEST(NamedPreTokenizerGguf, DeepSeekCoderAndTekkenCutDigitsOneByOne) {
  EXPECT_EQ(byte_level_vocab("default")->encode("12345", false, false), (Ids{257, 258}));
  for (const char* pre : {"deepseek-coder", "tekken", "smollm", "qwen2"}) {
    EXPECT_EQ(byte_level_vocab(pre)->encode("12345", false, false), (Ids{'1', '2', '3', '4', '5'})) << pre;
  }
  EXPECT_EQ(byte_level_vocab("deepseek-v3")->encode("12345", false, false), (Ids{257, 258}));
}

TEST(NamedPreTokenizerGguf, RowFlagsSetBosAndIgnoreMerges) {
  // Tekken: BOS by default and a word that is a token is kept whole ("abc").
  auto tekken = byte_level_vocab("tekken");
  EXPECT_TRUE(tekken->add_bos());
  EXPECT_EQ(tekken->encode("abc", true, false), (Ids{261, 260}));
  // Qwen2 (same word split, no flags): no BOS, "abc" spelled out.
  auto qwen2 = byte_level_vocab("qwen2");
  EXPECT_FALSE(qwen2->add_bos());
  EXPECT_EQ(qwen2->encode("abc", true, false), (Ids{'a', 'b', 'c'}));
  EXPECT_TRUE(byte_level_vocab("chameleon")->add_bos());
  EXPECT_FALSE(byte_level_vocab("deepseek-llm")->add_bos());
  // tokenizer.ggml.add_bos_token overrides the row.
  gguf::GgufWriter w;
  fill_byte_level(w, "tekken");
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(false));
  EXPECT_FALSE(Tokenizer::from_gguf(gguf::GgufFile::open(write_temp_gguf("tekken_nobos.gguf", w)))->add_bos());
}

TEST(NamedPreTokenizerGguf, AnUnknownNameIsOneLineNamingTheKnownOnes) {
  gguf::GgufWriter w;
  fill_byte_level(w, "deepseek-llm-v9");
  try {
    Tokenizer::from_gguf(gguf::GgufFile::open(write_temp_gguf("unknown_pre.gguf", w)));
    FAIL() << "loaded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unsupported tokenizer.ggml.pre 'deepseek-llm-v9'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("supported: default, gpt-2, llama-bpe"), std::string::npos) << msg;
    EXPECT_NE(msg.find("deepseek-llm,"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// ---- Gemma's SentencePiece vocabulary -------------------------------------------

// Gemma's layout in small: 0 <pad>  1 <eos>  2 <bos>  3 <unk>, 4..259 <0x00>..<0xFF>,
// then pieces and their merges in rank order (an SPM score is minus the rank, as
// Gemma's tokenizer.json merges come from the SentencePiece scores):
//   260 ▁  261 H  262 i  263 t  264 h  265 e  266 r  267 u  268 s  269 \n
//   270 Hi (H i, rank 0)  271 ▁t (▁ t, 1)  272 he (h e, 2)  273 ▁the (▁t he, 3)
//   274 re (r e, 4)  275 ▁there (▁the re, 5)  276 us (u s, 6)  277 er (e r, 7)
//   278 user (us er, 8)  279 <start_of_turn>  280 <end_of_turn>
const char* kSp = "\xE2\x96\x81";  // ▁

struct GemmaPiece {
  std::string text;
  int merge_rank;  // -1: a single character
  std::string left, right;
};

std::vector<GemmaPiece> gemma_pieces() {
  const std::string sp = kSp;
  return {{sp, -1, "", ""},
          {"H", -1, "", ""},
          {"i", -1, "", ""},
          {"t", -1, "", ""},
          {"h", -1, "", ""},
          {"e", -1, "", ""},
          {"r", -1, "", ""},
          {"u", -1, "", ""},
          {"s", -1, "", ""},
          {"\n", -1, "", ""},
          {"Hi", 0, "H", "i"},
          {sp + "t", 1, sp, "t"},
          {"he", 2, "h", "e"},
          {sp + "the", 3, sp + "t", "he"},
          {"re", 4, "r", "e"},
          {sp + "there", 5, sp + "the", "re"},
          {"us", 6, "u", "s"},
          {"er", 7, "e", "r"},
          {"user", 8, "us", "er"}};
}

void fill_gemma(gguf::GgufWriter& w) {
  std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>"};
  std::vector<float> scores = {0, 0, 0, 0};
  std::vector<int32_t> types = {3, 3, 3, 2};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  for (const GemmaPiece& p : gemma_pieces()) {
    tokens.push_back(p.text);
    scores.push_back(p.merge_rank < 0 ? 0.0f : -static_cast<float>(p.merge_rank));
    types.push_back(1);
  }
  for (const char* t : {"<start_of_turn>", "<end_of_turn>"}) {
    tokens.push_back(t);
    scores.push_back(0);
    types.push_back(3);
  }
  w.set("general.architecture", gguf::Value::str("gemma2"));
  w.set("tokenizer.ggml.model", gguf::Value::str("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::str_array(tokens));
  w.set("tokenizer.ggml.scores", gguf::Value::f32_array(scores));
  w.set("tokenizer.ggml.token_type", gguf::Value::i32_array(types));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::u32(2));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::u32(1));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::u32(3));
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::u32(0));
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::boolean(false));
  w.set("tokenizer.ggml.add_bos_token", gguf::Value::boolean(true));
}

std::unique_ptr<Tokenizer> gemma_gguf() {
  gguf::GgufWriter w;
  fill_gemma(w);
  return Tokenizer::from_gguf(gguf::GgufFile::open(write_temp_gguf("gemma.gguf", w)));
}

// Gemma's tokenizer.json: BPE with byte fallback, spaces replaced by ▁, no
// Prepend and no pre-tokenizer, decoder ▁ -> ' ', ByteFallback, Fuse (no Strip).
std::unique_ptr<Tokenizer> gemma_hf() {
  json vocab = json::object();
  json added = json::array();
  const char* specials[] = {"<pad>", "<eos>", "<bos>", "<unk>"};
  for (int id = 0; id < 4; ++id) {
    vocab[specials[id]] = id;
    added.push_back({{"id", id}, {"content", specials[id]}, {"special", true}});
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    vocab[buf] = 4 + b;
  }
  std::vector<GemmaPiece> pieces = gemma_pieces();
  std::vector<std::pair<int, json>> merges;
  for (size_t i = 0; i < pieces.size(); ++i) {
    vocab[pieces[i].text] = 260 + static_cast<int>(i);
    if (pieces[i].merge_rank >= 0) merges.emplace_back(pieces[i].merge_rank, json::array({pieces[i].left, pieces[i].right}));
  }
  std::sort(merges.begin(), merges.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  json merge_list = json::array();
  for (auto& [rank, m] : merges) merge_list.push_back(m);
  vocab["<start_of_turn>"] = 279;
  vocab["<end_of_turn>"] = 280;
  added.push_back({{"id", 279}, {"content", "<start_of_turn>"}, {"special", true}});
  added.push_back({{"id", 280}, {"content", "<end_of_turn>"}, {"special", true}});
  const json doc = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"}, {"unk_token", "<unk>"}, {"fuse_unk", true}, {"byte_fallback", true}, {"vocab", vocab},
        {"merges", merge_list}}},
  };
  const json config = {{"bos_token", "<bos>"}, {"eos_token", "<eos>"}, {"pad_token", "<pad>"},
                       {"add_bos_token", true}, {"add_eos_token", false}};
  return Tokenizer::from_hf_json(write_temp("gemma_tokenizer.json", doc.dump()),
                                 write_temp("gemma_tokenizer_config.json", config.dump()));
}

TEST(Gemma, ChatTurnGivesTheHandDerivedIdsFromGgufAndTokenizerJson) {
  // <bos> <start_of_turn> user \n Hi ▁there <end_of_turn>: no ▁ in front of "user"
  // (no dummy prefix), "\n" is a piece of its own, and the merges build ▁there.
  const Ids expected = {2, 279, 278, 269, 270, 275, 280};
  const std::string text = "<start_of_turn>user\nHi there<end_of_turn>";
  auto gguf_tok = gemma_gguf();
  auto hf_tok = gemma_hf();
  EXPECT_EQ(gguf_tok->encode(text, true, true), expected);
  EXPECT_EQ(hf_tok->encode(text, true, true), expected);
  for (const Tokenizer* tok : {gguf_tok.get(), hf_tok.get()}) {
    EXPECT_EQ(tok->bos(), 2);
    EXPECT_EQ(tok->eos(), 1);
    EXPECT_TRUE(tok->is_eog(280));  // <end_of_turn> stops generation
    EXPECT_TRUE(tok->is_eog(1));
    EXPECT_FALSE(tok->is_eog(279));
    EXPECT_TRUE(tok->is_special(0));
    EXPECT_EQ(tok->model_name(), "llama");
    EXPECT_FALSE(tok->strips_leading_space());
    EXPECT_EQ(tok->decode(expected, /*skip_special=*/true), "user\nHi there");
  }
}

TEST(Gemma, NoDummyPrefixAndByteFallbackAgreeBetweenGgufAndTokenizerJson) {
  auto gguf_tok = gemma_gguf();
  auto hf_tok = gemma_hf();
  // " Hi": one ▁ from the space, none added in front; "Hi" without a space: no ▁.
  // "é" (C3 A9) is not in the vocabulary: bytes 4 + 0xC3, 4 + 0xA9.
  const std::vector<std::pair<std::string, Ids>> cases = {
      {" Hi", {260, 270}},
      {"Hi", {270}},
      {"there", {263, 272, 274}},  // t he re: no ▁t without the space
      {"\xC3\xA9", {4 + 0xC3, 4 + 0xA9}},
      {"Hi  there\n", {270, 260, 275, 269}},
  };
  for (const auto& [text, ids] : cases) {
    SCOPED_TRACE(text);
    EXPECT_EQ(gguf_tok->encode(text, false, false), ids);
    EXPECT_EQ(hf_tok->encode(text, false, false), ids);
    EXPECT_EQ(gguf_tok->decode(ids), text);  // the leading space is kept
    EXPECT_EQ(hf_tok->decode(ids), text);
  }
}

TEST(Gemma, AddSpacePrefixIsHonouredBothWays) {
  // The same vocabulary with add_space_prefix = true (Llama 2's default) puts a ▁
  // in front of the text: " Hi" becomes ▁▁Hi, "there" becomes ▁there.
  gguf::GgufWriter w;
  fill_gemma(w);
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::boolean(true));
  auto prefixed = Tokenizer::from_gguf(gguf::GgufFile::open(write_temp_gguf("gemma_prefix.gguf", w)));
  EXPECT_EQ(prefixed->encode(" Hi", false, false), (Ids{260, 260, 270}));
  EXPECT_EQ(prefixed->encode("there", false, false), (Ids{275}));
  EXPECT_TRUE(prefixed->strips_leading_space());
  EXPECT_EQ(prefixed->decode(Ids{275}), "there");
  auto gemma = gemma_gguf();
  EXPECT_EQ(gemma->encode("there", false, false), (Ids{263, 272, 274}));
  EXPECT_EQ(gemma->decode(Ids{275}), " there");
}

}  // namespace
}  // namespace pagoda
