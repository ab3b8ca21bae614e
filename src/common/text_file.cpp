#include "common/text_file.h"

#include <fstream>
#include <sstream>

#include "common/error.h"

namespace pagoda {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot open");
  return ss.str();
}

}  // namespace pagoda
