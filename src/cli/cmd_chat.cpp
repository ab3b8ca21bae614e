// `pagoda chat`: a conversation in the terminal, as llama-cli and `ollama run` have it.
// Each turn renders the whole conversation with the chat template and runs it through the
// same Engine the server uses, so the prefix cache serves every turn after the first from
// what the previous ones computed (the stats line after each reply says how many tokens).
//
// Input: a line is a message; a line ending in `\` continues on the next one; `"""` on a
// line of its own opens and closes a block of many lines. Commands: /bye (or /exit,
// /quit, end of input), /clear (a new conversation, same system prompt), /system TEXT
// (a new conversation with that system prompt), /help. Ctrl-C while the model answers
// stops the answer (what it wrote so far stays in the conversation); at the prompt, a
// second Ctrl-C in a row quits.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>

#include "cli/chat_template_choice.h"
#include "cli/commands.h"
#include "cli/kv_options.h"
#include "cli/model_loading.h"
#include "common/error.h"
#include "common/thread_pool.h"
#include "engine/engine.h"

namespace pagoda::cli {

namespace {

std::atomic<bool> g_interrupted{false};
void on_sigint(int) { g_interrupted = true; }

// Streams the reply to stdout as the engine thread produces it.
class ReplySink final : public RequestSink {
 public:
  void on_token(const TokenEvent& ev) override {
    if (ev.text.empty()) return;
    std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
    std::fflush(stdout);
  }
  void on_finish(const RequestResult& result) override { done_.set_value(result); }
  void on_error(uint64_t, const std::string& message) override {
    done_.set_exception(std::make_exception_ptr(Error(message)));
  }
  std::future<RequestResult> result() { return done_.get_future(); }

 private:
  std::promise<RequestResult> done_;
};

enum class Input { Line, End, Interrupted };

// One line from standard input, without its newline. read(2) a byte at a time, so a
// Ctrl-C (the handler is installed without SA_RESTART) interrupts the wait.
Input read_line(std::string& line) {
  line.clear();
  for (;;) {
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) {
      if (g_interrupted) return Input::Interrupted;
      continue;
    }
    if (n <= 0) return line.empty() ? Input::End : Input::Line;
    if (c == '\n') return Input::Line;
    line += c;
  }
}

// A whole message: continuation lines (`\` at the end) and `"""` blocks joined.
Input read_message(std::string& message, bool prompt) {
  message.clear();
  std::string line;
  if (prompt) std::fputs(">>> ", stdout), std::fflush(stdout);
  Input in = read_line(line);
  if (in != Input::Line) return in;
  if (line == "\"\"\"") {  // a block, to the closing """
    for (bool first = true;; first = false) {
      if (prompt) std::fputs("... ", stdout), std::fflush(stdout);
      in = read_line(line);
      if (in != Input::Line) return in == Input::End && !message.empty() ? Input::Line : in;
      if (line == "\"\"\"") return Input::Line;
      if (!first) message += '\n';
      message += line;
    }
  }
  while (!line.empty() && line.back() == '\\') {
    line.pop_back();
    message += line + '\n';
    if (prompt) std::fputs("... ", stdout), std::fflush(stdout);
    in = read_line(line);
    if (in != Input::Line) return in == Input::End ? Input::Line : in;
  }
  message += line;
  return Input::Line;
}

constexpr const char* kHelp =
    "  /bye, /exit, /quit   end the chat (or Ctrl-D)\n"
    "  /clear               start a new conversation\n"
    "  /system TEXT         start a new conversation with this system prompt\n"
    "  \\ at the end of a line continues the message; \"\"\" opens and closes a block of lines\n"
    "  Ctrl-C stops an answer; twice at the prompt quits\n";

}  // namespace

