// Whole-file reads for small text inputs (JSON configs, templates, key files): any thread.
#pragma once

#include <string>

namespace pagoda {

// The bytes of the file at `path`. Throws pagoda::Error "PATH: cannot open" when it
// cannot be opened or read.
std::string read_text_file(const std::string& path);

}  // namespace pagoda
