// Sequential and ModuleList: modules that hold modules, named "0", "1", ... as in PyTorch.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  Sequential& push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return modules_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Holds modules for a parent's forward to use in its own way; has no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  ModuleList& push_back(std::shared_ptr<Module> module);
  std::string name() const override { return "ModuleList"; }
  size_t size() const { return modules_.size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace kiln::nn
