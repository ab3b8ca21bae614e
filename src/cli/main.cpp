// pagoda — command-line entry point (subcommands are added as modules land).
#include <cstdio>

int main(int argc, char** argv) {
  std::fprintf(stderr, "usage: pagoda <command> [options]\n");
  return 2;
}
