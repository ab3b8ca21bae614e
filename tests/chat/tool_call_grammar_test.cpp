// tool_call_grammar: for every format the GBNF compiles, a call written in the
// format's syntax is accepted byte for byte by a Matcher and parsed back by
// parse_chat_output, and what must not pass (another tool, arguments against the
// schema, a second call without `parallel`, text before the call) is rejected.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "chat_test_outputs.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace pagoda::chat {
namespace {

using nlohmann::json;
using testing::kDsCallBegin;
using testing::kDsCallEnd;
using testing::kDsCallsBegin;
using testing::kDsCallsEnd;
using testing::kDsml;
using testing::kDsSep;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"],
    "additionalProperties": false}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
    "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false}}}
])");

std::shared_ptr<const grammar::TokenVocabulary> byte_vocab() {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  pieces.emplace_back("");  // 256: EOG
  return std::make_shared<grammar::TokenVocabulary>(pieces, std::vector<int32_t>{256});
}

bool accepts(const std::string& gbnf, const std::string& text) {
  grammar::Matcher m(grammar::Grammar::from_gbnf(gbnf), byte_vocab());
  return m.accept_bytes(text) && m.is_accepting();
}

struct Case {
  std::string label;
  ChatFormat format;
  std::string one_call;        // get_weather {"city": "Paris", "days": 3}
  std::string two_calls;       // that, then search {"query": "umbrellas"}
};

