// Matcher: acceptance against independent references (std::regex over every string
// up to a length, a counter for a non-regular language), UTF-8 split across tokens,
// EOG / termination rules, and masks equal to brute force (copy the matcher, try
// each token) on random vocabularies and on a real 128k vocabulary, with and without
// the mask cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <string>

#include "grammar/grammar.h"
#include "grammar/grammar_impl.h"

namespace pagoda::grammar {
namespace {

std::shared_ptr<const TokenVocabulary> vocab_of(std::vector<std::string> pieces, std::vector<int32_t> eog = {},
                                                std::vector<bool> disallowed = {}) {
  return std::make_shared<TokenVocabulary>(std::move(pieces), std::move(eog), std::move(disallowed));
}

std::shared_ptr<const TokenVocabulary> byte_vocab() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  pieces.push_back("");
  return vocab_of(std::move(pieces), {256});
}

std::vector<uint32_t> mask_of(Matcher& m) {
  std::vector<uint32_t> mask((m.vocabulary().size() + 31) / 32);
  m.fill_next_token_bitmask(mask);
  return mask;
}

std::vector<uint32_t> brute_force_mask(const Matcher& m) {
  const int32_t n = m.vocabulary().size();
  std::vector<uint32_t> mask((n + 31) / 32);
  for (int32_t id = 0; id < n; ++id) {
    Matcher c = m.clone();
    if (c.accept_token(id)) mask[id >> 5] |= 1u << (id & 31);
  }
  return mask;
}

bool bit(const std::vector<uint32_t>& mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1; }

std::string first_difference(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
                             const TokenVocabulary& v) {
  for (int32_t id = 0; id < v.size(); ++id)
    if (bit(got, id) != bit(want, id))
      return "token " + std::to_string(id) + " '" + v.impl().pieces[id] + "': mask " + std::to_string(bit(got, id)) +
             ", brute force " + std::to_string(bit(want, id));
  return "";
}

// All strings over `alphabet` of length <= n.
std::vector<std::string> all_strings(const std::string& alphabet, int n) {
  std::vector<std::string> out{""};
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(out[i].size()) == n) continue;
    for (char c : alphabet) out.push_back(out[i] + c);
  }
  return out;
}

struct RegexCase {
  const char* gbnf;
  const char* regex;
  const char* alphabet;
};

// For every string s up to length 6: the matcher accepts s as a sentence iff the
// regex matches it, and accepts s as a prefix iff some string up to length 9
// extending it matches (each of these languages completes within 3 characters).
TEST(Matcher, AgreesWithStdRegexOnAllShortStrings) {
  const RegexCase cases[] = {
      {R"(root ::= ("ab" | "a")* "c"?)", "(ab|a)*c?", "abc"},
      {R"(root ::= [a-b]{2,3} ("c" | "ca")+)", "[ab]{2,3}(c|ca)+", "abc"},
      {R"(root ::= x | y
x ::= "a" x | "c"
y ::= "b"+ "a"?)", "a*c|b+a?", "abc"},
      {R"(root ::= [^a]* "a" [^a]*)", "[^a]*a[^a]*", "abc"},
      {R"(root ::= ("a" | "b" | "ab")* "c" ("b"? "a"){0,2})", "(a|b|ab)*c(b?a){0,2}", "abc"},
  };
  for (const RegexCase& c : cases) {
    SCOPED_TRACE(c.gbnf);
    auto g = Grammar::from_gbnf(c.gbnf);
    std::regex re(c.regex);
    std::set<std::string> sentences;
    for (const std::string& s : all_strings(c.alphabet, 9))
      if (std::regex_match(s, re)) sentences.insert(s);
    for (const std::string& s : all_strings(c.alphabet, 6)) {
      bool prefix = false;
      for (auto it = sentences.lower_bound(s); it != sentences.end() && it->compare(0, s.size(), s) == 0; ++it) {
        prefix = true;
        break;
      }
      Matcher m(g, byte_vocab());
      bool ok = m.accept_bytes(s);
      ASSERT_EQ(ok, prefix) << "'" << s << "'";
      ASSERT_EQ(ok && m.is_accepting(), sentences.count(s) > 0) << "'" << s << "'";
    }
  }
}

TEST(Matcher, DyckWordsAgreeWithACounter) {
  auto g = Grammar::from_gbnf(R"g(root ::= "" | "(" root ")" root)g");
  for (const std::string& s : all_strings("()", 12)) {
    int depth = 0;
    bool prefix = true;
    for (char c : s) {
      depth += c == '(' ? 1 : -1;
      if (depth < 0) prefix = false;
    }
    Matcher m(g, byte_vocab());
    bool ok = m.accept_bytes(s);
    ASSERT_EQ(ok, prefix) << s;
    ASSERT_EQ(ok && m.is_accepting(), prefix && depth == 0) << s;
  }
}

