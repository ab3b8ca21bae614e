// The `pagoda` subcommands. Each registers its options on a CLI11 subcommand
// and returns the function that runs it (exit code). Errors the user can fix
// (bad file, bad argument value) are thrown as pagoda::Error and printed as one
// line by main(); argument parse errors print usage and exit 2.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

namespace pagoda::cli {

using Runner = std::function<int()>;

Runner add_generate(CLI::App& app);
Runner add_chat(CLI::App& app);
Runner add_bench_model(CLI::App& app);
Runner add_bench_vision(CLI::App& app);
Runner add_bench_engine(CLI::App& app);
Runner add_inspect(CLI::App& app);
Runner add_tokenize(CLI::App& app);
Runner add_synth(CLI::App& app);
Runner add_logits(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_chat_template(CLI::App& app);
Runner add_convert(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_pull(CLI::App& app);
Runner add_list(CLI::App& app);
Runner add_rm(CLI::App& app);

}  // namespace pagoda::cli
