// The languages of the generated grammars, checked against independent references:
// - documents sampled at random through the Matcher (a toy vocabulary of all 256 bytes
//   and a few hundred multi-byte pieces) must each be valid JSON for the schema by
//   Python's jsonschema (tests/grammar/json_schema_check.py, Debian's /usr/bin/python3);
// - hand-written valid documents are accepted and invalid ones (missing required key,
//   extra key, out-of-range integer, too-long string, pattern mismatch...) rejected,
//   and the checker agrees with each verdict, so the test data is checked too;
// - regexes: acceptance equals Python's re.fullmatch on random strings, and sampled
//   texts fully match;
// - integer and number ranges: every value near the bounds, against arithmetic.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace pagoda::grammar {
namespace {

using ojson = nlohmann::ordered_json;

const char* kPython = "/usr/bin/python3";

bool python_ready() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import jsonschema' >/dev/null 2>&1") == 0;
  return ok;
}

std::string checker_path() { return std::string(PAGODA_SOURCE_DIR) + "/tests/grammar/json_schema_check.py"; }

std::filesystem::path temp_path(const std::string& stem) {
  static int counter = 0;
  return std::filesystem::temp_directory_path() /
         ("pagoda_jsv_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" + stem);
}

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

// One python run over many texts: returns its output lines, one per text.
std::vector<std::string> run_checker(const std::string& mode, const std::string& spec,
                                     const std::vector<std::string>& texts) {
  const auto spec_file = temp_path("spec"), samples_file = temp_path("samples");
  std::ofstream(spec_file) << spec;
  {
    std::ofstream out(samples_file);
    for (const std::string& t : texts) out << hex(t) << "\n";
  }
  const std::string cmd = std::string(kPython) + " " + checker_path() + " " + mode + " " + spec_file.string() + " " +
                          samples_file.string();
  std::vector<std::string> lines;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::string cur;
    while (fgets(buf, sizeof buf, p)) {
      cur += buf;
      if (!cur.empty() && cur.back() == '\n') {
        cur.pop_back();
        lines.push_back(cur);
        cur.clear();
      }
    }
    pclose(p);
  }
  std::filesystem::remove(spec_file);
  std::filesystem::remove(samples_file);
  return lines;
}

// Toy vocabulary: ids 0..255 are the single bytes, then multi-byte pieces, then EOG
// (the last id, empty piece).
std::vector<std::string> toy_pieces() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  const std::vector<std::string> multi = {
      "{\"", "\":", "\": ", ", \"", ",\"", "\",", "\"}", "\"]", "}}", "]}", "[]", "{}", "[\"", "[{", "},", "],",
      "true", "false", "null", "tru", "nul", "\n", "\n  ", "\n    ", "  ", "\": \"", "\":\"", "\"\"",
      "name", "age", "tags", "id", "next", "value", "kind", "email", "date", "when", "at", "child", "items",
      "hello", " world", "abc", "xyz", "foo", "bar", "Alice", "Bob", "red", "green", "blue", "cat", "dog",
      "\\n", "\\\"", "\\\\", "\\u00e9", "\\ud83d\\ude00", "\\u", "é", "日本", "😀", "ñ",
      "2024", "-01", "-02-", "-29", "-12-31", "T", "T12:", "12:", ":00", ":59", ".5", ".123", "Z", "+01:00", "-05:30",
      "1900", "2000", "0000", "9999", "-31", "-30", "ab", ".x", "AB-", "-123",
      "@", ".com", "user", "example",
      "550e8400", "-e29b", "-41d4", "-a716", "-446655440000", "ABCD", "abcd", "ef",
      "-1", "-", "1e5", "e-3", "E+2", "0.", "1.", ".0", "00",
  };
  for (const std::string& m : multi) pieces.push_back(m);
  for (int i = 0; i < 100; ++i) pieces.push_back(std::to_string(i));
  for (int i = 100; i < 1000; i += 37) pieces.push_back(std::to_string(i));
  pieces.push_back("");  // EOG
  return pieces;
}

