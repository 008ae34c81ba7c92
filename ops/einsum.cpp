#include "kiln/ops/einsum.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"
#include "kiln/core/shape.h"
#include "kiln/ops/elementwise.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/index.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/reduce.h"

namespace kiln {

namespace {

// Labels are ints: 0-51 for a-z and A-Z, kEllipsis + i for the i-th of the ellipsis's dims
// counted from the right.
constexpr int kEllipsis = 1000;
using Labels = std::vector<int>;

[[noreturn]] void bad(const std::string& equation, const std::string& why) {
  throw ValueError("einsum: \"" + equation + "\": " + why);
}

int letter_label(char c) {
  return c >= 'a' && c <= 'z' ? c - 'a' : (c >= 'A' && c <= 'Z' ? 26 + c - 'A' : -1);
}

// The sort key of the implicit output: uppercase before lowercase, as ASCII (and torch) order them.
int alphabetical(int label) {
  return label < 26 ? label + 26 : label - 26;
}

// One term's labels, the ellipsis expanded to `ellipsis_dims` labels (right-aligned).
struct Term {
  std::vector<int> letters_before, letters_after;
  bool has_ellipsis = false;
};

Term parse_term(const std::string& equation, const std::string& text) {
  Term t;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ') continue;
    if (c == '.') {
      if (t.has_ellipsis || text.compare(i, 3, "...") != 0)
        bad(equation, "an ellipsis is three dots, at most once per operand");
      t.has_ellipsis = true;
      i += 2;
      continue;
    }
    const int l = letter_label(c);
    if (l < 0) bad(equation, std::string("subscripts are letters, got '") + c + "'");
    (t.has_ellipsis ? t.letters_after : t.letters_before).push_back(l);
  }
  return t;
}

Labels expand(const Term& t, int64_t ellipsis_dims) {
  Labels out = t.letters_before;
  for (int64_t i = ellipsis_dims - 1; i >= 0; --i) out.push_back(kEllipsis + static_cast<int>(i));
  out.insert(out.end(), t.letters_after.begin(), t.letters_after.end());
  return out;
}

// A tensor and the label of each of its dims.
struct Labeled {
  Tensor t;
  Labels labels;
};

// A subscript repeated within one operand ("ii->i", "bii->b") takes the diagonal of those dims:
// they move last, flatten to n * n, and index_select keeps the positions k * (n + 1), so the
// gradient flows back through index_select. Repeated until every label of the operand is distinct.
Labeled diagonals(Labeled in, const std::string& equation, size_t operand) {
  for (;;) {
    size_t a = 0, b = 0;
    for (size_t p = 0; p < in.labels.size() && b == 0; ++p)
      for (size_t q = p + 1; q < in.labels.size(); ++q)
        if (in.labels[p] == in.labels[q]) {
          a = p, b = q;
          break;
        }
    if (b == 0) return in;
    const int64_t n = in.t.size(static_cast<int64_t>(a));
    if (in.t.size(static_cast<int64_t>(b)) != n)
      throw ShapeError("einsum: \"" + equation + "\": operand " + std::to_string(operand) +
                       " repeats a subscript over dims of sizes " + std::to_string(n) + " and " +
                       std::to_string(in.t.size(static_cast<int64_t>(b))));
    std::vector<int64_t> perm;
    Labels labels;
    Shape shape;
    for (size_t d = 0; d < in.labels.size(); ++d) {
      if (d == a || d == b) continue;
      perm.push_back(static_cast<int64_t>(d));
      labels.push_back(in.labels[d]);
      shape.push_back(in.t.size(static_cast<int64_t>(d)));
    }
    perm.push_back(static_cast<int64_t>(a));
    perm.push_back(static_cast<int64_t>(b));
    labels.push_back(in.labels[a]);
    shape.push_back(n * n);
    const Tensor flat = in.t.permute(perm).reshape(shape);
    const Tensor positions = mul(arange(n, DType::i64, in.t.device()), static_cast<double>(n + 1));
    in = Labeled{index_select(flat, flat.dim() - 1, positions), labels};
  }
}

// Sums out the dims whose labels are not in `keep`.
Labeled sum_except(const Labeled& x, const std::set<int>& keep) {
  Labeled out;
  std::vector<int64_t> dims;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (keep.count(x.labels[d]))
      out.labels.push_back(x.labels[d]);
    else
      dims.push_back(static_cast<int64_t>(d));
  }
  out.t = dims.empty() ? x.t : sum(x.t, dims);
  return out;
}

int64_t size_of(const Labeled& x, int label) {
  for (size_t d = 0; d < x.labels.size(); ++d)
    if (x.labels[d] == label) return x.t.size(static_cast<int64_t>(d));
  return 1;
}

// x permuted to `order` (labels it has) and reshaped to groups of dims, expanded to `sizes`.
Tensor arrange(const Labeled& x, const std::vector<Labels>& groups,
               const std::map<int, int64_t>& sizes) {
  std::vector<int64_t> perm;
  Shape expanded, grouped;
  for (const Labels& group : groups) {
    int64_t n = 1;
    for (int l : group) {
      const auto it = std::find(x.labels.begin(), x.labels.end(), l);
      perm.push_back(it - x.labels.begin());
      expanded.push_back(sizes.at(l));
      n *= sizes.at(l);
    }
    grouped.push_back(n);
  }
  return x.t.permute(perm).expand(expanded).reshape(grouped);
}

