// pagoda — command-line entry point: dispatches to the subcommands in commands.h.
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/error.h"

namespace {

// llama-server's multi-letter single-dash flags, which CLI11 cannot declare (a short name
// is one letter): rewritten to pagoda's long names before parsing. Only exact words, so a
// value such as a prompt is untouched unless it is exactly one of these.
constexpr std::pair<const char*, const char*> kLlamaServerFlags[] = {
    {"-np", "--parallel"}, {"-ctk", "--kv-type-k"}, {"-ctv", "--kv-type-v"}, {"-hf", "--hf-repo"},
    {"-hfr", "--hf-repo"}, {"-md", "--model-draft"}};

std::vector<std::string> with_long_names(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    for (const auto& [from, to] : kLlamaServerFlags)
      if (a == from) a = to;
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pagoda: a paged-KV LLM inference server for GGUF Llama-family models"};
  app.set_version_flag("--version", std::string("pagoda ") + PAGODA_VERSION);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for all subcommands");
  std::map<CLI::App*, pagoda::cli::Runner> runners;
  auto add = [&](const char* name, const char* desc, pagoda::cli::Runner (*fn)(CLI::App&)) {
    CLI::App* sub = app.add_subcommand(name, desc);
    runners[sub] = fn(*sub);
  };
  add("generate", "Generate text from a prompt, streaming it to stdout", pagoda::cli::add_generate);
  add("chat", "Chat with a model in the terminal (the chat template, the prefix cache across turns)",
      pagoda::cli::add_chat);
  add("bench-model", "Measure prompt-processing and generation speed, with the decode roofline",
      pagoda::cli::add_bench_model);
  add("bench-vision", "Measure how long a vision projector (--mmproj) takes to encode an image",
      pagoda::cli::add_bench_vision);
  add("bench-engine", "Measure aggregate generation speed for N concurrent streams through the engine",
      pagoda::cli::add_bench_engine);
  add("inspect", "Print a GGUF file's metadata and tensor table", pagoda::cli::add_inspect);
  add("tokenize", "Print the token ids (and pieces) of a text", pagoda::cli::add_tokenize);
  add("synth", "Write a random-weight model of a real shape as GGUF (and a Gemma 3 vision projector)",
      pagoda::cli::add_synth);
  add("serve", "Serve the model over an OpenAI-compatible HTTP API", pagoda::cli::add_serve);
  add("chat-template", "Render a conversation with a Jinja chat template (for checking a template by hand)",
      pagoda::cli::add_chat_template);
  add("convert", "Convert a Hugging Face model directory (safetensors) to GGUF", pagoda::cli::add_convert);
  add("bench", "Benchmark any OpenAI-compatible server with a realistic workload (latency percentiles, throughput)",
      pagoda::cli::add_bench);
  add("pull", "Download a model from the Hugging Face Hub into its cache (OWNER/REPO[:QUANT | /FILE])",
      pagoda::cli::add_pull);
  add("list", "List the models in the Hugging Face cache (sizes, revisions)", pagoda::cli::add_list);
  add("rm", "Delete a model (OWNER/REPO) from the Hugging Face cache", pagoda::cli::add_rm);
  add("logits", "Write the raw logits of a token sequence (for reference checks)", pagoda::cli::add_logits);

  // `pagoda serve --version` as well as `pagoda --version`.
  for (CLI::App* sub : app.get_subcommands({}))
    sub->set_version_flag("--version", std::string("pagoda ") + PAGODA_VERSION);
  std::vector<std::string> args = with_long_names(argc, argv);
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  try {
    app.parse(static_cast<int>(argp.size()), argp.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line and where to look, not the whole help (90 lines for serve) after it.
    CLI::App* failing = &app;
    for (CLI::App* sub : app.get_subcommands()) failing = sub;
    const std::string cmd = failing == &app ? "pagoda" : "pagoda " + failing->get_name();
    if (argc == 1) {  // no command at all: the list of commands is the answer (25 lines)
      std::fprintf(stderr, "%s", app.help().c_str());
      return 2;
    }
    std::fprintf(stderr, "%s: %s (see '%s --help')\n", cmd.c_str(), e.what(), cmd.c_str());
    return 2;
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) return runners.at(sub)();
  } catch (const pagoda::Error& e) {
    std::fprintf(stderr, "pagoda: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagoda: internal error: %s\n", e.what());
    return 1;
  }
  return 2;
}
