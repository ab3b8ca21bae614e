// ChatTemplate — renders a conversation into a prompt with the model's Jinja chat
// template (tokenizer.chat_template, or --chat-template-file), the way Hugging Face
// transformers does.
//
// Contract:
// - The Jinja dialect and environment are those of transformers'
//   apply_chat_template: ImmutableSandboxedEnvironment(trim_blocks=True,
//   lstrip_blocks=True) with the loopcontrols extension, a `tojson` filter that does
//   not escape HTML (json.dumps(ensure_ascii=False, indent, separators, sort_keys)),
//   and globals raise_exception(msg) and strftime_now(fmt). Output is byte-identical
//   to python3-jinja2 rendering the same template with the same context (see the
//   conformance test), or both raise.
// - Construction parses the whole template and checks every filter, test, method
//   and statement it names; a template using something the engine does not support
//   throws pagoda::Error at load time ("chat template <name>: line L: unsupported
//   filter 'xyz'"), never at request time. One exception, jinja2's own: an unknown
//   filter/test/method directly inside an {% if %} branch or an inline if fails only
//   when that branch runs (jinja2 defers those; DeepSeek-V3.2 guards `from_json`
//   with `is string`), so such templates render wherever the reference does.
// - strftime_now uses the local time, or midnight of the date in the environment
//   variable PAGODA_FIXED_DATE (YYYY-MM-DD) when set (tests, reproductions).
// - apply() is const and thread-safe (rendering allocates its own scope). It throws
//   pagoda::Error when the template raises (raise_exception: the message is the
//   template's) or hits a runtime error (undefined attribute call, type error), with
//   a one-line message; the server answers it with 400.
// - Rendering is bounded (jinja/budget.h: steps, loop iterations, output, string and
//   list sizes, nesting), so a template cannot hang the server or allocate without
//   bound: exceeding a budget throws ChatTemplateLimitError naming it. Rendering the
//   same template again cannot succeed, so callers should not retry on it.
// - Without a template the fallback is ChatML ("<|im_start|>role\ncontent<|im_end|>\n"
//   per message, "<|im_start|>assistant\n" for the generation prompt), as llama-server.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/error.h"

namespace pagoda::jinja {
class Template;
}

namespace pagoda::chat {

// A render that ran out of a budget: a pagoda::Error, one line naming the budget.
struct ChatTemplateLimitError : Error {
  using Error::Error;
};

class ChatTemplate {
 public:
  // `name` appears in error messages (a file name or "tokenizer.chat_template").
  // Throws pagoda::Error on a syntax error or unsupported feature.
  ChatTemplate(std::string source, std::string name = "chat template");
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The ChatML fallback for models without a template.
  static ChatTemplate chatml();
  // A built-in template by llama-server's --chat-template name: chatml, llama3, gemma,
  // phi3 (content only: no tools beyond ChatML's generic ones), gpt-oss (harmony: tools,
  // reasoning_effort, analysis / final / commentary channels); nullopt for another name.
  static std::optional<ChatTemplate> builtin(const std::string& name);
  // "chatml, llama3, gemma, phi3, gpt-oss", for messages.
  static std::string builtin_names();

  struct Inputs {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    nlohmann::ordered_json tools;  // null: the variable is undefined in the template
    bool add_generation_prompt = true;
    std::string bos_token;
    std::string eos_token;
    nlohmann::ordered_json extra;  // null or an object: more variables (chat_template_kwargs)
  };
  std::string apply(const Inputs& inputs) const;

  const std::string& source() const { return source_; }
  const std::string& name() const { return name_; }

 private:
  std::string source_;
  std::string name_;
  std::unique_ptr<jinja::Template> tmpl_;
};

}  // namespace pagoda::chat
