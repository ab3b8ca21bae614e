// Which chat template a command renders conversations with (serve, chat): the flags'
// (--chat-template-file F, or llama-server's --chat-template NAME|F), else the model's
// own, else ChatML when the model has a tokenizer.
#pragma once

#include <optional>
#include <string>

#include "chat/chat_template.h"
#include "cli/model_loading.h"

namespace pagoda::cli {

// The template the flags name (nullopt: none), read and compiled before the model loads,
// so a bad file or name is a one-line error naming the flag. `source` says where it came from.
std::optional<chat::ChatTemplate> chat_template_from_flags(const std::string& template_file,
                                                            const std::string& template_name_or_file,
                                                            std::string& source);
// The model's own template (an unsupported one is an error with the hint to give one by
// flag), else ChatML when it has a tokenizer, else nullopt; `source` says which.
std::optional<chat::ChatTemplate> model_chat_template(const LoadedModel& lm, std::string& source);

}  // namespace pagoda::cli
