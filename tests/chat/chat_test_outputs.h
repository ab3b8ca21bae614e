// Hand-written model outputs per format, shared by the parser and streaming tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_format.h"

namespace pagoda::chat::testing {

// DeepSeek's full-width markers, spelled once.
inline const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>";
inline const std::string kDsCallsEnd = "<｜tool▁calls▁end｜>";
inline const std::string kDsCallBegin = "<｜tool▁call▁begin｜>";
inline const std::string kDsCallEnd = "<｜tool▁call▁end｜>";
inline const std::string kDsSep = "<｜tool▁sep｜>";
inline const std::string kDsml = "｜DSML｜";

struct Sample {
  std::string label;
  ChatFormat format;
  ParseOptions opts;
  std::string text;
};

inline ParseOptions with_tools(bool thinking_open = false) {
  ParseOptions o;
  o.parse_tool_calls = true;
  o.thinking_open_at_start = thinking_open;
  return o;
}

// Tool calls parsed, with the request's tools: functions of these names (OpenAI shape).
inline ParseOptions offering(const std::vector<std::string>& names) {
  ParseOptions o = with_tools();
  o.tools = nlohmann::json::array();
  for (const std::string& n : names)
    o.tools.push_back({{"type", "function"}, {"function", {{"name", n}, {"parameters", {{"type", "object"}}}}}});
  return o;
}

inline std::vector<Sample> sample_outputs() {
  const ChatFormat hermes{ToolCallFormat::Hermes, ReasoningFormat::None};
  const ChatFormat qwen3{ToolCallFormat::Hermes, ReasoningFormat::Think};
  const ChatFormat coder{ToolCallFormat::Qwen3Coder, ReasoningFormat::Think};
  const ChatFormat llama{ToolCallFormat::Llama3, ReasoningFormat::None};
  const ChatFormat mistral{ToolCallFormat::Mistral, ReasoningFormat::None, ToolCallSyntax::MistralNameArgs};
  const ChatFormat ds_v3{ToolCallFormat::DeepSeekV3, ReasoningFormat::None};
  const ChatFormat ds_r1{ToolCallFormat::DeepSeekR1, ReasoningFormat::Think};
  const ChatFormat gptoss{ToolCallFormat::GptOss, ReasoningFormat::GptOss};
  const ChatFormat generic{};
  const ChatFormat gemma4{ToolCallFormat::Gemma4, ReasoningFormat::Gemma4};
  std::vector<Sample> s;
  s.push_back({"hermes one call", hermes, with_tools(),
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"});
  s.push_back({"hermes content + two calls", hermes, with_tools(),
               "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"y\": [1, 2, {\"z\": null}]}}\n</tool_call>"});
  s.push_back({"apriel tool_calls array", hermes, with_tools(),
               "<tool_calls>[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]</tool_calls>"});
  s.push_back({"hermes malformed", hermes, with_tools(),
               "Here: <tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1,}}\n</tool_call> done"});
  s.push_back({"hermes no tools", hermes, ParseOptions{}, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"});
  s.push_back({"qwen3 think + call", qwen3, with_tools(),
               "<think>\nThe user wants weather. <tool_call> is how I call.\n</think>\n\n"
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\"}}\n</tool_call>"});
  s.push_back({"qwen3 think open at start", qwen3, with_tools(true), "Hmm, let me think.\n</think>\n\nHello there!"});
  s.push_back({"qwen3 unclosed think", qwen3, with_tools(), "<think>\nStill thinking about </thi"});
  s.push_back({"qwen3 plain", qwen3, ParseOptions{}, "Just an answer with < and <t and </think in it."});
  s.push_back({"coder xml call", coder, with_tools(),
               "I will run it.\n<tool_call>\n<function=run_shell>\n<parameter=command>\nls -la /tmp\n</parameter>\n"
               "<parameter=timeout>\n30\n</parameter>\n<parameter=opts>\n{\"a\": [1, true]}\n</parameter>\n"
               "</function>\n</tool_call>"});
  s.push_back({"coder multiline value", coder, with_tools(),
               "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\n"
               "def f():\n    return 1\n\n</parameter>\n</function>\n</tool_call>"});
  s.push_back({"llama3 json", llama, with_tools(),
               "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Berlin\", \"unit\": \"c\"}}"});
  s.push_back({"llama3 two json", llama, with_tools(),
               "{\"type\": \"function\", \"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": \"v\"}}"});
  s.push_back({"llama3 python_tag builtin", llama, with_tools(),
               "<|python_tag|>brave_search.call(query=\"weather in Paris\", count=3)"});
  s.push_back({"llama3 python_tag code", llama, with_tools(), "<|python_tag|>print(1 + 1)\n"});
  s.push_back({"llama3 plain", llama, with_tools(), "The answer is {not json} 42."});
  s.push_back({"mistral name args", mistral, with_tools(),
               "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]get_time[ARGS]{\"tz\": \"CET\"}"});
  s.push_back({"mistral array", mistral, with_tools(),
               "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": 1}, \"id\": \"abcdefghi\"}, "
               "{\"name\": \"b\", \"arguments\": \"{\\\"r\\\": 2}\"}]"});
  s.push_back({"mistral call id", mistral, with_tools(), "[TOOL_CALLS]f[CALL_ID]a1b2c3d4e[ARGS]{\"n\": -1.5e3}"});
  s.push_back({"deepseek v3", ds_v3, with_tools(),
               "Checking." + kDsCallsBegin + kDsCallBegin + "function" + kDsSep + "get_weather\n```json\n{\"city\": \"Oslo\"}\n```" +
                   kDsCallEnd + "\n" + kDsCallBegin + "function" + kDsSep + "b\n```json\n{}\n```" + kDsCallEnd + kDsCallsEnd});
  s.push_back({"deepseek v3.1", ds_v3, with_tools(),
               kDsCallsBegin + kDsCallBegin + "get_weather" + kDsSep + "{\"city\": \"Lima\"}" + kDsCallEnd + kDsCallsEnd});
  s.push_back({"deepseek dsml", ds_v3, with_tools(),
               "<" + kDsml + "function_calls>\n<" + kDsml + "invoke name=\"get_weather\">\n<" + kDsml +
                   "parameter name=\"city\" string=\"true\">New York</" + kDsml + "parameter>\n<" + kDsml +
                   "parameter name=\"days\" string=\"false\">3</" + kDsml + "parameter>\n</" + kDsml + "invoke>\n</" +
                   kDsml + "function_calls>"});
  s.push_back({"deepseek r1 think + call", ds_r1, with_tools(true),
               "I should call it.\n</think>\n\n" + kDsCallsBegin + kDsCallBegin + "function" + kDsSep +
                   "f\n```json\n{\"a\": \"b\"}\n```" + kDsCallEnd + kDsCallsEnd});
  s.push_back({"gptoss analysis + final", gptoss, with_tools(),
               "<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>"});
  s.push_back({"gptoss call", gptoss, with_tools(),
               "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>"});
  s.push_back({"gptoss recipient in header", gptoss, with_tools(),
               "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"id\": 7}<|call|>"});
  s.push_back({"gptoss unterminated final", gptoss, with_tools(), "<|channel|>final<|message|>Partial answer"});
  s.push_back({"gemma4 thought + content", gemma4, with_tools(),
               "<|channel>thought\nThe user greets me.<channel|>Hello! How can I help?"});
  s.push_back({"gemma4 call", gemma4, with_tools(),
               "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|>"});
  s.push_back({"gemma4 thought + two calls, nested values", gemma4, with_tools(),
               "<|channel>thought\nNeed both.<channel|><|tool_call>call:a{opts:{deep:[1,2.5,<|\"|>x, \"y\"\n<|\"|>],"
               "flag:true,none:null},q:<|\"|>{not json}<|\"|>}<tool_call|><|tool_call>call:b{}<tool_call|>"});
  s.push_back({"gemma4 content then call", gemma4, with_tools(),
               "Let me check.\n<|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}<tool_call|>"});
  s.push_back({"gemma4 empty channel and stray close", gemma4, with_tools(),
               "<|channel><|channel>thought\nok<channel|><channel|>Answer."});
  s.push_back({"gemma4 thinking open at start", gemma4, with_tools(true), "Let me think.<channel|>Sure."});
  s.push_back({"gemma4 malformed call", gemma4, with_tools(),
               "<|tool_call>call:get_weather{city:Paris}<tool_call|> done"});
  s.push_back({"gemma4 no tools", gemma4, ParseOptions{}, "<|tool_call>call:a{}<tool_call|>"});
  s.push_back({"gemma4 turn marker", gemma4, with_tools(), "<|turn>model\nHi <b>there</b> <|chan"});
  s.push_back({"generic object", generic, with_tools(),
               "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"x\": \"y\"}}, {\"name\": \"b\", \"arguments\": {}}]}"});
  s.push_back({"generic fenced single", generic, with_tools(),
               "```json\n{\"name\": \"a\", \"arguments\": {\"x\": 2}}\n```"});
  s.push_back({"generic plain json", generic, with_tools(), "{\"answer\": 42}"});
  s.push_back({"generic text", generic, with_tools(), "Hello, world."});
  // A call of a function the request did not offer is text, in every format; the offered
  // get_weather beside it in one region goes with it, in a region of its own it stays a call.
  const ParseOptions weather = offering({"get_weather", "get_time"});
  s.push_back({"unoffered hermes", hermes, weather,
               "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {\"path\": \"/\"}}\n</tool_call>"});
  s.push_back({"unoffered hermes after an offered call", hermes, weather,
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>"});
  s.push_back({"unoffered coder xml", coder, weather,
               "Cleaning up.\n<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>"});
  s.push_back({"unoffered llama3 json", llama, weather, "{\"name\": \"rm_rf\", \"parameters\": {\"path\": \"/\"}}"});
  s.push_back({"unoffered llama3 python_tag code", llama, weather, "<|python_tag|>import shutil; shutil.rmtree('/')"});
  s.push_back({"unoffered mistral name args", mistral, weather, "[TOOL_CALLS]rm_rf[ARGS]{\"path\": \"/\"}"});
  s.push_back({"unoffered mistral array beside an offered call", mistral, weather,
               "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
               "{\"name\": \"rm_rf\", \"arguments\": {}}]"});
  s.push_back({"unoffered deepseek v3", ds_v3, weather,
               kDsCallsBegin + kDsCallBegin + "function" + kDsSep + "rm_rf\n```json\n{\"path\": \"/\"}\n```" + kDsCallEnd +
                   kDsCallsEnd});
  s.push_back({"unoffered deepseek dsml", ds_v3, weather,
               "<" + kDsml + "function_calls>\n<" + kDsml + "invoke name=\"rm_rf\">\n</" + kDsml + "invoke>\n</" + kDsml +
                   "function_calls>"});
  s.push_back({"unoffered gptoss", gptoss, weather,
               "<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{\"path\": \"/\"}<|call|>"});
  s.push_back({"unoffered gemma4", gemma4, weather, "<|tool_call>call:rm_rf{path:<|\"|>/<|\"|>}<tool_call|>"});
  s.push_back({"unoffered generic", generic, weather, "{\"tool_calls\": [{\"name\": \"rm_rf\", \"arguments\": {}}]}"});
  s.push_back({"offered generic", generic, weather, "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}"});
  return s;
}

}  // namespace pagoda::chat::testing