struct Sampler {
  std::shared_ptr<const TokenVocabulary> vocab;
  int32_t eog = 0;
  std::vector<std::string> pieces;

  Sampler() : pieces(toy_pieces()) {
    eog = static_cast<int32_t>(pieces.size() - 1);
    vocab = std::make_shared<TokenVocabulary>(pieces, std::vector<int32_t>{eog});
  }

  // A random document of the grammar, or "" (with *finished false) when it hit the cap.
  // Biased to finish: EOG is taken with probability 0.35 once allowed (always after
  // soft_cap tokens), and past soft_cap a closing piece ('"', '}', ']') is preferred.
  std::string sample(const std::shared_ptr<const Grammar>& g, std::mt19937& rng, bool* finished) {
    const std::vector<std::string>& piece_text = pieces;
    Matcher m(g, vocab);
    const int n = vocab->size();
    std::vector<uint32_t> mask((n + 31) / 32);
    std::string text;
    constexpr int kSoftCap = 60, kHardCap = 600;
    for (int step = 0; step < kHardCap; ++step) {
      m.fill_next_token_bitmask(mask);
      std::vector<int32_t> allowed, closers;
      bool eog_ok = false;
      for (int32_t id = 0; id < n; ++id) {
        if (!((mask[id / 32] >> (id % 32)) & 1)) continue;
        if (id == eog) {
          eog_ok = true;
          continue;
        }
        allowed.push_back(id);
        const std::string& p = piece_text[id];
        if (p == "\"" || p == "}" || p == "]" || p == "\"}" || p == "\"]" || p == "}}" || p == "]}") closers.push_back(id);
      }
      std::uniform_real_distribution<double> u(0, 1);
      if (eog_ok && (allowed.empty() || step >= kSoftCap || u(rng) < 0.35)) {
        EXPECT_TRUE(m.accept_token(eog));
        *finished = true;
        return text;
      }
      if (allowed.empty()) {
        ADD_FAILURE() << "dead end after '" << text << "'";
        break;
      }
      const std::vector<int32_t>& pool = step >= kSoftCap && !closers.empty() && u(rng) < 0.7 ? closers : allowed;
      const int32_t id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
      if (!m.accept_token(id)) {
        ADD_FAILURE() << "a token the mask allowed was refused: '" << piece_text[id] << "' after '" << text << "'";
        break;
      }
      text += piece_text[id];
    }
    *finished = false;
    return "";
  }
};

