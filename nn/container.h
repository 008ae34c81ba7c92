// Sequential, ModuleList and ParameterList: modules that hold modules (or parameters), named "0",
// "1", ... as in PyTorch; ModuleDict, which holds them by name in insertion order.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
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

 protected:
  void replace_child(const std::string& name, std::shared_ptr<Module> module) override;

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

 protected:
  void replace_child(const std::string& name, std::shared_ptr<Module> module) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Modules by name, in insertion order (torch.nn.ModuleDict): the names are the state dict's.
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules);
  // A name already present is a ValueError (PyTorch replaces; kiln's module names are set once).
  ModuleDict& insert(const std::string& key, std::shared_ptr<Module> module);
  std::string name() const override { return "ModuleDict"; }
  size_t size() const { return modules_.size(); }
  bool contains(const std::string& key) const;
  // A missing key is an IndexError naming it (PyTorch raises KeyError).
  std::shared_ptr<Module> operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 protected:
  void replace_child(const std::string& name, std::shared_ptr<Module> module) override;

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules_;
};

// Parameters named "0", "1", ... (torch.nn.ParameterList).
class ParameterList : public Module {
 public:
  ParameterList() = default;
  explicit ParameterList(const std::vector<Tensor>& parameters);
  // Registers t as the next parameter (requiring grad) and returns it.
  Tensor append(const Tensor& t);
  std::string name() const override { return "ParameterList"; }
  size_t size() const { return parameters_.size(); }
  Tensor operator[](size_t i) const;
  auto begin() const { return parameters_.begin(); }
  auto end() const { return parameters_.end(); }

 private:
  std::vector<Tensor> parameters_;
};

}  // namespace kiln::nn
