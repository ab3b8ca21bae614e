// Unit tests of ChatTemplate: transformers' environment (bos/eos, tools, extra
// variables, raise_exception, strftime_now) around the Jinja engine, its one-line
// errors, the ChatML fallback and what a hostile template does to a request.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "server/chat_template.h"

namespace pagoda::server {
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
}  // namespace pagoda::server
