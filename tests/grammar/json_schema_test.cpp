// JSON Schema / regex / choice -> GBNF: the text generated for representative schemas,
// every refused keyword named, malformed and hostile schemas. Each generated grammar is
// also compiled by Grammar::from_gbnf, so the dialect stays what the parser reads.
// (Whether the languages are right is json_schema_validity_test's job.)
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include "grammar/grammar.h"

namespace pagoda::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::string compile(const std::string& schema_text) {
  const std::string g = json_schema_to_gbnf(ojson::parse(schema_text));
  EXPECT_NO_THROW(Grammar::from_gbnf(g)) << g;
  return g;
}

// The body of rule `name` in g ("" when absent).
std::string rule(const std::string& g, const std::string& name) {
  const std::string head = name + " ::= ";
  size_t at = g.rfind("\n" + head);
  if (at == std::string::npos) {
    if (g.rfind(head, 0) != 0) return "";
    at = 0;
  } else {
    at += 1;
  }
  const size_t start = at + head.size();
  return g.substr(start, g.find('\n', start) - start);
}

UnsupportedSchema unsupported(const std::string& schema_text) {
  try {
    json_schema_to_gbnf(ojson::parse(schema_text));
  } catch (const UnsupportedSchema& e) {
    return e;
  }
  ADD_FAILURE() << "no UnsupportedSchema for " << schema_text;
  return UnsupportedSchema("");
}

TEST(GbnfQuote, EscapesQuotesBackslashesAndControlBytes) {
  EXPECT_EQ(gbnf_quote("a\"b\\c\n\r\t"), "\"a\\\"b\\\\c\\n\\r\\t\"");
  EXPECT_EQ(gbnf_quote(std::string("\x01\x7f", 2)), "\"\\x01\\x7F\"");
  EXPECT_EQ(gbnf_quote("é"), "\"é\"");             // valid UTF-8 stays as is
  EXPECT_EQ(gbnf_quote("\xff"), "\"\\xFF\"");      // a stray byte does not
}

TEST(JsonSchemaGbnf, RequiredAndOptionalPropertiesInSchemaOrder) {
  const std::string g = compile(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":10},
      "age":{"type":"integer","minimum":-20,"maximum":150}},
      "required":["name"],"additionalProperties":false})");
  EXPECT_EQ(g,
            "root ::= object\n"
            "ws ::= ([ \\t] | \"\\n\" [ \\t]{0,20})?\n"
            "hex ::= [0-9a-fA-F]\n"
            "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" (([0-9a-cA-Ce-fE-F] hex{3} | [dD] "
            "[0-7] hex{2}) | [dD] [89abAB] hex{2} \"\\\\u\" [dD] [c-fC-F] hex{2}))\n"
            "string ::= \"\\\"\" char{0,10} \"\\\"\"\n"
            "integer ::= (\"-\" ([1-9] | (\"1\" [0-9] | \"2\" \"0\")) | [0-9] | [1-9] [0-9] | \"1\" ([0-4] [0-9] | "
            "\"5\" \"0\"))\n"
            "obj-rest ::= (\",\" ws \"\\\"age\\\"\" ws \":\" ws integer ws)?\n"
            "obj ::= \"\\\"name\\\"\" ws \":\" ws string ws obj-rest\n"
            "object ::= \"{\" ws obj \"}\"\n");
}

TEST(JsonSchemaGbnf, PlainJsonKeepsKeyOrderSorted) {
  // nlohmann::json sorts keys; the ordered_json overload keeps the document's order.
  const auto text = R"({"type":"object","properties":{"b":{"type":"null"},"a":{"type":"null"}},
                        "required":["b","a"],"additionalProperties":false})";
  const std::string sorted = json_schema_to_gbnf(nlohmann::json::parse(text));
  const std::string ordered = json_schema_to_gbnf(ojson::parse(text));
  EXPECT_NE(rule(sorted, "obj").find("\"\\\"a\\\"\""), std::string::npos) << sorted;
  EXPECT_EQ(rule(ordered, "obj").find("\"\\\"a\\\"\""), std::string::npos) << ordered;
  EXPECT_NE(rule(ordered, "obj").find("\"\\\"b\\\"\""), std::string::npos) << ordered;
}

