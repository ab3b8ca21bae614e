// Unit tests of ChatTemplate: transformers' environment (bos/eos, tools, extra
// variables, raise_exception, strftime_now) around the Jinja engine, its one-line
// errors, the ChatML fallback and what a hostile template does to a request.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "chat/chat_template.h"

namespace pagoda::chat {
namespace {

using nlohmann::ordered_json;

TEST(ChatTemplate, RendersTheTransformersContext) {
  ChatTemplate t("{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                 "{% if add_generation_prompt %}>{% endif %}{{ tools is defined }}{{ eos_token }}{{ extra_var }}",
                 "t");
  ChatTemplate::Inputs in;
  in.messages = ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra = ordered_json::parse(R"({"extra_var": 7})");
  EXPECT_EQ(t.apply(in), "<s>[user:hi]>False</s>7");
  in.tools = ordered_json::array();
  in.add_generation_prompt = false;
  EXPECT_EQ(t.apply(in), "<s>[user:hi]True</s>7");
}

TEST(ChatTemplate, RaiseExceptionBecomesErrorWithTheTemplatesMessage) {
  ChatTemplate t("{{ raise_exception('roles must alternate') }}", "t");
  try {
    t.apply({});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "roles must alternate");
  }
}

TEST(ChatTemplate, LoadErrorNamesTemplateLineAndFeature) {
  try {
    ChatTemplate t("a\n{{ x|from_json }}", "my.jinja");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "chat template my.jinja: line 2: unsupported filter 'from_json'");
  }
}

TEST(ChatTemplate, RuntimeErrorNamesTheLine) {
  ChatTemplate t("\n\n{{ messages[0].x.y }}", "t");
  ChatTemplate::Inputs in;
  in.messages = ordered_json::parse(R"([{"role":"user"}])");
  try {
    t.apply(in);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("chat template t: line 3: ", 0), 0u) << e.what();
  }
}

// What a request meets when the model's template is hostile: apply() throws a
// one-line pagoda::Error naming the budget (the server answers it with 400) in
// well under a second, and the next request renders as usual.
TEST(ChatTemplate, HostileTemplateEndsWithANamedBudgetErrorAndTheNextRenderWorks) {
  ChatTemplate hostile("{% set ns = namespace(s=messages[0].content) %}{% for i in range(64) %}"
                       "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
                       "hostile.jinja");
  ChatTemplate::Inputs in;
  in.messages = ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  for (int request = 0; request < 3; ++request) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      hostile.apply(in);
      FAIL() << "no exception";
    } catch (const ChatTemplateLimitError& e) {
      EXPECT_STREQ(e.what(), "chat template hostile.jinja: line 1: render budget exceeded: a string over 16777216 "
                             "bytes (max_string_bytes)");
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);  // catches a hang, not speed
  }
  EXPECT_EQ(ChatTemplate::chatml().apply(in), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  try {
    ChatTemplate parens("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "parens.jinja");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "chat template parens.jinja: line 1: template nested deeper than 256 levels (blocks, "
                           "parentheses, brackets or operator chains)");
  }
}

// The built-in harmony template (gpt-oss): system with the date and reasoning_effort,
// the request's system text and tools in the developer message, reasoning on the analysis
// channel, a call on commentary with its arguments as sent, the tool's result from
// functions.NAME, and the generation prompt; reasoning_effort defaults to medium.
TEST(ChatTemplate, BuiltinGptOssRendersHarmony) {
  ::setenv("PAGODA_FIXED_DATE", "2026-03-14", 1);
  const ChatTemplate t = *ChatTemplate::builtin("gpt-oss");
  ChatTemplate::Inputs in;
  in.messages = ordered_json::parse(R"([
    {"role":"system","content":"Answer in French."},
    {"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":null,"reasoning_content":"Need the tool.",
     "tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
    {"role":"tool","tool_call_id":"c1","content":"{\"temp\":21}"},
    {"role":"assistant","content":"Il fait 21."},
    {"role":"user","content":"Merci"}])");
  in.tools = ordered_json::parse(R"([{"type":"function","function":{"name":"get_weather","description":"Get the weather",
    "parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},
    "unit":{"type":"string","enum":["c","f"]},"days":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},
    "required":["city"]}}}])");
  in.extra = ordered_json::parse(R"({"reasoning_effort":"high"})");
  EXPECT_EQ(t.apply(in),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            "Knowledge cutoff: 2024-06\nCurrent date: 2026-03-14\n\nReasoning: high\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message.\n"
            "Calls to these tools must go to the commentary channel: 'functions'.<|end|>"
            "<|start|>developer<|message|># Instructions\n\nAnswer in French.\n\n# Tools\n\n## functions\n\n"
            "namespace functions {\n\n// Get the weather\ntype get_weather = (_: {\n// City name\ncity: string,\n"
            "unit?: \"c\" | \"f\",\ndays?: number,\ntags?: string[],\n}) => any;\n\n} // namespace functions<|end|>"
            "<|start|>user<|message|>Weather in Paris?<|end|>"
            "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"
            "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{\"temp\":21}<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Il fait 21.<|end|>"
            "<|start|>user<|message|>Merci<|end|><|start|>assistant");
  in.messages = ordered_json::parse(R"([{"role":"user","content":"Hi"}])");
  in.tools = nullptr;
  in.extra = nullptr;
  EXPECT_EQ(t.apply(in),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            "Knowledge cutoff: 2024-06\nCurrent date: 2026-03-14\n\nReasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
            "<|start|>user<|message|>Hi<|end|><|start|>assistant");
  ::unsetenv("PAGODA_FIXED_DATE");
}

TEST(ChatTemplate, ChatMLFallback) {
  ChatTemplate::Inputs in;
  in.messages = ordered_json::parse(R"([{"role":"user","content":"hi"}])");
  EXPECT_EQ(ChatTemplate::chatml().apply(in), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, StrftimeNowUsesFixedDateWhenSet) {
  setenv("PAGODA_FIXED_DATE", "2026-01-15", 1);
  ChatTemplate t("{{ strftime_now('%Y-%m-%d %b') }}", "t");
  EXPECT_EQ(t.apply({}), "2026-01-15 Jan");
  unsetenv("PAGODA_FIXED_DATE");
}

}  // namespace
}  // namespace pagoda::chat
