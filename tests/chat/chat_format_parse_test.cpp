// parse_chat_output on hand-written outputs of each format: calls recovered with
// JSON-equal arguments, content around them kept, malformed / truncated / unknown
// text left as content, reasoning split off.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "chat_test_outputs.h"

namespace pagoda::chat {
namespace {

using nlohmann::json;
using testing::sample_outputs;
using testing::with_tools;

struct Expected {
  std::optional<std::string> content;
  std::string reasoning;
  std::vector<std::pair<std::string, json>> calls;
};

void expect_message(const ParsedMessage& m, const Expected& e, const std::string& label) {
  SCOPED_TRACE(label);
  EXPECT_EQ(m.content, e.content);
  EXPECT_EQ(m.reasoning_content, e.reasoning);
  ASSERT_EQ(m.tool_calls.size(), e.calls.size());
  for (size_t i = 0; i < e.calls.size(); ++i) {
    EXPECT_EQ(m.tool_calls[i].name, e.calls[i].first);
    json args = json::parse(m.tool_calls[i].arguments, nullptr, false);
    EXPECT_EQ(args, e.calls[i].second) << m.tool_calls[i].arguments;
    EXPECT_EQ(m.tool_calls[i].id, "call_" + std::to_string(i));
  }
}

TEST(ChatFormatParse, SampleOutputs) {
  const std::map<std::string, Expected> expected = {
      {"hermes one call", {std::nullopt, "", {{"get_weather", {{"city", "Paris"}}}}}},
      {"hermes content + two calls",
       {"Let me check both.", "", {{"a", {{"x", 1}}}, {"b", {{"y", json::array({1, 2, {{"z", nullptr}}})}}}}}},
      {"apriel tool_calls array", {std::nullopt, "", {{"a", {{"x", 1}}}, {"b", json::object()}}}},
      {"hermes malformed",
       {"Here: <tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1,}}\n</tool_call> done", "", {}}},
      {"hermes no tools", {"<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>", "", {}}},
      {"qwen3 think + call",
       {std::nullopt, "The user wants weather. <tool_call> is how I call.", {{"get_weather", {{"city", "Tokyo"}}}}}},
      {"qwen3 think open at start", {"Hello there!", "Hmm, let me think.", {}}},
      {"qwen3 unclosed think", {"", "Still thinking about </thi", {}}},
      {"qwen3 plain", {"Just an answer with < and <t and </think in it.", "", {}}},
      {"coder xml call",
       {"I will run it.",
        "",
        {{"run_shell", {{"command", "ls -la /tmp"}, {"timeout", 30}, {"opts", {{"a", json::array({1, true})}}}}}}}},
      {"coder multiline value",
       {std::nullopt, "", {{"write_file", {{"path", "a.py"}, {"content", "def f():\n    return 1\n"}}}}}},
      {"llama3 json", {std::nullopt, "", {{"get_weather", {{"location", "Berlin"}, {"unit", "c"}}}}}},
      {"llama3 two json", {std::nullopt, "", {{"a", json::object()}, {"b", {{"k", "v"}}}}}},
      {"llama3 python_tag builtin",
       {std::nullopt, "", {{"brave_search", {{"query", "weather in Paris"}, {"count", 3}}}}}},
      {"llama3 python_tag code", {std::nullopt, "", {{"python", {{"code", "print(1 + 1)"}}}}}},
      {"llama3 plain", {"The answer is {not json} 42.", "", {}}},
      {"mistral name args", {std::nullopt, "", {{"get_weather", {{"city", "Rome"}}}, {"get_time", {{"tz", "CET"}}}}}},
      {"mistral array", {std::nullopt, "", {{"a", {{"q", 1}}}, {"b", {{"r", 2}}}}}},
      {"mistral call id", {std::nullopt, "", {{"f", {{"n", -1.5e3}}}}}},
      {"deepseek v3", {"Checking.", "", {{"get_weather", {{"city", "Oslo"}}}, {"b", json::object()}}}},
      {"deepseek v3.1", {std::nullopt, "", {{"get_weather", {{"city", "Lima"}}}}}},
      {"deepseek dsml", {std::nullopt, "", {{"get_weather", {{"city", "New York"}, {"days", 3}}}}}},
      {"deepseek r1 think + call", {std::nullopt, "I should call it.", {{"f", {{"a", "b"}}}}}},
      {"gptoss analysis + final", {"Hello!", "User says hi.", {}}},
      {"gptoss call", {std::nullopt, "Need weather.", {{"get_weather", {{"city", "Paris"}}}}}},
      {"gptoss recipient in header", {std::nullopt, "", {{"lookup", {{"id", 7}}}}}},
      {"gptoss unterminated final", {"Partial answer", "", {}}},
      {"gemma4 thought + content", {"Hello! How can I help?", "The user greets me.", {}}},
      {"gemma4 call", {std::nullopt, "", {{"get_weather", {{"city", "Paris"}, {"days", 3}}}}}},
      {"gemma4 thought + two calls, nested values",
       {std::nullopt,
        "Need both.",
        {{"a",
          {{"opts", {{"deep", json::array({1, 2.5, "x, \"y\"\n"})}, {"flag", true}, {"none", nullptr}}},
           {"q", "{not json}"}}},
         {"b", json::object()}}}},
      {"gemma4 content then call", {"Let me check.", "", {{"get_weather", {{"city", "Rome"}}}}}},
      {"gemma4 empty channel and stray close", {"Answer.", "ok", {}}},
      {"gemma4 thinking open at start", {"Sure.", "Let me think.", {}}},
      {"gemma4 malformed call", {"<|tool_call>call:get_weather{city:Paris}<tool_call|> done", "", {}}},
      {"gemma4 no tools", {"<|tool_call>call:a{}<tool_call|>", "", {}}},
      {"gemma4 turn marker", {"Hi <b>there</b> <|chan", "", {}}},
      {"unoffered gemma4", {"<|tool_call>call:rm_rf{path:<|\"|>/<|\"|>}<tool_call|>", "", {}}},
      {"generic object", {std::nullopt, "", {{"a", {{"x", "y"}}}, {"b", json::object()}}}},
      {"generic fenced single", {std::nullopt, "", {{"a", {{"x", 2}}}}}},
      {"generic plain json", {"{\"answer\": 42}", "", {}}},
      {"generic text", {"Hello, world.", "", {}}},
      {"unoffered hermes",
       {"<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {\"path\": \"/\"}}\n</tool_call>", "", {}}},
      {"unoffered hermes after an offered call",
       {"<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>", "", {{"get_weather", {{"city", "Paris"}}}}}},
      {"unoffered coder xml",
       {"Cleaning up.\n<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>", "", {}}},
      {"unoffered llama3 json", {"{\"name\": \"rm_rf\", \"parameters\": {\"path\": \"/\"}}", "", {}}},
      {"unoffered llama3 python_tag code", {"<|python_tag|>import shutil; shutil.rmtree('/')", "", {}}},
      {"unoffered mistral name args", {"[TOOL_CALLS]rm_rf[ARGS]{\"path\": \"/\"}", "", {}}},
      {"unoffered mistral array beside an offered call",
       {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, {\"name\": \"rm_rf\", "
        "\"arguments\": {}}]",
        "",
        {}}},
      {"unoffered deepseek v3",
       {testing::kDsCallsBegin + testing::kDsCallBegin + "function" + testing::kDsSep +
            "rm_rf\n```json\n{\"path\": \"/\"}\n```" + testing::kDsCallEnd + testing::kDsCallsEnd,
        "",
        {}}},
      {"unoffered deepseek dsml",
       {"<" + testing::kDsml + "function_calls>\n<" + testing::kDsml + "invoke name=\"rm_rf\">\n</" + testing::kDsml +
            "invoke>\n</" + testing::kDsml + "function_calls>",
        "",
        {}}},
      {"unoffered gptoss", {"{\"path\": \"/\"}", "", {}}},  // harmony: the message's body, as any non-call
      {"unoffered generic", {"{\"tool_calls\": [{\"name\": \"rm_rf\", \"arguments\": {}}]}", "", {}}},
      {"offered generic", {std::nullopt, "", {{"get_time", {{"tz", "UTC"}}}}}},
  };
  for (const auto& s : sample_outputs()) {
    auto it = expected.find(s.label);
    ASSERT_NE(it, expected.end()) << "no expectation for " << s.label;
    expect_message(parse_chat_output(s.format, s.text, s.opts), it->second, s.label);
  }
}

TEST(ChatFormatParse, ArgumentsKeepTheModelsBytes) {
  const ChatFormat hermes{ToolCallFormat::Hermes, ReasoningFormat::None};
  const std::string args = "{ \"b\" :2,\"a\":  [1 ,2] }";
  ParsedMessage m = parse_chat_output(
      hermes, "<tool_call>{\"name\": \"f\", \"arguments\": " + args + "}</tool_call>", with_tools());
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, args);
}

TEST(ChatFormatParse, CallIdPrefix) {
  ParseOptions o = with_tools();
  o.call_id_prefix = "chatcmpl-x-";
  ParsedMessage m = parse_chat_output({ToolCallFormat::Mistral, ReasoningFormat::None},
                                      "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{}", o);
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].id, "chatcmpl-x-0");
  EXPECT_EQ(m.tool_calls[1].id, "chatcmpl-x-1");
}

