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
  for (auto& m : modules_) h = (*m)(h);
  return h;
}

void Sequential::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  Module::replace_child(name, module);
  modules_.at(std::stoul(name)) = std::move(module);
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

void ModuleList::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  Module::replace_child(name, module);
  modules_.at(std::stoul(name)) = std::move(module);
}

std::shared_ptr<Module> ModuleList::operator[](size_t i) const {
  KILN_CHECK(i < modules_.size(), IndexError, "ModuleList: index {} out of range for {} modules", i,
             modules_.size());
  return modules_[i];
}

ModuleDict::ModuleDict(std::vector<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (auto& [key, m] : modules) insert(key, std::move(m));
}

ModuleDict& ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  KILN_CHECK(!contains(key), ValueError, "ModuleDict: the key '{}' is already present", key);
  add_child(key, module);
  modules_.emplace_back(key, std::move(module));
  return *this;
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, m] : modules_)
    if (k == key) return true;
  return false;
}

void ModuleDict::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  Module::replace_child(name, module);
  for (auto& [key, m] : modules_)
    if (key == name) m = std::move(module);
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  for (const auto& [k, m] : modules_)
    if (k == key) return m;
  throw IndexError("ModuleDict: no module named '" + key + "' (" + std::to_string(size()) +
                   " modules)");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : modules_) out.push_back(k);
  return out;
}

ParameterList::ParameterList(const std::vector<Tensor>& parameters) {
  for (const Tensor& p : parameters) append(p);
}

Tensor ParameterList::append(const Tensor& t) {
  Tensor p = register_parameter(std::to_string(parameters_.size()), t);
  parameters_.push_back(p);
  return p;
}

Tensor ParameterList::operator[](size_t i) const {
  KILN_CHECK(i < parameters_.size(), IndexError,
             "ParameterList: index {} out of range for {} parameters", i, parameters_.size());
  return parameters_[i];
}

}  // namespace kiln::nn
