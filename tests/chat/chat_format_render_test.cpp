// Round trip through the real templates: every template in shared/chat-templates whose
// detected tool-call format is not the generic fallback renders an assistant turn with
// tool calls (arguments as an object, as the server passes them); the turn is cut out
// of the rendering and parse_chat_output must recover each call's name and
// JSON-equal arguments. This ties the parsers to what the templates write, not to
// what we believe they write.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "chat/chat_format.h"
#include "chat/chat_template.h"
#include "common/error.h"
#include "grammar/grammar.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using chat::ChatFormat;
using chat::ToolCallFormat;
using nlohmann::json;
using nlohmann::ordered_json;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "search", "description": "Web search",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
])");

// Templates that write reasoning into the turn (Qwen3, V3.2 with thinking) write this.
const std::string kReasoning = "The user wants the weather; I will call get_weather.";

ordered_json call(const std::string& id, const std::string& name, const ordered_json& args) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", args}}}};
}

struct Rendered {
  std::string prompt;  // up to and including the generation prompt
  std::string turn;    // what the model would have generated
};

// The assistant turn: where the rendering with the turn departs from the rendering
// with only the generation prompt, up to the end-of-turn marker (the server's text
// never contains the EOS token that ends generation).
Rendered render_turn(const chat::ChatTemplate& t, const ordered_json& calls, const std::string& content,
                     bool with_tools = true) {
  ordered_json user = {{"role", "user"}, {"content", "What is the weather in Paris? Also search for umbrellas."}};
  // Content null with calls, as OpenAI clients send it (R1's template renders the
  // calls only then).
  ordered_json assistant = {{"role", "assistant"},
                            {"content", content.empty() ? ordered_json(nullptr) : ordered_json(content)},
                            {"tool_calls", calls},
                            {"reasoning_content", kReasoning}};
  chat::ChatTemplate::Inputs in;
  if (with_tools) in.tools = kTools;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  // firefunction-v2 reads its tools from `functions` (a string) and wants `datetime`.
  in.extra = {{"functions", kTools.dump()}, {"datetime", "2025-01-01"}};
  in.messages = ordered_json::array({user});
  in.add_generation_prompt = true;
  std::string prompt;
  try {
    prompt = t.apply(in);
  } catch (const Error&) {
    // llama.cpp's deepseek-r1 template pipes a generator into tojson, which raises in
    // jinja2 too; the assistant turn does not depend on the tools.
    if (with_tools) return render_turn(t, calls, content, false);
    throw;
  }
  in.messages.push_back(assistant);
  in.add_generation_prompt = false;
  // Devstral / Ministral 3 want a string content; R1-Distill-Llama-8B concatenates
  // the arguments as a string (it raises on an object): try the variants in turn.
  std::string full;
  const ordered_json original = in.messages.back();
  for (int attempt = 0; attempt < 4; ++attempt) {
    ordered_json a = original;
    if (attempt & 1)
      for (auto& c : a["tool_calls"]) c["function"]["arguments"] = c["function"]["arguments"].dump();
    if ((attempt & 2) && a["content"].is_null()) a["content"] = "";
    in.messages.back() = a;
    try {
      full = t.apply(in);
      break;
    } catch (const Error&) {
      if (attempt == 3) throw;
    }
  }
  size_t common = 0;
  while (common < prompt.size() && common < full.size() && prompt[common] == full[common]) ++common;
  // Never cut inside a marker ("<｜Assistant｜><" shared by "<think>" and "</think>").
  const size_t lt = full.rfind('<', common ? common - 1 : 0), gt = full.rfind('>', common ? common - 1 : 0);
  if (common > 0 && lt != std::string::npos && (gt == std::string::npos || lt > gt)) common = lt;
  std::string turn = full.substr(common);
  // A generation prompt that closes an empty think block ("<think></think>", thinking
  // off) while history turns are written "</think>..." (DeepSeek V3.2): the model's
  // output starts after the "</think>".
  if (prompt.ends_with("</think>") && turn.starts_with("</think>")) turn = turn.substr(8);
  // The turn ends at its end-of-turn marker (firefunction writes the next header after it).
  for (const char* eot : {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<｜end▁of▁sentence｜>", "</s>", "<|end|>",
                          "<|return|>", "<|endoftext|>", "<|end_of_text|>", "<end_of_turn>", "<sep>", "<turn|>"}) {
    const size_t p = turn.find(eot);
    if (p != std::string::npos) turn.resize(p);
  }
  return {prompt.substr(0, common), turn};
}

