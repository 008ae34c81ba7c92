#include "kiln/dist/env.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "kiln/core/error.h"

namespace kiln::dist {

namespace {

const char* variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

int integer(const char* name, const char* text, int low) {
  const std::string s = text;
  int value = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  KILN_CHECK(error == std::errc() && end == s.data() + s.size() && value >= low, ValueError,
             "dist: environment variable {}='{}' is not a whole number of at least {}", name, s,
             low);
  return value;
}

int integer_or(const char* name, int fallback, int low) {
  const char* text = variable(name);
  return text ? integer(name, text, low) : fallback;
}

// The rank, size and local numbers of one launcher's naming.
struct Names {
  const char* launcher;
  const char *rank, *size, *local_rank, *local_size;
};

const Names kLaunchers[] = {
    {"kiln-run", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

// The srun steps of one batch job share its SLURM_JOB_ID, and a file store keeps its keys: a
// second step named after the job alone would read the first one's (its NCCL id among them, a
// bootstrap root long gone). Each mpirun is a job of its own already.
std::string step_suffix(const char* launcher) {
  const char* step = std::string(launcher) == "srun" ? variable("SLURM_STEP_ID") : nullptr;
  return step != nullptr ? std::string("-") + step : std::string();
}

// A store path all ranks of one mpirun or srun job agree on without talking to each other: the
// job's own id, which the launcher gives every rank.
std::string job_file_store(const char* launcher) {
  const char* id = std::string(launcher) == "mpirun" ? variable("OMPI_MCA_ess_base_jobid")
                                                     : variable("SLURM_JOB_ID");
  KILN_CHECK(id != nullptr, ValueError,
             "dist: launched by {} without MASTER_ADDR and MASTER_PORT, and no job id to name a "
             "file store after; set MASTER_ADDR and MASTER_PORT (rank 0's host and a free port)",
             launcher);
  return (std::filesystem::temp_directory_path() /
          (std::string("kiln-store-") + id + step_suffix(launcher)))
      .string();
}

// The launcher whose rank and size are both set; a launcher that sets one without the other (or a
// local rank without either) left the environment half-made, and guessing would start a group of
// one, or wait for ranks that never come. Slurm's allocation (salloc, sbatch) sets SLURM_NTASKS
// for a program it runs outside srun, which is then one process: only srun's SLURM_PROCID counts.
const Names* launcher_of_env() {
  for (const Names& n : kLaunchers) {
    const bool rank = variable(n.rank) != nullptr, size = variable(n.size) != nullptr;
    if (rank && size) return &n;
    if (std::string(n.launcher) == "srun") continue;
    KILN_CHECK(!rank && !size, ValueError,
               "dist: {}={} is set but {} is not: a launcher ({}) sets both, a single process "
               "neither",
               rank ? n.rank : n.size, variable(rank ? n.rank : n.size), rank ? n.size : n.rank,
               n.launcher);
    for (const char* local : {n.local_rank, n.local_size})
      KILN_CHECK(variable(local) == nullptr, ValueError,
                 "dist: {}={} is set but {} and {} are not: a launcher ({}) sets them together, a "
                 "single process none of them",
                 local, variable(local), n.rank, n.size, n.launcher);
  }
  return nullptr;
}

}  // namespace

LaunchEnv launch_env() {
  LaunchEnv env;
  env.launcher = "none";
  if (const Names* n = launcher_of_env()) {
    env.launcher = n->launcher;
    env.world_size = integer(n->size, variable(n->size), 1);
    env.rank = integer(n->rank, variable(n->rank), 0);
    KILN_CHECK(variable(n->local_size) == nullptr || variable(n->local_rank) != nullptr, ValueError,
               "dist: {}={} is set but {} is not: a launcher sets both", n->local_size,
               variable(n->local_size), n->local_rank);
    // Without a local size, every rank is taken to be on this machine.
    env.local_world_size = integer_or(n->local_size, env.world_size, 1);
    env.local_rank = integer_or(n->local_rank, env.rank, 0);
    KILN_CHECK(env.rank < env.world_size, ValueError,
               "dist: {}={} is not below {}={}: ranks count from 0 to {} - 1", n->rank, env.rank,
               n->size, env.world_size, n->size);
    KILN_CHECK(env.local_world_size <= env.world_size, ValueError,
               "dist: {}={} is more than {}={}: a machine cannot hold more ranks than the job",
               n->local_size, env.local_world_size, n->size, env.world_size);
    KILN_CHECK(env.local_rank < env.local_world_size, ValueError,
               "dist: {}={} is not below {}={}: local ranks count from 0 to {} - 1", n->local_rank,
               env.local_rank, n->local_size, env.local_world_size, n->local_size);
  }
  KILN_CHECK(variable("MASTER_PORT") == nullptr || variable("MASTER_ADDR") != nullptr, ValueError,
             "dist: MASTER_PORT={} is set but MASTER_ADDR is not: the rendezvous needs both "
             "(rank 0's host and a free port)",
             variable("MASTER_PORT"));
  if (const char* addr = variable("MASTER_ADDR")) {
    env.master_addr = addr;
    KILN_CHECK(variable("MASTER_PORT") != nullptr, ValueError,
               "dist: MASTER_ADDR={} is set but MASTER_PORT is not", addr);
    env.master_port = integer("MASTER_PORT", variable("MASTER_PORT"), 1);
    KILN_CHECK(env.master_port <= 65535, ValueError, "dist: MASTER_PORT={} is not a TCP port",
               env.master_port);
  } else if (env.world_size > 1) {
    KILN_CHECK(env.launcher != "kiln-run", ValueError,
               "dist: RANK and WORLD_SIZE={} are set but MASTER_ADDR and MASTER_PORT are not: "
               "the ranks meet at rank 0's host and port (kiln-run and torchrun set all four)",
               env.world_size);
    // The file store is a folder of this machine's temporary directory: ranks on other
    // machines would wait in their own until the timeout.
    KILN_CHECK(env.local_world_size == env.world_size, ValueError,
               "dist: launched by {} across machines ({} of the {} ranks on this one) without "
               "MASTER_ADDR and MASTER_PORT: set them to rank 0's host, as the other machines "
               "reach it, and a free port there",
               env.launcher, env.local_world_size, env.world_size);
    env.file_store = job_file_store(env.launcher.c_str());
  }
  return env;
}

}  // namespace kiln::dist
