// The simulator's NCCL model (sim/nccl), across processes: 2, 3 and 4 ranks, each a forked
// process on a simulated device, talking over loopback TCP as kiln's ranks would.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
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
ncclResult_t settle(ncclComm_t comm, ncclResult_t result) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (result == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::yield();
    const ncclResult_t query = ncclCommGetAsyncError(comm, &result);
    if (query != ncclSuccess) result = query;
  }
  return result;
}

// Polls an idle communicator until it reports an error (or the limit passes): what it then says.
ncclResult_t first_error(ncclComm_t comm) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  ncclResult_t async = ncclSuccess;
  while (async == ncclSuccess && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    expect_nccl(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
  }
  return async;
}

// Starts joining and settles the join: what the communicator then answers.
ncclResult_t settle_join(int rank, int nranks, const ncclUniqueId& id, bool blocking,
                         ncclComm_t* comm) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  *comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(comm, nranks, id, rank, &config);
  expect(*comm != nullptr, "ncclCommInitRankConfig made no communicator");
  return settle(*comm, started);
}

ncclComm_t join(int rank, int nranks, const ncclUniqueId& id, bool blocking) {
  ncclComm_t comm = nullptr;
  expect_nccl(settle_join(rank, nranks, id, blocking, &comm), "ncclCommInitRankConfig");
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
    expect_values(
        mine_reduced.read(),
        [&](std::size_t i) { return reduced(static_cast<std::size_t>(rank) * count + i); },
        tolerance, "reduce_scatter " + what);
  }
  const int root = nranks - 1;
  DeviceArray<T> broadcast(mine(count, 0));
  expect_nccl(ncclBroadcast(broadcast.get(), broadcast.get(), count, type, root, comm, stream),
              "ncclBroadcast " + name);
  expect_values(
      broadcast.read(), [&](std::size_t i) { return value(root, i); }, 0, "broadcast " + name);
  DeviceArray<T> own(mine(count, 0));
  DeviceArray<T> gathered(count * nranks);
  expect_nccl(ncclAllGather(own.get(), gathered.get(), count, type, comm, stream),
              "ncclAllGather " + name);
  expect_values(
      gathered.read(), [&](std::size_t i) { return value(static_cast<int>(i / count), i % count); },
      0, "all_gather " + name);
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
  // Megabytes from every rank to every other at once: parts larger than a socket's buffers.
  const std::size_t large = std::size_t{1} << 20;
  std::vector<float> values(large);
  for (std::size_t i = 0; i < large; ++i) values[i] = static_cast<float>(value(rank, i));
  DeviceArray<float> buffer(values);
  expect_nccl(ncclAllReduce(buffer.get(), buffer.get(), large, ncclFloat32, ncclSum, comm, stream),
              "ncclAllReduce of 1M float32");
  expect_values(
      buffer.read(),
      [&](std::size_t i) {
        return host_reduce(ncclSum, nranks, [&](int r) { return value(r, i); });
      },
      0, "all_reduce of 1M float32");
  cudaStreamDestroy(stream);
  end(comm);
  return "";
}

// A ring step as kiln's ring makes it, in one group: to the next rank 0 floats, then 3, then 1;
// from the previous the same. They pair in posting order.
std::string ring_of_messages(int rank, int nranks, const ncclUniqueId& id, bool blocking) {
  ncclComm_t comm = join(rank, nranks, id, blocking);
  const int next = (rank + 1) % nranks;
  const int previous = (rank + nranks - 1) % nranks;
  const std::vector<std::size_t> sizes = {0, 3, 1};
  std::vector<std::unique_ptr<DeviceArray<float>>> sends, recvs;
  for (std::size_t m = 0; m < sizes.size(); ++m) {
    std::vector<float> values(sizes[m]);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 100.0f * rank + 10.0f * m + i;
    sends.push_back(std::make_unique<DeviceArray<float>>(values));
    recvs.push_back(std::make_unique<DeviceArray<float>>(sizes[m]));
  }
  expect_nccl(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t m = 0; m < sizes.size(); ++m) {
    expect_nccl(ncclRecv(recvs[m]->get(), sizes[m], ncclFloat32, previous, comm, nullptr),
                "ncclRecv");
    expect_nccl(ncclSend(sends[m]->get(), sizes[m], ncclFloat32, next, comm, nullptr), "ncclSend");
  }
  expect_nccl(settle(comm, ncclGroupEnd()), "ncclGroupEnd");
  for (std::size_t m = 0; m < sizes.size(); ++m)
    expect_values(
        recvs[m]->read(), [&](std::size_t i) { return 100.0 * previous + 10.0 * m + i; }, 0,
        "message " + std::to_string(m));
  end(comm);
  return "";
}