void expect_calls(const chat::ParsedMessage& m, const ordered_json& calls, const std::string& where) {
  ASSERT_EQ(m.tool_calls.size(), calls.size()) << where;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(m.tool_calls[i].name, calls[i]["function"]["name"].get<std::string>()) << where;
    const json got = json::parse(m.tool_calls[i].arguments, nullptr, false);
    EXPECT_EQ(got, json(calls[i]["function"]["arguments"])) << where << "\narguments: " << m.tool_calls[i].arguments;
  }
}

// Templates that accept only one call per turn (they raise_exception otherwise).
const std::set<std::string> kSingleCallTemplates = {
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
};

TEST(ChatFormatRender, EveryKnownFormatTemplateRoundTrips) {
  const fs::path dir = fs::path(PAGODA_SHARED_DIR) / "chat-templates";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not found";
  const ordered_json one = ordered_json::array({call("abcDEF123", "get_weather", {{"city", "Paris"}, {"days", 3}})});
  const ordered_json two = ordered_json::array(
      {call("abcDEF123", "get_weather", {{"city", "Paris"}, {"days", 3}}),
       call("ghiJKL456", "search", {{"query", "umbrellas for rain"}})});
  int checked = 0, with_reasoning = 0;
  std::set<ToolCallFormat> formats_seen;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().filename().string();
    const std::string source = read_file(entry.path());
    const ChatFormat f = chat::detect_chat_format(source);
    if (f.tools == ToolCallFormat::Generic) continue;
    SCOPED_TRACE(name);
    chat::ChatTemplate t(source, name);
    chat::ParseOptions opts;
    opts.parse_tool_calls = true;
    opts.tools = kTools;
    for (const ordered_json* calls : {&one, &two}) {
      if (calls == &two && kSingleCallTemplates.count(name)) continue;
      for (const std::string& content : {std::string(), std::string("Let me look that up.")}) {
        Rendered r;
        try {
          r = render_turn(t, *calls, content);
        } catch (const Error& e) {
          ADD_FAILURE() << name << ": template raised: " << e.what();
          continue;
        }
        opts.thinking_open_at_start = chat::prompt_opens_thinking(f, r.prompt);
        const std::string where = name + " (" + std::to_string(calls->size()) + " calls, content '" + content +
                                  "'):\n" + r.turn;
        if (r.turn.find("get_weather") == std::string::npos) {
          // R1 distills and Apriel drop the calls of a turn that has content: nothing
          // to recover, and the content must come back whole.
          EXPECT_FALSE(content.empty()) << where;
          const chat::ParsedMessage m = chat::parse_chat_output(f, r.turn, opts);
          EXPECT_TRUE(m.tool_calls.empty()) << where;
          continue;
        }
        const chat::ParsedMessage m = chat::parse_chat_output(f, r.turn, opts);
        expect_calls(m, *calls, where);
        if (r.turn.find(kReasoning) != std::string::npos) {
          EXPECT_EQ(m.reasoning_content, kReasoning) << where;
          ++with_reasoning;
        }
        // Content around the calls survives (templates that drop it are fine: then none).
        if (!content.empty() && m.content) {
          EXPECT_NE(m.content->find(content), std::string::npos) << where;
        }
        if (content.empty() && m.content) {
          EXPECT_EQ(*m.content, "") << where;
        }
        ++checked;
        formats_seen.insert(f.tools);
      }
    }
  }
  EXPECT_GE(checked, 40);
  EXPECT_GE(with_reasoning, 4);  // Qwen3, QwQ, Qwen3.5, Nemotron 3, ... write it back
  for (ToolCallFormat want : {ToolCallFormat::Hermes, ToolCallFormat::Llama3, ToolCallFormat::Mistral,
                              ToolCallFormat::Qwen3Coder, ToolCallFormat::DeepSeekV3, ToolCallFormat::DeepSeekR1,
                              ToolCallFormat::Gemma4})
    EXPECT_TRUE(formats_seen.count(want)) << chat::tool_call_format_name(want) << " never exercised";
}

