// What the scenarios of nccl_job share: one rank of a multi-process job on simulated GPUs, started
// by tests/sim/run_nccl_job.py with kiln-run's environment (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT), each rank on its own simulated device cuda:LOCAL_RANK. A failed check
// throws; the program then says which on stderr and exits 1.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/kiln.h"

namespace nccl_job {

// Throws kiln::Error("check failed: <what>") unless `ok`.
void expect(bool ok, const std::string& what);

// Equal in shape, dtype and values, compared on the host.
void expect_equal(const kiln::Tensor& got, const kiln::Tensor& want, const std::string& what);

// Close to `want` as allclose(rtol, atol), compared on the host in f64.
void expect_close(const kiln::Tensor& got, const kiln::Tensor& want, double rtol, double atol,
                  const std::string& what);

// This rank's simulated GPU (cuda:LOCAL_RANK once the nccl group is made).
kiln::Device gpu();

// Rank `rank`'s input to a collective, on the host: values that differ by rank and by position,
// exact in every dtype and small enough that a sum over 4 ranks stays exact (bf16 included) and
// fits u8. Unsigned and bool inputs are not negative.
kiln::Tensor rank_input(int rank, int64_t numel, kiln::DType dtype);

// Every scenario: run on every rank of the default group.
void collectives();
void ring();
void ddp(const std::string& scratch);
void no_sync();
void comm_hooks();
void sync_batch_norm();
void grad_scaler();
void die_or_hang(bool die);
void hang_with_blocking_wait();

}  // namespace nccl_job