struct Case {
  const char* name;
  const char* schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
  // Valid, but outside what the grammar generates by design (keys out of schema
  // order, duplicate keys): python accepts, the grammar refuses.
  std::vector<std::string> outside = {};
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"nested objects",
       R"({"type":"object","properties":{"name":{"type":"string"},"child":{"type":"object",
           "properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},
           "required":["id"],"additionalProperties":false}},"required":["name","child"],"additionalProperties":false})",
       {R"({"name":"a","child":{"id":1}})", "{\n  \"name\": \"x\",\n  \"child\": {\"id\": -5, \"tags\": [\"a\", \"b\"]}\n}"},
       {R"({"name":"a"})", R"({"name":"a","child":{"id":1},"x":1})", R"({"name":"a","child":{"id":1.5}})"},
       {R"({"child":{"id":1},"name":"a"})"}},
      {"optional properties",
       R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},"c":{"type":"integer"},
           "d":{"type":"string"}},"required":["c"],"additionalProperties":false})",
       {R"({"c":1})", R"({"a":true,"c":0,"d":""})", R"({"a":false,"b":null,"c":3,"d":"x"})", R"({"b":null,"c":2})"},
       {R"({})", R"({"a":true})", R"({"c":1,"e":2})"},
       {R"({"c":1,"c":2})"}},
      {"additional properties",
       R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
       {R"({})", R"({"id":3,"x":"y"})", R"({"ide":"s","i":"t"})"},
       {R"({"id":"3"})", R"({"x":1})", R"({"id":1,"id":"s"})"}},
      {"arrays with bounds",
       R"({"type":"array","items":{"type":"integer","minimum":0,"maximum":9},"minItems":2,"maxItems":4})",
       {"[1,2]", "[0, 9, 5, 5]", "[ 1 ,2 ]"},
       {"[1]", "[1,2,3,4,5]", "[1,10]", "[-1,2]", "[]"}},
      {"prefix items",
       R"({"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":{"type":"null"},"maxItems":4})",
       {"[]", "[\"a\"]", "[\"a\",true]", "[\"a\",false,null,null]"},
       {"[true]", "[\"a\",true,1]", "[\"a\",true,null,null,null]"}},
      {"enums",
       R"({"type":"object","properties":{"kind":{"enum":["red","green","blue",1,null,{"k":[1]}]},
           "c":{"const":"fixed"}},"required":["kind","c"],"additionalProperties":false})",
       {R"({"kind":"red","c":"fixed"})", R"({"kind":1,"c":"fixed"})", R"({"kind":{"k":[1]},"c":"fixed"})"},
       {R"({"kind":"redd","c":"fixed"})", R"({"kind":"red","c":"x"})", R"({"kind":2,"c":"fixed"})"}},
      {"anyOf",
       R"({"anyOf":[{"type":"integer","minimum":10},{"type":"string","maxLength":3},
           {"type":"array","items":{"type":"boolean"},"maxItems":2}]})",
       {"10", "\"abc\"", "[true,false]", "12345"},
       {"9", "\"abcd\"", "[true,true,true]", "null"}},
      {"recursive ref",
       R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
           "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["value","next"],
           "additionalProperties":false}}})",
       {R"({"value":1,"next":null})", R"({"value":1,"next":{"value":2,"next":null}})"},
       {R"({"value":1})", R"({"value":1,"next":{"value":2}})"}},
      {"patterns",
       R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}$"},
           "free":{"type":"string","pattern":"ab|\\.x"}},"required":["code","free"],"additionalProperties":false})",
       {R"({"code":"AB-123","free":"zzabzz"})", R"({"code":"XY-1234","free":".x"})"},
       {R"({"code":"AB-12","free":"ab"})", R"({"code":"ab-123","free":"ab"})", R"({"code":"AB-123","free":"a b"})"}},
      {"integer bounds",
       R"({"type":"object","properties":{"a":{"type":"integer","minimum":-37,"maximum":1205},
           "b":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":100},
           "c":{"type":"number","minimum":-2,"exclusiveMaximum":3}},"required":["a","b","c"],"additionalProperties":false})",
       {R"({"a":-37,"b":1,"c":-2})", R"({"a":1205,"b":99,"c":2.999})", R"({"a":0,"b":50,"c":-1.5})"},
       {R"({"a":-38,"b":1,"c":0})", R"({"a":1206,"b":1,"c":0})", R"({"a":0,"b":0,"c":0})", R"({"a":0,"b":100,"c":0})",
        R"({"a":0,"b":1,"c":3})", R"({"a":0,"b":1,"c":-2.5})", R"({"a":01,"b":1,"c":0})"}},
      {"string lengths",
       R"({"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":4}},"required":["s"],
           "additionalProperties":false})",
       {R"({"s":"ab"})", R"({"s":"abcd"})", R"({"s":"日本語"})", R"({"s":"a\n"})", R"({"s":"\u00e9\u00e9"})"},
       {R"({"s":"a"})", R"({"s":"abcde"})", R"({"s":"日本語日本"})"}},
      {"formats",
       R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"t":{"type":"string","format":"time"},
           "dt":{"type":"string","format":"date-time"},"u":{"type":"string","format":"uuid"},
           "e":{"type":"string","format":"email"}},"required":["d","t","dt","u","e"],"additionalProperties":false})",
       {R"({"d":"2024-02-29","t":"12:00:00Z","dt":"2000-02-29T23:59:59.5+01:00",
            "u":"550e8400-e29b-41d4-a716-446655440000","e":"user@example.com"})"},
       {R"({"d":"2023-02-29","t":"12:00:00Z","dt":"2000-02-29T23:59:59Z","u":"550e8400-e29b-41d4-a716-446655440000","e":"a@b.c"})",
        R"({"d":"1900-02-29","t":"12:00:00Z","dt":"2000-02-29T23:59:59Z","u":"550e8400-e29b-41d4-a716-446655440000","e":"a@b.c"})",
        R"({"d":"2024-04-31","t":"12:00:00Z","dt":"2000-02-29T23:59:59Z","u":"550e8400-e29b-41d4-a716-446655440000","e":"a@b.c"})",
        R"({"d":"2024-01-01","t":"24:00:00Z","dt":"2000-02-29T23:59:59Z","u":"550e8400-e29b-41d4-a716-446655440000","e":"a@b.c"})",
        R"({"d":"2024-01-01","t":"12:00:00Z","dt":"2000-02-29T23:59:59Z","u":"550e8400e29b-41d4-a716-446655440000","e":"a@b.c"})"}},
      {"type lists and nullable",
       R"({"type":"object","properties":{"v":{"type":["integer","null"]},"w":{"type":["string","boolean"]}},
           "additionalProperties":false})",
       {R"({"v":null})", R"({"v":3,"w":true})", R"({"w":"s"})"},
       {R"({"v":"3"})", R"({"w":null})", R"({"v":1.5})"}},
      {"any object",
       R"({"type":"object"})",
       {R"({})", R"({"a":[1,{"b":null}],"c":"d"})"},
       {"[]", "1", R"({"a":})"}},
      {"tree via definitions",
       R"({"definitions":{"t":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/definitions/t"},
           "maxItems":2},"name":{"type":"string","maxLength":5}},"additionalProperties":false}},"$ref":"#/definitions/t"})",
       {R"({})", R"({"kids":[{"kids":[{}]},{"name":"x"}]})"},
       {R"({"kids":[{},{},{}]})", R"({"kids":[{"name":"toolong"}]})"}},
  };
  return c;
}

