// Where this process stands in a distributed job, read from the environment the way torchrun,
// OpenMPI's mpirun and Slurm's srun each set it, so a program needs no kiln-specific launcher:
//   kiln-run / torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   mpirun (OpenMPI):    OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   srun (Slurm):        SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// MASTER_ADDR and MASTER_PORT name the rendezvous (rank 0's store); under mpirun or srun without
// them, every rank of a one-machine job meets in a file store named after the job.
#pragma once

#include <string>

namespace kiln::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // empty: rendezvous through `file_store` instead
  int master_port = 0;
  std::string file_store;  // a path every rank of the job agrees on, when there is no master
  std::string launcher;    // "kiln-run", "mpirun", "srun" or "none" (a single process)
};

// Reads the variables above; the first launcher whose rank and size are both set wins. Throws
// ValueError naming the variable and what was expected when one is malformed or out of range
// (RANK >= WORLD_SIZE, a negative or non-numeric value), or when the set is inconsistent: a rank
// without a size or the reverse, a local rank or size without them, MASTER_PORT without
// MASTER_ADDR, or RANK and WORLD_SIZE > 1 without a MASTER_ADDR to meet at. (Slurm's allocation
// sets SLURM_NTASKS outside srun too: without SLURM_PROCID it is a single process.)
LaunchEnv launch_env();

}  // namespace kiln::dist