TEST(Matcher, FailedAcceptLeavesTheStateUnchanged) {
  auto g = Grammar::from_gbnf(R"(root ::= "abc" | "abd")");
  Matcher m(g, byte_vocab());
  ASSERT_TRUE(m.accept_bytes("ab"));
  EXPECT_FALSE(m.accept_bytes("cx"));  // 'c' fits, 'x' does not: all or nothing
  EXPECT_TRUE(m.accept_bytes("d"));
  EXPECT_TRUE(m.is_accepting());
}

TEST(Matcher, Utf8SplitAcrossTokens) {
  // U+03B1..U+03C9 are CE B1..CF 89; "€" is E2 82 AC; 😀 is F0 9F 98 80.
  auto g = Grammar::from_gbnf(R"(root ::= [α-ω]+ "€" [^a]? "😀")");
  auto v = vocab_of({"\xCE", "\xB1", "\xCE\xB1", "\xCF\x89\xE2", "\x82\xAC", "\xF0\x9F", "\x98\x80", "a", "\xCF",
                     "\x8A", "\xE2\x82\xAC\xF0", ""},
                    {11});
  Matcher m(g, v);
  auto mask = mask_of(m);
  EXPECT_TRUE(bit(mask, 0));   // CE: may start α..ο
  EXPECT_FALSE(bit(mask, 1));  // a continuation byte cannot start
  EXPECT_TRUE(bit(mask, 2));   // α
  EXPECT_TRUE(bit(mask, 3));   // ω then the first byte of €
  EXPECT_TRUE(bit(mask, 8));   // CF: π..ω
  EXPECT_FALSE(bit(mask, 4));
  ASSERT_TRUE(m.accept_token(0));  // CE
  mask = mask_of(m);
  EXPECT_TRUE(bit(mask, 1));   // B1 completes α
  EXPECT_FALSE(bit(mask, 7));  // 'a' cannot follow a lead byte
  ASSERT_TRUE(m.accept_token(1));
  {
    Matcher c = m.clone();
    ASSERT_TRUE(c.accept_token(8));         // CF
    EXPECT_FALSE(c.accept_token(9));        // CF 8A is U+03CA, past ω
    EXPECT_FALSE(c.is_accepting());
  }
  ASSERT_TRUE(m.accept_token(3));  // ω E2
  ASSERT_TRUE(m.accept_token(4));  // 82 AC: €
  EXPECT_FALSE(m.clone().accept_token(7));  // [^a] rejects 'a'
  ASSERT_TRUE(m.accept_token(5));  // F0 9F: [^a] could be a 4-byte char or 😀 could begin
  ASSERT_TRUE(m.accept_token(6));  // 98 80
  EXPECT_TRUE(m.is_accepting());
  EXPECT_FALSE(m.is_terminated());  // that 😀 may have been [^a]: a second one may follow
  EXPECT_EQ(brute_force_mask(m), mask_of(m));
  ASSERT_TRUE(m.accept_token(5));
  ASSERT_TRUE(m.accept_token(6));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_EQ(brute_force_mask(m), mask_of(m));
}

TEST(Matcher, InvalidUtf8IsNeverAccepted) {
  auto g = Grammar::from_gbnf("root ::= .*");
  for (const char* bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF0\x80\x80\x80",
                          "\xF4\x90\x80\x80", "\xF5", "\xFF", "\xC3\x41"}) {
    Matcher m(g, byte_vocab());
    EXPECT_FALSE(m.accept_bytes(bad)) << testing::PrintToString(std::string(bad));
  }
  Matcher m(g, byte_vocab());
  EXPECT_TRUE(m.accept_bytes("\xED\x9F\xBF\xEE\x80\x80\xF4\x8F\xBF\xBF\xC2\x80"));  // edges of the valid ranges
  EXPECT_TRUE(m.accept_bytes("\xE0"));
  EXPECT_FALSE(m.is_accepting());  // mid-character
  auto mask = mask_of(m);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(bit(mask, b), b >= 0xA0 && b <= 0xBF) << b;  // E0 needs A0..BF
}

TEST(Matcher, EogOnlyWhenAcceptingAndTermination) {
  auto g = Grammar::from_gbnf(R"(root ::= "a" "b"?)");
  auto v = vocab_of({"a", "b", "<eos>", "ab", "", "<ctl>"}, {2}, {false, false, false, false, false, true});
  Matcher m(g, v);
  auto mask = mask_of(m);
  EXPECT_EQ(mask[0], 0b1001u);  // "a", "ab"; not EOG, not the empty piece, not the control token
  EXPECT_FALSE(m.accept_token(2));
  EXPECT_FALSE(m.accept_token(4));
  EXPECT_FALSE(m.accept_token(5));
  EXPECT_FALSE(m.is_accepting());
  ASSERT_TRUE(m.accept_token(0));
  EXPECT_TRUE(m.is_accepting());
  EXPECT_FALSE(m.is_terminated());  // "b" may still come
  EXPECT_EQ(mask_of(m)[0], 0b0110u);
  ASSERT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_EQ(mask_of(m)[0], 0b0100u);  // only EOG
  ASSERT_TRUE(m.accept_token(2));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token(0));
  m.reset();
  EXPECT_FALSE(m.is_accepting());
  EXPECT_TRUE(m.accept_token(3));
}