TEST(JsonSchemaGbnf, AllOptionalPropertiesCostLinearSpace) {
  // 300 optional properties: a naive expansion is 2^300 orderings; ours is one rule
  // pair per property.
  ojson props = ojson::object();
  for (int i = 0; i < 300; ++i) props[std::string("p").append(std::to_string(i))] = {{"type", "boolean"}};
  ojson schema = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
  const std::string g = json_schema_to_gbnf(schema);
  EXPECT_LT(g.size(), 300u * 200u);
  EXPECT_NO_THROW(Grammar::from_gbnf(g));
}

TEST(JsonSchemaGbnf, ExtraKeysExcludeDeclaredNames) {
  const std::string g = compile(R"({"type":"object","properties":{"ab":{"type":"null"}}})");
  // The extra key may not be "ab": the trie node after "ab" cannot close the string.
  EXPECT_NE(g.find("other-key ::= \"\\\"\" "), std::string::npos) << g;
  EXPECT_NE(g.find("more ::= (\",\" ws other-key ws \":\" ws value ws)*"), std::string::npos) << g;
}

TEST(JsonSchemaGbnf, AdditionalPropertiesSchemaTypesTheExtraValues) {
  const std::string g = compile(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_EQ(rule(g, "more"), "(\",\" ws string ws \":\" ws integer ws)*") << g;
}

TEST(JsonSchemaGbnf, EnumAndConstAreLiteralAlternatives) {
  const std::string g = compile(R"({"enum":["a\"b", 1, null, {"k":[true]}]})");
  EXPECT_EQ(rule(g, "enum"), "\"\\\"a\\\\\\\"b\\\"\" | \"1\" | \"null\" | \"{\\\"k\\\":[true]}\"") << g;
  EXPECT_EQ(rule(compile(R"({"const":"x"})"), "schema"), "\"\\\"x\\\"\"");
  // enum filtered by type.
  EXPECT_EQ(rule(compile(R"({"type":"string","enum":["a",1]})"), "schema"), "\"\\\"a\\\"\"");
}

TEST(JsonSchemaGbnf, TypeListsAndNullable) {
  const std::string g = compile(R"({"type":["string","null"]})");
  EXPECT_EQ(rule(g, "value"), "\"null\" | string") << g;
}

TEST(JsonSchemaGbnf, IntegerRangesAreDigitConstructions) {
  EXPECT_EQ(rule(compile(R"({"type":"integer","minimum":0,"maximum":9})"), "integer"), "[0-9]");
  EXPECT_EQ(rule(compile(R"({"type":"integer","exclusiveMinimum":99})"), "integer"),
            "[1-9] [0-9]{2,15}");
  EXPECT_EQ(rule(compile(R"({"type":"integer","minimum":-1000,"maximum":1})"), "integer"),
            "(\"-\" ([1-9] | [1-9] [0-9] | [1-9] [0-9]{2} | \"1000\") | [0-1])");
  EXPECT_EQ(rule(compile(R"({"type":"integer","minimum":-5,"exclusiveMaximum":0})"), "integer"),
            "\"-\" [1-5]");
}

TEST(JsonSchemaGbnf, NumberBoundsHaveNoExponent) {
  const std::string g = compile(R"({"type":"number","exclusiveMinimum":0,"maximum":10})");
  EXPECT_EQ(rule(g, "number"),
            "([1-9] (\".\" [0-9]{1,16})? | \"0\" \".\" \"0\"{0,15} [1-9] [0-9]{0,15} | \"10\" (\".\" \"0\"{1,16})?)");
}

TEST(JsonSchemaGbnf, ArraysWithBoundsAndPrefixItems) {
  std::string g = compile(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":3})");
  EXPECT_EQ(rule(g, "array"), "\"[\" ws (\"true\" | \"false\") ws item{0,2} \"]\"") << g;
  g = compile(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})");
  EXPECT_EQ(rule(g, "array"), "\"[\" ws (integer ws items)? \"]\"") << g;
  EXPECT_EQ(rule(g, "items"), "(\",\" ws string ws)?") << g;
  g = compile(R"({"type":"array","maxItems":0})");
  EXPECT_EQ(g, "root ::= array\nws ::= ([ \\t] | \"\\n\" [ \\t]{0,20})?\narray ::= \"[\" ws \"]\"\n");
}

