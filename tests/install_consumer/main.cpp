// An outside project: finds kiln with find_package, includes <kiln/kiln.h>, computes a gradient.
#include <kiln/kiln.h>

#include <cstdio>
#include <vector>

int main() {
  kiln::Tensor x = kiln::tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  kiln::Tensor loss = kiln::sum(kiln::mul(x, x));
  loss.backward();
  // d/dx sum(x^2) = 2x = [2, 4, 6]
  std::vector<double> g = x.grad().tolist();
  bool ok = g.size() == 3 && g[0] == 2.0 && g[1] == 4.0 && g[2] == 6.0;
  std::printf("consumer: loss %.1f, grad ok: %s\n", loss.item<double>(), ok ? "yes" : "no");
  return ok ? 0 : 1;
}