TEST(Matcher, MaskLogitsSetsDisallowedToMinusInfinity) {
  auto g = Grammar::from_gbnf(R"(root ::= "b")");
  Matcher m(g, vocab_of({"a", "b", "c"}));
  std::vector<float> logits{1, 2, 3, 4, 5};  // two ids past the vocabulary
  m.mask_logits(logits);
  EXPECT_TRUE(std::isinf(logits[0]) && logits[0] < 0);
  EXPECT_EQ(logits[1], 2.0f);
  for (int i : {2, 3, 4}) EXPECT_TRUE(std::isinf(logits[i]) && logits[i] < 0) << i;
}

TEST(Matcher, AmbiguityOverTheStackLimitRejectsInsteadOfGrowing) {
  GrammarLimits limits;
  limits.max_stacks = 8;
  // After n a's, "x{n}" alternatives are distinct stacks: more than 8 is over the limit.
  auto g = Grammar::from_gbnf(R"(root ::= ("a" [a-z]{0,20})* "!")", "root", limits);
  Matcher m(g, byte_vocab());
  bool rejected = false;
  for (int i = 0; i < 40 && !rejected; ++i) rejected = !m.accept_bytes("a");
  EXPECT_TRUE(rejected);
}

// Random small vocabularies (ASCII, multi-byte characters, lone UTF-8 pieces,
// duplicate pieces) against several grammars: at each step of a random walk the
// mask equals brute force, and the cached mask equals the cold one.
TEST(Matcher, MasksEqualBruteForceOnRandomVocabularies) {
  const char* grammars[] = {
      R"(root ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair ::= str ws ":" ws ( str | num | root )
str ::= "\"" [^"\\]* "\""
num ::= "-"? [0-9]+ ( "." [0-9]+ )?
ws ::= [ ]?)",
      R"(root ::= ( [α-ω] | "ab" | [^a-zα-ω] )* "z")",
      R"g(root ::= "" | "(" root ")" root)g",
      R"(root ::= ( "é" | "e" | "€" ){1,4} "😀"?)",
  };
  const std::vector<std::string> atoms = {"a", "b", "e", "z", "{", "}", "\"", ":", ",", " ", "-", "1", "0",
                                          ".", "(", ")", "\\", "\xCE\xB1", "\xCF\x89", "\xC3\xA9", "\xE2\x82\xAC",
                                          "\xF0\x9F\x98\x80", "\xCE", "\xB1", "\xE2", "\x82", "\xAC", "\xF0\x9F"};
  std::mt19937 rng(42);
  for (const char* gbnf : grammars) {
    SCOPED_TRACE(gbnf);
    GrammarLimits cold_limits;
    cold_limits.mask_cache_bytes = 0;
    auto cached = Grammar::from_gbnf(gbnf);
    auto cold = Grammar::from_gbnf(gbnf, "root", cold_limits);
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<std::string> pieces;
      for (int i = 0; i < 300; ++i) {
        std::string p;
        int len = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < len; ++k) p += atoms[rng() % atoms.size()];
        pieces.push_back(p);
      }
      for (const auto& a : atoms) pieces.push_back(a);
      pieces.push_back(pieces[5]);  // a duplicate piece
      pieces.push_back("");         // EOG
      auto v = vocab_of(pieces, {static_cast<int32_t>(pieces.size() - 1)});
      Matcher m(cached, v), mc(cold, v);
      for (int step = 0; step < 25; ++step) {
        auto want = brute_force_mask(m);
        auto got = mask_of(m);
        ASSERT_EQ(got, want) << "step " << step << ": " << first_difference(got, want, *v);
        ASSERT_EQ(mask_of(mc), want) << "cold, step " << step;
        ASSERT_EQ(mask_of(m), want) << "second (cached) call, step " << step;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < v->size(); ++id)
          if (bit(want, id)) allowed.push_back(id);
        if (allowed.empty()) break;
        int32_t id = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.accept_token(id));
        ASSERT_TRUE(mc.accept_token(id));
        if (m.is_terminated()) break;
      }
    }
    EXPECT_GT(cached->impl().mask_cache.hits(), 0u);
  }
}

