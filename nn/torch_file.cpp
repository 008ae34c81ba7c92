#include "kiln/nn/torch_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/tensor.h"
#include "kiln/nn/atomic_file.h"
#include "kiln/nn/pickle_reader.h"
#include "kiln/nn/printable.h"
#include "kiln/nn/zip_archive.h"

namespace kiln::nn {
namespace {

// Storages are read and written as raw host memory, which is the file's byte order (little, as
// archive/byteorder says) only on a little-endian machine.
static_assert(std::endian::native == std::endian::little,
              "PyTorch file I/O assumes a little-endian host");

using Kind = PickleNode::Kind;
constexpr const char* kLoad = "load_torch_file";
constexpr const char* kSave = "save_torch_file";
constexpr const char* kArchive = "archive";
constexpr const char* kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr const char* kRebuildParameter = "torch._utils._rebuild_parameter";
constexpr int64_t kMaxDims = 64;

// PyTorch's storage class for each kiln dtype.
const char* storage_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "FloatStorage";
    case DType::f64:
      return "DoubleStorage";
    case DType::f16:
      return "HalfStorage";
    case DType::bf16:
      return "BFloat16Storage";
    case DType::i32:
      return "IntStorage";
    case DType::i64:
      return "LongStorage";
    case DType::u8:
      return "ByteStorage";
    case DType::boolean:
      return "BoolStorage";
  }
  throw DTypeError("save_torch_file: unknown dtype");
}

