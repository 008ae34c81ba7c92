// kiln::Error and its subclasses: every bad input becomes one of these, with a message that names
// the op, what it expected and what it got. KILN_CHECK formats the message only on failure.
#pragma once

#include <stdexcept>
#include <string>
#ifndef __CUDACC__
#include <fmt/format.h>
#endif

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Shapes that do not fit together (broadcasting, matmul inner dims, cat along a dim).
class ShapeError : public Error {
  using Error::Error;
};
// A dtype the op does not accept, or two dtypes that must agree and do not.
class DTypeError : public Error {
  using Error::Error;
};
// Tensors on different devices, or a device kiln was not built for.
class DeviceError : public Error {
  using Error::Error;
};
// An index or dimension out of range.
class IndexError : public Error {
  using Error::Error;
};
// A value out of its domain (negative size, probability outside [0, 1], ...).
class ValueError : public Error {
  using Error::Error;
};
// Misuse of autograd: backward through a freed graph, a saved tensor modified in place, ...
class AutogradError : public Error {
  using Error::Error;
};
// A feature that exists in the API but not on this device or dtype yet.
class NotImplementedError : public Error {
  using Error::Error;
};
// Memory could not be allocated.
class OutOfMemoryError : public Error {
  using Error::Error;
};
// Work that a CUDA graph cannot hold, asked for while one is being captured (a host
// synchronisation, random numbers), or a graph used out of order. The message names the op.
class GraphCaptureError : public Error {
  using Error::Error;
};
// A distributed job failed: a rank died or hung past the timeout, a collective's peers
// disagreed, the rendezvous could not be reached. The message names the rank and the collective.
class DistError : public Error {
  using Error::Error;
};

}  // namespace kiln

// KILN_CHECK(cond, ErrorType, "fmt string", args...): throws ErrorType(formatted message) if !cond.
#ifndef __CUDACC__
#define KILN_CHECK(cond, ErrorType, ...)                    \
  do {                                                      \
    if (!(cond)) throw ErrorType(fmt::format(__VA_ARGS__)); \
  } while (0)
#else
// nvcc (CUDA 13) cannot compile fmt 9's headers in C++20 mode, so in .cu files a failed check names
// the condition, file and line instead. Op entry points, which check user input, are all .cpp.
#define KILN_CHECK(cond, ErrorType, ...)                                            \
  do {                                                                              \
    if (!(cond))                                                                    \
      throw ErrorType(std::string("check failed: " #cond " at ") + __FILE__ + ":" + \
                      std::to_string(__LINE__));                                    \
  } while (0)
#endif