// Rank 0 sends `sent` floats, rank 1 receives `received`: both must report the mismatch.
RankBody mismatched_message(std::size_t sent, std::size_t received) {
  return [=](int rank, int nranks, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm = join(rank, nranks, id, false);
    DeviceArray<float> buffer(std::max(sent, received));
    const ncclResult_t started =
        rank == 0 ? ncclSend(buffer.get(), sent, ncclFloat32, 1, comm, nullptr)
                  : ncclRecv(buffer.get(), received, ncclFloat32, 0, comm, nullptr);
    const ncclResult_t result = settle(comm, started);
    ncclResult_t async = ncclSuccess;
    expect_nccl(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
    const std::string why = ncclGetLastError(comm);
    ncclCommAbort(comm);
    expect(result == ncclInvalidUsage && async == ncclInvalidUsage,
           std::string("the mismatch answered ") + ncclGetErrorString(result) + ", async " +
               ncclGetErrorString(async));
    expect(why.find("posting order") != std::string::npos &&
               why.find(std::to_string(sent * sizeof(float)) + " bytes") != std::string::npos &&
               why.find(std::to_string(received * sizeof(float)) + " bytes") != std::string::npos,
           "ncclGetLastError does not name both sizes: " + why);
    return "";
  };
}

// Rank 1 receives what rank 0 never sends. On a non-blocking communicator the receive stays in
// progress until ncclCommAbort releases it; rank 0 then sees rank 1 gone.
std::string unmatched_receive(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = join(rank, nranks, id, false);
  if (rank == 0) {
    const ncclResult_t seen = first_error(comm);
    ncclCommAbort(comm);
    expect(seen == ncclRemoteError, std::string("rank 0 saw ") + ncclGetErrorString(seen) +
                                        " after rank 1 aborted, not a remote error");
    return "";
  }
  DeviceArray<float> buffer(4);
  ncclResult_t result = ncclRecv(buffer.get(), 4, ncclFloat32, 0, comm, nullptr);
  const auto until = Clock::now() + std::chrono::milliseconds(500);
  while (result == ncclInProgress && Clock::now() < until)
    expect_nccl(ncclCommGetAsyncError(comm, &result), "ncclCommGetAsyncError");
  expect(result == ncclInProgress, std::string("the unmatched receive answered ") +
                                       ncclGetErrorString(result) + " instead of hanging");
  const auto start = Clock::now();
  expect_nccl(ncclCommAbort(comm), "ncclCommAbort");
  expect(Clock::now() - start < std::chrono::seconds(5), "ncclCommAbort took over 5 s");
  return "";
}

// The same on a blocking communicator: the receive blocks its thread until another thread aborts.
std::string unmatched_blocking_receive(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = join(rank, nranks, id, true);
  if (rank == 0) {
    const ncclResult_t seen = first_error(comm);
    ncclCommAbort(comm);
    expect(seen == ncclRemoteError,
           std::string("rank 0 saw ") + ncclGetErrorString(seen) + " after rank 1 aborted");
    return "";
  }
  std::atomic<bool> aborted{false};
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    aborted = true;
    ncclCommAbort(comm);
  });
  DeviceArray<float> buffer(4);
  const ncclResult_t result = ncclRecv(buffer.get(), 4, ncclFloat32, 0, comm, nullptr);
  const bool released_by_abort = aborted;
  watchdog.join();
  expect(released_by_abort, "the unmatched receive returned before the abort");
  expect(result != ncclSuccess, "the aborted receive answered success");
  return "";
}

// Rank 0 calls `first`, the others `others`: every rank must report the mismatch.
RankBody mismatched_collectives(std::function<ncclResult_t(ncclComm_t, float*)> first,
                                std::function<ncclResult_t(ncclComm_t, float*)> others) {
  return [=](int rank, int nranks, const ncclUniqueId& id) -> std::string {
    ncclComm_t comm = join(rank, nranks, id, false);
    DeviceArray<float> buffer(8 * static_cast<std::size_t>(nranks));
    const ncclResult_t result = settle(comm, (rank == 0 ? first : others)(comm, buffer.get()));
    const std::string why = ncclGetLastError(comm);
    ncclCommAbort(comm);
    expect(result == ncclInvalidUsage,
           std::string("the mismatched collective answered ") + ncclGetErrorString(result));
    expect(why.find("same order") != std::string::npos,
           "ncclGetLastError does not explain: " + why);
    return "";
  };
}

// The last rank's process ends without a word (as a killed rank's does); the others hear of it as
// a remote error, not a hang and not a result.
std::string rank_dies(int rank, int nranks, const ncclUniqueId& id) {
  if (rank == nranks - 1) {
    join(rank, nranks, id, false);
    _exit(0);
  }
  // The asynchronous error is the communicator's, not a call's: a survivor still polling its
  // join when the last rank's process ends may hear of the loss there, before its all-reduce.
  ncclComm_t comm = nullptr;
  ncclResult_t result = settle_join(rank, nranks, id, false, &comm);
  DeviceArray<float> buffer(4);
  if (result == ncclSuccess)
    result = settle(
        comm, ncclAllReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclSum, comm, nullptr));
  const std::string why = ncclGetLastError(comm);
  ncclCommAbort(comm);
  expect(result == ncclRemoteError,
         std::string("the join or the all-reduce answered ") + ncclGetErrorString(result));
  // With 3 ranks, a survivor may see the other survivor's abort first.
  const std::string lost = nranks == 2 ? "rank 1's connection ended" : "connection ended";
  expect(why.find(lost) != std::string::npos,
         "ncclGetLastError does not say '" + lost + "': " + why);
  return "";
}