bool storage_dtype(const std::string& global, DType* dtype) {
  for (DType d : kAllDTypes) {
    if (global == fmt::format("torch.{}", storage_name(d))) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

template <class... Args>
[[noreturn]] void fail(const std::string& path, fmt::format_string<Args...> format,
                       Args&&... args) {
  throw ValueError(fmt::format("{}: {}: {}", kLoad, path,
                               printable(fmt::format(format, std::forward<Args>(args)...))));
}

// Refuses every global but the few a state dict's pickle names.
void check_global(const std::string& path, const std::string& module, const std::string& name) {
  std::string global = module + "." + name;
  if (global.size() > 200) global = global.substr(0, 200) + "...";
  DType dtype;
  if (global == "collections.OrderedDict" || global == kRebuildTensor ||
      global == kRebuildParameter || global == "torch.Size" || storage_dtype(global, &dtype))
    return;
  if (module == "torch" && name.size() > 7 && name.ends_with("Storage"))
    fail(path,
         "storage type {} holds a dtype kiln does not have (kiln has f32, f64, f16, bf16, "
         "i32, i64, u8 and bool)",
         global);
  if (module == "torch._utils")
    fail(path,
         "{} rebuilds a kind of tensor kiln does not read (quantized, sparse, or a tensor "
         "subclass); kiln reads dense tensors saved by torch.save(model.state_dict())",
         global);
  fail(path,
       "the file pickles {}, which a state dict does not use; kiln executes no pickled code, so it "
       "reads only state dicts: if this file was written by torch.save(model), save "
       "model.state_dict() instead",
       global);
}

struct FileStorage {
  DType dtype;
  Tensor data;  // 1-d, on the CPU
};

class Loader {
 public:
  Loader(const std::string& path, const ZipReader& zip, const PickleTree& tree,
         const std::string& prefix)
      : path_(path), zip_(zip), tree_(tree), prefix_(prefix) {}

  TensorMap load() {
    const PickleNode& root = tree_.at(tree_.root);
    if (root.kind != Kind::dict)
      fail(path_, "{}/data.pkl holds {}, expected a state dict (an OrderedDict of tensors)",
           prefix_, describe(root));
    TensorMap out;
    for (size_t i = 0; i + 1 < root.items.size(); i += 2) {
      const PickleNode& key = tree_.at(root.items[i]);
      if (key.kind != Kind::string)
        fail(path_, "a state dict key is {}, expected a str", describe(key));
      Tensor t = tensor(key.text, tree_.at(root.items[i + 1]));
      if (!out.emplace(key.text, t).second)
        fail(path_, "key \"{}\" occurs twice in the state dict", key.text);
    }
    return out;
  }

 private:
  std::string describe(const PickleNode& node) const {
    switch (node.kind) {
      case Kind::none:
        return "None";
      case Kind::boolean:
        return node.integer ? "True" : "False";
      case Kind::integer:
        return fmt::format("the int {}", node.integer);
      case Kind::floating:
        return fmt::format("the float {}", node.floating);
      case Kind::string:
        return "a str";
      case Kind::tuple:
        return fmt::format("a tuple of {}", node.items.size());
      case Kind::list:
        return fmt::format("a list of {}", node.items.size());
      case Kind::dict:
        return "a dict";
      case Kind::global:
        return fmt::format("the global {}", node.text);
      case Kind::call:
        return fmt::format("the result of {}", tree_.at(node.items[0]).text);
      case Kind::persistent:
        return "a persistent id";
    }
    return "a value";
  }

  const PickleNode& expect(const std::string& key, const PickleNode& node, Kind kind,
                           const char* what) const {
    if (node.kind != kind) fail(path_, "tensor \"{}\": {} is {}", key, what, describe(node));
    return node;
  }

  int64_t count(const std::string& key, const PickleNode& node, const char* what) const {
    if (node.kind != Kind::integer || node.integer < 0)
      fail(path_, "tensor \"{}\": {} is {}, expected a non-negative int", key, what,
           describe(node));
    return node.integer;
  }

  Shape ints(const std::string& key, const PickleNode& node, const char* what) const {
    expect(key, node, Kind::tuple, what);
    if (static_cast<int64_t>(node.items.size()) > kMaxDims)
      fail(path_, "tensor \"{}\": {} has {} dimensions, more than {}", key, what, node.items.size(),
           kMaxDims);
    Shape out;
    for (size_t item : node.items) out.push_back(count(key, tree_.at(item), what));
    return out;
  }

  Tensor tensor(const std::string& key, const PickleNode& value) {
    if (value.kind != Kind::call)
      fail(path_,
           "the value of \"{}\" is {}, not a tensor: kiln reads state dicts, whose values are all "
           "tensors (for a checkpoint that nests one, save checkpoint[\"model\"] on its own)",
           key, describe(value));
    const PickleNode* call = &value;
    if (tree_.at(call->items[0]).text == kRebuildParameter) {
      // (data, requires_grad, backward_hooks): an nn.Parameter around a tensor.
      const std::vector<size_t>& args = tree_.at(call->items[1]).items;
      if (args.size() != 3)
        fail(path_, "tensor \"{}\": {} has {} arguments, expected 3", key, kRebuildParameter,
             args.size());
      call = &tree_.at(args[0]);
      if (call->kind != Kind::call)
        fail(path_, "tensor \"{}\": the data of its {} is {}, not a tensor", key, kRebuildParameter,
             describe(*call));
    }
    const std::string& function = tree_.at(call->items[0]).text;
    const std::vector<size_t>& args = tree_.at(call->items[1]).items;
    if (function != kRebuildTensor)
      fail(path_, "the value of \"{}\" is the result of {}, not a tensor", key, function);
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (args.size() != 6 && args.size() != 7)
      fail(path_, "tensor \"{}\": {} has {} arguments, expected 6 or 7", key, function,
           args.size());
    const FileStorage& source = storage(key, tree_.at(args[0]));
    const int64_t offset = count(key, tree_.at(args[1]), "storage_offset");
    const Shape sizes = ints(key, tree_.at(args[2]), "size");
    const Shape strides = ints(key, tree_.at(args[3]), "stride");
    if (sizes.size() != strides.size())
      fail(path_, "tensor \"{}\": size has {} dimensions but stride has {}", key, sizes.size(),
           strides.size());
    if (args.size() == 7) {
      const PickleNode& metadata = tree_.at(args[6]);
      if (metadata.kind != Kind::none && !(metadata.kind == Kind::dict && metadata.items.empty()))
        fail(path_,
             "tensor \"{}\" carries Python attributes (metadata {}); kiln reads plain "
             "tensors",
             key, describe(metadata));
    }
    return gather(key, source, offset, sizes, strides);
  }

  // Checks that every element lies inside the storage, then copies them out in row-major order.
  Tensor gather(const std::string& key, const FileStorage& source, int64_t offset,
                const Shape& sizes, const Shape& strides) const {
    const int64_t available = source.data.numel();
    // kiln's contiguous strides are products of the sizes (a 0 counting as 1), so they must fit in
    // int64 even when the tensor is empty.
    int64_t numel = 1, extent = 1;
    for (int64_t s : sizes) {
      const int64_t factor = std::max<int64_t>(s, 1);
      if (extent > std::numeric_limits<int64_t>::max() / factor)
        fail(path_,
             "tensor \"{}\": size {} is too large: the product of its sizes does not fit in "
             "int64",
             key, shape_str(sizes));
      extent *= factor;
      numel *= s;
    }
    // Each element's own bytes (no expanded, stride-0 tensors) bound the allocation by the file.
    if (numel > available)
      fail(path_, "tensor \"{}\": size {} has {} elements, more than its storage's {}", key,
           shape_str(sizes), numel, available);
    Tensor out = empty(sizes, source.dtype);
    if (numel == 0) return out;
    // Each size is at most numel, and so at most the storage's length: 128 bits hold the sum.
    unsigned __int128 last = static_cast<uint64_t>(offset);
    for (size_t d = 0; d < sizes.size(); ++d)
      last += static_cast<unsigned __int128>(sizes[d] - 1) * static_cast<uint64_t>(strides[d]);
    if (last >= static_cast<uint64_t>(available))
      fail(path_,
           "tensor \"{}\": size {}, stride {} and storage_offset {} reach past its "
           "storage's {} elements",
           key, shape_str(sizes), shape_str(strides), offset, available);
    const size_t element = dtype_size(source.dtype);
    const auto* from = static_cast<const unsigned char*>(source.data.data_ptr());
    auto* to = static_cast<unsigned char*>(out.data_ptr());
    const size_t dims = sizes.size();
    std::vector<int64_t> index(dims, 0);
    int64_t at = offset;
    for (int64_t i = 0; i < numel; ++i) {
      std::memcpy(to + static_cast<size_t>(i) * element, from + static_cast<size_t>(at) * element,
                  element);
      for (size_t d = dims; d-- > 0;) {
        at += strides[d];
        if (++index[d] < sizes[d]) break;
        at -= strides[d] * sizes[d];
        index[d] = 0;
      }
    }
    return out;
  }

  // ('storage', torch.<X>Storage, key, location, numel): a storage, read once however many
  // tensors share it.
  const FileStorage& storage(const std::string& key, const PickleNode& node) {
    const PickleNode& id = tree_.at(expect(key, node, Kind::persistent, "its storage").items[0]);
    if (id.kind != Kind::tuple || id.items.size() != 5 ||
        tree_.at(id.items[0]).kind != Kind::string || tree_.at(id.items[0]).text != "storage")
      fail(path_,
           "tensor \"{}\": its storage's persistent id is {}, expected ('storage', type, "
           "key, location, numel)",
           key, describe(id));
    const PickleNode& type = tree_.at(id.items[1]);
    DType dtype = DType::f32;
    if (type.kind != Kind::global || !storage_dtype(type.text, &dtype))
      fail(path_, "tensor \"{}\": its storage type is {}, expected torch.<Type>Storage", key,
           describe(type));
    const std::string& name =
        expect(key, tree_.at(id.items[2]), Kind::string, "its storage key").text;
    expect(key, tree_.at(id.items[3]), Kind::string, "its storage location");
    const int64_t numel = count(key, tree_.at(id.items[4]), "its storage's numel");

    auto found = storages_.find(name);
    if (found != storages_.end()) {
      if (found->second.dtype != dtype || found->second.data.numel() != numel)
        fail(path_,
             "tensor \"{}\": storage \"{}\" is {} of {} elements here, {} of {} for an "
             "earlier tensor",
             key, name, type.text, numel, storage_name(found->second.dtype),
             found->second.data.numel());
      return found->second;
    }
    const std::string entry_name = fmt::format("{}/data/{}", prefix_, name);
    const ZipEntry* entry = zip_.find(entry_name);
    if (!entry)
      fail(path_, "tensor \"{}\": its storage \"{}\" has no entry {} in the archive", key, name,
           entry_name);
    const uint64_t element = dtype_size(dtype);
    if (entry->size % element != 0 || entry->size / element != static_cast<uint64_t>(numel))
      fail(path_,
           "tensor \"{}\": entry {} has {} bytes, expected {} elements of {} ({} bytes "
           "each)",
           key, entry_name, entry->size, numel, type.text, element);
    Tensor data = empty({numel}, dtype);
    zip_.read(*entry, data.data_ptr());
    if (dtype == DType::boolean) {
      // kiln's bool is a C++ bool, for which any byte but 0 or 1 is undefined behaviour.
      const auto* bytes = static_cast<const unsigned char*>(data.data_ptr());
      for (int64_t i = 0; i < numel; ++i)
        if (bytes[i] > 1)
          fail(path_, "entry {}: bool byte {} is {}, expected 0 or 1", entry_name, i, bytes[i]);
    }
    return storages_.emplace(name, FileStorage{dtype, data}).first->second;
  }

  const std::string& path_;
  const ZipReader& zip_;
  const PickleTree& tree_;
  const std::string& prefix_;
  std::map<std::string, FileStorage> storages_;
};

// torch.save before PyTorch 1.6 (and with _use_new_zipfile_serialization=False since) writes
// pickles back to back, the first starting with PROTO; older still, a tar archive.
void refuse_other_formats(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) fail(path, "cannot open: {}", std::generic_category().message(errno));
  unsigned char head[262] = {};
  const size_t got = std::fread(head, 1, sizeof head, file);
  std::fclose(file);
  if (got == 0) fail(path, "the file is empty");
  if (head[0] == 0x80)
    fail(path,
         "the file is in PyTorch's legacy format (torch.save with "
         "_use_new_zipfile_serialization=False, or PyTorch before 1.6); kiln reads the zip format "
         "torch.save writes by default: torch.save(torch.load(file), new_file) converts it");
  if (got >= 262 && std::memcmp(head + 257, "ustar", 5) == 0)
    fail(path,
         "the file is a tar archive, PyTorch's oldest legacy format; kiln reads the zip "
         "format torch.save writes by default");
  if (got < 4 || !(head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4))
    fail(path,
         "expected a zip archive (starting PK\\3\\4) as torch.save writes, found bytes "
         "{:02x} {:02x} {:02x} {:02x}",
         head[0], got > 1 ? head[1] : 0, got > 2 ? head[2] : 0, got > 3 ? head[3] : 0);
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

}  // namespace

bool is_torch_file(const std::string& path) {
  return starts_like_zip(path);
}

TensorMap load_torch_file(const std::string& path, Device device) {
  refuse_other_formats(path);
  ZipReader zip(kLoad, path);
  if (zip.entries().empty()) fail(path, "the zip archive has no entries");
  // Like torch.load, the first entry's folder names the archive.
  const std::string& first = zip.entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0)
    fail(path, "the first entry is not inside a folder; torch.save puts every entry in one");
  const std::string prefix = first.substr(0, slash);
  if (const ZipEntry* order = zip.find(prefix + "/byteorder")) {
    const std::string text = zip.read(*order);
    if (text == "big")
      fail(path,
           "the file was written on a big-endian machine (byteorder \"big\"); kiln reads "
           "little-endian files only");
    if (text != "little")
      fail(path, "{}/byteorder is \"{}\", expected \"little\" or \"big\"", prefix,
           text.substr(0, 16));
  }
  // torch.load refuses a file without a format version; newer files keep it in .data/version.
  const ZipEntry* version = zip.find(prefix + "/.data/version");
  if (!version) version = zip.find(prefix + "/version");
  if (!version) fail(path, "the archive has no {}/version entry", prefix);
  const std::string version_text = zip.read(*version);
  if (version_text.empty() || version_text.size() > 8 ||
      version_text.find_first_not_of("0123456789\n") != std::string::npos ||
      version_text.front() == '\n')
    fail(path, "{} ({} bytes) is not a format version number", version->name, version_text.size());
  const std::string pickle_name = prefix + "/data.pkl";
  const ZipEntry* pickle_entry = zip.find(pickle_name);
  if (!pickle_entry) fail(path, "the archive has no {} entry", pickle_name);
  const std::string pickle = zip.read(*pickle_entry);
  const PickleTree tree = read_pickle(pickle, fmt::format("{}: {}: {}", kLoad, path, pickle_name),
                                      [&](const std::string& module, const std::string& name) {
                                        check_global(path, module, name);
                                      });
  TensorMap tensors = Loader(path, zip, tree, prefix).load();
  if (device != Device::cpu())
    for (auto& [name, t] : tensors) t = t.to(device);
  return tensors;
}

