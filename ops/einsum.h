// einsum, as torch.einsum: subscripts a-z and A-Z, an optional "..." per operand (broadcast from
// the right), an explicit output after "->" or the implicit one (the ellipsis, then the labels that
// appear once, in alphabetical order). Composed of sum, permute, reshape and bmm (operands
// contracted left to right, each pair as one batched matrix product), so every device and
// floating dtype runs it, autocast sends it through bmm in 16 bits, and autograd differentiates it.
#pragma once

#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// A label repeated within one operand takes that operand's diagonal ("ii->i", "bii->bi"; "ii" is
// the trace), through index_select; a label whose sizes differ between operands (neither being 1)
// is a ShapeError naming both.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

}  // namespace kiln
