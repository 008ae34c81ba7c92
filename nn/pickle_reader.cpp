#include "kiln/nn/pickle_reader.h"

#include <fmt/format.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/nn/printable.h"

namespace kiln::nn {
namespace {

using Kind = PickleNode::Kind;

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "a bool";
    case Kind::integer:
      return "an int";
    case Kind::floating:
      return "a float";
    case Kind::string:
      return "a str";
    case Kind::tuple:
      return "a tuple";
    case Kind::list:
      return "a list";
    case Kind::dict:
      return "a dict";
    case Kind::global:
      return "a global";
    case Kind::call:
      return "a call's result";
    case Kind::persistent:
      return "a persistent id";
  }
  return "a value";
}

class Unpickler {
 public:
  Unpickler(std::string_view bytes, const std::string& where, const GlobalCheck& check_global)
      : bytes_(bytes), where_(where), check_global_(check_global) {}

  PickleTree run() {
    while (true) {
      if (at_ >= bytes_.size()) fail_at(at_, "the pickle ended without a STOP opcode");
      op_at_ = at_;
      const auto op = static_cast<unsigned char>(bytes_[at_++]);
      if (op == '.') break;
      step(op);
    }
    if (!marks_.empty()) fail("STOP with a MARK still open");
    if (stack_.size() != 1)
      fail(fmt::format("STOP with {} values on the stack; expected one", stack_.size()));
    if (at_ != bytes_.size())
      fail(fmt::format("{} bytes follow the STOP opcode", bytes_.size() - at_));
    tree_.root = stack_.back();
    return std::move(tree_);
  }