TEST(ChatFormatParse, ExtractReasoningOffKeepsThinkingInContent) {
  ParseOptions o = with_tools();
  o.extract_reasoning = false;
  const ChatFormat qwen3{ToolCallFormat::Hermes, ReasoningFormat::Think};
  ParsedMessage m = parse_chat_output(qwen3, "<think>\nhm\n</think>\n\nHi", o);
  EXPECT_EQ(m.content, "<think>\nhm\n</think>\n\nHi");
  EXPECT_EQ(m.reasoning_content, "");
  m = parse_chat_output(qwen3,
                        "<think>x</think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", o);
  EXPECT_EQ(m.content, "<think>x</think>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  const ChatFormat gptoss{ToolCallFormat::GptOss, ReasoningFormat::GptOss};
  m = parse_chat_output(gptoss, "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b", o);
  EXPECT_EQ(m.content, "<|channel|>analysis<|message|>a<|end|>b");
}

TEST(ChatFormatParse, ToolCallsIgnoredWithoutTools) {
  ParsedMessage m = parse_chat_output({ToolCallFormat::Generic, ReasoningFormat::None},
                                      "{\"name\": \"a\", \"arguments\": {}}", ParseOptions{});
  EXPECT_EQ(m.content, "{\"name\": \"a\", \"arguments\": {}}");
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(ChatFormatParse, TruncatedCallIsContent) {
  const ChatFormat hermes{ToolCallFormat::Hermes, ReasoningFormat::None};
  const std::string text = "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"unfinished";
  ParsedMessage m = parse_chat_output(hermes, text, with_tools());
  EXPECT_EQ(m.content, text);
  EXPECT_TRUE(m.tool_calls.empty());
  // Cut right before the closing tag: the call stands.
  m = parse_chat_output(hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_", with_tools());
  ASSERT_EQ(m.tool_calls.size(), 1u);
}

TEST(ChatFormatParse, Qwen3CoderSchemaKeepsStringTypedValuesAsText) {
  ParseOptions o = with_tools();
  o.tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zip": {"type": "string"}, "n": {"type": "integer"}, "ok": {"type": "boolean"}}}}}])");
  const std::string text =
      "<tool_call>\n<function=f>\n<parameter=zip>\n02134\n</parameter>\n<parameter=n>\n7\n</parameter>\n"
      "<parameter=ok>\nTrue\n</parameter>\n</function>\n</tool_call>";
  ParsedMessage m = parse_chat_output({ToolCallFormat::Qwen3Coder, ReasoningFormat::None}, text, o);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(m.tool_calls[0].arguments), json::parse(R"({"zip": "02134", "n": 7, "ok": true})"));
  // Without the schema "02134" is not JSON (leading zero), so it is text anyway; 7 is a number.
  m = parse_chat_output({ToolCallFormat::Qwen3Coder, ReasoningFormat::None}, text, with_tools());
  EXPECT_EQ(json::parse(m.tool_calls[0].arguments), json::parse(R"({"zip": "02134", "n": 7, "ok": "True"})"));
}

TEST(ChatFormatParse, FunctionaryAndFireFunctionSpellings) {
  ParsedMessage m = parse_chat_output({ToolCallFormat::Qwen3Coder, ReasoningFormat::None},
                                      "<function=f>{\"a\": 1}</function>", with_tools());
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"a\": 1}");
  m = parse_chat_output({ToolCallFormat::Llama3, ReasoningFormat::None, ToolCallSyntax::FireFunction},
                        " functools[{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": {}}]",
                        with_tools());
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[1].name, "g");
}

