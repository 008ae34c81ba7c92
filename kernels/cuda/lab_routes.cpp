#include "kiln/kernels/cuda/lab_routes.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/cuda.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"

namespace kiln::cuda {

namespace {

const char* op_name(RoutedOp op) {
  switch (op) {
    case RoutedOp::softmax:
      return "softmax";
    case RoutedOp::sum:
      return "sum";
    case RoutedOp::attention:
      break;
  }
  return "attention";
}
const char* lab_family(RoutedOp op) {
  return op == RoutedOp::sum ? "reduction" : op_name(op);
}

template <class Version>
const Version* find_version(const std::vector<Version>& versions, const std::string& name) {
  for (const Version& v : versions)
    if (name == v.name) return &v;
  return nullptr;
}

// The attention version of that name, of the f32 table or of the tensor-core one.
const lab::AttentionVersion* find_attention_version(const std::string& name) {
  if (const lab::AttentionVersion* v = find_version(lab::attention_forward_versions(), name))
    return v;
  return find_version(lab::attention_tc_versions(), name);
}

bool names_a_version(const LabRoute& route) {
  switch (route.op) {
    case RoutedOp::softmax:
      return find_version(lab::softmax_versions(), route.version) != nullptr;
    case RoutedOp::sum:
      return find_version(lab::reduction_versions(), route.version) != nullptr;
    case RoutedOp::attention:
      break;
  }
  return find_attention_version(route.version) != nullptr ||
         find_version(lab::attention_backward_versions(), route.version) != nullptr;
}

void check(const LabRoute& route) {
  KILN_CHECK(route.min_cols >= 0 && (route.max_cols < 0 || route.max_cols >= route.min_cols),
             ValueError, "lab routes: {} route to {} has an empty range of row lengths [{}, {}]",
             op_name(route.op), route.version, route.min_cols, route.max_cols);
  KILN_CHECK(route.version.rfind("v0_", 0) != 0, ValueError,
             "lab routes: {} is version 0, the op's own kernel; leave the shapes out of the table "
             "instead",
             route.version);
  KILN_CHECK(names_a_version(route), ValueError,
             "lab routes: the {} lab has no version named \"{}\" (kernels/cuda/lab/)",
             lab_family(route.op), route.version);
}

struct Table {
  std::mutex mutex;
  std::vector<LabRoute> routes;
};

Table& table() {
  static Table* t = [] {
    auto* made = new Table;
    if (const char* text = std::getenv("KILN_LAB_ROUTES")) {
      made->routes = parse_lab_routes(text);
      for (const LabRoute& r : made->routes) check(r);
    }
    return made;
  }();
  return *t;
}

std::atomic<uint64_t> routed{0};

// The major compute capability of a GPU, asked once (cudaGetDeviceProperties is slow for a call
// made per op).
int capability_major(int device) {
  static std::mutex mutex;
  static std::map<int, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = known.find(device);
  if (it == known.end()) it = known.emplace(device, get_device_properties(device).major).first;
  return it->second;
}

// The version of the first route of `op` whose range holds cols.
std::string route_for(RoutedOp op, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return {};
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const LabRoute& r : t.routes)
    if (r.op == op && cols >= r.min_cols && (r.max_cols < 0 || cols <= r.max_cols))
      return r.version;
  return {};
}

int64_t parse_size(const std::string& text, const std::string& whole) {
  KILN_CHECK(!text.empty() && text.find_first_not_of("0123456789") == std::string::npos, ValueError,
             "KILN_LAB_ROUTES: \"{}\" in \"{}\" is not a row length", text, whole);
  return std::stoll(text);
}

}  // namespace

std::vector<LabRoute> lab_routes() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  return t.routes;
}

void set_lab_routes(const std::vector<LabRoute>& routes) {
  for (const LabRoute& r : routes) check(r);
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.routes = routes;
}

