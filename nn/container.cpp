#include "kiln/nn/container.h"

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  add_child(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : modules_) h = m->forward(h);
  return h;
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  KILN_CHECK(i < modules_.size(), IndexError, "Sequential: index {} out of range for {} modules", i,
             modules_.size());
  return modules_[i];
}

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> module) {
  add_child(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

std::shared_ptr<Module> ModuleList::operator[](size_t i) const {
  KILN_CHECK(i < modules_.size(), IndexError, "ModuleList: index {} out of range for {} modules", i,
             modules_.size());
  return modules_[i];
}

}  // namespace kiln::nn