class JsonSchemaValidity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!python_ready()) GTEST_SKIP() << "/usr/bin/python3 with jsonschema is missing (scripts/install-deps.sh)";
  }
};

TEST_F(JsonSchemaValidity, HandWrittenDocumentsAcceptedAndRejected) {
  Sampler s;
  for (const Case& c : cases()) {
    const std::string gbnf = json_schema_to_gbnf(ojson::parse(c.schema));
    const auto g = Grammar::from_gbnf(gbnf);
    std::vector<std::string> all = c.valid;
    all.insert(all.end(), c.invalid.begin(), c.invalid.end());
    all.insert(all.end(), c.outside.begin(), c.outside.end());
    const std::vector<std::string> verdicts = run_checker("schema", c.schema, all);
    ASSERT_EQ(verdicts.size(), all.size()) << c.name;
    for (size_t i = 0; i < all.size(); ++i) {
      const bool expect_valid = i < c.valid.size();
      const bool outside = i >= c.valid.size() + c.invalid.size();
      // The reference agrees with the test data...
      EXPECT_EQ(verdicts[i] == "ok", expect_valid || outside)
          << c.name << ": python says " << verdicts[i] << " for " << all[i];
      // ...and so does the grammar.
      Matcher m(g, s.vocab);
      const bool accepted = m.accept_bytes(all[i]) && m.is_accepting();
      EXPECT_EQ(accepted, expect_valid) << c.name << ": " << all[i] << "\n" << gbnf;
    }
  }
}

