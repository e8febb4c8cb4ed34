// sluice-load: the STOMP load generator and, as `sluice-load serve`, the benchmark sink.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tools/sluice-load/options.h"
#include "tools/sluice-load/run_load.h"
#include "tools/sluice-load/serve.h"

int main(int argc, char** argv) {
  using sluice::load::CommandLine;
  const std::vector<std::string> args(argv + 1, argv + argc);
  const CommandLine cl = sluice::load::parse_command_line(args);
  try {
    switch (cl.action) {
      case CommandLine::Action::kHelp:
        std::fputs(cl.message.c_str(), stdout);
        return 0;
      case CommandLine::Action::kError:
        std::fprintf(stderr, "sluice-load: %s\n(see sluice-load --help)\n", cl.message.c_str());
        return 2;
      case CommandLine::Action::kServe:
        return sluice::load::run_serve(cl.serve);
      case CommandLine::Action::kLoad:
        return sluice::load::run_load(cl.load);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sluice-load: %s\n", e.what());
    return 2;
  }
  return 2;
}
