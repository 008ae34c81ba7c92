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

}  // namespace

LaunchEnv launch_env() {
  LaunchEnv env;
  env.launcher = "none";
  for (const Names& n : kLaunchers) {
    if (!variable(n.rank) || !variable(n.size)) continue;
    env.launcher = n.launcher;
    env.world_size = integer(n.size, variable(n.size), 1);
    env.rank = integer(n.rank, variable(n.rank), 0);
    env.local_rank = integer_or(n.local_rank, env.rank, 0);
    env.local_world_size = integer_or(n.local_size, env.world_size, 1);
    break;
  }
  KILN_CHECK(env.rank < env.world_size, ValueError,
             "dist: rank {} is not below the world size {} (launcher {})", env.rank, env.world_size,
             env.launcher);
  KILN_CHECK(env.local_rank < env.local_world_size, ValueError,
             "dist: local rank {} is not below the local world size {} (launcher {})",
             env.local_rank, env.local_world_size, env.launcher);
  if (const char* addr = variable("MASTER_ADDR")) {
    env.master_addr = addr;
    KILN_CHECK(variable("MASTER_PORT") != nullptr, ValueError,
               "dist: MASTER_ADDR={} is set but MASTER_PORT is not", addr);
    env.master_port = integer("MASTER_PORT", variable("MASTER_PORT"), 1);
    KILN_CHECK(env.master_port <= 65535, ValueError, "dist: MASTER_PORT={} is not a TCP port",
               env.master_port);
  } else if (env.world_size > 1) {
    env.file_store = job_file_store(env.launcher.c_str());
  }
  return env;
}

}  // namespace kiln::dist