TEST_F(JsonSchemaValidity, SampledDocumentsAreValid) {
  Sampler s;
  for (const Case& c : cases()) {
    const auto g = Grammar::from_gbnf(json_schema_to_gbnf(ojson::parse(c.schema)));
    std::vector<std::string> samples;
    int unfinished = 0;
    constexpr int kSamples = 150;
    for (int seed = 0; seed < kSamples; ++seed) {
      std::mt19937 rng(seed * 7919 + 17);
      bool finished = false;
      std::string t = s.sample(g, rng, &finished);
      if (finished) samples.push_back(t);
      else ++unfinished;
    }
    EXPECT_LE(unfinished, kSamples / 5) << c.name << ": too many samples hit the step cap";
    std::set<std::string> distinct(samples.begin(), samples.end());
    EXPECT_GE(distinct.size(), std::min<size_t>(samples.size(), 20)) << c.name << ": the sampler barely explores";
    const std::vector<std::string> verdicts = run_checker("schema", c.schema, samples);
    ASSERT_EQ(verdicts.size(), samples.size()) << c.name;
    int bad = 0;
    for (size_t i = 0; i < samples.size(); ++i)
      if (verdicts[i] != "ok" && bad++ < 5)
        ADD_FAILURE() << c.name << ": generated " << samples[i] << "\n  python: " << verdicts[i];
  }
}

// ---- regex

const std::vector<std::string>& regexes() {
  static const std::vector<std::string> r = {
      "^(\\d{3}-)?[a-z]+\\.(com|org)$", "a*b+c?", "(ab|cd)*e{2,3}", "[^a-c]x.y", "\\w+\\s\\W", "(a|)+b",
      "[a-c-]{1,3}(?:z|zz)?", "x{2}|y{,2}", "\\S\\D\\d", "((a*)*b)?c", "[\\]\\\\]+",
  };
  return r;
}

TEST_F(JsonSchemaValidity, RegexAcceptanceEqualsPythonFullmatch) {
  Sampler s;
  std::mt19937 rng(12345);
  for (const std::string& pattern : regexes()) {
    const auto g = Grammar::from_gbnf(regex_to_gbnf(pattern));
    // Alphabet: the pattern's own characters plus a few others, ASCII only (see
    // regex_to_gbnf.cpp: non-ASCII differs from Python only for \d \w \s on purpose).
    std::string alphabet = pattern + "aZ09_-. \n\t\\]x";
    std::vector<std::string> texts;
    for (int i = 0; i < 600; ++i) {
      const int len = std::uniform_int_distribution<int>(0, 9)(rng);
      std::string t;
      for (int k = 0; k < len; ++k) t += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
      texts.push_back(t);
    }
    const std::vector<std::string> verdicts = run_checker("regex", pattern, texts);
    ASSERT_EQ(verdicts.size(), texts.size()) << pattern;
    int bad = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      Matcher m(g, s.vocab);
      const bool accepted = m.accept_bytes(texts[i]) && m.is_accepting();
      if (accepted != (verdicts[i] == "1") && bad++ < 5)
        ADD_FAILURE() << "/" << pattern << "/ on '" << texts[i] << "': grammar " << accepted << ", python " << verdicts[i];
    }
  }
}

TEST_F(JsonSchemaValidity, RegexSamplesFullyMatch) {
  Sampler s;
  for (const std::string& pattern : regexes()) {
    const auto g = Grammar::from_gbnf(regex_to_gbnf(pattern));
    std::vector<std::string> samples;
    for (int seed = 0; seed < 100; ++seed) {
      std::mt19937 rng(seed);
      bool finished = false;
      std::string t = s.sample(g, rng, &finished);
      if (finished) samples.push_back(t);
    }
    const std::vector<std::string> verdicts = run_checker("regex", pattern, samples);
    ASSERT_EQ(verdicts.size(), samples.size());
    for (size_t i = 0; i < samples.size(); ++i) EXPECT_EQ(verdicts[i], "1") << "/" << pattern << "/ generated '" << samples[i] << "'";
  }
}

