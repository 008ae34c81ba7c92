// The element types and reductions of the NCCL model: sizes and names for messages, and the
// reduction of one rank's contribution into an accumulator, element by element in the type's own
// arithmetic (f16 and bf16 through float, rounded back after every step, as a GPU's half
// arithmetic rounds).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <string>

namespace kiln::sim::nccl {

std::size_t type_size(ncclDataType_t type);  // 0 for a type the model does not hold (fp8)
std::string type_name(ncclDataType_t type);
std::string reduction_name(ncclRedOp_t op);
bool known_reduction(ncclRedOp_t op);  // sum, prod, max, min, avg

// accumulator[i] = accumulator[i] op contribution[i]; ncclAvg sums (divide_by_ranks ends it).
void reduce_into(void* accumulator, const void* contribution, std::size_t count,
                 ncclDataType_t type, ncclRedOp_t op);
// ncclAvg's last step: each element divided by the ranks, truncating for integers as NCCL does.
void divide_by_ranks(void* accumulator, std::size_t count, ncclDataType_t type, int ranks);

}  // namespace kiln::sim::nccl
