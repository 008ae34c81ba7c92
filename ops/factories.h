// Factories: new tensors from sizes, values, ranges, random streams and host buffers.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"

namespace kiln {

Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
            Device device = Device::cpu());
// A 0-dim tensor holding `value`.
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());
// 0, 1, ..., end-1 as i64 (PyTorch's arange with an integer end).
Tensor arange(int64_t end, DType dtype = DType::i64, Device device = Device::cpu());
// start, start+step, ... while < end (> end for a negative step).
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::f32,
              Device device = Device::cpu());
Tensor linspace(double start, double end, int64_t steps, DType dtype = DType::f32,
                Device device = Device::cpu());
Tensor eye(int64_t n, int64_t m = -1, DType dtype = DType::f32, Device device = Device::cpu());

// Uniform in [0, 1), standard normal, integers in [low, high); from `generator` or the default.
Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
            Generator* generator = nullptr);
Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
             Generator* generator = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::i64,
               Device device = Device::cpu(), Generator* generator = nullptr);
// Uniform in [low, high): the building block of weight initialisation.
Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::f32,
               Device device = Device::cpu(), Generator* generator = nullptr);

Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor rand_like(const Tensor& t, Generator* generator = nullptr);
Tensor randn_like(const Tensor& t, Generator* generator = nullptr);

// Copies `count` elements of type `dtype` from host memory into a new tensor of `shape`.
Tensor from_blob(const void* data, const Shape& shape, DType dtype, Device device = Device::cpu());

// tensor({1.f, 2.f}) is f32, tensor({1.0, 2.0}) f64, tensor({1, 2}) i64 (as PyTorch), and so on.
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape = {});
template <class T>
Tensor tensor(std::initializer_list<T> values) {
  return tensor(std::vector<T>(values));
}
// Rows of equal length: tensor({{1.f, 2.f}, {3.f, 4.f}}) has shape [2, 2].
template <class T>
Tensor tensor(std::initializer_list<std::initializer_list<T>> rows);

}  // namespace kiln