// The streaming parser on the same renderings, one byte at a time.
TEST(ChatFormatRender, StreamingMatchesOnRealTurns) {
  const fs::path dir = fs::path(PAGODA_SHARED_DIR) / "chat-templates";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not found";
  const ordered_json one = ordered_json::array({call("abcDEF123", "get_weather", {{"city", "Paris"}, {"days", 3}})});
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().filename().string();
    const std::string source = read_file(entry.path());
    const ChatFormat f = chat::detect_chat_format(source);
    if (f.tools == ToolCallFormat::Generic) continue;
    chat::ChatTemplate t(source, name);
    Rendered r;
    try {
      r = render_turn(t, one, "Checking.");
    } catch (const Error&) {
      continue;  // reported by the test above
    }
    chat::ParseOptions opts;
    opts.parse_tool_calls = true;
    opts.thinking_open_at_start = chat::prompt_opens_thinking(f, r.prompt);
    const chat::ParsedMessage want = chat::parse_chat_output(f, r.turn, opts);
    chat::StreamingChatParser p(f, opts);
    std::string content;
    std::vector<std::pair<std::string, std::string>> calls;
    auto apply = [&](const std::vector<chat::ChatDelta>& ds) {
      for (const auto& d : ds) {
        if (d.kind == chat::ChatDelta::Kind::Content) content += d.text;
        if (d.kind == chat::ChatDelta::Kind::ToolCallStart) calls.push_back({d.name, ""});
        if (d.kind == chat::ChatDelta::Kind::ToolCallArguments) calls.back().second += d.text;
      }
    };
    for (char c : r.turn) apply(p.push(std::string(1, c)));
    apply(p.finish());
    EXPECT_EQ(content, want.content.value_or("")) << name;
    ASSERT_EQ(calls.size(), want.tool_calls.size()) << name;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].first, want.tool_calls[i].name) << name;
      EXPECT_EQ(calls[i].second, want.tool_calls[i].arguments) << name;
    }
  }
}

// Gemma 4's template (the interleaved one in shared/chat-templates, which predates the
// official template's role "tool") gets an OpenAI conversation's tool results as the
// calling turn's tool_responses, the answer after them in the same model turn, as
// llama.cpp renders it; thinking on leaves the model turn open, off closes an empty
// thought; a forced call's grammar output parses back.
TEST(ChatFormatRender, Gemma4ToolResultsJoinTheirModelTurn) {
  const fs::path path = fs::path(PAGODA_SHARED_DIR) / "chat-templates" / "google-gemma-4-31B-it-interleaved.jinja";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not found";
  const std::string source = read_file(path);
  const ChatFormat f = chat::detect_chat_format(source);
  ASSERT_EQ(f.tools, ToolCallFormat::Gemma4);
  chat::ChatTemplate t(source, "gemma4");
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 1}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
    {"role": "assistant", "content": "21 C and clear."},
    {"role": "user", "content": "Thanks!"}
  ])");
  chat::ChatTemplate::Inputs in;
  in.messages = chat::messages_for_template(f, source, messages);
  in.tools = kTools;
  in.bos_token = "<bos>";
  in.add_generation_prompt = true;
  const std::string off = t.apply(in);
  EXPECT_NE(off.find("<|turn>model\n<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:1}<tool_call|>"
                     "<|tool_response>response:get_weather{sky:<|\"|>clear<|\"|>,temp:21}<tool_response|>"
                     "21 C and clear.<turn|>\n<|turn>user\nThanks!<turn|>\n"),
            std::string::npos)
      << off;
  EXPECT_TRUE(off.starts_with("<bos><|turn>system\nBe brief.<|tool>declaration:get_weather{")) << off;
  EXPECT_TRUE(off.ends_with("<|turn>model\n<|channel>thought\n<channel|>")) << off;
  in.extra = {{"enable_thinking", true}};
  const std::string on = t.apply(in);
  EXPECT_TRUE(on.starts_with("<bos><|turn>system\n<|think|>\nBe brief.")) << on;
  EXPECT_TRUE(on.ends_with("<|turn>model\n")) << on;
  // The official template reads role "tool" itself: messages pass unchanged.
  EXPECT_EQ(chat::messages_for_template(f, "{#- OpenAI Chat Completions: ... #}" + source, messages), json(messages));
  // A forced call, thinking first, parses back (with the prompt's state).
  const std::string out = "<|channel>thought\nCheck Rome.<channel|><|tool_call>call:get_weather{city:<|\"|>Rome<|\"|>}"
                          "<tool_call|>";
  const std::string g = chat::tool_call_grammar(f, kTools, std::nullopt, false);
  const chat::ReasoningGrammar rg = chat::with_reasoning_prefix(f, g, chat::prompt_opens_thinking(f, on));
  ASSERT_NO_THROW(grammar::Grammar::from_gbnf(rg.gbnf, rg.root));
  chat::ParseOptions opts;
  opts.parse_tool_calls = true;
  opts.tools = kTools;
  const chat::ParsedMessage m = chat::parse_chat_output(f, out, opts);
  EXPECT_EQ(m.reasoning_content, "Check Rome.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(m.tool_calls[0].arguments), json({{"city", "Rome"}}));
}

}  // namespace
}  // namespace pagoda
