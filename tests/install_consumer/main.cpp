// An outside project: finds kiln with find_package, includes <kiln/kiln.h>, computes a gradient,
// then trains a step the way the guide's sections 9 and 10 do: a model wrapped in
// DistributedDataParallel (a group of one over Gloo, as without a launcher), an all-reduce, and
// f16 autocast with a GradScaler, and a PNG written and read back. The last three need every
// library a static kiln links (Gloo, libpng, TurboJPEG among them) to come with kiln::kiln. Where
// kiln has a CUDA backend, a kernel of its own (block_sum.cu) runs on every GPU kiln sees: on two
// simulated ones when kiln was built for the CUDA simulator (run.cmake sets KILN_SIM_DEVICES).
#include <kiln/kiln.h>

#include <cstdio>
#include <memory>
#include <vector>

#if CONSUMER_OWN_KERNEL
#include "block_sum.h"
#endif

using namespace kiln;

namespace {

bool gradient_is_two_x() {
  Tensor x = tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  Tensor loss = sum(mul(x, x));
  loss.backward();
  // d/dx sum(x^2) = 2x = [2, 4, 6]
  std::vector<double> g = x.grad().tolist();
  bool ok = g.size() == 3 && g[0] == 2.0 && g[1] == 4.0 && g[2] == 6.0;
  std::printf("consumer: loss %.1f, grad ok: %s\n", loss.item<double>(), ok ? "yes" : "no");
  return ok;
}

bool data_parallel_step_with_scaler() {
#if KILN_WITH_GLOO
  dist::init_process_group("gloo");
  manual_seed(0);
  auto ddp = std::make_shared<dist::DistributedDataParallel>(std::make_shared<nn::Linear>(4, 2));
  optim::SGD sgd(ddp->parameters(), {.lr = 0.1});
  optim::GradScaler scaler;
  const Tensor x = randn({8, 4}), y = randint(0, 2, {8});
  Tensor loss;
  {
    autocast amp(DType::f16);
    loss = cross_entropy(ddp->forward(x), y);
  }
  sgd.zero_grad();
  scaler.scale(loss).backward();
  const bool stepped = scaler.step(sgd);
  scaler.update();
  Tensor ones = full({3}, 1.0);
  dist::all_reduce(ones);
  const bool ok = stepped && dist::get_world_size() == 1 && ones.sum().item() == 3.0;
  std::printf("consumer: DDP + GradScaler step %s, all_reduce ok: %s\n",
              stepped ? "taken" : "skipped", ok ? "yes" : "no");
  dist::destroy_process_group();
  return ok;
#else
  std::printf("consumer: kiln was built without Gloo; no data-parallel step\n");
  return true;
#endif
}

bool image_round_trip() {
  Tensor image = arange(48, DType::u8).view({3, 4, 4});
  Tensor back = data::decode_image(data::encode_png(image), "consumer.png");
  Tensor jpeg = data::decode_image(data::encode_jpeg(image), "consumer.jpg");
  const bool ok = equal(back, image) && jpeg.shape() == image.shape();
  std::printf("consumer: PNG and JPEG round trip ok: %s\n", ok ? "yes" : "no");
  return ok;
}

// The sum of 0, 1, ..., 999 (exact in f32 in any order) by block_sum_kernel, on kiln's tensors and
// kiln's current stream of each GPU, against kiln's own sum.
bool own_kernel_on_each_gpu() {
#if CONSUMER_OWN_KERNEL
  if (!cuda::is_available()) {
    std::printf("consumer: no GPU visible; its own kernel compiled, not run\n");
    return true;
  }
  bool ok = true;
  for (int device = 0; device < cuda::device_count(); ++device) {
    const cuda::DeviceGuard guard(device);
    const Tensor x = arange(0, 1000, 1, DType::f32, Device::cuda(device));
    Tensor total = zeros({1}, DType::f32, Device::cuda(device));
    block_sum(x.data<float>(), x.numel(), total.data<float>(), cuda::current_stream_handle());
    const double got = total.item(), kilns = x.sum().item();
    const bool right = got == 499500.0 && kilns == 499500.0;
    std::printf("consumer: own kernel on cuda:%d of %d (%s): sum %.1f, kiln's %.1f, ok: %s\n",
                device, cuda::device_count(), cuda::device_name(device).c_str(), got, kilns,
                right ? "yes" : "no");
    ok = ok && right;
  }
  return ok;
#else
  std::printf("consumer: kiln was built without CUDA; no kernel of its own\n");
  return true;
#endif
}

}  // namespace

int main() {
  return gradient_is_two_x() && data_parallel_step_with_scaler() && image_round_trip() &&
                 own_kernel_on_each_gpu()
             ? 0
             : 1;
}