TEST(JsonSchemaGbnf, StringLengthAndFormats) {
  std::string g = compile(R"({"type":"string","minLength":2,"maxLength":5})");
  EXPECT_EQ(rule(g, "string"), "\"\\\"\" char{2,5} \"\\\"\"");
  g = compile(R"({"type":"string","maxLength":100000})");
  EXPECT_NE(rule(g, "rep"), "") << g;  // blocks of 32, not 100000 nested options
  for (const char* f : {"date", "time", "date-time", "uuid", "email"}) {
    g = compile(std::string(R"({"type":"string","format":")") + f + "\"}");
    EXPECT_NE(rule(g, f), "") << g;
  }
  // A fixed-length format satisfies maxLength 36; a shorter bound cannot be combined.
  compile(R"({"type":"string","format":"uuid","maxLength":36})");
  EXPECT_EQ(unsupported(R"({"type":"string","format":"uuid","maxLength":10})").keyword, "maxLength");
}

TEST(JsonSchemaGbnf, PatternsAreSearchedUnlessAnchored) {
  std::string g = compile(R"({"type":"string","pattern":"^ab+$"})");
  EXPECT_EQ(rule(g, "pattern"), "\"a\" \"b\"+") << g;
  g = compile(R"({"type":"string","pattern":"ab"})");
  EXPECT_EQ(rule(g, "pattern"), "char* \"ab\" char*") << g;
  g = compile(R"({"type":"string","pattern":"^a\"\\\\$"})");
  EXPECT_EQ(rule(g, "pattern"), "\"a\\\\\\\"\\\\\\\\\"") << g;  // JSON-escaped inside the string
}

TEST(JsonSchemaGbnf, RecursiveRefsBecomeRules) {
  const std::string g = compile(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
      "properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
      "required":["v","next"],"additionalProperties":false}}})");
  EXPECT_EQ(rule(g, "root"), "node") << g;
  EXPECT_NE(rule(g, "alt").find("node"), std::string::npos) << g;
  // Self reference at the root, through definitions.
  compile(R"({"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#"}}}})");
  compile(R"({"definitions":{"a":{"type":"array","items":{"$ref":"#/definitions/a"}}},"$ref":"#/definitions/a"})");
}

TEST(JsonSchemaGbnf, LeftRecursiveRefsAreRefused) {
  const UnsupportedSchema e = unsupported(R"({"$ref":"#/$defs/a","$defs":{
      "a":{"anyOf":[{"$ref":"#/$defs/b"},{"type":"null"}]},"b":{"$ref":"#/$defs/a"}}})");
  EXPECT_EQ(e.keyword, "$ref") << e.what();
  EXPECT_EQ(unsupported(R"({"$ref":"#"})").keyword, "$ref");
}

TEST(JsonSchemaGbnf, AnyOfMergesSiblingKeywords) {
  const std::string g = compile(R"({"type":"object","required":["a"],
      "anyOf":[{"properties":{"a":{"type":"null"}},"additionalProperties":false},
               {"properties":{"a":{"type":"integer"},"b":{"type":"null"}},"additionalProperties":false}]})");
  EXPECT_EQ(rule(g, "alt"), "object | object-1") << g;
  // Sibling additionalProperties would see no properties from the branches: refused.
  EXPECT_EQ(unsupported(R"({"additionalProperties":false,"anyOf":[{"properties":{"a":{}}}]})").keyword,
            "additionalProperties");
  // allOf of one member is the member.
  compile(R"({"allOf":[{"type":"integer"}],"minimum":1})");
  EXPECT_EQ(unsupported(R"({"allOf":[{"type":"integer"},{"minimum":1}]})").keyword, "allOf");
}

TEST(JsonSchemaGbnf, AnnotationsAreIgnored) {
  compile(R"({"title":"t","description":"d","default":1,"examples":[1],"$schema":"x","$id":"y",
      "$comment":"c","deprecated":true,"readOnly":true,"writeOnly":false,"type":"integer"})");
}

