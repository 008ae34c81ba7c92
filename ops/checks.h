// The argument checks every op entry point makes before it reaches a kernel: definedness, device
// agreement, dtypes. Kept in one place so every op words its errors alike.
#pragma once

#include <initializer_list>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln {

// Throws DeviceError naming `op` unless every defined tensor is on one device; returns it.
Device common_device(const char* op, std::initializer_list<const Tensor*> tensors);
// Throws DTypeError unless the tensor is floating point.
void require_floating(const char* op, const Tensor& t, const char* argument = "input");
// Both defined, on one device, of one floating dtype (matmul, linear, conv2d operands).
void require_same_floating(const char* op, const Tensor& a, const Tensor& b, const char* a_name,
                           const char* b_name);
// Throws DTypeError unless the tensor holds integer class indices (i32 or i64).
void require_index_dtype(const char* op, const Tensor& t, const char* argument = "index");
// Throws ValueError naming op and argument for an undefined tensor.
void require_defined(const char* op, const Tensor& t, const char* argument = "input");

}  // namespace kiln