Runner add_chat(CLI::App& app) {
  struct Opts {
    std::string model, system, chat_template_file, chat_template, quantize;
    int64_t n_predict = 2048;
    int threads = 0;
    int64_t ctx_size = 0;
    bool ignore_eos = false;
    SamplingParams sp;
    KvOptions kv;
    SpecOptions spec;
  };
  auto o = std::make_shared<Opts>();
  o->sp.temperature = 0.8f;
  app.add_option("-m,--model", o->model, "GGUF model file, Hugging Face model directory or hf://OWNER/REPO[:QUANT]")
      ->required();
  app.add_option("-s,--system", o->system, "System prompt");
  app.add_option("-n,--n-predict", o->n_predict, "Most tokens per answer")->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--temp", o->sp.temperature, "Temperature (0 = greedy)")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", o->sp.top_k, "Top-k (0 = off)")->capture_default_str();
  app.add_option("--top-p", o->sp.top_p, "Top-p (1 = off)")->capture_default_str();
  app.add_option("--min-p", o->sp.min_p, "Min-p (0 = off)")->capture_default_str();
  app.add_option("--repeat-penalty", o->sp.repetition_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  app.add_option("--seed", o->sp.seed, "RNG seed (default: random)");
  app.add_option("-t,--threads", o->threads, "Worker threads (default: all cores)");
  app.add_option("-c,--ctx-size", o->ctx_size, "Context size (default: the model's)");
  auto* file_opt = app.add_option("--chat-template-file", o->chat_template_file, "Jinja chat template to use instead of the model's");
  app.add_option("--chat-template", o->chat_template,
                 "A built-in chat template (" + chat::ChatTemplate::builtin_names() + ") or a Jinja file")
      ->excludes(file_opt);
  app.add_flag("--ignore-eos", o->ignore_eos, "Keep answering past end-of-generation tokens (tests)");
  add_quantize_option(app, o->quantize);
  o->kv.add_to(app);
  o->spec.add_to(app);

  return [o] {
    if (auto err = o->sp.validate()) throw Error(*err);
    o->kv.resolve();  // bad KV flags fail before the model loads
    std::string template_source;
    std::optional<chat::ChatTemplate> tmpl = chat_template_from_flags(o->chat_template_file, o->chat_template, template_source);
    LoadedModel lm = load_model(resolve_model_path(o->model), LoadOptions{true, parse_quantize(o->quantize)});
    if (!tmpl) tmpl = model_chat_template(lm, template_source);
    const Tokenizer& tok = *lm.tokenizer;
    EngineConfig ec;
    ec.spec = o->spec.resolve();
    std::optional<LoadedModel> draft;
    if (ec.spec.draft) {
      draft = load_draft_model(o->spec.model_draft, lm);
      ec.draft_model = draft->model.get();
    }
    ec.kv = o->kv.resolve_for(*lm.model);
    ec.threads = o->threads > 0 ? o->threads : ThreadPool::default_num_threads();
    ec.parallel = 1;
    ec.max_queue = 1;
    ec.ctx_size = o->ctx_size > 0 ? o->ctx_size : lm.model->config().ctx_len;
    ec.model_id = o->model;
    ec.extra_eog_ids = lm.generation.eos_token_ids;
    Engine engine(*lm.model, &tok, ec);
    engine.start();
    std::fprintf(stderr, "pagoda chat: %s (%s), chat template: %s, %lld tokens of context; /help for help\n",
                 o->model.c_str(), lm.model->config().summary().c_str(), template_source.c_str(),
                 static_cast<long long>(engine.config().ctx_size));

    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a Ctrl-C interrupts the read at the prompt
    sigaction(SIGINT, &sa, nullptr);

    const bool interactive = isatty(STDIN_FILENO);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    auto restart = [&] {
      messages = nlohmann::ordered_json::array();
      if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
    };
    restart();
    bool interrupted_at_prompt = false;
    std::string message;
    for (;;) {
      const Input in = read_message(message, interactive);
      if (in == Input::End) break;
      if (in == Input::Interrupted) {
        g_interrupted = false;
        if (interrupted_at_prompt) break;
        interrupted_at_prompt = true;
        std::fputs("\n(Ctrl-C again, or /bye, to quit)\n", stdout);
        continue;
      }
      interrupted_at_prompt = false;
      if (message == "/bye" || message == "/exit" || message == "/quit") break;
      if (message == "/help" || message == "/?") {
        std::fputs(kHelp, stdout);
        continue;
      }
      if (message == "/clear") {
        restart();
        std::fputs("(a new conversation)\n", stdout);
        continue;
      }
      if (message.rfind("/system ", 0) == 0) {
        o->system = message.substr(8);
        restart();
        std::fputs("(a new conversation with that system prompt)\n", stdout);
        continue;
      }
      if (message.empty()) continue;

      messages.push_back({{"role", "user"}, {"content", message}});
      chat::ChatTemplate::Inputs inputs;
      inputs.messages = messages;
      inputs.add_generation_prompt = true;
      if (tok.bos() >= 0) inputs.bos_token = tok.token_text(tok.bos());
      if (tok.eos() >= 0) inputs.eos_token = tok.token_text(tok.eos());
      Request req;
      try {
        req.prompt = tok.encode(tmpl->apply(inputs), /*add_special=*/false, /*parse_special=*/true);
      } catch (const Error& e) {
        messages.erase(messages.size() - 1);
        std::fprintf(stderr, "pagoda chat: %s\n", e.what());
        continue;
      }
      // BOS when the model wants one and the template did not write it (as the server does).
      if (tok.add_bos() && tok.bos() >= 0 && (req.prompt.empty() || req.prompt.front() != tok.bos()))
        req.prompt.insert(req.prompt.begin(), tok.bos());
      req.sampling = o->sp;
      req.max_tokens = o->n_predict;
      req.ignore_eos = o->ignore_eos;
      auto sink = std::make_shared<ReplySink>();
      std::future<RequestResult> done = sink->result();
      const SubmitResult sub = engine.submit(std::move(req), sink);
      if (!sub.ok()) {  // the conversation outgrew the context: say so, keep the chat going
        messages.erase(messages.size() - 1);
        std::fprintf(stderr, "pagoda chat: %s (/clear starts a new conversation)\n", sub.message.c_str());
        continue;
      }
      while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready)
        if (g_interrupted.exchange(false)) engine.cancel(sub.request_id);
      RequestResult r;
      try {
        r = done.get();
      } catch (const Error& e) {
        messages.erase(messages.size() - 1);
        std::fprintf(stderr, "\npagoda chat: %s\n", e.what());
        continue;
      }
      std::fwrite(r.final_text.data(), 1, r.final_text.size(), stdout);
      std::fputs("\n", stdout);
      std::fflush(stdout);
      messages.push_back({{"role", "assistant"}, {"content", r.text}});
      double decode_ms = 0;
      for (double ms : r.timings.token_intervals_ms) decode_ms += ms;
      const size_t n = r.timings.token_intervals_ms.size();
      std::fprintf(stderr, "[prompt %lld tokens, %lld from the cache; %lld tokens at %.1f tok/s%s]\n",
                   static_cast<long long>(r.prompt_tokens), static_cast<long long>(r.cached_tokens),
                   static_cast<long long>(r.generated_tokens), n ? n / std::max(decode_ms / 1000.0, 1e-9) : 0.0,
                   r.finish == FinishReason::Cancelled ? "; stopped" : "");
    }
    engine.stop();
    return 0;
  };
}

}  // namespace pagoda::cli