TEST(JsonSchemaGbnf, EveryUnsupportedKeywordIsNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"not", "{}"},
      {"if", "{}"},
      {"then", "{}"},
      {"else", "{}"},
      {"patternProperties", R"({"a":{}})"},
      {"dependentRequired", R"({"a":["b"]})"},
      {"dependentSchemas", R"({"a":{}})"},
      {"dependencies", R"({"a":["b"]})"},
      {"uniqueItems", "true"},
      {"contains", "{}"},
      {"minContains", "1"},
      {"maxContains", "1"},
      {"multipleOf", "2"},
      {"minProperties", "1"},
      {"maxProperties", "1"},
      {"propertyNames", "{}"},
      {"unevaluatedProperties", "false"},
      {"unevaluatedItems", "false"},
      {"$dynamicRef", "\"#a\""},
  };
  for (const auto& [keyword, value] : cases) {
    const UnsupportedSchema top = unsupported("{\"" + keyword + "\":" + value + "}");
    EXPECT_EQ(top.keyword, keyword);
    EXPECT_EQ(top.path, "/" + keyword);
    EXPECT_NE(std::string(top.what()).find(keyword), std::string::npos) << top.what();
    const UnsupportedSchema nested =
        unsupported(R"({"type":"object","properties":{"a":{")" + keyword + "\":" + value + "}}}");
    EXPECT_EQ(nested.keyword, keyword);
    EXPECT_EQ(nested.path, "/properties/a/" + keyword);
  }
  const UnsupportedSchema f = unsupported(R"({"type":"string","format":"hostname"})");
  EXPECT_EQ(f.keyword, "format");
  EXPECT_NE(std::string(f.what()).find("hostname"), std::string::npos);
  EXPECT_EQ(unsupported(R"({"type":"number","minimum":0.5})").keyword, "minimum");
  EXPECT_EQ(unsupported(R"js({"type":"string","pattern":"(?=a)"})js").keyword, "pattern");
  EXPECT_EQ(unsupported(R"({"type":"string","pattern":"\\bx"})").keyword, "pattern");
  EXPECT_EQ(unsupported(R"({"type":"string","pattern":"^[a-z]+$","maxLength":4})").keyword, "maxLength");
  EXPECT_EQ(unsupported(R"({"$ref":"http://example.com/s.json"})").keyword, "$ref");
  EXPECT_EQ(unsupported(R"({"type":"string","maxLength":10000000})").keyword, "maxLength");
  EXPECT_EQ(unsupported(R"({"enum":["a"],"minLength":3})").keyword, "minLength");
}

TEST(JsonSchemaGbnf, BadSchemasThrowWithAClearMessage) {
  for (const char* text : {"5", "\"string\"", "[1]", "null"})
    EXPECT_THROW(json_schema_to_gbnf(ojson::parse(text)), std::invalid_argument) << text;
  EXPECT_THROW(compile(R"({"type":"strnig"})"), std::invalid_argument);
  EXPECT_THROW(compile(R"({"type":"object","properties":3})"), std::invalid_argument);
  EXPECT_THROW(compile(R"({"type":"object","required":"a"})"), std::invalid_argument);
  EXPECT_THROW(compile(R"({"type":"string","minLength":-1})"), std::invalid_argument);
  EXPECT_THROW(compile(R"({"$ref":"#/$defs/missing"})"), std::invalid_argument);
  EXPECT_THROW(compile(R"({"type":"object","properties":{"a":7}})"), std::invalid_argument);
  // Schemas no value satisfies.
  EXPECT_THROW(compile("false"), UnsupportedSchema);
  EXPECT_THROW(compile(R"({"type":"integer","minimum":5,"maximum":4})"), UnsupportedSchema);
  EXPECT_THROW(compile(R"({"type":"object","properties":{"a":false},"required":["a"]})"), UnsupportedSchema);
  EXPECT_THROW(compile(R"({"type":"string","enum":[1,2]})"), UnsupportedSchema);
  try {
    compile(R"({"type":"object","properties":{"x":{"type":"integer","minimum":3,"maximum":1}}})");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "an optional property no value fits is left out, not an error: " << e.what();
  }
}

// Whitespace between two tokens is bounded as llama.cpp bounds it: one blank, or one
// newline and at most 20 blanks (21 bytes); never two whitespace runs back to back.
TEST(JsonSchemaGbnf, WhitespaceBetweenTokensIsAtMostANewlineAndTwentyBlanks) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  pieces.push_back("");
  const auto vocab = std::make_shared<TokenVocabulary>(std::move(pieces), std::vector<int32_t>{256});
  const auto schema = ojson::parse(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})");
  for (const std::string& gbnf : {json_schema_to_gbnf(schema), json_schema_to_gbnf(ojson::parse("true"))}) {
    auto accepts = [&](const std::string& text) {
      Matcher m(Grammar::from_gbnf(gbnf), vocab);
      return m.accept_bytes(text) && m.is_accepting();
    };
    const std::string pad20 = "\n" + std::string(20, ' '), pad21 = "\n" + std::string(21, ' ');
    EXPECT_TRUE(accepts("{" + pad20 + "\"a\": [1," + pad20 + "2\t]" + pad20 + "}"));
    EXPECT_FALSE(accepts("{" + pad21 + "\"a\": [1, 2]}"));
    EXPECT_FALSE(accepts("{\"a\": [1," + pad21 + "2]}"));
    EXPECT_FALSE(accepts("{\"a\":  [1]}")) << "two blanks";
    EXPECT_FALSE(accepts("{\"a\": [1]\n\n}")) << "two newlines";
  }
}

TEST(JsonSchemaGbnf, NestingDepthIsBounded) {
  auto nested = [](int levels) {
    ojson s = {{"type", "integer"}};
    for (int i = 0; i < levels; ++i) {
      ojson outer = {{"type", "array"}, {"items", nullptr}};
      outer["items"] = std::move(s);
      s = std::move(outer);
    }
    return s;
  };
  EXPECT_NO_THROW(json_schema_to_gbnf(nested(60)));
  EXPECT_THROW(json_schema_to_gbnf(nested(70)), UnsupportedSchema);
  // Hostile: 5000 levels must fail cleanly, not overflow the stack.
  EXPECT_THROW(json_schema_to_gbnf(nested(5000)), UnsupportedSchema);
  // A long chain of distinct $refs is a work list, not recursion.
  ojson defs = ojson::object();
  for (int i = 0; i < 2000; ++i)
    defs[std::string("d").append(std::to_string(i))] =
        i == 1999 ? ojson{{"type", "null"}}
                  : ojson{{"type", "array"}, {"items", {{"$ref", "#/$defs/d" + std::to_string(i + 1)}}}};
  const std::string g = json_schema_to_gbnf(ojson{{"$defs", defs}, {"$ref", "#/$defs/d0"}});
  EXPECT_NO_THROW(Grammar::from_gbnf(g));
}

TEST(JsonSchemaGbnf, HugeEnumIsOneRule) {
  ojson values = ojson::array();
  for (int i = 0; i < 20000; ++i) values.push_back("value-" + std::to_string(i));
  const std::string g = json_schema_to_gbnf(ojson{{"enum", values}});
  EXPECT_LT(g.size(), 20000u * 20u);
  // Prefix-shared: the "value-" prefix is written once.
  EXPECT_EQ(g.find("value-"), g.rfind("value-"));
  EXPECT_NO_THROW(Grammar::from_gbnf(g));
}

TEST(JsonSchemaGbnf, WhitespaceIsBounded) {
  GbnfBuilder b;
  const std::string ws = b.ws();
  const std::string g = b.gbnf(ws);
  const std::string body = rule(g, ws);
  EXPECT_EQ(body.find('*'), std::string::npos) << body;
  EXPECT_EQ(body.find('+'), std::string::npos) << body;
}

TEST(JsonSchemaGbnf, BuilderSharesRulesAcrossSchemas) {
  GbnfBuilder b;
  const std::string a = b.add_json_schema(nlohmann::json::parse(R"({"type":"string"})"), "tool a");
  const std::string c = b.add_json_schema(nlohmann::json::parse(R"({"type":"object"})"), "tool.b");
  const std::string lit = b.add_json_string_literal("get_weather");
  const std::string top = b.add_rule("call", lit + " " + b.ws() + " (" + a + " | " + c + ")");
  EXPECT_EQ(b.add_rule("call", lit + " " + b.ws() + " (" + a + " | " + c + ")"), top);
  EXPECT_THROW(b.add_rule("call", "\"x\""), std::invalid_argument);
  EXPECT_THROW(b.add_rule("bad name", "\"x\""), std::invalid_argument);
  const std::string g = b.gbnf(top);
  EXPECT_NO_THROW(Grammar::from_gbnf(g)) << g;
  EXPECT_EQ(rule(g, lit), "\"\\\"get_weather\\\"\"");

  // A caller's own "root" rule is the root.
  GbnfBuilder r;
  r.add_rule("root", "\"x\" " + r.ws());
  EXPECT_EQ(rule(r.gbnf("root"), "root"), "\"x\" ws");
  EXPECT_THROW(r.gbnf("ws"), std::invalid_argument);
}

TEST(RegexGbnf, HostileRepetitionsStayBounded) {
  // The text stays small; expanding it is the grammar compiler's limit to enforce.
  const std::string g = regex_to_gbnf("((a{1000}){1000}){1000}");
  EXPECT_LT(g.size(), 200u);
  try {
    Grammar::from_gbnf(g);  // rules shared across repetitions: small once compiled
  } catch (const GrammarError&) {
  }
  EXPECT_LT(regex_to_gbnf("a{999999}").size(), 400u);
  EXPECT_THROW(regex_to_gbnf("a{1000001}"), UnsupportedSchema);
  std::string deep(150, '(');
  deep += "a" + std::string(150, ')');
  EXPECT_THROW(regex_to_gbnf(deep), UnsupportedSchema);
}

TEST(RegexGbnf, Subset) {
  EXPECT_EQ(rule(regex_to_gbnf("^(\\d{3}-)?[a-z]+\\.(com|org)$"), "regex"),
            "([0-9]{3} \"-\")? [a-z]+ \".\" (\"com\" | \"org\")");
  // A repeated group that can match "" is repeated without its empty string.
  EXPECT_EQ(rule(regex_to_gbnf("(a*)*b"), "regex"), "(\"a\"+)* \"b\"");
  EXPECT_EQ(rule(regex_to_gbnf("x{"), "regex"), "\"x{\"");
  EXPECT_NE(regex_to_gbnf("a|").find(" ::= regex?\n"), std::string::npos);
  for (const char* bad : {"(?=a)", "(?<=a)b", "a\\1", "\\bx", "a**", "*a", "(a", "a)", "[a", "a++", "(?i)a", "^^a",
                          "a$b", "\\p{L}"}) {
    try {
      regex_to_gbnf(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const UnsupportedSchema& e) {
      EXPECT_EQ(e.keyword, "pattern") << bad;
    }
  }
  for (const char* ok : {"", "a|b|", "[]a]", "[^\\d\\s]", "[a-]", "\\x41\\u00e9", ".*?x", "(?P<n>a)b", "é+", "a{,3}"})
    EXPECT_NO_THROW(Grammar::from_gbnf(regex_to_gbnf(ok))) << ok << "\n" << regex_to_gbnf(ok);
}

TEST(ChoiceGbnf, ExactlyOneOfTheStrings) {
  EXPECT_EQ(choice_to_gbnf({"yes", "no", "yes", "a\"b"}), "root ::= choice\nchoice ::= \"yes\" | \"no\" | \"a\\\"b\"\n");
  EXPECT_THROW(choice_to_gbnf({}), std::invalid_argument);
  EXPECT_THROW(choice_to_gbnf({""}), std::invalid_argument);
}

TEST(JsonObjectGbnf, AnyObject) {
  const std::string g = json_object_gbnf();
  EXPECT_EQ(rule(g, "root"), "object");
  EXPECT_NO_THROW(Grammar::from_gbnf(g));
}

}  // namespace
}  // namespace pagoda::grammar