std::vector<LabRoute> parse_lab_routes(const std::string& text) {
  std::vector<LabRoute> routes;
  std::stringstream entries(text);
  std::string entry;
  while (std::getline(entries, entry, ',')) {
    if (entry.empty()) continue;
    const size_t first = entry.find(':'), second = entry.find(':', first + 1);
    KILN_CHECK(first != std::string::npos && second != std::string::npos, ValueError,
               "KILN_LAB_ROUTES: expected op:min-max:version, got \"{}\"", entry);
    const std::string op = entry.substr(0, first);
    const std::string range = entry.substr(first + 1, second - first - 1);
    KILN_CHECK(op == "softmax" || op == "sum" || op == "attention", ValueError,
               "KILN_LAB_ROUTES: \"{}\" in \"{}\" is not a routed op (softmax, sum or attention)",
               op, entry);
    const size_t dash = range.find('-');
    KILN_CHECK(dash != std::string::npos, ValueError,
               "KILN_LAB_ROUTES: expected a range min-max (or min-) in \"{}\"", entry);
    LabRoute route;
    route.op = op == "softmax" ? RoutedOp::softmax
               : op == "sum"   ? RoutedOp::sum
                               : RoutedOp::attention;
    route.min_cols = parse_size(range.substr(0, dash), entry);
    const std::string max = range.substr(dash + 1);
    route.max_cols = max.empty() ? -1 : parse_size(max, entry);
    route.version = entry.substr(second + 1);
    routes.push_back(std::move(route));
  }
  return routes;
}

const lab::SoftmaxVersion* routed_softmax(int64_t rows, int64_t cols) {
  const std::string name = route_for(RoutedOp::softmax, rows, cols);
  if (name.empty()) return nullptr;
  ++routed;
  return find_version(lab::softmax_versions(), name);
}

const lab::ReductionVersion* routed_sum(int64_t rows, int64_t cols) {
  const std::string name = route_for(RoutedOp::sum, rows, cols);
  if (name.empty()) return nullptr;
  ++routed;
  return find_version(lab::reduction_versions(), name);
}

const lab::AttentionVersion* routed_attention(DType dtype, int64_t batch_heads, int64_t l,
                                              int64_t s, int64_t d) {
  if (batch_heads <= 0 || l <= 0 || s <= 0) return nullptr;
  const bool tensor_cores = dtype == DType::bf16 || dtype == DType::f16;
  if (dtype != DType::f32 && !tensor_cores) return nullptr;
  const std::vector<lab::AttentionVersion>& versions =
      tensor_cores ? lab::attention_tc_versions() : lab::attention_forward_versions();
  const lab::AttentionVersion* chosen = nullptr;
  {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    for (const LabRoute& r : t.routes) {
      if (r.op != RoutedOp::attention || s < r.min_cols || (r.max_cols >= 0 && s > r.max_cols))
        continue;
      const lab::AttentionVersion* v = find_version(versions, r.version);
      if (v == nullptr) continue;  // a version of the other dtype's table
      const bool v4 = r.version == "v4_mma_fa2";
      if (v4 ? !lab::attention::v4_head_dim_supported(d) : d < 1 || d > lab::attention::kMaxHeadDim)
        continue;
      chosen = v;
      break;
    }
  }
  if (chosen == nullptr || std::string(chosen->name) != "v4_mma_fa2") return chosen;
  // v4's instructions are Ampere's: below 8.0 the version would refuse, so the op composes.
  const int device = current_device();
  if (capability_major(device) >= 8) return chosen;
  static std::once_flag told;
  std::call_once(told, [&] {
    const DeviceProperties gpu = get_device_properties(device);
    std::fprintf(stderr,
                 "kiln: the lab route of scaled_dot_product_attention to v4_mma_fa2 is not taken "
                 "on cuda:%d (%s, compute capability %d.%d): it needs 8.0 or newer; the op "
                 "composes matmul and softmax there (kernels/cuda/lab_routes.h)\n",
                 device, gpu.name.c_str(), gpu.major, gpu.minor);
  });
  return nullptr;
}

const lab::AttentionBackwardVersion& routed_attention_backward(int64_t s) {
  const std::vector<lab::AttentionBackwardVersion>& versions = lab::attention_backward_versions();
  {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    for (const LabRoute& r : t.routes) {
      if (r.op != RoutedOp::attention || s < r.min_cols || (r.max_cols >= 0 && s > r.max_cols))
        continue;
      if (const lab::AttentionBackwardVersion* v = find_version(versions, r.version)) return *v;
    }
  }
  return *find_version(versions, "v1_recompute");
}

void note_lab_routed_call() {
  ++routed;
}

uint64_t lab_routed_calls() {
  return routed.load();
}

}  // namespace kiln::cuda
