// GPU checks of the runtime's devices, streams and events: queries, the device guard, current
// streams per thread, event ordering between streams, pinned asynchronous copies, and copies
// between two GPUs (when there are two).
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "kiln/core/cuda.h"
#include "kiln/kiln.h"
#include "parity.h"

using namespace kiln;
using kiln::testing::check_close;
using kiln::testing::kExact;

namespace {

constexpr int64_t kBig = int64_t{1} << 24;  // 64 MiB of f32: copies long enough to overlap

void fill_host(const Tensor& t, float scale) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = scale * static_cast<float>(i % 1000);
}

}  // namespace

TEST_CASE("cuda streams: device properties and memory info") {
  cuda::DeviceProperties props = cuda::get_device_properties(0);
  CHECK_FALSE(props.name.empty());
  CHECK(props.name == cuda::device_name(0));
  // CUDA 13 builds for compute capability 7.5 (Turing) and newer; kiln for any of them (README).
  CHECK(props.major * 10 + props.minor >= 75);
  CHECK(props.total_memory > 0);
  CHECK(props.multi_processor_count > 0);
  CHECK(props.warp_size == 32);
  cuda::MemoryInfo info = cuda::mem_get_info(0);
  CHECK(info.total_bytes > 0);
  CHECK(info.free_bytes <= info.total_bytes);
  CHECK_THROWS_AS(cuda::get_device_properties(cuda::device_count()), DeviceError);
}

TEST_CASE("cuda streams: DeviceGuard restores the device") {
  int last = cuda::device_count() - 1;
  cuda::set_device(0);
  {
    cuda::DeviceGuard guard(last);
    CHECK(cuda::current_device() == last);
    {
      cuda::DeviceGuard inner(0);
      CHECK(cuda::current_device() == 0);
    }
    CHECK(cuda::current_device() == last);
    cuda::set_device(0);  // a switch inside the scope is undone too
  }
  CHECK(cuda::current_device() == 0);
  CHECK_THROWS_AS(cuda::DeviceGuard(last + 1), DeviceError);
  CHECK(cuda::current_device() == 0);
}

TEST_CASE("cuda streams: the current stream is the default one until a StreamGuard") {
  CHECK(cuda::current_stream() == cuda::Stream::default_stream());
  CHECK(cuda::current_stream().is_default());
  CHECK(cuda::current_stream_handle() == nullptr);
  cuda::Stream side = cuda::Stream::create();
  CHECK_FALSE(side.is_default());
  CHECK(side.device() == 0);
  {
    cuda::StreamGuard guard(side);
    CHECK(cuda::current_stream() == side);
    CHECK(cuda::current_stream_handle() == side.handle());
  }
  CHECK(cuda::current_stream().is_default());
  cuda::set_current_stream(side);
  CHECK(cuda::current_stream_handle() == side.handle());
  cuda::set_current_stream(cuda::Stream::default_stream());
  CHECK(cuda::current_stream_handle() == nullptr);
}

TEST_CASE("cuda streams: each thread has its own current stream") {
  cuda::Stream side = cuda::Stream::create();
  cuda::StreamGuard guard(side);
  bool other_thread_default = false;
  std::thread worker([&] { other_thread_default = cuda::current_stream(0).is_default(); });
  worker.join();
  CHECK(other_thread_default);
  CHECK(cuda::current_stream() == side);
}

TEST_CASE("cuda streams: pool streams are distinct until the pool wraps") {
  cuda::Stream a = cuda::Stream::create();
  cuda::Stream b = cuda::Stream::create();
  CHECK(a.handle() != b.handle());
}

TEST_CASE("cuda streams: an event orders work on one stream after another") {
  Tensor host = empty_pinned({kBig});
  fill_host(host, 1.0f);
  Tensor a = empty({kBig}, DType::f32, Device::cuda(0));
  Tensor b = empty({kBig}, DType::f32, Device::cuda(0));
  size_t nbytes = static_cast<size_t>(kBig) * sizeof(float);
  cuda::Stream producer = cuda::Stream::create();
  cuda::Stream consumer = cuda::Stream::create();
  cuda::Event written;
  {
    cuda::StreamGuard guard(producer);
    cuda::copy_bytes_async(a.data_ptr(), a.device(), host.data_ptr(), host.device(), nbytes);
    written.record();
  }
  CHECK(written.is_recorded());
  {
    cuda::StreamGuard guard(consumer);
    consumer.wait_event(written);
    cuda::copy_bytes(b.data_ptr(), b.device(), a.data_ptr(), a.device(), nbytes);  // device->device
    Tensor back = b.cpu();  // on the consumer stream, waited for
    check_close(back, host, kExact);
  }
  written.synchronize();
  CHECK(written.query());
  producer.synchronize();
  CHECK(producer.query());
}

