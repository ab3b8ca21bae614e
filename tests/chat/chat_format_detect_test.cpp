// detect_chat_format on every template in shared/chat-templates: a table of what the
// ones with a known tool-call format must give, and every template (including new
// ones dropped into the folder) must be covered by the table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "chat/chat_format.h"

namespace pagoda::chat {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using TF = ToolCallFormat;
using RF = ReasoningFormat;
using SX = ToolCallSyntax;

struct Want {
  TF tools;
  RF reasoning;
  SX syntax = SX::Default;
};

// Every template in the folder, with what it should be detected as. Templates whose
// tool syntax pagoda has no parser for (Command R, Kimi K2, functionary v3.2, GLM,
// Gemma, LFM, Granite 3.3...) get Generic: the JSON form the grammar can force.
const std::map<std::string, Want> kExpected = {
    {"Apriel-1.6-15b-Thinker-fixed.jinja", {TF::Generic, RF::None}},
    {"Bielik-11B-v3.0-Instruct.jinja", {TF::Hermes, RF::Think}},
    {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", {TF::Generic, RF::None}},
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", {TF::Generic, RF::None}},
    {"GLM-4.7-Flash.jinja", {TF::Generic, RF::Think}},
    {"GigaChat3-10B-A1.8B.jinja", {TF::Generic, RF::None}},
    {"HuggingFaceTB-SmolLM3-3B.jinja", {TF::Generic, RF::Think}},
    {"Kimi-K2-Thinking.jinja", {TF::Generic, RF::Think}},
    {"LFM2.5-8B-A1B.jinja", {TF::Generic, RF::Think}},
    {"LFM2.5-Instruct.jinja", {TF::Generic, RF::Think}},  // strips past </think> blocks
    {"MiMo-VL.jinja", {TF::Hermes, RF::None}},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", {TF::Mistral, RF::None, SX::MistralNameArgs}},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", {TF::Qwen3Coder, RF::Think}},
    {"NVIDIA-Nemotron-Nano-v2.jinja", {TF::Generic, RF::Think}},
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", {TF::Hermes, RF::None}},
    {"Qwen-QwQ-32B.jinja", {TF::Hermes, RF::Think}},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", {TF::Hermes, RF::None}},
    {"Qwen-Qwen3-0.6B.jinja", {TF::Hermes, RF::Think}},
    {"Qwen3.5-4B.jinja", {TF::Qwen3Coder, RF::Think}},
    {"Reka-Edge.jinja", {TF::Hermes, RF::Think}},
    {"StepFun3.5-Flash.jinja", {TF::Qwen3Coder, RF::Think}},
    {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", {TF::DeepSeekR1, RF::Think}},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {TF::DeepSeekR1, RF::Think}},
    {"deepseek-ai-DeepSeek-V3.2.jinja", {TF::DeepSeekV3, RF::Think, SX::DeepSeekDsml}},
    {"fireworks-ai-llama-3-firefunction-v2.jinja", {TF::Llama3, RF::None, SX::FireFunction}},
    {"google-gemma-2-2b-it.jinja", {TF::Generic, RF::None}},
    {"google-gemma-4-31B-it-interleaved.jinja", {TF::Gemma4, RF::Gemma4}},
    {"ibm-granite-granite-3.3-2B-Instruct.jinja", {TF::Generic, RF::Think}},
    {"ibm-granite-granite-4.1.jinja", {TF::Hermes, RF::None}},
    {"llama-cpp-deepseek-r1.jinja", {TF::DeepSeekR1, RF::Think}},
    {"llama-cpp-rwkv-world.jinja", {TF::Generic, RF::Think}},
    {"meetkai-functionary-medium-v3.1.jinja", {TF::Qwen3Coder, RF::None}},
    {"meetkai-functionary-medium-v3.2.jinja", {TF::Generic, RF::None}},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", {TF::Llama3, RF::None}},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", {TF::Llama3, RF::None}},
    {"microsoft-Phi-3.5-mini-instruct.jinja", {TF::Generic, RF::None}},
    {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", {TF::Mistral, RF::None, SX::MistralNameArgs}},
    {"moonshotai-Kimi-K2.jinja", {TF::Generic, RF::None}},
    {"stepfun-ai-Step-3.5-Flash.jinja", {TF::Qwen3Coder, RF::Think}},
    {"unsloth-Apriel-1.5.jinja", {TF::Hermes, RF::None}},
    {"unsloth-mistral-Devstral-Small-2507.jinja", {TF::Mistral, RF::None, SX::MistralNameArgs}},
};

TEST(ChatFormatDetect, EveryTemplateInSharedFolder) {
  const fs::path dir = fs::path(PAGODA_SHARED_DIR) / "chat-templates";
  if (!fs::exists(dir)) GTEST_SKIP() << dir << " not found";
  int seen = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string name = entry.path().filename().string();
    const ChatFormat f = detect_chat_format(read_file(entry.path()));
    ++seen;
    auto it = kExpected.find(name);
    if (it == kExpected.end()) {
      ADD_FAILURE() << name << ": not in the table; detected " << tool_call_format_name(f.tools) << " / "
                    << reasoning_format_name(f.reasoning);
      continue;
    }
    EXPECT_EQ(tool_call_format_name(f.tools), std::string(tool_call_format_name(it->second.tools))) << name;
    EXPECT_EQ(reasoning_format_name(f.reasoning), std::string(reasoning_format_name(it->second.reasoning))) << name;
    EXPECT_EQ(static_cast<int>(f.syntax), static_cast<int>(it->second.syntax)) << name;
  }
  EXPECT_EQ(seen, static_cast<int>(kExpected.size()));
}

TEST(ChatFormatDetect, HandWrittenMarkers) {
  EXPECT_EQ(detect_chat_format("{{ '<|start|>assistant<|channel|>final<|message|>' }}").tools, TF::GptOss);
  EXPECT_EQ(detect_chat_format("", "gpt-oss").reasoning, RF::GptOss);
  EXPECT_EQ(detect_chat_format("<tool_call>\n<function=x>").tools, TF::Qwen3Coder);
  // Gemma 4: its call marker, its turn and channel markers, or the architecture.
  EXPECT_EQ(detect_chat_format("{{- '<|tool_call>call:' + function['name'] -}}").tools, TF::Gemma4);
  EXPECT_EQ(detect_chat_format("<|turn>model\n<|channel>thought\n<channel|>").reasoning, RF::Gemma4);
  EXPECT_EQ(detect_chat_format("{{ messages }}", "gemma4").tools, TF::Gemma4);
  EXPECT_EQ(detect_chat_format("[TOOL_CALLS] {{ tool_calls|tojson }}").syntax, SX::Default);
  const ChatFormat v31 = detect_chat_format("<｜tool▁call▁begin｜>' + name + '<｜tool▁sep｜>' + args");
  EXPECT_EQ(v31.tools, TF::DeepSeekV3);
  EXPECT_EQ(v31.syntax, SX::DeepSeekV31);
  const ChatFormat none = detect_chat_format("{{ messages }}");
  EXPECT_EQ(none.tools, TF::Generic);
  EXPECT_EQ(none.reasoning, RF::None);
}

TEST(ChatFormatDetect, PromptOpensThinking) {
  const ChatFormat think{TF::Hermes, RF::Think};
  EXPECT_TRUE(prompt_opens_thinking(think, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking(think, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_thinking({TF::Hermes, RF::None}, "<think>"));
  EXPECT_TRUE(prompt_opens_thinking({TF::GptOss, RF::GptOss}, "<|start|>assistant<|channel|>analysis<|message|>"));
  // Gemma 4: thinking off closes an empty thought in the prompt; open only mid-thought.
  EXPECT_FALSE(prompt_opens_thinking({TF::Gemma4, RF::Gemma4}, "<|turn>model\n<|channel>thought\n<channel|>"));
  EXPECT_FALSE(prompt_opens_thinking({TF::Gemma4, RF::Gemma4}, "<|turn>model\n"));
  EXPECT_TRUE(prompt_opens_thinking({TF::Gemma4, RF::Gemma4}, "<|turn>model\n<|channel>thought\n"));
}

}  // namespace
}  // namespace pagoda::chat