// a and b contracted over their shared labels not in `keep`, as one bmm.
Labeled contract(const Labeled& a, const Labeled& b, const std::set<int>& keep,
                 const std::string& equation) {
  Labels batch, contracted, left, right;
  std::map<int, int64_t> sizes;
  for (int l : a.labels) {
    const bool shared = std::count(b.labels.begin(), b.labels.end(), l) > 0;
    if (shared && keep.count(l))
      batch.push_back(l);
    else if (shared)
      contracted.push_back(l);
    else
      left.push_back(l);
  }
  for (int l : b.labels)
    if (std::count(a.labels.begin(), a.labels.end(), l) == 0) right.push_back(l);
  for (const Labeled* x : {&a, &b})
    for (int l : x->labels) {
      const int64_t n = size_of(*x, l);
      auto [it, added] = sizes.emplace(l, n);
      if (!added && it->second != n && it->second != 1 && n != 1)
        throw ShapeError("einsum: \"" + equation + "\": a subscript has size " +
                         std::to_string(it->second) + " in one operand and " + std::to_string(n) +
                         " in another");
      if (!added) it->second = std::max(it->second, n);
    }
  const Tensor product = bmm(arrange(a, {batch, left, contracted}, sizes),
                             arrange(b, {batch, contracted, right}, sizes));
  Labeled out;
  Shape shape;
  for (const Labels* group : {&batch, &left, &right})
    for (int l : *group) {
      out.labels.push_back(l);
      shape.push_back(sizes.at(l));
    }
  out.t = product.reshape(shape);
  return out;
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  profiler::OpScope profile("einsum", {});
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(equation, lhs.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != operands.size())
    bad(equation, std::to_string(terms.size()) + " operands in the equation, " +
                      std::to_string(operands.size()) + " given");
  std::vector<Labeled> inputs;
  std::vector<Labels> written;  // each operand's labels as written, repeats included
  int64_t ellipsis_dims = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Tensor& x = operands[i];
    if (!x.defined()) bad(equation, "operand " + std::to_string(i) + " is undefined");
    if (x.dtype() != operands[0].dtype())
      throw DTypeError("einsum: \"" + equation + "\": operands of one dtype expected, got " +
                       dtype_name(operands[0].dtype()) + " and " + dtype_name(x.dtype()));
    const int64_t letters =
        static_cast<int64_t>(terms[i].letters_before.size() + terms[i].letters_after.size());
    if (x.dim() < letters || (!terms[i].has_ellipsis && x.dim() != letters))
      throw ShapeError("einsum: \"" + equation + "\": operand " + std::to_string(i) + " has " +
                       std::to_string(x.dim()) + " dims for " + std::to_string(letters) +
                       " subscripts");
    const int64_t mine = x.dim() - letters;
    ellipsis_dims = std::max(ellipsis_dims, mine);
    written.push_back(expand(terms[i], mine));
    inputs.push_back(diagonals(Labeled{x, written.back()}, equation, i));
  }
  Labels output;
  if (arrow != std::string::npos) {
    const Term t = parse_term(equation, equation.substr(arrow + 2));
    output = expand(t, t.has_ellipsis ? ellipsis_dims : 0);
    for (int l : output) {
      bool found = false;
      for (const Labeled& in : inputs)
        found = found || std::count(in.labels.begin(), in.labels.end(), l) > 0;
      if (!found) bad(equation, "an output subscript appears in no operand");
    }
    if (std::set<int>(output.begin(), output.end()).size() != output.size())
      bad(equation, "an output subscript appears twice");
  } else {
    // Implicit output: the labels written once in the whole equation (a repeat within one operand
    // counts too: "ii" is the trace, as in NumPy and torch).
    std::map<int, int> count;
    for (const Labels& labels : written)
      for (int l : labels) ++count[l];
    for (int64_t i = ellipsis_dims - 1; i >= 0; --i)
      output.push_back(kEllipsis + static_cast<int>(i));
    Labels once;
    for (const auto& [l, n] : count)
      if (l < kEllipsis && n == 1) once.push_back(l);
    std::sort(once.begin(), once.end(),
              [](int a, int b) { return alphabetical(a) < alphabetical(b); });
    output.insert(output.end(), once.begin(), once.end());
  }
  // Left to right: each operand's private labels summed out, then contracted into the result,
  // keeping the labels that the output or a later operand needs.
  auto needed_after = [&](size_t i) {
    std::set<int> keep(output.begin(), output.end());
    for (size_t j = i + 1; j < inputs.size(); ++j)
      keep.insert(inputs[j].labels.begin(), inputs[j].labels.end());
    return keep;
  };
  Labeled result = sum_except(inputs[0], needed_after(0));
  for (size_t i = 1; i < inputs.size(); ++i) {
    std::set<int> keep_b = needed_after(i);
    keep_b.insert(result.labels.begin(), result.labels.end());
    const Labeled b = sum_except(inputs[i], keep_b);
    result = contract(result, b, needed_after(i), equation);
  }
  result = sum_except(result, std::set<int>(output.begin(), output.end()));
  std::vector<int64_t> perm;
  for (int l : output)
    perm.push_back(std::find(result.labels.begin(), result.labels.end(), l) -
                   result.labels.begin());
  return result.t.permute(perm);
}

}  // namespace kiln
