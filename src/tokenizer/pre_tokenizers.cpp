#include "tokenizer/pre_tokenizers.h"

#include <memory>

namespace pagoda::tokenizer_detail {

namespace {

// Regexes shared by several rows. Non-ASCII characters are written as \x{...}
// so the table reads the same in any editor and no tool can normalize them
// (DeepSeek's letter class holds U+2126 OHM SIGN and U+212A KELVIN SIGN, whose
// NFC forms are other characters).

// GPT-2 as llama.cpp writes it: HF's pattern without the final `|\s+`, which
// only ever matches a lone whitespace character that would be a gap, and
// therefore a piece of its own, anyway.
constexpr std::string_view kGpt2NoTail =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Llama 3 (tiktoken cl100k): up to 3 digits, letters with one leading
// non-letter, punctuation absorbing following newlines. "(?i:'s|...)" is
// spelled as explicit classes (see the header).
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: Llama 3 with single digits.
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM / Coder: Han (U+4E00..U+9FA5), U+0800..U+4E00 and Hangul
// (U+AC00..U+D7FF) runs.
constexpr std::string_view kDeepSeekCjk = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// BLOOM / Poro: anything but whitespace and . , ! ? … 。 ， 、 । ۔ ، (and,
// as the original pattern is written, the characters ( | ) too).
constexpr std::string_view kBloom =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";

// Letter runs that a lower-to-upper case change ends (tiktoken o200k):
// "helloWorld" -> "hello", "World"; "HTTPServer" stays one run.
#define PAGODA_CASED_WORDS(SUFFIX)                                                             \
  R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" SUFFIX \
  R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" SUFFIX
#define PAGODA_CONTRACTION_SUFFIX R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?)"

// tiktoken o200k (GPT-4o, Llama 4): cased letter runs with contractions, up to 3 digits.
constexpr std::string_view kGpt4o = PAGODA_CASED_WORDS(PAGODA_CONTRACTION_SUFFIX)
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A function-local static: built on first use, whatever the order of static
// initialization across files.
const std::vector<NamedPreTokenizer>& table() {
  static const std::vector<NamedPreTokenizer> rows = {
      // llama.cpp's fallback for a gpt2 vocabulary without a name.
      {{"default"},
       {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2NoTail, R"(\p{N}+)", R"([0-9][0-9][0-9])"}},
      {{"gpt-2", "phi-2", "roberta-bpe", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "jina-v2-code", "gigachat", "mpt", "olmo", "jais", "a.x-4.0", "mellum", "modern-bert", "exaone4",
        "trillion", "granite-docling"},
       {kGpt2Regex}},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {kLlama3},
       /*ignore_merges=*/true,
       /*add_bos=*/true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "kormo", "f2llmv2", "stablelm2", "hunyuan", "solar-open",
        "grok-2"},
       {kQwen2}},
      // GPT-2 after cutting every digit off on its own.
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {R"(\p{N})", kGpt2Regex}},
      // Newlines alone; cased letters (with one leading space); ASCII and
      // full-width punctuation; trailing whitespace; CJK runs; digit runs.
      {{"deepseek-llm"},
       {R"([\r\n])",
        R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
        R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
        R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
        R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
        R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
        R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
        R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
        R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
        R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
        R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
        R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
        R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
        R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
        R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
        R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
        R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
        R"(\s+$)", kDeepSeekCjk, R"(\p{N}+)"}},
      // Newlines alone; letters; punctuation; CJK runs; single digits.
      {{"deepseek-coder"}, {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepSeekCjk, R"(\p{N})"}},
      // Up to 3 digits; Han and kana runs; a punctuation character may lead an
      // ASCII word; letters with marks.
      {{"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"},
       {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      // Punctuation runs first, then GPT-2, then ASCII digits in threes.
      {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2NoTail, R"([0-9][0-9][0-9])"}},
      {{"poro-chat", "bloom", "gpt3-finnish"}, {kBloom}},
      {{"viking"}, {kBloom, R"(\p{N})"}},
      // Mistral Tekken: cased letter runs, single digits, '/' sticks to punctuation.
      {{"tekken"},
       {PAGODA_CASED_WORDS("") R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       /*ignore_merges=*/true,
       /*add_bos=*/true},
      // tiktoken o200k (GPT-4o, Llama 4): cased letter runs with contractions, up to 3 digits.
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {kGpt4o}},
      // Chameleon: its sentinel and image tokens, tabs / newlines / runs of 2 or
      // 4 spaces, single digits, single punctuation characters, then GPT-2.
      {{"chameleon"},
       {R"(<sentinel:[0-9]+>)", R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)", R"(([\t\n]|    |  ))", R"(\p{N})",
        R"([\p{P}!-/:-@\[-`{-~])", kGpt2NoTail},
       /*ignore_merges=*/false,
       /*add_bos=*/true},
      // Seed-Coder: Qwen2 whose punctuation runs stop at newlines.
      {{"seed-coder"},
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      // MiniCPM 5: up to 3 digits first, then Qwen2's pattern with digit runs
      // (cuts as Llama 3 does; no BOS by default).
      {{"minicpm5"},
       {R"(\p{N}{1,3})",
        R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       /*ignore_merges=*/true},
      // Jais 2: Llama 3 with space runs cut into powers of two.
      {{"jais-2"},
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)"
        R"(|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})"}},
      // Qwen2 without the contractions, so Turkish "'dan" stays on its word.
      {{"ufakzeka"},
       {R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
      // Laguna: lines and newline runs apart first, then Qwen2.
      {{"laguna"}, {R"([^\n]+|[\n]+)", kQwen2}},
      // EXAONE MoE: letter runs go on across single spaces ("hello world" is one piece).
      {{"exaone-moe"},
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)"}},
      // Tiny Aya / Cohere 2 MoE: ASCII-style thousands grouping from the right
      // ("1234567" -> 1 234 567), then GPT-4o's pattern.
      {{"tiny_aya", "cohere2moe"}, {R"(\d{1,3}(?=(?:\d{3})*\b))", kGpt4o}},
      // Ling (BailingMoE): Qwen2 as its tokenizer.json writes it, possessive
      // quantifiers included (PCRE2 has them; llama.cpp made them greedy, which
      // cuts the same here).
      {{"bailingmoe", "bailingmoe2", "llada-moe"},
       {R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"}},
      // Qwen3.5: Qwen2 with combining marks kept inside words.
      {{"qwen35"},
       {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
  };
  return rows;
}

#undef PAGODA_CASED_WORDS
#undef PAGODA_CONTRACTION_SUFFIX

}  // namespace

std::span<const NamedPreTokenizer> named_pre_tokenizers() { return table(); }

const NamedPreTokenizer* find_named_pre_tokenizer(std::string_view name) {
  for (const NamedPreTokenizer& row : table()) {
    for (std::string_view n : row.names) {
      if (n == name) return &row;
    }
  }
  return nullptr;
}

std::string supported_pre_tokenizer_names() {
  std::string out;
  for (const NamedPreTokenizer& row : table()) {
    if (!out.empty()) out += ", ";
    out += row.names.front();
  }
  return out;
}

std::vector<PreTokenizerStep> pre_tokenizer_steps(const NamedPreTokenizer& row) {
  std::vector<PreTokenizerStep> steps;
  steps.reserve(row.regexes.size() + 1);
  for (std::string_view re : row.regexes) {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::split;
    step.regex = std::make_shared<Regex>(std::string(re));
    step.behavior = SplitBehavior::isolated;
    steps.push_back(std::move(step));
  }
  PreTokenizerStep byte_level;
  byte_level.kind = PreTokenizerStep::Kind::byte_level;
  byte_level.use_regex = false;
  steps.push_back(std::move(byte_level));
  return steps;
}

std::span<const std::string_view> pre_tokenizer_probe_texts() {
  // Each row's distinguishing feature appears at least once (the probes of
  // tests/tokenizer/pre_tokenizers_test.cpp), plus ordinary English and code.
  static constexpr std::string_view kTexts[] = {
      "a+b 1234567\n\n  x",
      "Hi, \xE4\xB8\x96\xE7\x95\x8C 12345!\n  end  ",
      "x.init 12345 \xE3\x81\xB2\xE3\x82\x89\xE3\x81\x8C\xE3\x81\xAA\xE6\xBC\xA2\xE5\xAD\x97\n",
      "a`+b \xD9\xA1\xD9\xA2",
      "Hello, well-known 12!",
      "helloWorld's 12345 a//\nb",
      "ab  cd\t12.5!IMGIMGABZx",
      "a+b 12;\n\nx",
      "e\xCC\x81te 12",
      "I'm sure they'll say \"NO\" -- it's 3:45pm, isn't it?\r\n\tDone.  ",
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 ALLCAPS camelCaseWord \xC2\xBD \xC2\xB2 \xF0\x9F\x98\x80 1 12 123 1234",
      "def f(x):\n    return x**2  # \xC3\xA9t\xC3\xA9\n\n\n",
  };
  return kTexts;
}

const NamedPreTokenizer* match_named_pre_tokenizer(const std::vector<PreTokenizerStep>& steps,
                                                   bool ignore_merges) {
  const auto texts = pre_tokenizer_probe_texts();
  std::vector<std::vector<std::string>> wanted;
  wanted.reserve(texts.size());
  for (std::string_view t : texts) wanted.push_back(pre_tokenize(steps, std::string(t), true));
  const NamedPreTokenizer* same_pieces = nullptr;
  for (const NamedPreTokenizer& row : table()) {
    const auto row_steps = pre_tokenizer_steps(row);
    bool same = true;
    for (size_t i = 0; same && i < texts.size(); ++i) {
      same = pre_tokenize(row_steps, std::string(texts[i]), true) == wanted[i];
    }
    if (!same) continue;
    if (row.ignore_merges == ignore_merges) return &row;
    if (same_pieces == nullptr) same_pieces = &row;
  }
  return same_pieces;
}

}  // namespace pagoda::tokenizer_detail