TEST(ChatFormatParse, ContentAfterCallsIsKept) {
  ParsedMessage m = parse_chat_output({ToolCallFormat::Hermes, ReasoningFormat::None},
                                      "A <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> B", with_tools());
  EXPECT_EQ(m.content, "AB");
  ASSERT_EQ(m.tool_calls.size(), 1u);
}

TEST(ChatFormatParse, NeverThrowsOnHostileText) {
  std::vector<std::string> nasty = {
      std::string(10000, '['),
      "<tool_call>" + std::string(5000, '{'),
      "<tool_call>{\"name\": \"\\ud800\", \"arguments\": {}}</tool_call>",
      "[TOOL_CALLS]" + std::string(1000, 'a'),
      std::string("\0\xff\xfe<think>", 10),
      "<|channel|>" + std::string(2000, 'x'),
      "<|python_tag|>x.call(=,=)",
      "<|python_tag|>x.call(a=\"unterminated)",
  };
  for (ChatFormat f : {ChatFormat{ToolCallFormat::Hermes, ReasoningFormat::Think}, ChatFormat{ToolCallFormat::Mistral},
                       ChatFormat{ToolCallFormat::Llama3}, ChatFormat{ToolCallFormat::GptOss, ReasoningFormat::GptOss},
                       ChatFormat{ToolCallFormat::Generic}, ChatFormat{ToolCallFormat::DeepSeekV3}}) {
    for (const std::string& t : nasty) {
      ParsedMessage m = parse_chat_output(f, t, with_tools());
      EXPECT_TRUE(m.content || !m.tool_calls.empty());
    }
  }
}

// Every prefix of every sample: no crash, and the text is never lost (every byte of a
// prefix with no complete call is in content or reasoning, modulo trimmed blanks).
TEST(ChatFormatParse, EveryTruncationKeepsTheText) {
  for (const auto& s : sample_outputs()) {
    for (size_t n = 0; n <= s.text.size(); ++n) {
      const std::string prefix = s.text.substr(0, n);
      ParsedMessage m = parse_chat_output(s.format, prefix, s.opts);
      size_t kept = m.content.value_or("").size() + m.reasoning_content.size();
      for (const auto& c : m.tool_calls) {
        kept += c.name.size() + c.arguments.size();
        EXPECT_TRUE(json::parse(c.arguments, nullptr, false).is_object()) << s.label << " @" << n;
      }
      size_t non_blank = 0;
      for (char c : prefix) non_blank += !(c == ' ' || c == '\n');
      // Markers and header bytes are dropped with a call or a think block; text is not.
      if (m.tool_calls.empty() && s.format.reasoning == ReasoningFormat::None &&
          s.format.tools != ToolCallFormat::GptOss)
        EXPECT_GE(kept, non_blank) << s.label << " @" << n << ": " << prefix;
    }
  }
}

}  // namespace
}  // namespace pagoda::chat
