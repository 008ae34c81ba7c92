// Every collective of the nccl backend on every dtype it maps, sizes 0, 1 and 1000, against the
// host; and a ring of point-to-point messages of 0, 3 and 1 elements.
#include <cstdint>
#include <string>
#include <vector>

#include "job.h"
#include "kiln/core/cuda.h"
#include "kiln/dist/process_group.h"
#include "kiln/kiln.h"

namespace nccl_job {

using namespace kiln;
using dist::ReduceOp;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                    DType::i64, DType::i32, DType::u8,  DType::boolean};

std::string op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : op == ReduceOp::max ? "max" : "average";
}

// The reduction over ranks [0, n) of rank_input(first + rank) on the host, in f64: a bool sum is an
// "or" (the backend reduces bools with max).
Tensor host_reduction(int n, int first, int64_t numel, DType dtype, ReduceOp op) {
  Tensor acc = rank_input(first, numel, dtype).to(DType::f64);
  for (int r = 1; r < n; ++r) {
    const Tensor x = rank_input(first + r, numel, dtype).to(DType::f64);
    acc = op == ReduceOp::max || dtype == DType::boolean ? maximum(acc, x) : add(acc, x);
  }
  if (op == ReduceOp::average) acc = div(acc, static_cast<double>(n));
  return acc;
}

// An average rounds once in the dtype (the model divides in float): within one of its ulps.
void expect_reduced(const Tensor& got, const Tensor& want_f64, ReduceOp op,
                    const std::string& what) {
  if (op == ReduceOp::average) {
    const double rtol = got.dtype() == DType::bf16 ? 8e-3 : got.dtype() == DType::f16 ? 1e-3 : 1e-6;
    expect_close(got, want_f64, rtol, 0.0, what);
  } else {
    expect_equal(got, want_f64.to(got.dtype()), what);
  }
}

// A channels-last tensor goes through as the block of memory it fills; a gathered part in another
// layout is refused, naming the collective, before anything is sent.
void channels_last(dist::ProcessGroup& g) {
  const int n = g.size(), r = g.rank();
  const Shape shape{2, 3, 2, 2};
  auto input = [&](int rank) {
    return rank_input(rank, 24, DType::f32).view(shape).to(gpu()).to(MemoryFormat::channels_last);
  };
  const Tensor t = input(r);
  g.all_reduce(t, ReduceOp::sum);
  expect(t.is_contiguous(MemoryFormat::channels_last), "all_reduce keeps channels-last");
  expect_equal(t, host_reduction(n, 0, 24, DType::f32, ReduceOp::sum).to(DType::f32).view(shape),
               "all_reduce of a channels-last tensor");
  std::vector<Tensor> gathered;
  for (int q = 0; q < n; ++q)
    gathered.push_back(empty(shape, DType::f32, gpu(), MemoryFormat::channels_last));
  g.all_gather(gathered, input(r));
  for (int q = 0; q < n; ++q)
    expect_equal(gathered[q], input(q), "all_gather of channels-last tensors");
  std::vector<Tensor> nchw;
  for (int q = 0; q < n; ++q) nchw.push_back(zeros(shape, DType::f32, gpu()));
  try {
    g.all_gather(nchw, input(r));
    expect(false, "all_gather into parts of another layout is refused");
  } catch (const Error& e) {
    expect(std::string(e.what()).find("all_gather") != std::string::npos &&
               std::string(e.what()).find("channels_last") != std::string::npos,
           std::string("the refusal names the collective and the layout: ") + e.what());
  }
}

void send_and_receive(dist::ProcessGroup& g) {
  const int n = g.size(), r = g.rank(), right = (r + 1) % n, left = (r + n - 1) % n;
  // Messages of 0, 3 and 1 elements around the ring, each exchange one point-to-point group: the
  // 0-element message is real (NCCL pairs it with the left neighbour's), and the ones after it
  // must still land in order.
  for (int64_t numel : {int64_t{0}, int64_t{3}, int64_t{1}}) {
    const Tensor out = rank_input(r, numel, DType::f32).to(gpu());
    const Tensor in = full({numel}, -1.0, DType::f32, gpu());
    g.begin_point_to_point();
    auto received = g.recv_async(in, left, 0);
    auto sent = g.send_async(out, right, 0);
    g.end_point_to_point();
    received->wait();
    sent->wait();
    expect_equal(in, rank_input(left, numel, DType::f32),
                 "a message of " + std::to_string(numel) + " elements from the left");
  }
}

}  // namespace

void collectives() {
  dist::ProcessGroup& g = dist::default_group();
  const int n = g.size(), r = g.rank();
  expect(g.backend() == "nccl", "the default group's backend is nccl");
  expect(cuda::current_device() == dist::get_local_rank(), "each rank on cuda:LOCAL_RANK");
  for (DType dtype : kDtypes) {
    const std::string name = dtype_name(dtype);
    for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{1000}}) {
      const std::string size = " of " + std::to_string(numel) + " " + name;
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::average}) {
        if (op == ReduceOp::average && !is_floating(dtype)) continue;
        const Tensor t = rank_input(r, numel, dtype).to(gpu());
        g.all_reduce(t, op);
        expect_reduced(t, host_reduction(n, 0, numel, dtype, op), op,
                       "all_reduce " + op_name(op) + size);
      }
      for (int root = 0; root < n; ++root) {
        const Tensor t = rank_input(r, numel, dtype).to(gpu());
        g.broadcast(t, root);
        expect_equal(t, rank_input(root, numel, dtype),
                     "broadcast from " + std::to_string(root) + size);
      }
      std::vector<Tensor> gathered;
      for (int q = 0; q < n; ++q) gathered.push_back(zeros({numel}, dtype, gpu()));
      g.all_gather(gathered, rank_input(r, numel, dtype).to(gpu()));
      for (int q = 0; q < n; ++q)
        expect_equal(gathered[q], rank_input(q, numel, dtype), "all_gather" + size);
      // Rank q's part for rank p is rank_input(q + p): rank p gets the sum over q.
      std::vector<Tensor> parts;
      for (int p = 0; p < n; ++p) parts.push_back(rank_input(r + p, numel, dtype).to(gpu()));
      const Tensor scattered = zeros({numel}, dtype, gpu());
      g.reduce_scatter(scattered, parts, ReduceOp::sum);
      expect_equal(scattered, host_reduction(n, r, numel, dtype, ReduceOp::sum).to(dtype),
                   "reduce_scatter" + size);
    }
  }
  channels_last(g);
  send_and_receive(g);
  g.barrier();
}

}  // namespace nccl_job
