// How kiln's programs read their command line and what their exit statuses mean (the user guide,
// section 11, lists them):
//   0    success (and --help)
//   1    an error while running: one line on stderr, "<program>: <what went wrong>"
//   2    a usage error: an unknown, malformed or repeated flag, the same one line and a pointer to
//        --help (2, as most command-line tools use, instead of CLI11's own codes such as 109)
//   130  interrupted (Ctrl-C, 128 + SIGINT), after saving what the program could; kiln-train
//        exits 143 (128 + SIGTERM) when SIGTERM stops it the same way
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>

namespace kiln::apps {

constexpr int kExitUsage = 2;
constexpr int kExitInterrupted = 130;

// CLI11's messages where they mislead: a flag given twice is "--epochs: At Most 1 required but
// received 2", as if a second value were required.
inline std::string usage_message(const CLI::ParseError& e) {
  static const std::regex repeated(R"(^(\S+): At Most 1 required but received (\d+)$)");
  std::smatch m;
  const std::string what = e.what();
  if (std::regex_match(what, m, repeated))
    return m[1].str() + " was given " + m[2].str() + " times; give it once";
  return what;
}

// Parses argv into `app`. Returns the status to exit with when the program should stop here
// (0 after printing --help, kExitUsage after a usage error), or nullopt to go on.
inline std::optional<int> parse_command_line(CLI::App& app, const std::string& program, int argc,
                                             char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", program.c_str(), usage_message(e).c_str(),
                 program.c_str());
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace kiln::apps