std::vector<Case> cases() {
  const std::string w = R"({"city": "Paris", "days": 3})";
  const std::string s = R"({"query": "umbrellas"})";
  std::vector<Case> c;
  c.push_back({"generic", {ToolCallFormat::Generic},
               R"({"tool_calls": [{"name": "get_weather", "arguments": )" + w + "}]}",
               R"({"tool_calls": [{"name": "get_weather", "arguments": )" + w +
                   R"(}, {"name": "search", "arguments": )" + s + "}]}"});
  c.push_back({"hermes", {ToolCallFormat::Hermes},
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + w + "}\n</tool_call>",
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + w + "}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"search\", \"arguments\": " + s + "}\n</tool_call>"});
  c.push_back({"llama3", {ToolCallFormat::Llama3},
               "{\"name\": \"get_weather\", \"parameters\": " + w + "}",
               "{\"name\": \"get_weather\", \"parameters\": " + w + "}; {\"name\": \"search\", \"parameters\": " + s + "}"});
  c.push_back({"firefunction", {ToolCallFormat::Llama3, ReasoningFormat::None, ToolCallSyntax::FireFunction},
               " functools[{\"name\": \"get_weather\", \"arguments\": " + w + "}]",
               " functools[{\"name\": \"get_weather\", \"arguments\": " + w + "}, {\"name\": \"search\", \"arguments\": " +
                   s + "}]"});
  c.push_back({"mistral array", {ToolCallFormat::Mistral},
               "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + w + "}]",
               "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + w + "}, {\"name\": \"search\", \"arguments\": " +
                   s + "}]"});
  c.push_back({"mistral name args", {ToolCallFormat::Mistral, ReasoningFormat::None, ToolCallSyntax::MistralNameArgs},
               "[TOOL_CALLS]get_weather[ARGS]" + w,
               "[TOOL_CALLS]get_weather[ARGS]" + w + "[TOOL_CALLS]search[ARGS]" + s});
  c.push_back({"qwen3 coder", {ToolCallFormat::Qwen3Coder, ReasoningFormat::Think},
               "<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n<parameter=days>\n3\n"
               "</parameter>\n</function>\n</tool_call>",
               "<tool_call>\n<function=get_weather>\n<parameter=city>\n\"Paris\"\n</parameter>\n<parameter=days>\n3\n"
               "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\n"
               "\"umbrellas\"\n</parameter>\n</function>\n</tool_call>"});
  c.push_back({"deepseek v3", {ToolCallFormat::DeepSeekV3},
               kDsCallsBegin + kDsCallBegin + "function" + kDsSep + "get_weather\n```json\n" + w + "\n```" + kDsCallEnd +
                   kDsCallsEnd,
               kDsCallsBegin + kDsCallBegin + "function" + kDsSep + "get_weather\n```json\n" + w + "\n```" + kDsCallEnd +
                   "\n" + kDsCallBegin + "function" + kDsSep + "search\n```json\n" + s + "\n```" + kDsCallEnd +
                   kDsCallsEnd});
  c.push_back({"deepseek r1", {ToolCallFormat::DeepSeekR1, ReasoningFormat::Think},
               kDsCallsBegin + kDsCallBegin + "function" + kDsSep + "get_weather\n```json\n" + w + "\n```" + kDsCallEnd +
                   kDsCallsEnd,
               ""});
  c.push_back({"deepseek v3.1", {ToolCallFormat::DeepSeekV3, ReasoningFormat::None, ToolCallSyntax::DeepSeekV31},
               kDsCallsBegin + kDsCallBegin + "get_weather" + kDsSep + w + kDsCallEnd + kDsCallsEnd,
               kDsCallsBegin + kDsCallBegin + "get_weather" + kDsSep + w + kDsCallEnd + "\n" + kDsCallBegin + "search" +
                   kDsSep + s + kDsCallEnd + kDsCallsEnd});
  const std::string dsml_w = "<" + kDsml + "invoke name=\"get_weather\">\n<" + kDsml +
                             "parameter name=\"city\" string=\"false\">\"Paris\"</" + kDsml + "parameter>\n<" + kDsml +
                             "parameter name=\"days\" string=\"false\">3</" + kDsml + "parameter>\n</" + kDsml + "invoke>\n";
  const std::string dsml_s = "<" + kDsml + "invoke name=\"search\">\n<" + kDsml +
                             "parameter name=\"query\" string=\"false\">\"umbrellas\"</" + kDsml + "parameter>\n</" +
                             kDsml + "invoke>\n";
  c.push_back({"deepseek dsml", {ToolCallFormat::DeepSeekV3, ReasoningFormat::Think, ToolCallSyntax::DeepSeekDsml},
               "<" + kDsml + "function_calls>\n" + dsml_w + "</" + kDsml + "function_calls>",
               "<" + kDsml + "function_calls>\n" + dsml_w + dsml_s + "</" + kDsml + "function_calls>"});
  c.push_back({"gpt-oss", {ToolCallFormat::GptOss, ReasoningFormat::GptOss},
               "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + w + "<|call|>",
               "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + w +
                   "<|call|><|start|>assistant<|channel|>commentary to=functions.search <|constrain|>json<|message|>" + s +
                   "<|call|>"});
  const std::string g4w = "call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>";
  c.push_back({"gemma4", {ToolCallFormat::Gemma4, ReasoningFormat::Gemma4}, "<|tool_call>" + g4w,
               "<|tool_call>" + g4w + "<|tool_call>call:search{query:<|\"|>umbrellas<|\"|>}<tool_call|>"});
  return c;
}

ParseOptions parse_opts() {
  ParseOptions o;
  o.parse_tool_calls = true;
  o.tools = kTools;
  return o;
}

TEST(ToolCallGrammar, EveryFormatAcceptsItsOwnCallsAndParsesThemBack) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.label);
    const std::string single = tool_call_grammar(c.format, kTools, std::nullopt, false);
    ASSERT_NO_THROW(grammar::Grammar::from_gbnf(single)) << single;
    EXPECT_TRUE(accepts(single, c.one_call)) << single << "\n---\n" << c.one_call;
    ParsedMessage m = parse_chat_output(c.format, c.one_call, parse_opts());
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(m.tool_calls[0].arguments), json::parse(R"({"city": "Paris", "days": 3})"));
    EXPECT_FALSE(m.content.has_value());

    // Text before the call, an unknown tool, arguments against the schema: rejected.
    EXPECT_FALSE(accepts(single, "Sure! " + c.one_call));
    std::string other = c.one_call;
    other.replace(other.find("get_weather"), 11, "get_wiather");
    EXPECT_FALSE(accepts(single, other));
    std::string bad_args = c.one_call;
    bad_args.replace(bad_args.find('3'), 1, "\"3\"");
    EXPECT_FALSE(accepts(single, bad_args));

    if (c.two_calls.empty()) continue;
    EXPECT_FALSE(accepts(single, c.two_calls));
    const std::string parallel = tool_call_grammar(c.format, kTools, std::nullopt, true);
    EXPECT_TRUE(accepts(parallel, c.one_call));
    EXPECT_TRUE(accepts(parallel, c.two_calls)) << parallel << "\n---\n" << c.two_calls;
    m = parse_chat_output(c.format, c.two_calls, parse_opts());
    ASSERT_EQ(m.tool_calls.size(), 2u);
    EXPECT_EQ(m.tool_calls[1].name, "search");
    EXPECT_EQ(json::parse(m.tool_calls[1].arguments), json::parse(R"({"query": "umbrellas"})"));

    // A named tool_choice: only that tool.
    const std::string named = tool_call_grammar(c.format, kTools, std::string("search"), true);
    EXPECT_FALSE(accepts(named, c.one_call));
  }
}