 private:
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    throw ValueError(fmt::format("{}: pickle byte {}: {}", where_, at, what));
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(op_at_, what); }

  std::string_view take(uint64_t n, const char* what) {
    if (n > bytes_.size() - at_)
      fail(fmt::format("{} needs {} bytes but the pickle has {} left", what, n,
                       bytes_.size() - at_));
    std::string_view out = bytes_.substr(at_, n);
    at_ += n;
    return out;
  }
  uint64_t take_le(int n, const char* what) {
    std::string_view b = take(n, what);
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(b[i])} << (8 * i);
    return v;
  }
  std::string_view take_line(const char* what) {
    const size_t end = bytes_.find('\n', at_);
    if (end == std::string_view::npos) fail(fmt::format("{} has no terminating newline", what));
    std::string_view line = bytes_.substr(at_, end - at_);
    at_ = end + 1;
    return line;
  }

  size_t add(PickleNode node) {
    tree_.nodes.push_back(std::move(node));
    return tree_.nodes.size() - 1;
  }
  void push(size_t node) { stack_.push_back(node); }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t pop(const char* op) {
    if (stack_.size() <= floor())
      fail(fmt::format("{} needs a value, but the stack is empty{}", op,
                       marks_.empty() ? "" : " down to the last MARK"));
    const size_t top = stack_.back();
    stack_.pop_back();
    return top;
  }
  size_t top(const char* op) {
    if (stack_.size() <= floor()) fail(fmt::format("{} needs a value on the stack", op));
    return stack_.back();
  }
  // The values since the last MARK, which is removed.
  std::vector<size_t> pop_mark(const char* op) {
    if (marks_.empty()) fail(fmt::format("{} without a MARK", op));
    std::vector<size_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()),
                              stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  PickleNode& node(size_t index) { return tree_.nodes[index]; }
  PickleNode& expect(size_t index, Kind kind, const char* op) {
    if (node(index).kind != kind)
      fail(fmt::format("{} expects {}, got {}", op, kind_name(kind), kind_name(node(index).kind)));
    return node(index);
  }

  void push_value(Kind kind, int64_t integer = 0) {
    PickleNode n;
    n.kind = kind;
    n.integer = integer;
    push(add(std::move(n)));
  }
  void push_string(std::string_view text) {
    if (!valid_utf8(text)) fail("a str is not valid UTF-8");
    PickleNode n;
    n.kind = Kind::string;
    n.text = std::string(text);
    push(add(std::move(n)));
  }
  void push_container(Kind kind, std::vector<size_t> items) {
    PickleNode n;
    n.kind = kind;
    n.items = std::move(items);
    push(add(std::move(n)));
  }
  void push_global(std::string_view module, std::string_view name) {
    check_global_(std::string(module), std::string(name));
    PickleNode n;
    n.kind = Kind::global;
    n.text = fmt::format("{}.{}", module, name);
    push(add(std::move(n)));
  }
  void memo_put(uint64_t index) { memo_[index] = top("a memo put"); }
  void memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail(fmt::format("memo entry {} is read before it is written", index));
    push(it->second);
  }
  void set_items(size_t dict, const std::vector<size_t>& items, const char* op) {
    if (items.size() % 2 != 0) fail(fmt::format("{} with an odd number of values", op));
    auto& target = expect(dict, Kind::dict, op).items;
    target.insert(target.end(), items.begin(), items.end());
  }

  void reduce() {
    const size_t args = pop("REDUCE");
    const size_t callable = pop("REDUCE");
    expect(args, Kind::tuple, "REDUCE's arguments");
    const std::string& name = expect(callable, Kind::global, "REDUCE's callable").text;
    const std::vector<size_t>& arg_items = node(args).items;
    if (name == "collections.OrderedDict") {
      if (!arg_items.empty()) fail("collections.OrderedDict called with arguments");
      push_container(Kind::dict, {});
    } else if (name == "torch.Size") {
      if (arg_items.size() != 1 || node(arg_items[0]).kind != Kind::tuple)
        fail("torch.Size expects one tuple");
      push_container(Kind::tuple, node(arg_items[0]).items);
    } else {
      push_container(Kind::call, {callable, args});
    }
  }

  void step(unsigned char op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint64_t protocol = take_le(1, "PROTO");
        if (protocol < 2 || protocol > 5)
          fail(fmt::format("pickle protocol {}; expected 2 to 5", protocol));
        break;
      }
      case 0x95:  // FRAME: a length hint for buffered readers; the opcodes simply follow
        if (take_le(8, "FRAME") > bytes_.size() - at_) fail("FRAME runs past the pickle's end");
        break;
      case 'c': {
        std::string_view module = take_line("GLOBAL's module");
        std::string_view name = take_line("GLOBAL's name");
        push_global(module, name);
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        const size_t name = pop("STACK_GLOBAL");
        const size_t module = pop("STACK_GLOBAL");
        push_global(expect(module, Kind::string, "STACK_GLOBAL's module").text,
                    expect(name, Kind::string, "STACK_GLOBAL's name").text);
        break;
      }
      case 'q':
        memo_put(take_le(1, "BINPUT"));
        break;
      case 'r':
        memo_put(take_le(4, "LONG_BINPUT"));
        break;
      case 0x94:  // MEMOIZE
        memo_put(memo_.size());
        break;
      case 'h':
        memo_get(take_le(1, "BINGET"));
        break;
      case 'j':
        memo_get(take_le(4, "LONG_BINGET"));
        break;
      case '(':
        marks_.push_back(stack_.size());
        break;
      case '}':
        push_container(Kind::dict, {});
        break;
      case ')':
        push_container(Kind::tuple, {});
        break;
      case ']':
        push_container(Kind::list, {});
        break;
      case 't':
        push_container(Kind::tuple, pop_mark("TUPLE"));
        break;
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
        std::vector<size_t> items(op - 0x84);
        for (size_t i = items.size(); i-- > 0;) items[i] = pop("TUPLE1/2/3");
        push_container(Kind::tuple, std::move(items));
        break;
      }
      case 'X':
        push_string(take(take_le(4, "BINUNICODE"), "BINUNICODE's text"));
        break;
      case 0x8c:  // SHORT_BINUNICODE
        push_string(take(take_le(1, "SHORT_BINUNICODE"), "SHORT_BINUNICODE's text"));
        break;
      case 0x8d:  // BINUNICODE8
        push_string(take(take_le(8, "BINUNICODE8"), "BINUNICODE8's text"));
        break;
      case 'J':
        push_value(Kind::integer, static_cast<int32_t>(take_le(4, "BININT")));
        break;
      case 'K':
        push_value(Kind::integer, static_cast<int64_t>(take_le(1, "BININT1")));
        break;
      case 'M':
        push_value(Kind::integer, static_cast<int64_t>(take_le(2, "BININT2")));
        break;
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const uint64_t n = take_le(1, "LONG1");
        if (n > 8) fail(fmt::format("LONG1 of {} bytes does not fit in int64", n));
        uint64_t v = take_le(static_cast<int>(n), "LONG1's value");
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);
        push_value(Kind::integer, static_cast<int64_t>(v));
        break;
      }
      case 'N':
        push_value(Kind::none);
        break;
      case 0x88:
        push_value(Kind::boolean, 1);
        break;
      case 0x89:
        push_value(Kind::boolean, 0);
        break;
      case 'G': {  // BINFLOAT, big-endian
        std::string_view b = take(8, "BINFLOAT");
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(b[i]);
        PickleNode n;
        n.kind = Kind::floating;
        n.floating = std::bit_cast<double>(bits);
        push(add(std::move(n)));
        break;
      }
      case 'R':
        reduce();
        break;
      case 'b':  // BUILD: sets an object's attributes; only an OrderedDict's _metadata here
        pop("BUILD");
        expect(top("BUILD"), Kind::dict, "BUILD's object");
        break;
      case 's': {
        const size_t value = pop("SETITEM");
        const size_t key = pop("SETITEM");
        set_items(top("SETITEM"), {key, value}, "SETITEM");
        break;
      }
      case 'u': {
        std::vector<size_t> items = pop_mark("SETITEMS");
        set_items(top("SETITEMS"), items, "SETITEMS");
        break;
      }
      case 'a': {
        const size_t value = pop("APPEND");
        expect(top("APPEND"), Kind::list, "APPEND").items.push_back(value);
        break;
      }
      case 'e': {
        std::vector<size_t> items = pop_mark("APPENDS");
        auto& target = expect(top("APPENDS"), Kind::list, "APPENDS").items;
        target.insert(target.end(), items.begin(), items.end());
        break;
      }
      case 'Q':
        push_container(Kind::persistent, {pop("BINPERSID")});
        break;
      default:
        fail(fmt::format("opcode 0x{:02x} is not one that torch.save emits for a state dict", op));
    }
  }

  std::string_view bytes_;
  const std::string& where_;
  const GlobalCheck& check_global_;
  size_t at_ = 0, op_at_ = 0;
  PickleTree tree_;
  std::vector<size_t> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, size_t> memo_;
};

