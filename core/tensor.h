// Tensor: a strided view over shared Storage, with the autograd state that makes it differentiable.
// A Tensor is a cheap handle (one shared_ptr); copies share data, clone() copies it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/memory_format.h"
#include "kiln/core/shape.h"
#include "kiln/core/storage.h"

namespace kiln {

class Node;
class Tensor;
namespace indexing {
class TensorIndex;
}

// A hook sees the gradient flowing into a tensor; returning a defined tensor replaces it.
using GradHook = std::function<Tensor(const Tensor&)>;
// Runs after a leaf's .grad has been updated for this backward pass (distributed training uses it
// to start reducing a gradient as soon as it is final).
using PostAccumulateHook = std::function<void(Tensor&)>;

struct AutogradMeta {
  bool requires_grad = false;  // set by the user on leaves; non-leaves require grad via grad_fn
  std::shared_ptr<Tensor> grad;
  std::shared_ptr<Node> grad_fn;         // the node that produced this tensor (non-leaves)
  std::weak_ptr<Node> grad_accumulator;  // leaves: the node that adds into .grad, shared by uses
  std::vector<GradHook> hooks;           // leaves only; non-leaf hooks live on grad_fn
  std::vector<PostAccumulateHook> post_accumulate_hooks;
  bool retains_grad = false;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements, from the start of storage
  DType dtype = DType::f32;
  bool is_view = false;  // shares storage with the tensor it was made from
  std::unique_ptr<AutogradMeta> autograd;

  AutogradMeta& autograd_meta();
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata ----
  const Shape& shape() const;
  const Shape& strides() const;
  int64_t dim() const;
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t numel() const;
  int64_t offset() const;
  DType dtype() const;
  Device device() const;
  size_t element_size() const;
  bool is_contiguous() const;
  // Dense in `format`'s order (channels_last: a 4-D tensor laid out NHWC), size-1 dims ignored.
  bool is_contiguous(MemoryFormat format) const;
  // The format a result computed from this tensor should take, as PyTorch's
  // suggest_memory_format(): channels_last when the strides say so (is_channels_last_strides),
  // else contiguous.
  MemoryFormat suggest_memory_format() const;
  const std::shared_ptr<Storage>& storage() const;
  // Address of element 0 (storage start + offset).
  void* data_ptr() const;
  template <class T>
  T* data() const;  // checks that T matches dtype()

  // ---- views: share storage, never copy ----
  Tensor view(const Shape& shape) const;     // throws if the strides do not allow it
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }  // t[i], a view, as PyTorch's
  // t.index({Slice(1, None), 0, mask}) is Python's t[1:, 0, mask] (core/tensor_index.h): a view
  // when only integers, slices, None and Ellipsis index it, else a gathered copy; differentiable.
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;
  Tensor contiguous() const;  // itself when already contiguous
  // Itself when already dense in `format` (or for preserve), else a copy laid out so
  // (differentiable), as PyTorch's contiguous(memory_format=...).
  Tensor contiguous(MemoryFormat format) const;

  // ---- conversion and copies ----
  // to(dtype), to(device) and clone() keep the memory format the tensor suggests, as PyTorch's
  // (memory_format=torch.preserve_format).
  Tensor to(DType dtype) const;  // itself when the dtype matches
  // x.to(MemoryFormat::channels_last), as PyTorch's x.to(memory_format=...): itself when it
  // already suggests `format` (or for preserve), else a copy in it (differentiable). Unlike
  // contiguous(format), a [N, 1, H, W] tensor, dense in both formats, is copied to carry the
  // channels-last strides that make later ops keep the format.
  Tensor to(MemoryFormat format) const;
  Tensor to(Device device) const;  // itself when the device matches; differentiable
  Tensor to(const std::string& device) const { return to(Device::parse(device)); }
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  // non_blocking: from pinned memory to a GPU the copy is queued on the current stream and this
  // returns at once, as PyTorch's; any other pair of devices copies as to(device).
  Tensor to(Device device, bool non_blocking) const;
  Tensor pin_memory() const;  // a copy in page-locked host memory (itself if pinned); needs a GPU
  bool is_pinned() const;     // in memory from cuda::pinned_allocator()
  Tensor clone() const;       // a copy in the suggested memory format, differentiable
  Tensor clone(MemoryFormat format) const;  // a copy laid out in `format` (preserve: as clone())
  // The one element of a one-element tensor, converted to T: item() is a double (as a Python
  // float), item<int64_t>() exact for every integer.
  template <class T = double>
  T item() const;
  std::vector<double> tolist() const;  // every element, in row-major order, as double
  std::string str() const;             // printed like PyTorch, with shape, dtype and device

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // leaves only
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  Tensor grad() const;  // undefined until a backward pass reaches this leaf
  void set_grad(const Tensor& grad);
  void zero_grad();  // drops .grad (as PyTorch's set_to_none=True)
  // create_graph records the backward ops, so the .grad it leaves can be differentiated again
  // (double backward); it keeps the graph, whatever retain_graph says, as PyTorch's default.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  Tensor detach() const;  // shares storage, no history
  // Replaces this tensor's data (storage, shape, strides, dtype) with `other`'s, keeping its
  // identity and autograd state: how module.to() moves parameters an optimizer already holds.
  void set_data(const Tensor& other);
  void register_hook(GradHook hook);
  void register_post_accumulate_grad_hook(PostAccumulateHook hook);
  void retain_grad();  // a non-leaf keeps its .grad after backward
  uint64_t version() const;