TEST(ToolCallGrammar, ToolsWithoutParametersAndUnknownNames) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "now"}}])");
  const std::string g = tool_call_grammar({ToolCallFormat::Hermes}, tools, std::nullopt, false);
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_THROW(tool_call_grammar({ToolCallFormat::Hermes}, tools, std::string("later"), false), std::invalid_argument);
  EXPECT_THROW(tool_call_grammar({ToolCallFormat::Hermes}, json::array(), std::nullopt, false), std::invalid_argument);
  // Qwen3Coder falls back to the JSON body when the schema has no properties.
  const std::string q = tool_call_grammar({ToolCallFormat::Qwen3Coder}, tools, std::nullopt, false);
  const std::string call = "<tool_call>\n<function=now>\n{}\n</function>\n</tool_call>";
  EXPECT_TRUE(accepts(q, call)) << q;
  ParseOptions o = parse_opts();
  o.tools = tools;  // the request's own list, as the server passes it: `now` is offered
  ParsedMessage m = parse_chat_output({ToolCallFormat::Qwen3Coder}, call, o);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{}");
}

// Gemma 4's arguments are Gemma's value syntax, typed per property: keys in sorted order
// (as its template writes past calls), required ones present, scalars by their schema.
TEST(ToolCallGrammar, Gemma4ArgumentsFollowTheSchemaInGemmasSyntax) {
  const ChatFormat g4{ToolCallFormat::Gemma4, ReasoningFormat::Gemma4};
  const std::string g = tool_call_grammar(g4, kTools, std::string("get_weather"), false);
  EXPECT_TRUE(accepts(g, "<|tool_call>call:get_weather{city:<|\"|>Paris, \"TX\" {x}<|\"|>}<tool_call|>")) << g;
  EXPECT_TRUE(accepts(g, "<|tool_call>call:get_weather{city:<|\"|><|\"|>, days:-2}<tool_call|>"));
  EXPECT_FALSE(accepts(g, "<|tool_call>call:get_weather{days:3}<tool_call|>"));  // city is required
  EXPECT_FALSE(accepts(g, "<|tool_call>call:get_weather{days:3,city:<|\"|>P<|\"|>}<tool_call|>"));  // order
  EXPECT_FALSE(accepts(g, "<|tool_call>call:get_weather{city:<|\"|>P<|\"|>,days:<|\"|>3<|\"|>}<tool_call|>"));
  EXPECT_FALSE(accepts(g, "<|tool_call>call:get_weather{city:\"P\"}<tool_call|>"));  // JSON quotes
  // Without properties: any dict of Gemma values.
  const json any = json::parse(R"([{"type": "function", "function": {"name": "now"}}])");
  const std::string a = tool_call_grammar(g4, any, std::nullopt, false);
  EXPECT_TRUE(accepts(a, "<|tool_call>call:now{k:[1,{x:null},<|\"|>s<|\"|>],b:false}<tool_call|>")) << a;
  EXPECT_TRUE(accepts(a, "<|tool_call>call:now{}<tool_call|>"));
  // Thinking first, then the call: "<|channel>thought ... <channel|>".
  const ReasoningGrammar r = with_reasoning_prefix(g4, g, false);
  grammar::Matcher m(grammar::Grammar::from_gbnf(r.gbnf, r.root), byte_vocab());
  EXPECT_TRUE(m.accept_bytes("<|channel>thought\nThe <b>city</b> is Paris.<channel|><|tool_call>call:get_weather"
                             "{city:<|\"|>Paris<|\"|>}<tool_call|>") &&
              m.is_accepting());
}

