#include "kiln/ops/checks.h"

#include <initializer_list>
#include <string>

namespace kiln {

Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    KILN_CHECK(t->device() == first->device(), DeviceError,
               "{}: expected all tensors on one device, got {} and {}; move one with .to(device)",
               op, describe(*first), describe(*t));
  }
  return first ? first->device() : Device::cpu();
}

void require_floating(const char* op, const Tensor& t, const char* argument) {
  KILN_CHECK(is_floating(t.dtype()), DTypeError, "{}: expected a floating-point {}, got {}", op,
             argument, describe(t));
}

void require_same_floating(const char* op, const Tensor& a, const Tensor& b, const char* a_name,
                           const char* b_name) {
  require_defined(op, a, a_name);
  require_defined(op, b, b_name);
  common_device(op, {&a, &b});
  KILN_CHECK(a.dtype() == b.dtype(), DTypeError,
             "{}: expected {} and {} of one dtype, got {} and {}; convert one with .to(dtype)", op,
             a_name, b_name, describe(a), describe(b));
  require_floating(op, a, a_name);
}

void require_index_dtype(const char* op, const Tensor& t, const char* argument) {
  KILN_CHECK(t.dtype() == DType::i64 || t.dtype() == DType::i32, DTypeError,
             "{}: expected {} of dtype i64 or i32, got {}", op, argument, describe(t));
}

void require_defined(const char* op, const Tensor& t, const char* argument) {
  KILN_CHECK(t.defined(), ValueError, "{}: {} is an undefined tensor", op, argument);
}

}  // namespace kiln