void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

}  // namespace

PickleTree read_pickle(std::string_view bytes, const std::string& where,
                       const GlobalCheck& check_global) {
  return Unpickler(bytes, where, check_global).run();
}

PickleWriter::PickleWriter() : out_("\x80\x02", 2) {}

void PickleWriter::global(const std::string& module, const std::string& name) {
  out_ += 'c' + module + '\n' + name + '\n';
}
void PickleWriter::mark() {
  out_ += '(';
}
void PickleWriter::tuple() {
  out_ += 't';
}
void PickleWriter::empty_tuple() {
  out_ += ')';
}
void PickleWriter::string(const std::string& text) {
  out_ += 'X';
  put_le(out_, text.size(), 4);
  out_ += text;
}
void PickleWriter::integer(int64_t value) {
  if (value >= 0 && value < 0x100) {
    out_ += 'K';
    put_le(out_, static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value < 0x10000) {
    out_ += 'M';
    put_le(out_, static_cast<uint64_t>(value), 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    out_ += 'J';
    put_le(out_, static_cast<uint64_t>(value), 4);
  } else {
    out_ += "\x8a\x08";
    put_le(out_, static_cast<uint64_t>(value), 8);
  }
}
void PickleWriter::boolean(bool value) {
  out_ += value ? '\x88' : '\x89';
}
void PickleWriter::reduce() {
  out_ += 'R';
}
void PickleWriter::persistent_id() {
  out_ += 'Q';
}
void PickleWriter::set_items() {
  out_ += 'u';
}
std::string PickleWriter::finish() {
  out_ += '.';
  return std::move(out_);
}

}  // namespace kiln::nn
