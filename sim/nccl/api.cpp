// NCCL's entry points for the simulator build, under NCCL's own declarations (nccl.h), on the
// model of communicator.h. Argument errors are answered at once (ncclInvalidArgument, the reason
// in ncclGetLastError); what goes wrong between ranks is the communicator's asynchronous error.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/sim/nccl/communicator.h"
#include "kiln/sim/nccl/reduce.h"
#include "kiln/sim/nccl/rendezvous.h"
#include "kiln/sim/runtime/lazy_streams.h"
#include "kiln/sim/runtime/state.h"

// nccl.h's opaque handle. The communicator outlives it while a call that was blocked in it
// returns (ncclCommAbort from another thread releases such calls).
struct ncclComm {
  std::shared_ptr<kiln::sim::nccl::Communicator> model;
};

namespace {

namespace model = kiln::sim::nccl;
namespace rt = kiln::sim::runtime;

thread_local std::string last_argument_error;

// The calls between ncclGroupStart and its ncclGroupEnd, on this host thread (NCCL's groups are
// per thread), in the order they were made.
struct Group {
  int depth = 0;
  std::vector<std::pair<std::shared_ptr<model::Communicator>, model::Op>> ops;
};
thread_local Group group;

ncclResult_t invalid_usage(const std::string& why) {
  last_argument_error = "kiln-sim NCCL: " + why;
  return ncclInvalidUsage;
}

ncclResult_t invalid(const std::string& why) {
  last_argument_error = "kiln-sim NCCL: " + why;
  return ncclInvalidArgument;
}

std::string pointer_text(const void* pointer) {
  std::ostringstream text;
  text << pointer;
  return text.str();
}

// A buffer NCCL reads or writes must lie in one live allocation of the communicator's device.
bool on_device(const model::Communicator& comm, const void* buffer, std::size_t bytes,
               const char* call, const char* name, std::string* why) {
  if (bytes == 0 || rt::within_allocation(comm.device(), buffer, bytes)) return true;
  *why = std::string(call) + ": " + name + " " + pointer_text(buffer) + " (" +
         std::to_string(bytes) + " bytes) is not inside one allocation of device " +
         std::to_string(comm.device()) + ", the communicator's";
  return false;
}

// Checks a call's arguments, then runs it (or, inside a group, keeps it for ncclGroupEnd).
ncclResult_t enqueue(ncclComm_t comm, model::Op op, cudaStream_t stream, const char* call) {
  if (comm == nullptr) return invalid(std::string(call) + ": a null communicator");
  // A copy: ncclCommAbort from another thread may free the handle while this call waits.
  const std::shared_ptr<model::Communicator> held = comm->model;
  model::Communicator& c = *held;
  const std::size_t size = model::type_size(op.type);
  if (size == 0)
    return invalid(std::string(call) + ": the model does not hold " + model::type_name(op.type));
  const bool reduces =
      op.kind == model::OpKind::all_reduce || op.kind == model::OpKind::reduce_scatter;
  if (reduces && !model::known_reduction(op.reduction))
    return invalid(std::string(call) + ": " + model::reduction_name(op.reduction) +
                   " is not one of NCCL's built-in reductions");
  const bool p2p = op.kind == model::OpKind::send || op.kind == model::OpKind::recv;
  if ((p2p || op.kind == model::OpKind::broadcast) && (op.peer < 0 || op.peer >= c.nranks()))
    return invalid(std::string(call) + ": " + (p2p ? "peer " : "root ") + std::to_string(op.peer) +
                   " is not a rank below " + std::to_string(c.nranks()));
  if (rt::stream_device(stream) != c.device())
    return invalid(std::string(call) + ": a stream of device " +
                   std::to_string(rt::stream_device(stream)) + " for a communicator of device " +
                   std::to_string(c.device()));
  // The model does the call's work now, so the work queued on the stream before it runs first.
  rt::run_deferred(stream);
  const std::size_t bytes = op.count * size;
  const std::size_t ranks = static_cast<std::size_t>(c.nranks());
  std::size_t send_bytes = bytes;
  std::size_t recv_bytes = bytes;
  if (op.kind == model::OpKind::all_gather) recv_bytes = bytes * ranks;
  if (op.kind == model::OpKind::reduce_scatter) send_bytes = bytes * ranks;
  if (op.kind == model::OpKind::broadcast && c.rank() != op.peer) send_bytes = 0;
  if (op.kind == model::OpKind::recv) send_bytes = 0;
  if (op.kind == model::OpKind::send) recv_bytes = 0;
  std::string why;
  if (!on_device(c, op.send_buffer, send_bytes, call, "sendbuff", &why) ||
      !on_device(c, op.recv_buffer, recv_bytes, call, "recvbuff", &why))
    return invalid(why);
  // NCCL discards empty collectives; an empty send or receive is a message all the same.
  if (!p2p && op.count == 0) return ncclSuccess;
  if (group.depth > 0) {
    group.ops.emplace_back(comm->model, op);
    return ncclSuccess;
  }
  return c.wait(*c.submit({op}));
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  thread_local std::string text;
  text = comm != nullptr ? comm->model->last_error() : std::string();
  if (text.empty()) text = last_argument_error;
  return text.c_str();
}

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return invalid("ncclGetVersion: a null pointer");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return invalid("ncclGetUniqueId: a null pointer");
  return model::start_root(unique_id);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return invalid("ncclCommInitRankConfig: a null communicator pointer");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return invalid("ncclCommInitRankConfig: rank " + std::to_string(rank) + " of " +
                   std::to_string(nranks) + " ranks");
  const std::optional<model::RendezvousAddress> root = model::read_id(comm_id);
  if (!root)
    return invalid(
        "ncclCommInitRankConfig: the unique id was not made by this model's "
        "ncclGetUniqueId");
  const bool blocking =
      config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
  auto communicator =
      std::make_shared<model::Communicator>(nranks, rank, rt::current_device(), blocking, *root);
  *comm = new ncclComm{communicator};
  const ncclResult_t joined = communicator->wait_joined();
  if (blocking && joined != ncclSuccess) {
    communicator->abort();
    delete *comm;
    *comm = nullptr;
  }
  return joined;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr)
    return invalid("ncclCommGetAsyncError: a null argument");
  *async_error = comm->model->async_error();
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return invalid("ncclCommCount: a null argument");
  *count = comm->model->nranks();
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return invalid("ncclCommUserRank: a null argument");
  *rank = comm->model->rank();
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr) return invalid("ncclCommCuDevice: a null argument");
  *device = comm->model->device();
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return invalid("ncclCommFinalize: a null communicator");
  const std::shared_ptr<model::Communicator> c = comm->model;
  return c->wait(*c->submit({}, true));
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  const ncclResult_t result = comm->model->destroy();
  delete comm;
  return result;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->model->abort();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return enqueue(comm, {model::OpKind::all_reduce, sendbuff, recvbuff, count, datatype, op, 0},
                 stream, "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return enqueue(comm,
                 {model::OpKind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root},
                 stream, "ncclBroadcast");
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm,
                 {model::OpKind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0},
                 stream, "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return enqueue(comm,
                 {model::OpKind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0},
                 stream, "ncclReduceScatter");
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, {model::OpKind::send, sendbuff, nullptr, count, datatype, ncclSum, peer},
                 stream, "ncclSend");
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, {model::OpKind::recv, nullptr, recvbuff, count, datatype, ncclSum, peer},
                 stream, "ncclRecv");
}

ncclResult_t ncclGroupStart() {
  ++group.depth;
  return ncclSuccess;
}

// The outermost end runs each communicator's calls as one task, every communicator's task
// queued before any is waited for, so calls of one group progress together.
ncclResult_t ncclGroupEnd() {
  if (group.depth == 0) return invalid_usage("ncclGroupEnd without its ncclGroupStart");
  if (--group.depth > 0) return ncclSuccess;
  std::vector<std::pair<std::shared_ptr<model::Communicator>, std::vector<model::Op>>> tasks;
  for (auto& [comm, op] : group.ops) {
    auto it = tasks.begin();
    while (it != tasks.end() && it->first != comm) ++it;
    if (it == tasks.end()) it = tasks.insert(tasks.end(), {comm, {}});
    it->second.push_back(op);
  }
  group.ops.clear();
  std::vector<std::shared_ptr<model::Task>> queued;
  for (auto& [comm, ops] : tasks) queued.push_back(comm->submit(std::move(ops)));
  ncclResult_t result = ncclSuccess;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const ncclResult_t one = tasks[i].first->wait(*queued[i]);
    if (result == ncclSuccess) result = one;
  }
  return result;
}

}  // extern "C"
