// ChatTemplate (see chat_template.h): builds the transformers context and runs
// pagoda::jinja::Template, mapping its errors to one-line pagoda::Error messages.
#include "chat/chat_template.h"

#include <cstdlib>
#include <ctime>
#include <new>

#include "common/error.h"
#include "jinja/lexer.h"
#include "jinja/template.h"

namespace pagoda::chat {

namespace {

// Plain ChatML, plus what an agent's conversation needs (as llama-server's generic
// format does): the tools and how to call them in a system block, null content as
// nothing, and an assistant's tool_calls written in the generic JSON call form that the
// generic parser reads back (so a multi-turn tool conversation renders and re-renders
// identically, and the prefix cache hits across turns).
const char* kChatML =
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\nYou can call these tools:\\n' + (tools | tojson) + "
    "'\\nTo call tools, answer with only {\"tool_calls\": [{\"name\": ..., \"arguments\": {...}}]}<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is not none -%}{{- message['content'] -}}{%- endif -%}"
    "{%- if message['tool_calls'] -%}"
    "{{- '{\"tool_calls\": [' -}}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- if not loop.first -%}{{- ', ' -}}{%- endif -%}"
    "{{- '{\"name\": ' + (call['function']['name'] | tojson) + ', \"arguments\": ' + (call['function']['arguments'] | tojson) + '}' -}}"
    "{%- endfor -%}"
    "{{- ']}' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

// strftime_now(fmt): the local time now, or midnight of PAGODA_FIXED_DATE
// (YYYY-MM-DD) when that is set, so that tests and reproductions are stable.
std::string strftime_now(const std::string& fmt) {
  std::tm tm{};
  const char* fixed = std::getenv("PAGODA_FIXED_DATE");
  int y = 0, m = 0, d = 0;
  if (fixed && std::sscanf(fixed, "%d-%d-%d", &y, &m, &d) == 3) {
    tm.tm_year = y - 1900;
    tm.tm_mon = m - 1;
    tm.tm_mday = d;
    tm.tm_isdst = -1;
    std::time_t t = std::mktime(&tm);
    localtime_r(&t, &tm);
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  char buf[512];
  size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return std::string(buf, n);
}

// "chat template NAME" for messages (the default name already says it).
std::string label(const std::string& name) {
  return name.rfind("chat template", 0) == 0 ? name : "chat template " + name;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string name) : source_(std::move(source)), name_(std::move(name)) {
  try {
    tmpl_ = std::make_unique<jinja::Template>(source_);
  } catch (const jinja::SyntaxError& e) {
    throw Error(label(name_) + ": line " + std::to_string(e.line) + ": " + e.what());
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::chatml() { return ChatTemplate(kChatML, "chatml"); }

namespace {
// The formats of the model families' own templates (meta-llama Llama 3.x, google Gemma 2,
// microsoft Phi-3.5), message content only. Gemma has no system role: its text goes in
// front of the first user turn, as llama.cpp does.
const char* kLlama3 =
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] or '') | trim + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}";
const char* kGemma =
    "{{- bos_token -}}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{%- set ns.system = ns.system + (message['content'] or '') + '\n\n' -%}"
    "{%- else -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "{%- set text = (ns.system + (message['content'] or '')) if role == 'user' else (message['content'] or '') -%}"
    "{%- if role == 'user' -%}{%- set ns.system = '' -%}{%- endif -%}"
    "{{- '<start_of_turn>' + role + '\n' + text | trim + '<end_of_turn>\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}";
const char* kPhi3 =
    "{%- for message in messages -%}"
    "{{- '<|' + message['role'] + '|>\n' + (message['content'] or '') + '<|end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}";
// gpt-oss's harmony format, written from OpenAI's description of it (not a copy of the
// model's own template, which real GGUFs carry and which takes precedence): a system
// message with the identity, knowledge cutoff, date, `Reasoning: <reasoning_effort>`
// (default medium) and the valid channels; a developer message with the request's system /
// developer text as "# Instructions" and the tools as a TypeScript namespace `functions`;
// user turns; an assistant's reasoning (reasoning_content or thinking) on the analysis
// channel, its answer on final, each tool call as `<|start|>assistant
// to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>`; a tool result as
// `<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>...<|end|>`, NAME the
// last call's. The generation prompt is `<|start|>assistant`. Parameters become
// TypeScript types by their JSON schema (string enums as unions, arrays as T[], other
// objects as `object`), required ones without `?`.
const char* kGptOss =
    "{%- macro ts_type(p) -%}"
    "{%- if p.enum is defined and p.enum -%}{{- '\"' + (p.enum | join('\" | \"')) + '\"' -}}"
    "{%- elif p.type == 'string' -%}string"
    "{%- elif p.type == 'integer' or p.type == 'number' -%}number"
    "{%- elif p.type == 'boolean' -%}boolean"
    "{%- elif p.type == 'array' -%}{{- (ts_type(p['items']) if p['items'] is defined else 'any') + '[]' -}}"
    "{%- elif p.type == 'object' -%}object"
    "{%- else -%}any{%- endif -%}"
    "{%- endmacro -%}"
    "{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\\n"
    "Knowledge cutoff: 2024-06\\nCurrent date: ' + strftime_now('%Y-%m-%d') + '\\n\\nReasoning: ' + "
    "(reasoning_effort if reasoning_effort is defined and reasoning_effort else 'medium') + '\\n\\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.' -}}"
    "{%- if tools -%}{{- \"\\nCalls to these tools must go to the commentary channel: 'functions'.\" -}}{%- endif -%}"
    "{{- '<|end|>' -}}"
    "{%- set ns = namespace(instructions='', last_call='') -%}"
    "{%- for m in messages -%}{%- if m.role == 'system' or m.role == 'developer' -%}"
    "{%- set ns.instructions = ns.instructions + ('\\n\\n' if ns.instructions else '') + (m.content or '') -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if ns.instructions or tools -%}"
    "{{- '<|start|>developer<|message|>' -}}"
    "{%- if ns.instructions -%}{{- '# Instructions\\n\\n' + ns.instructions + '\\n\\n' -}}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '# Tools\\n\\n## functions\\n\\nnamespace functions {\\n\\n' -}}"
    "{%- for t in tools -%}{%- set f = t.function if t.function is defined else t -%}"
    "{%- if f.description -%}{{- '// ' + f.description + '\\n' -}}{%- endif -%}"
    "{%- if f.parameters and f.parameters.properties -%}"
    "{{- 'type ' + f.name + ' = (_: {\\n' -}}"
    "{%- for name, p in f.parameters.properties.items() -%}"
    "{%- if p.description -%}{{- '// ' + p.description + '\\n' -}}{%- endif -%}"
    "{{- name + ('' if name in (f.parameters.required or []) else '?') + ': ' + ts_type(p) + ',\\n' -}}"
    "{%- endfor -%}"
    "{{- '}) => any;\\n\\n' -}}"
    "{%- else -%}{{- 'type ' + f.name + ' = () => any;\\n\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{{- '} // namespace functions' -}}"
    "{%- endif -%}"
    "{{- '<|end|>' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}{{- '<|start|>user<|message|>' + (m.content or '') + '<|end|>' -}}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- set thinking = m.reasoning_content or m.thinking or '' -%}"
    "{%- if thinking -%}{{- '<|start|>assistant<|channel|>analysis<|message|>' + thinking + '<|end|>' -}}{%- endif -%}"
    "{%- if m.tool_calls -%}"
    "{%- for c in m.tool_calls -%}{%- set f = c.function if c.function is defined else c -%}"
    "{{- '<|start|>assistant to=functions.' + f.name + '<|channel|>commentary json<|message|>' + "
    "(f.arguments if f.arguments is string else (f.arguments | tojson)) + '<|call|>' -}}"
    "{%- set ns.last_call = f.name -%}"
    "{%- endfor -%}"
    "{%- elif m.content -%}{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' -}}"
    "{%- endif -%}"
    "{%- elif m.role == 'tool' -%}"
    "{{- '<|start|>functions.' + (m.name or ns.last_call) + ' to=assistant<|channel|>commentary<|message|>' + "
    "(m.content if m.content is string else (m.content | tojson)) + '<|end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}";
}  // namespace

std::optional<ChatTemplate> ChatTemplate::builtin(const std::string& name) {
  if (name == "chatml") return chatml();
  if (name == "llama3") return ChatTemplate(kLlama3, "llama3");
  if (name == "gemma") return ChatTemplate(kGemma, "gemma");
  if (name == "phi3") return ChatTemplate(kPhi3, "phi3");
  if (name == "gpt-oss") return ChatTemplate(kGptOss, "gpt-oss");
  return std::nullopt;
}

std::string ChatTemplate::builtin_names() { return "chatml, llama3, gemma, phi3, gpt-oss"; }

std::string ChatTemplate::apply(const Inputs& in) const {
  using jinja::Value;
  // The values are converted inside the try: a message nested past the value-depth budget
  // (a tool call's arguments 600 levels deep) is a client's error (400), not a server one.
  try {
    std::vector<std::pair<std::string, Value>> vars;
    vars.emplace_back("messages", Value::from_json(in.messages));
    if (!in.tools.is_null()) vars.emplace_back("tools", Value::from_json(in.tools));
    vars.emplace_back("add_generation_prompt", Value(in.add_generation_prompt));
    vars.emplace_back("bos_token", Value(in.bos_token));
    vars.emplace_back("eos_token", Value(in.eos_token));
    if (in.extra.is_object())
      for (auto it = in.extra.begin(); it != in.extra.end(); ++it) vars.emplace_back(it.key(), Value::from_json(it.value()));
    vars.emplace_back("raise_exception", Value::callable("raise_exception", [](jinja::RenderState&, jinja::CallArgs& a) -> Value {
                        throw jinja::RaisedError(a.pos.empty() ? "" : a.pos[0].to_str());
                      }));
    vars.emplace_back("strftime_now", Value::callable("strftime_now", [](jinja::RenderState&, jinja::CallArgs& a) -> Value {
                        if (a.pos.empty() || !a.pos[0].is_string()) throw jinja::RuntimeError("strftime_now(format) needs a string");
                        return Value(strftime_now(a.pos[0].str()));
                      }));
    return tmpl_->render(vars);
  } catch (const jinja::RaisedError& e) {
    throw Error(e.what());
  } catch (const jinja::BudgetError& e) {
    // line 0: the budget ran out converting the inputs, before the template ran.
    throw ChatTemplateLimitError(label(name_) + (e.line > 0 ? ": line " + std::to_string(e.line) : std::string()) +
                                 ": " + e.what());
  } catch (const jinja::RuntimeError& e) {
    throw Error(label(name_) + ": line " + std::to_string(e.line) + ": " + e.what());
  } catch (const std::bad_alloc&) {  // a safety net: the budgets should stop a render long before
    throw ChatTemplateLimitError(label(name_) + ": out of memory while rendering");
  }
}

}  // namespace pagoda::chat