// Stacks that remember the whole prefix give a distinct state per trie node: past
// the walk's memo cap the masks must stay exact.
TEST(Matcher, PrefixRememberingGrammarMasksStayExact) {
  auto g = Grammar::from_gbnf(R"(root ::= "a" root "a" | "b" root "b" | "c" root "c" | "d" root "d" | "|")");
  std::vector<std::string> pieces;
  const std::string abc = "abcd";
  for (int len = 1; len <= 6; ++len) {  // every string over abcd up to 6 long: 5460 pieces
    for (int code = 0; code < (1 << (2 * len)); ++code) {
      std::string p;
      for (int k = 0; k < len; ++k) p += abc[(code >> (2 * k)) & 3];
      pieces.push_back(p);
    }
  }
  pieces.push_back("|");
  pieces.push_back("|b");
  pieces.push_back("|dcb");
  auto v = vocab_of(pieces);
  Matcher m(g, v);
  ASSERT_TRUE(m.accept_bytes("abcd"));
  auto got = mask_of(m);
  auto want = brute_force_mask(m);
  EXPECT_EQ(got, want) << first_difference(got, want, *v);
  const int32_t n = static_cast<int32_t>(pieces.size());
  EXPECT_FALSE(bit(got, n - 2));  // "|b" after "abcd": the mirror must start with d
  EXPECT_TRUE(bit(got, n - 1));   // "|dcb"
}

// Byte-level BPE pieces (GPT-2's printable stand-ins mapped back to bytes).
std::vector<std::string> load_byte_level_pieces(const std::string& path, std::vector<int32_t>& special) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  // GPT-2's table: printable bytes stand for themselves, the others are U+0100 + k.
  std::vector<int> byte_of_cp(0x200, -1);
  int k = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    byte_of_cp[printable ? b : 0x100 + k++] = b;
  }
  std::vector<std::string> pieces;
  auto put = [&](int id, const std::string& s) {
    if (id >= static_cast<int>(pieces.size())) pieces.resize(id + 1);
    pieces[id] = s;
  };
  for (auto& [text, id] : j["model"]["vocab"].items()) {
    std::string bytes;
    for (size_t i = 0; i < text.size();) {
      unsigned char c = text[i];
      int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
      uint32_t cp = len == 1 ? c : c & (0x7F >> len);
      for (int t = 1; t < len; ++t) cp = (cp << 6) | (text[i + t] & 0x3F);
      i += len;
      bytes += static_cast<char>(cp < byte_of_cp.size() && byte_of_cp[cp] >= 0 ? byte_of_cp[cp] : '?');
    }
    put(id.get<int>(), bytes);
  }
  for (const auto& t : j["added_tokens"]) {
    put(t["id"].get<int>(), t["content"].get<std::string>());
    special.push_back(t["id"].get<int>());
  }
  return pieces;
}

TEST(Matcher, MasksEqualBruteForceOnLlama3Vocabulary) {
  const std::string path = std::string(PAGODA_SHARED_DIR) + "/models/llama3-tokenizer/tokenizer.json";
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " missing";
  }
  std::vector<int32_t> special;
  auto pieces = load_byte_level_pieces(path, special);
  std::vector<bool> disallowed(pieces.size(), false);
  std::vector<int32_t> eog;
  for (int32_t id : special) {
    if (pieces[id] == "<|eot_id|>" || pieces[id] == "<|end_of_text|>") eog.push_back(id);
    else disallowed[id] = true;
  }
  auto v = vocab_of(pieces, eog, disallowed);
  ASSERT_GT(v->size(), 128000);
  auto g = Grammar::from_gbnf(R"(root ::= "{" ws "\"name\":" ws str "," ws "\"tags\":" ws "[" ws ( str ( "," ws str )* )? "]" ws "}"
str ::= "\"" ( [^"\\\x00-\x1F] | "\\" ["\\nt] )* "\""
ws ::= [ \n]{0,4})");
  Matcher m(g, v);
  // Walk a document byte by byte, checking the mask at a few states on the way.
  const std::string doc = "{ \"name\": \"Zoë \\\"Z\\\" 数学\", \"tags\": [\"a\",\n \"b\"]}";
  for (size_t i = 0; i <= doc.size(); ++i) {
    if (i % 7 == 0 || i == doc.size() || i == 14 /* inside ë */ || i == 23 /* inside 数 */) {
      auto got = mask_of(m);
      auto want = brute_force_mask(m);
      ASSERT_EQ(got, want) << "after '" << doc.substr(0, i) << "': " << first_difference(got, want, *v);
    }
    if (i < doc.size()) {
      ASSERT_TRUE(m.accept_bytes(doc.substr(i, 1))) << i;
    }
  }
  EXPECT_TRUE(m.is_terminated());
  EXPECT_TRUE(m.accept_token(eog[0]));
}

}  // namespace
}  // namespace pagoda::grammar
