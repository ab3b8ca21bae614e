// The table of named GGUF pre-tokenizers (tokenizer.ggml.pre): every row's
// regexes compile, every name is found, and every row cuts a probe text the
// way its model's tokenizer does — digit grouping (1, 3 or any number of
// digits), CJK and kana runs, punctuation, contractions, case changes,
// newline runs — with the expected pieces worked out by hand from the
// patterns (the comment above each case walks through it). Each probe also
// cuts differently under "default", so each name is shown to matter. And an
// independent engine: Python's `re` (pre_tokenizer_reference.py, with \p{..}
// expanded from Python's own Unicode tables) cuts llama.cpp's test strings and
// the probe texts into the same pieces as PCRE2 for every row.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/pretokenize.h"

namespace pagoda::tokenizer_detail {
namespace {

using Pieces = std::vector<std::string>;

// The pieces a named pre-tokenizer cuts `text` into, mapped back from the
// byte-level alphabet so the expectations read as plain text.
Pieces cut(std::string_view name, const std::string& text) {
  const NamedPreTokenizer* row = find_named_pre_tokenizer(name);
  if (row == nullptr) {
    ADD_FAILURE() << "no pre-tokenizer named " << name;
    return {};
  }
  Pieces out;
  for (const std::string& p : pre_tokenize(pre_tokenizer_steps(*row), text, true)) {
    out.push_back(byte_level_decode(p));
  }
  return out;
}

struct Probe {
  std::string_view row;  // canonical name; the probe runs under every alias of the row
  std::string text;
  Pieces expected;
};

const std::vector<Probe>& probes() {
  static const std::vector<Probe> all = {
      // Punctuation runs first ("+"), GPT-2 words, digit runs, then ASCII digits in threes.
      {"default", "a+b 1234567", {"a", "+", "b", " ", "123", "456", "7"}},
      // GPT-2 alone: a digit run keeps its space and is not cut into threes.
      {"gpt-2", "a+b 1234567", {"a", "+", "b", " 1234567"}},
      // Llama 3: "+b" (one non-letter leads a word); the space before a digit is
      // a lone \s+; digits in threes; "\n\n" is \s*[\r\n]+; of "  x" the last space
      // goes with the word (\s+(?!\S) leaves it).
      {"llama-bpe", "a+b 1234567\n\n  x", {"a", "+b", " ", "123", "456", "7", "\n\n", " ", " x"}},
      {"dbrx", "a+b 1234567\n\n  x", {"a", "+b", " ", "123", "456", "7", "\n\n", " ", " x"}},
      // Qwen2: Llama 3 with single digits.
      {"qwen2", "a+b 1234567\n\n  x",
       {"a", "+b", " ", "1", "2", "3", "4", "5", "6", "7", "\n\n", " ", " x"}},
      // StarCoder family: every digit alone first, then GPT-2 ("b " ends in a lone space).
      {"starcoder", "a+b 1234567", {"a", "+", "b", " ", "1", "2", "3", "4", "5", "6", "7"}},
      // DeepSeek LLM: "\n" alone; "Hi" and " end" are cased-letter runs (世界 is not);
      // "," and "!" punctuation runs; "  " at the end is \s+$; 世界 a CJK run;
      // 12345 one digit run.
      {"deepseek-llm", "Hi, \xE4\xB8\x96\xE7\x95\x8C 12345!\n  end  ",
       {"Hi", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", " ", "12345", "!", "\n", " ", " end", "  "}},
      // DeepSeek Coder: " 世界" is a letter run (\p{L}) before the CJK split takes
      // the space off again; digits one by one.
      {"deepseek-coder", "Hi, \xE4\xB8\x96\xE7\x95\x8C 12345!\n  end  ",
       {"Hi", ",", " ", "\xE4\xB8\x96\xE7\x95\x8C", " ", "1", "2", "3", "4", "5", "!", "\n", " ", " end",
        "  "}},
      // DeepSeek V3: digits in threes first (so "45" is left alone, not "12345");
      // ひらがな漢字 one Han + kana run; ".init" a punctuation-led ASCII word.
      {"deepseek-v3", "x.init 12345 \xE3\x81\xB2\xE3\x82\x89\xE3\x81\x8C\xE3\x81\xAA\xE6\xBC\xA2\xE5\xAD\x97\n",
       {"x", ".init", " ", "123", "45", " ",
        "\xE3\x81\xB2\xE3\x82\x89\xE3\x81\x8C\xE3\x81\xAA\xE6\xBC\xA2\xE5\xAD\x97", "\n"}},
      // Falcon: '`' joins the punctuation run ("`+"); no \p{N}+ step, so the
      // Arabic-Indic " ١٢" keeps its space.
      {"falcon", "a`+b \xD9\xA1\xD9\xA2", {"a", "`+", "b", " \xD9\xA1\xD9\xA2"}},
      // BLOOM / Poro: only whitespace and . , ! ? (and the like) cut; "well-known"
      // and " 12" stay whole.
      {"poro-chat", "Hello, well-known 12!", {"Hello", ",", " well-known", " 12", "!"}},
      // Viking: BLOOM, then single digits.
      {"viking", "Hello, well-known 12!", {"Hello", ",", " well-known", " ", "1", "2", "!"}},
      // Tekken: a case change starts a word ("World"); single digits; '/' runs take
      // the newline after them ("//\n").
      {"tekken", "helloWorld 123 a//\nb", {"hello", "World", " ", "1", "2", "3", " a", "//\n", "b"}},
      // GPT-4o: as Tekken, with the contraction kept on its word ("World's") and
      // digits in threes.
      {"gpt-4o", "helloWorld's 12345 a//\nb", {"hello", "World's", " ", "123", "45", " a", "//\n", "b"}},
      // Chameleon: image tokens; two spaces and a tab alone; single digits; single
      // punctuation characters.
      {"chameleon", "ab  cd\t12.5!IMGIMGABZx",
       {"ab", "  ", "cd", "\t", "1", "2", ".", "5", "!", "IMGIMGABZ", "x"}},
      // Seed-Coder: Qwen2 whose punctuation run stops before the newlines.
      {"seed-coder", "a+b 12;\n\nx", {"a", "+b", " ", "1", "2", ";", "\n\n", "x"}},
      // MiniCPM 5: digits in threes first; then as Llama 3.
      {"minicpm5", "a+b 1234567\n\n  x", {"a", "+b", " ", "123", "456", "7", "\n\n", " ", " x"}},
      // Jais 2: seven spaces before a word are 4 + 2 (+ the one that leads " b").
      {"jais-2", "a       b", {"a", "    ", "  ", " b"}},
      // ufakzeka: no contraction rule, so "'dan" is one word led by the apostrophe.
      {"ufakzeka", "Ankara'dan 12", {"Ankara", "'dan", " ", "1", "2"}},
      // Laguna: the line "a." and the newline run apart before Qwen2 cuts ".".
      {"laguna", "a.\n\nb", {"a", ".", "\n\n", "b"}},
      // EXAONE MoE: "hello world" is one letter run; "/" takes no digit after it.
      {"exaone-moe", "hello world 12/3\n", {"hello world", " ", "1", "2", "/", "3", "\n"}},
      // Tiny Aya: 1 234 567 (groups of three counted from the right).
      {"tiny_aya", "x 1234567 ab", {"x", " ", "1", "234", "567", " ab"}},
      // BailingMoE: cuts as Qwen2.
      {"bailingmoe", "a+b 1234567\n\n  x",
       {"a", "+b", " ", "1", "2", "3", "4", "5", "6", "7", "\n\n", " ", " x"}},
      // Qwen3.5: a combining acute (U+0301) stays inside its word.
      {"qwen35", "e\xCC\x81te 12", {"e\xCC\x81te", " ", "1", "2"}},
  };
  return all;
}

TEST(NamedPreTokenizers, EveryRowCutsItsProbeAsItsModelDoes) {
  for (const Probe& p : probes()) {
    const NamedPreTokenizer* row = find_named_pre_tokenizer(p.row);
    ASSERT_NE(row, nullptr) << p.row;
    for (std::string_view name : row->names) {
      SCOPED_TRACE(std::string(name));
      EXPECT_EQ(cut(name, p.text), p.expected);
    }
  }
}

TEST(NamedPreTokenizers, EveryProbeCutsDifferentlyUnderDefault) {
  for (const Probe& p : probes()) {
    if (p.row == "default") continue;
    SCOPED_TRACE(std::string(p.row));
    EXPECT_NE(cut("default", p.text), p.expected);
  }
}

// Rows that share a regex differ elsewhere: Qwen2 and Seed-Coder on newlines after
// punctuation, Qwen2 and Qwen3.5 on combining marks, Tekken and GPT-4o on digits.
TEST(NamedPreTokenizers, SimilarRowsDifferWhereTheirModelsDo) {
  EXPECT_EQ(cut("qwen2", "a+b 12;\n\nx"), (Pieces{"a", "+b", " ", "1", "2", ";\n\n", "x"}));
  EXPECT_EQ(cut("qwen2", "e\xCC\x81te 12"), (Pieces{"e", "\xCC\x81te", " ", "1", "2"}));
  EXPECT_EQ(cut("tekken", "12345"), (Pieces{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(cut("gpt-4o", "12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(cut("qwen2", "Ankara'dan"), (Pieces{"Ankara", "'d", "an"}));
  EXPECT_EQ(cut("qwen2", "a.\n\nb"), (Pieces{"a", ".\n\n", "b"}));
  // Capitals then lower case is one run (the capitals' * takes "HTTPS").
  EXPECT_EQ(cut("gpt-4o", "HTTPServer"), (Pieces{"HTTPServer"}));
  // Case by Unicode category, as tokenizer.json's \p{Lu} / \p{Ll}: "ï" is lower and
  // "É" upper case, so "naïveÉcole" is two runs (llama.cpp's std::regex rewrite
  // counts every letter outside A-Z as lower case too, and keeps one run).
  EXPECT_EQ(cut("tekken", "na\xC3\xAFve\xC3\x89" "cole"),
            (Pieces{"na\xC3\xAFve", "\xC3\x89" "cole"}));
}

TEST(NamedPreTokenizers, EveryRowHasAProbe) {
  std::set<std::string_view> probed;
  for (const Probe& p : probes()) probed.insert(p.row);
  for (const NamedPreTokenizer& row : named_pre_tokenizers()) {
    EXPECT_TRUE(probed.count(row.names.front())) << row.names.front() << " has no probe";
  }
}

TEST(NamedPreTokenizers, NamesAreUniqueAndFoundAndRegexesCompile) {
  std::set<std::string_view> seen;
  for (const NamedPreTokenizer& row : named_pre_tokenizers()) {
    for (std::string_view name : row.names) {
      EXPECT_TRUE(seen.insert(name).second) << "duplicate name " << name;
      EXPECT_EQ(find_named_pre_tokenizer(name), &row) << name;
    }
    const auto steps = pre_tokenizer_steps(row);  // throws if a regex does not compile
    ASSERT_EQ(steps.size(), row.regexes.size() + 1);
    EXPECT_EQ(steps.back().kind, PreTokenizerStep::Kind::byte_level);
  }
  // The names the issue asked for (llama-family GGUFs in the wild).
  for (std::string_view name : {"deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "smollm", "olmo",
                                "command-r", "tekken", "gpt-4o", "exaone", "chameleon", "starcoder", "refact",
                                "gpt-2", "jais", "dbrx", "poro-chat", "viking", "stablelm2", "bloom",
                                "minerva-7b", "codeshell", "default", "llama-bpe", "qwen2"}) {
    EXPECT_NE(find_named_pre_tokenizer(name), nullptr) << name;
  }
}

TEST(NamedPreTokenizers, UnknownNamesAreNotFound) {
  EXPECT_EQ(find_named_pre_tokenizer("no-such-pre"), nullptr);
  EXPECT_EQ(find_named_pre_tokenizer(""), nullptr);
  EXPECT_EQ(find_named_pre_tokenizer("DeepSeek-LLM"), nullptr);  // names are exact
}

TEST(NamedPreTokenizers, FlagsFollowTheModels) {
  auto row = [](std::string_view name) { return *find_named_pre_tokenizer(name); };
  EXPECT_TRUE(row("llama-bpe").ignore_merges);
  EXPECT_TRUE(row("llama-bpe").add_bos);
  EXPECT_TRUE(row("tekken").ignore_merges);
  EXPECT_TRUE(row("tekken").add_bos);
  EXPECT_FALSE(row("chameleon").ignore_merges);
  EXPECT_TRUE(row("chameleon").add_bos);
  for (std::string_view name : {"deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "gpt-4o", "dbrx"}) {
    EXPECT_FALSE(row(name).ignore_merges) << name;
    EXPECT_FALSE(row(name).add_bos) << name;
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string run_and_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(NamedPreTokenizers, AgreeWithPythonReOnLlamaCppTestStrings) {
  const std::string python = "/usr/bin/python3";
  if (::access(python.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << python;
  // llama.cpp's test strings (test-tokenizer-0) plus the probe texts.
  const std::string inp = read_file(std::string(PAGODA_SHARED_DIR) + "/models/ggml-vocab/ggml-vocab-llama-bpe.gguf.inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    texts.push_back(inp.substr(pos, next - pos));
  }
  ASSERT_GT(texts.size(), 30u);
  for (std::string_view t : pre_tokenizer_probe_texts()) texts.emplace_back(t);

  nlohmann::json spec = {{"rows", nlohmann::json::array()}, {"texts", texts}};
  for (const NamedPreTokenizer& row : named_pre_tokenizers()) {
    nlohmann::json regexes = nlohmann::json::array();
    for (std::string_view re : row.regexes) regexes.push_back(std::string(re));
    spec["rows"].push_back({{"name", std::string(row.names.front())}, {"regexes", regexes}});
  }
  const std::string spec_path = ::testing::TempDir() + "pagoda_pretok_ref_" + std::to_string(::getpid()) + ".json";
  std::ofstream(spec_path, std::ios::binary) << spec.dump();
  const std::string out = run_and_capture(python + " " + PAGODA_SOURCE_DIR +
                                          "/tests/tokenizer/pre_tokenizer_reference.py " + spec_path + " 2>/dev/null");
  std::remove(spec_path.c_str());
  const nlohmann::json reference = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(reference.is_object()) << "the reference printed: " << out.substr(0, 200);

  for (const NamedPreTokenizer& row : named_pre_tokenizers()) {
    const std::string name(row.names.front());
    SCOPED_TRACE(name);
    ASSERT_TRUE(reference.contains(name));
    const auto& expected = reference[name];
    ASSERT_EQ(expected.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(cut(name, texts[i]), expected[i].get<Pieces>()) << "text: '" << texts[i] << "'";
    }
  }
}

}  // namespace
}  // namespace pagoda::tokenizer_detail
