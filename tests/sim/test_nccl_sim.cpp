// The simulator's NCCL model (sim/nccl), across processes: 2, 3 and 4 ranks, each a forked
// process on a simulated device, talking over loopback TCP as kiln's ranks would.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nccl_ranks.h"

namespace {

using Clock = std::chrono::steady_clock;

void expect(bool ok, const std::string& why) {
  if (!ok) throw std::runtime_error(why);
}

void expect_nccl(ncclResult_t result, const std::string& call) {
  expect(result == ncclSuccess, call + " answered " + ncclGetErrorString(result));
}

// As kiln's process group settles a non-blocking communicator's call: polls until it is over.
ncclResult_t settle(ncclComm_t comm, ncclResult_t result,
                    std::chrono::milliseconds limit = std::chrono::milliseconds(20000)) {
  const auto deadline = Clock::now() + limit;
  while (result == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::yield();
    const ncclResult_t query = ncclCommGetAsyncError(comm, &result);
    if (query != ncclSuccess) result = query;
  }
  return result;
}

ncclComm_t join(int rank, int nranks, const ncclUniqueId& id, bool blocking) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  expect(comm != nullptr, "ncclCommInitRankConfig made no communicator");
  expect_nccl(settle(comm, started), "ncclCommInitRankConfig");
  return comm;
}

void end(ncclComm_t comm) {
  expect_nccl(settle(comm, ncclCommFinalize(comm)), "ncclCommFinalize");
  expect_nccl(ncclCommDestroy(comm), "ncclCommDestroy");
}

// Simulated device memory holding n T.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    expect(cudaMalloc(reinterpret_cast<void**>(&data_), std::max<std::size_t>(n, 1) * sizeof(T)) ==
               cudaSuccess,
           "cudaMalloc");
  }
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) {
    expect(cudaMemcpy(data_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess,
           "cudaMemcpy to the device");
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return data_; }
  std::vector<T> read() const {
    std::vector<T> values(n_);
    expect(cudaMemcpy(values.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess,
           "cudaMemcpy to the host");
    return values;
  }

 private:
  T* data_ = nullptr;
  std::size_t n_;
};

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, __half>)
    return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(v);
  else
    return static_cast<double>(v);
}

// Rank r's element i: small integers, different on every rank, exact in every type.
double value(int rank, std::size_t i) {
  return static_cast<double>(((rank + 1) * 3 + i * 5) % 17);
}

double host_reduce(ncclRedOp_t op, int nranks, const std::function<double(int)>& of_rank) {
  double acc = of_rank(0);
  for (int r = 1; r < nranks; ++r) {
    const double v = of_rank(r);
    acc = op == ncclMax ? std::max(acc, v) : op == ncclMin ? std::min(acc, v) : acc + v;
  }
  return op == ncclAvg ? acc / nranks : acc;
}

template <class T>
void expect_values(const std::vector<T>& got, const std::function<double(std::size_t)>& expected,
                   double tolerance, const std::string& what) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = expected(i);
    expect(std::abs(to_double(got[i]) - e) <= tolerance * std::max(1.0, std::abs(e)),
           what + ": element " + std::to_string(i) + " is " + std::to_string(to_double(got[i])) +
               ", expected " + std::to_string(e));
  }
}

template <class T>
void check_collectives(ncclComm_t comm, cudaStream_t stream, int rank, int nranks,
                       ncclDataType_t type, const std::string& name, bool floating) {
  const std::size_t count = 37;
  const double tolerance = !floating ? 0 : sizeof(T) == 2 ? 1e-2 : 1e-6;
  std::vector<ncclRedOp_t> ops = {ncclSum, ncclMax, ncclMin};
  if (floating) ops.push_back(ncclAvg);
  const auto mine = [&](std::size_t n, std::size_t offset) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = from_double<T>(value(rank, offset + i));
    return v;
  };
  for (ncclRedOp_t op : ops) {
    const std::string what = name + " op " + std::to_string(op);
    const auto reduced = [&](std::size_t i) {
      return host_reduce(op, nranks, [&](int r) { return value(r, i); });
    };
    DeviceArray<T> send(mine(count, 0));
    DeviceArray<T> recv(count);
    expect_nccl(ncclAllReduce(send.get(), recv.get(), count, type, op, comm, stream),
                "ncclAllReduce " + what);
    expect_values(recv.read(), reduced, tolerance, "all_reduce " + what);
    expect_nccl(ncclAllReduce(send.get(), send.get(), count, type, op, comm, stream),
                "in-place ncclAllReduce " + what);
    expect_values(send.read(), reduced, tolerance, "in-place all_reduce " + what);

    DeviceArray<T> parts(mine(count * nranks, 0));
    DeviceArray<T> mine_reduced(count);
    expect_nccl(ncclReduceScatter(parts.get(), mine_reduced.get(), count, type, op, comm, stream),
                "ncclReduceScatter " + what);
    expect_values(mine_reduced.read(),
                  [&](std::size_t i) { return reduced(static_cast<std::size_t>(rank) * count + i); },
                  tolerance, "reduce_scatter " + what);
  }
  const int root = nranks - 1;
  DeviceArray<T> broadcast(mine(count, 0));
  expect_nccl(ncclBroadcast(broadcast.get(), broadcast.get(), count, type, root, comm, stream),
              "ncclBroadcast " + name);
  expect_values(broadcast.read(), [&](std::size_t i) { return value(root, i); }, 0,
                "broadcast " + name);
  DeviceArray<T> own(mine(count, 0));
  DeviceArray<T> gathered(count * nranks);
  expect_nccl(ncclAllGather(own.get(), gathered.get(), count, type, comm, stream),
              "ncclAllGather " + name);
  expect_values(gathered.read(),
                [&](std::size_t i) { return value(static_cast<int>(i / count), i % count); }, 0,
                "all_gather " + name);
}

std::string every_collective(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = join(rank, nranks, id, true);
  cudaStream_t stream;
  expect(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate");
  check_collectives<float>(comm, stream, rank, nranks, ncclFloat32, "f32", true);
  check_collectives<double>(comm, stream, rank, nranks, ncclFloat64, "f64", true);
  check_collectives<__half>(comm, stream, rank, nranks, ncclFloat16, "f16", true);
  check_collectives<__nv_bfloat16>(comm, stream, rank, nranks, ncclBfloat16, "bf16", true);
  check_collectives<std::int32_t>(comm, stream, rank, nranks, ncclInt32, "i32", false);
  check_collectives<std::int64_t>(comm, stream, rank, nranks, ncclInt64, "i64", false);
  check_collectives<std::uint8_t>(comm, stream, rank, nranks, ncclUint8, "u8", false);
  cudaStreamDestroy(stream);
  end(comm);
  return "";
}

std::string joined(const std::vector<std::string>& failures) {
  std::string text;
  for (const std::string& f : failures) text += f + "\n";
  return text;
}

}  // namespace

TEST_CASE("nccl model: every collective, dtype and reduction against the host, 2 to 4 ranks",
          "[nccl_sim]") {
  for (int nranks : {2, 3, 4}) {
    INFO(nranks << " ranks");
    const std::vector<std::string> failures = run_ranks(nranks, every_collective);
    INFO(joined(failures));
    CHECK(failures.empty());
  }
}