// A Gemma 4 string's minLength / maxLength / pattern / format, a const and a number's
// bounds hold as they do in JSON: before, every string was any text up to <|"|>, so a
// forced call's city with maxLength 12 ran on until max_tokens with a random model (the
// SDK suite's gemma4 case) and no schema bound was kept.
TEST(ToolCallGrammar, Gemma4StringsAndNumbersKeepTheirSchemaBounds) {
  const ChatFormat g4{ToolCallFormat::Gemma4, ReasoningFormat::Gemma4};
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {
      "a": {"type": "string", "minLength": 2, "maxLength": 4},
      "b": {"type": "string", "pattern": "^[0-9]{3}$"},
      "c": {"type": "string", "format": "date"},
      "d": {"const": "x y"},
      "e": {"type": "integer", "minimum": 1, "maximum": 9},
      "f": {"type": "string", "pattern": "ab"}},
    "required": ["a", "b", "c", "d", "e", "f"]}}}])");
  const std::string g = tool_call_grammar(g4, tools, std::nullopt, false);
  auto call = [](const std::string& a, const std::string& b, const std::string& c, const std::string& e,
                 const std::string& f) {
    return "<|tool_call>call:f{a:<|\"|>" + a + "<|\"|>,b:<|\"|>" + b + "<|\"|>,c:<|\"|>" + c +
           "<|\"|>,d:<|\"|>x y<|\"|>,e:" + e + ",f:<|\"|>" + f + "<|\"|>}<tool_call|>";
  };
  EXPECT_TRUE(accepts(g, call("añ\"", "123", "2024-02-29", "9", "ab"))) << g;
  EXPECT_TRUE(accepts(g, call("wxyz", "007", "2023-12-31", "1", "[ab]\nc")));  // a pattern is searched
  EXPECT_FALSE(accepts(g, call("w", "123", "2024-02-29", "9", "ab")));        // minLength
  EXPECT_FALSE(accepts(g, call("vwxyz", "123", "2024-02-29", "9", "ab")));    // maxLength
  EXPECT_FALSE(accepts(g, call("a<b", "123", "2024-02-29", "9", "ab")));      // no '<' in a bounded string
  EXPECT_FALSE(accepts(g, call("ok", "12a", "2024-02-29", "9", "ab")));       // pattern
  EXPECT_FALSE(accepts(g, call("ok", "123", "2023-02-29", "9", "ab")));       // format (not a leap year)
  EXPECT_FALSE(accepts(g, call("ok", "123", "2024-02-29", "10", "ab")));      // maximum
  EXPECT_FALSE(accepts(g, call("ok", "123", "2024-02-29", "9", "a b")));      // pattern searched, not found
  EXPECT_FALSE(accepts(g, "<|tool_call>call:f{a:<|\"|>ok<|\"|>,b:<|\"|>123<|\"|>,c:<|\"|>2024-02-29<|\"|>,"
                          "d:<|\"|>x<|\"|>,e:1,f:<|\"|>ab<|\"|>}<tool_call|>"));  // const
  // The parser reads the bounded strings back as JSON strings.
  ParseOptions o = parse_opts();
  o.tools = tools;
  const ParsedMessage m = parse_chat_output(g4, call("añ\"", "123", "2024-02-29", "9", "ab"), o);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(m.tool_calls[0].arguments),
            json::parse(R"({"a": "añ\"", "b": "123", "c": "2024-02-29", "d": "x y", "e": 9, "f": "ab"})"));
}

TEST(ToolCallGrammar, UnsupportedSchemaThrows) {
  const json tools = json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}])");
  EXPECT_THROW(tool_call_grammar({ToolCallFormat::Hermes}, tools, std::nullopt, false), grammar::UnsupportedSchema);
}

}  // namespace
}  // namespace pagoda::chat
