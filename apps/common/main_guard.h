// run_main: how every kiln program ends on an error. Any exception, kiln's or not
// (std::filesystem_error, std::bad_alloc, std::length_error, ...), becomes one line on stderr,
// "<program>: <what went wrong>", and exit status 1 — never std::terminate and SIGABRT.
#pragma once

#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>

namespace kiln::apps {

// The message without a leading "<program>: " that the thrower may already have written.
inline std::string without_program(const std::string& program, const std::string& message) {
  const std::string prefix = program + ": ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

inline int report(const std::string& program, const std::string& message) {
  std::fflush(stdout);  // what the program printed so far comes before the error
  std::fprintf(stderr, "%s: %s\n", program.c_str(), without_program(program, message).c_str());
  return 1;
}

// Runs body() and returns its exit status; reports whatever it throws.
inline int run_main(const std::string& program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::filesystem::filesystem_error& e) {
    // "filesystem error: cannot create directories: Not a directory [/a/b]" says which call, the
    // reason and the path; keep all three.
    return report(program, e.what());
  } catch (const std::bad_alloc&) {
    return report(program, "out of memory (an allocation failed)");
  } catch (const std::length_error& e) {
    return report(program, std::string("a size is too large to allocate (") + e.what() + ")");
  } catch (const std::exception& e) {
    return report(program, e.what());
  } catch (...) {
    return report(program, "unknown error");
  }
}

}  // namespace kiln::apps
