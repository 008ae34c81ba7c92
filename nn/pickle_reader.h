// A restricted unpickler: it reads the opcodes of pickle protocols 2 to 4 that torch.save emits
// for a state dict into a tree of plain values, and executes nothing. A global (a class or a
// function the pickle names) is accepted only if the caller's check allows it, and is never
// called: REDUCE records the call for the caller to interpret, except collections.OrderedDict()
// and torch.Size(tuple), which become the dict and the tuple they build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::nn {

struct PickleNode {
  enum class Kind : uint8_t {
    none,
    boolean,
    integer,
    floating,
    string,      // text: the (UTF-8) string
    tuple,       // items
    list,        // items
    dict,        // items: key, value, key, value, ... in insertion order
    global,      // text: "module.name"
    call,        // items: the global, then the arguments tuple
    persistent,  // items: the persistent id (BINPERSID's argument)
  };
  Kind kind = Kind::none;
  int64_t integer = 0;  // also the boolean
  double floating = 0;
  std::string text;
  std::vector<size_t> items;  // indices into PickleTree::nodes
};

struct PickleTree {
  std::vector<PickleNode> nodes;
  size_t root = 0;
  const PickleNode& at(size_t index) const { return nodes[index]; }
};

// Called with a global's module and name; throws (naming the file) to refuse it.
using GlobalCheck = std::function<void(const std::string& module, const std::string& name)>;

// Reads `bytes` (a whole pickle, ending in STOP). Bad input throws ValueError "<where>: pickle byte
// N: ...", `where` naming the operation, file and entry. Work and memory are linear in the pickle's
// length: each opcode adds at most one node.
PickleTree read_pickle(std::string_view bytes, const std::string& where,
                       const GlobalCheck& check_global);

// Writes the protocol-2 opcodes of a pickle, for the writers that need one.
class PickleWriter {
 public:
  PickleWriter();  // PROTO 2
  void global(const std::string& module, const std::string& name);
  void mark();
  void tuple();  // since the mark
  void empty_tuple();
  void string(const std::string& text);
  void integer(int64_t value);
  void boolean(bool value);
  void reduce();
  void persistent_id();  // BINPERSID of the value on top
  void set_items();      // since the mark
  std::string finish();  // STOP, and the bytes

 private:
  std::string out_;
};

}  // namespace kiln::nn