void save_torch_file(const std::string& path, const TensorMap& tensors) {
  std::vector<std::pair<std::string, Tensor>> host;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(t.defined(), ValueError, "{}: {}: tensor \"{}\" is undefined", kSave, path, name);
    // Python reads the names as UTF-8 strings.
    KILN_CHECK(valid_utf8(name), ValueError, "{}: {}: tensor name \"{}\" is not valid UTF-8", kSave,
               path, printable(name));
    host.emplace_back(name, t.detach().to(Device::cpu()).contiguous());
  }
  PickleWriter pickle;
  pickle.global("collections", "OrderedDict");
  pickle.empty_tuple();
  pickle.reduce();
  pickle.mark();
  for (size_t i = 0; i < host.size(); ++i) {
    const auto& [name, t] = host[i];
    pickle.string(name);
    pickle.global("torch._utils", "_rebuild_tensor_v2");
    pickle.mark();
    pickle.mark();
    pickle.string("storage");
    pickle.global("torch", storage_name(t.dtype()));
    pickle.string(std::to_string(i));
    pickle.string("cpu");
    pickle.integer(t.numel());
    pickle.tuple();
    pickle.persistent_id();
    pickle.integer(0);
    pickle.mark();
    for (int64_t s : t.shape()) pickle.integer(s);
    pickle.tuple();
    pickle.mark();
    for (int64_t s : contiguous_strides(t.shape())) pickle.integer(s);
    pickle.tuple();
    pickle.boolean(false);
    pickle.global("collections", "OrderedDict");
    pickle.empty_tuple();
    pickle.reduce();
    pickle.tuple();
    pickle.reduce();
  }
  pickle.set_items();
  const std::string data = pickle.finish();

  AtomicFile file(kSave, path);
  ZipWriter zip([&](const void* bytes, size_t nbytes) { file.write(bytes, nbytes); });
  const std::string prefix = kArchive;
  zip.add(prefix + "/data.pkl", data.data(), data.size());
  zip.add(prefix + "/byteorder", "little", 6);
  for (size_t i = 0; i < host.size(); ++i) {
    const Tensor& t = host[i].second;
    zip.add(fmt::format("{}/data/{}", prefix, i), t.data_ptr(),
            static_cast<size_t>(t.numel()) * t.element_size());
  }
  zip.add(prefix + "/version", "3\n", 2);
  zip.finish();
  file.commit();
}

}  // namespace kiln::nn
