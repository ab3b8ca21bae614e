#include "cli/chat_template_choice.h"

#include <filesystem>

#include "common/error.h"
#include "common/text_file.h"

namespace pagoda::cli {

namespace {
std::string read_named(const std::string& path, const char* flag) {
  try {
    return read_text_file(path);
  } catch (const Error& e) {
    throw Error(std::string(flag) + " " + e.what());
  }
}
}  // namespace

std::optional<chat::ChatTemplate> chat_template_from_flags(const std::string& template_file,
                                                            const std::string& template_name_or_file,
                                                            std::string& source) {
  if (!template_file.empty()) {
    source = template_file;
    return chat::ChatTemplate(read_named(template_file, "--chat-template-file"), template_file);
  }
  if (template_name_or_file.empty()) return std::nullopt;
  // llama-server's --chat-template takes a name; a file works too.
  source = template_name_or_file;
  if (std::optional<chat::ChatTemplate> t = chat::ChatTemplate::builtin(template_name_or_file)) return t;
  if (std::filesystem::is_regular_file(template_name_or_file))
    return chat::ChatTemplate(read_named(template_name_or_file, "--chat-template"), template_name_or_file);
  throw Error("--chat-template " + template_name_or_file + ": neither a file nor a built-in template (" +
              chat::ChatTemplate::builtin_names() + ")");
}

std::optional<chat::ChatTemplate> model_chat_template(const LoadedModel& lm, std::string& source) {
  if (!lm.chat_template.empty()) {
    source = "the model's tokenizer.chat_template";
    try {
      return chat::ChatTemplate(lm.chat_template, "tokenizer.chat_template");
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " (use --chat-template-file to supply a template pagoda supports)");
    }
  }
  // gpt-oss speaks only harmony: a file without its template (a synth) gets the built-in
  // harmony template, not ChatML.
  if (lm.tokenizer && lm.model && lm.model->config().arch == Arch::GptOss) {
    source = "built-in gpt-oss (harmony) template (the model has no chat template)";
    return chat::ChatTemplate::builtin("gpt-oss");
  }
  if (lm.tokenizer) {
    source = "ChatML fallback (the model has no chat template)";
    return chat::ChatTemplate::chatml();
  }
  source = "none";
  return std::nullopt;
}

}  // namespace pagoda::cli
