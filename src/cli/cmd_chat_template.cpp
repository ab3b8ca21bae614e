// `pagoda chat-template`: renders a conversation with a Jinja chat template and
// prints the prompt to stdout byte for byte (no newline added), for checking a
// template by hand and for the conformance test against Python jinja2.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "common/error.h"
#include "common/text_file.h"

namespace pagoda::cli {

namespace {
nlohmann::ordered_json read_json(const std::string& path) {
  try {
    return nlohmann::ordered_json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": invalid JSON: " + e.what());
  }
}
}  // namespace

Runner add_chat_template(CLI::App& app) {
  struct Opts {
    std::string tmpl, messages, tools, bos, eos, kwargs;
    bool add_generation_prompt = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--template", o->tmpl, "Jinja chat template file")->required();
  app.add_option("--messages", o->messages,
                 "JSON file: an array of messages, or {\"messages\": [...], \"tools\": [...]}")
      ->required();
  app.add_flag("--add-generation-prompt", o->add_generation_prompt, "Set add_generation_prompt = true");
  app.add_option("--bos-token", o->bos, "Value of bos_token");
  app.add_option("--eos-token", o->eos, "Value of eos_token");
  app.add_option("--tools", o->tools, "JSON file with the tools list (overrides one in --messages)");
  app.add_option("--kwargs", o->kwargs, "JSON file with an object of extra template variables");
  return [o]() -> int {
    chat::ChatTemplate tmpl(read_text_file(o->tmpl), o->tmpl);
    chat::ChatTemplate::Inputs in;
    nlohmann::ordered_json m = read_json(o->messages);
    if (m.is_array()) {
      in.messages = m;
    } else if (m.is_object() && m.contains("messages") && m["messages"].is_array()) {
      in.messages = m["messages"];
      if (m.contains("tools")) in.tools = m["tools"];
    } else {
      throw Error(o->messages + ": expected an array of messages or an object with \"messages\"");
    }
    if (!o->tools.empty()) in.tools = read_json(o->tools);
    if (!o->kwargs.empty()) {
      in.extra = read_json(o->kwargs);
      if (!in.extra.is_object()) throw Error(o->kwargs + ": expected a JSON object");
    }
    in.add_generation_prompt = o->add_generation_prompt;
    in.bos_token = o->bos;
    in.eos_token = o->eos;
    std::string out = tmpl.apply(in);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    return 0;
  };
}

}  // namespace pagoda::cli