// ---- digit ranges, against arithmetic

bool accepts(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenVocabulary>& v,
             const std::string& text) {
  Matcher m(g, v);
  return m.accept_bytes(text) && m.is_accepting();
}

TEST(DigitRanges, IntegersNearEveryBound) {
  Sampler s;
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, 0}, {7, 7}, {-5, 5}, {-1000, -17}, {-37, 1205}, {99, 100}, {1, 999999}, {-123456, 42}, {19, 2001}};
  for (const auto& [lo, hi] : ranges) {
    ojson schema = {{"type", "integer"}, {"minimum", lo}, {"maximum", hi}};
    const auto g = Grammar::from_gbnf(json_schema_to_gbnf(schema));
    std::vector<int64_t> probes;
    for (int64_t d = -40; d <= 40; ++d) {
      probes.push_back(lo + d);
      probes.push_back(hi + d);
    }
    std::mt19937_64 rng(lo * 31 + hi);
    for (int i = 0; i < 300; ++i) probes.push_back(std::uniform_int_distribution<int64_t>(lo - 10, hi + 10)(rng));
    for (int64_t v : probes)
      EXPECT_EQ(accepts(g, s.vocab, std::to_string(v)), v >= lo && v <= hi) << v << " in [" << lo << ", " << hi << "]";
    EXPECT_FALSE(accepts(g, s.vocab, "-0"));
    EXPECT_FALSE(accepts(g, s.vocab, std::string("0").append(std::to_string(std::max<int64_t>(lo, 1)))));
  }
  // Exclusive bounds and one side open; 16-digit extremes.
  const auto g = Grammar::from_gbnf(json_schema_to_gbnf(ojson{{"type", "integer"}, {"exclusiveMinimum", -3}}));
  EXPECT_FALSE(accepts(g, s.vocab, "-3"));
  EXPECT_TRUE(accepts(g, s.vocab, "-2"));
  EXPECT_TRUE(accepts(g, s.vocab, "9999999999999999"));
  EXPECT_FALSE(accepts(g, s.vocab, "10000000000000000"));  // past the 16-digit cap
}

TEST(DigitRanges, DecimalsBetweenIntegerBounds) {
  Sampler s;
  struct R {
    int64_t lo;
    bool lo_excl;
    int64_t hi;
    bool hi_excl;
  };
  const std::vector<R> ranges = {{0, false, 1, false}, {0, true, 1, true}, {-3, false, 2, true},
                                 {-10, true, -2, false}, {5, false, 5, false}, {-1, true, 0, false}};
  for (const R& r : ranges) {
    ojson schema = {{"type", "number"},
                    {r.lo_excl ? "exclusiveMinimum" : "minimum", r.lo},
                    {r.hi_excl ? "exclusiveMaximum" : "maximum", r.hi}};
    const auto g = Grammar::from_gbnf(json_schema_to_gbnf(schema));
    for (int64_t units = (r.lo - 2) * 100; units <= (r.hi + 2) * 100; units += 7) {
      for (const int frac_digits : {0, 1, 2}) {
        if (frac_digits == 0 && units % 100 != 0) continue;
        char buf[64];
        const double v = units / 100.0;
        std::snprintf(buf, sizeof buf, "%.*f", frac_digits, v);
        if (std::abs(std::strtod(buf, nullptr) - v) > 1e-9) continue;  // not exactly representable at this width
        const bool in = (r.lo_excl ? v > r.lo : v >= r.lo) && (r.hi_excl ? v < r.hi : v <= r.hi);
        const std::string text = buf;
        if (text[0] == '-' && std::strtod(buf, nullptr) == 0) continue;  // "-0", "-0.00": not generated
        EXPECT_EQ(accepts(g, s.vocab, text), in) << text << " for " << schema.dump();
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::grammar