// One rank: a buffer in host memory, or past its allocation's end, is refused at the call.
std::string buffers_outside_device_memory(int rank, int nranks, const ncclUniqueId& id) {
  ncclComm_t comm = join(rank, nranks, id, true);
  std::vector<float> host(4);
  DeviceArray<float> device(4);
  const ncclResult_t from_host =
      ncclAllReduce(host.data(), device.get(), 4, ncclFloat32, ncclSum, comm, nullptr);
  const std::string why = ncclGetLastError(comm);
  const ncclResult_t past_end =
      ncclAllReduce(device.get(), device.get(), 5, ncclFloat32, ncclSum, comm, nullptr);
  const ncclResult_t in_bounds =
      ncclAllReduce(device.get(), device.get(), 4, ncclFloat32, ncclSum, comm, nullptr);
  end(comm);
  expect(from_host == ncclInvalidArgument && past_end == ncclInvalidArgument,
         "a buffer outside device memory was taken");
  expect(why.find("sendbuff") != std::string::npos, "ncclGetLastError does not say which: " + why);
  expect_nccl(in_bounds, "ncclAllReduce on one rank");
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

TEST_CASE("nccl model: sends and receives pair per peer in posting order, 0 bytes included",
          "[nccl_sim]") {
  for (int nranks : {2, 3, 4}) {
    INFO(nranks << " ranks");
    for (bool blocking : {false, true}) {
      INFO((blocking ? "blocking" : "non-blocking") << " communicators");
      const std::vector<std::string> failures =
          run_ranks(nranks, [=](int rank, int n, const ncclUniqueId& id) {
            return ring_of_messages(rank, n, id, blocking);
          });
      INFO(joined(failures));
      CHECK(failures.empty());
    }
  }
}

TEST_CASE("nccl model: a send and a receive of different sizes are an error on both ranks",
          "[nccl_sim]") {
  for (auto [sent, received] : {std::pair<std::size_t, std::size_t>{8, 4}, {0, 1}, {1, 0}}) {
    INFO("sent " << sent << " floats, received " << received);
    const std::vector<std::string> failures = run_ranks(2, mismatched_message(sent, received));
    INFO(joined(failures));
    CHECK(failures.empty());
  }
}

TEST_CASE("nccl model: an unmatched receive hangs until ncclCommAbort releases it", "[nccl_sim]") {
  for (const RankBody& body : {RankBody(unmatched_receive), RankBody(unmatched_blocking_receive)}) {
    const std::vector<std::string> failures = run_ranks(2, body);
    INFO(joined(failures));
    CHECK(failures.empty());
  }
}

TEST_CASE("nccl model: collectives called in another order, count or type are reported",
          "[nccl_sim]") {
  const auto all_reduce = [](std::size_t count, ncclDataType_t type) {
    return [=](ncclComm_t comm, float* buffer) {
      return ncclAllReduce(buffer, buffer, count, type, ncclSum, comm, nullptr);
    };
  };
  const auto broadcast = [](ncclComm_t comm, float* buffer) {
    return ncclBroadcast(buffer, buffer, 4, ncclFloat32, 0, comm, nullptr);
  };
  const auto all_gather = [](ncclComm_t comm, float* buffer) {
    return ncclAllGather(buffer, buffer, 4, ncclFloat32, comm, nullptr);
  };
  for (int nranks : {2, 3}) {
    INFO(nranks << " ranks");
    for (const RankBody& body :
         {mismatched_collectives(all_reduce(4, ncclFloat32), broadcast),
          mismatched_collectives(all_gather, all_reduce(4, ncclFloat32)),
          mismatched_collectives(all_reduce(4, ncclFloat32), all_reduce(5, ncclFloat32)),
          mismatched_collectives(all_reduce(4, ncclFloat32), all_reduce(4, ncclInt32))}) {
      const std::vector<std::string> failures = run_ranks(nranks, body);
      INFO(joined(failures));
      CHECK(failures.empty());
    }
  }
}

TEST_CASE("nccl model: buffers outside the device's memory are refused at the call", "[nccl_sim]") {
  const std::vector<std::string> failures = run_ranks(1, buffers_outside_device_memory);
  INFO(joined(failures));
  CHECK(failures.empty());
}

TEST_CASE("nccl model: a rank whose process ends is a remote error for the others", "[nccl_sim]") {
  for (int nranks : {2, 3}) {
    INFO(nranks << " ranks");
    const std::vector<std::string> failures = run_ranks(nranks, rank_dies);
    INFO(joined(failures));
    CHECK(failures.empty());
  }
}