TEST_CASE("cuda streams: wait_stream orders a stream after another's queued work") {
  Tensor host = empty_pinned({kBig});
  fill_host(host, 2.0f);
  Tensor a = empty({kBig}, DType::f32, Device::cuda(0));
  size_t nbytes = static_cast<size_t>(kBig) * sizeof(float);
  cuda::Stream producer = cuda::Stream::create();
  cuda::Stream consumer = cuda::Stream::create();
  {
    cuda::StreamGuard guard(producer);
    cuda::copy_bytes_async(a.data_ptr(), a.device(), host.data_ptr(), host.device(), nbytes);
  }
  consumer.wait_stream(producer);
  cuda::StreamGuard guard(consumer);
  check_close(a.cpu(), host, kExact);
}

TEST_CASE("cuda streams: timing events measure elapsed time") {
  Tensor a = empty({kBig}, DType::f32, Device::cuda(0));
  Tensor b = empty({kBig}, DType::f32, Device::cuda(0));
  cuda::Event start(true), stop(true);
  start.record();
  cuda::copy_bytes(b.data_ptr(), b.device(), a.data_ptr(), a.device(), a.numel() * 4);
  stop.record();
  CHECK(start.elapsed_time(stop) >= 0.0f);
  cuda::Event untimed;
  untimed.record();
  CHECK_THROWS_AS(untimed.elapsed_time(stop), ValueError);
  cuda::Event never(true);
  CHECK_THROWS_AS(never.elapsed_time(stop), ValueError);
  CHECK(never.query());  // never recorded: nothing to wait for
  cuda::synchronize();
  cuda::synchronize(0);
}

TEST_CASE("cuda streams: pinned memory round trip with a non-blocking copy") {
  Tensor host = arange(0.0, 100000.0, 1.0, DType::f32);
  Tensor pinned = host.pin_memory();
  CHECK(pinned.is_pinned());
  CHECK_FALSE(host.is_pinned());
  Tensor on_gpu = pinned.to(Device::cuda(0), true);
  CHECK(on_gpu.device() == Device::cuda(0));
  check_close(on_gpu.cpu(), host, kExact);  // same stream: ordered after the copy
  // A pageable source with non_blocking falls back to an ordinary copy.
  check_close(host.to(Device::cuda(0), true).cpu(), host, kExact);
  // Strided pinned views and non-float dtypes too.
  Tensor ints = arange(0.0, 600.0, 1.0, DType::i64).reshape({20, 30}).pin_memory();
  Tensor cols = ints.t();
  check_close(cols.to(Device::cuda(0), true).cpu(), cols, kExact);
}

TEST_CASE("cuda streams: a pinned block is not reused while a copy from it is pending") {
  cuda::Stream side = cuda::Stream::create();
  cuda::StreamGuard guard(side);
  Tensor on_gpu;
  {
    Tensor pinned = empty_pinned({kBig});
    fill_host(pinned, 1.0f);
    on_gpu = pinned.to(Device::cuda(0), true);
  }  // freed while the copy may still read it
  Tensor next = empty_pinned({kBig});
  fill_host(next, -1.0f);  // would corrupt the copy if it got the same, still busy, block
  Tensor expected = empty({kBig});
  fill_host(expected, 1.0f);
  check_close(on_gpu.cpu(), expected, kExact);
  CHECK(cuda::pinned_allocator().stats().live_allocations >= 1);
}

TEST_CASE("cuda streams: to(cuda, non_blocking) is differentiable") {
  Tensor x = arange(0.0, 6.0, 1.0, DType::f32).pin_memory().requires_grad_();
  Tensor y = x.to(Device::cuda(0), true);
  REQUIRE(y.requires_grad());
  y.cpu().sum().backward();
  check_close(x.grad(), ones({6}), kExact);
}

TEST_CASE("cuda streams: copies between two devices") {
  if (cuda::device_count() < 2) {
    WARN("one GPU visible: the copy between devices is not checked");
    return;
  }
  Tensor host = arange(0.0, 300000.0, 1.0, DType::f32);
  Tensor on0 = host.to(Device::cuda(0));
  Tensor on1 = on0.to(Device::cuda(1));
  CHECK(on1.device() == Device::cuda(1));
  check_close(on1.cpu(), host, kExact);
  Tensor back0 = on1.to(Device::cuda(0));
  check_close(back0.cpu(), host, kExact);
  CHECK(cuda::current_device() == 0);
}