  // ---- in place: bump the version counter ----
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(double value);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);
  // t += u is t.add_(u), in place, as in PyTorch (and so on for -=, *=, /=).
  Tensor& operator+=(const Tensor& other) { return add_(other); }
  Tensor& operator+=(double value) { return add_(value); }
  Tensor& operator-=(const Tensor& other) { return sub_(other); }
  Tensor& operator-=(double value) { return sub_(value); }
  Tensor& operator*=(const Tensor& other) { return mul_(other); }
  Tensor& operator*=(double value) { return mul_(value); }
  Tensor& operator/=(const Tensor& other) { return div_(other); }
  Tensor& operator/=(double value) { return div_(value); }
  Tensor& clamp_(double min, double max);
  Tensor& relu_();
  Tensor& neg_();
  Tensor& exp_();
  Tensor& sqrt_();
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& fill_(double value);
  Tensor& zero_();
  Tensor& copy_(const Tensor& src);  // broadcasts and converts src into this
  // Python's t[indices] = values (accumulate: t.index_put_(indices, values, accumulate=True), which
  // adds, duplicates included); values broadcast to the indexed shape. Without accumulate, indices
  // naming one element twice are a ValueError (PyTorch leaves which value lands undefined).
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, double value);

  // ---- method forms of common ops (see ops/*.h for every op) ----
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor pow(double exponent) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Makes a tensor over existing storage; the building block of every factory and view.
Tensor make_tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
                   DType dtype);
// A new, uninitialised, contiguous tensor.
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
// The same laid out in `format` (contiguous or channels_last; preserve is refused).
Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format);
// Whether t's elements fill one block of memory in contiguous or channels-last order (which one in
// *format): a kernel that treats every element alike (a multi-tensor step, a byte copy) can read
// such a tensor as a flat array.
bool dense_format(const Tensor& t, MemoryFormat* format);
// Whether a and b, of one shape, are both dense in the same order: element i of one's flat array
// is element i of the other's.
bool same_dense_layout(const Tensor& a, const Tensor& b);
// A new, uninitialised tensor of like's shape, of `dtype` on `device`, in the memory format like
// suggests: how a result keeps its operand's layout (PyTorch's preserve_format).
Tensor empty_like_layout(const Tensor& like, DType dtype, Device device);
// The same in page-locked host memory, for asynchronous copies to a GPU; needs a GPU.
Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);

template <class T>
T* Tensor::data() const {
  KILN_CHECK(dtype_of<T>() == dtype(), DTypeError, "Tensor::data: asked for {} but tensor is {}",
             dtype_name(dtype_of<T>()), dtype_name(dtype()));
  return static_cast<T*>(data_ptr());
}

// Reads one element as double; item<T>() converts from it (exact for every dtype but large i64).
double item_as_double(const Tensor& t);
template <class T>
T Tensor::item() const {
  if constexpr (std::is_same_v<T, int64_t>) {
    KILN_CHECK(numel() == 1, ValueError, "item: expected a tensor with one element, got shape {}",
               shape_str(shape()));
    if (dtype() == DType::i64) return *static_cast<const int64_t*>(to(Device::cpu()).data_ptr());
  }
  return convert<T>(item_as_double(*this));
}

// "[2, 3] f32 cpu": how errors describe a tensor ("undefined" for an undefined one).
std::string describe(const Tensor& t);

// Prints t.str(), as PyTorch's print(t): std::cout << t.
std::ostream& operator<<(std::ostream& out, const Tensor& t);

}  // namespace kiln
