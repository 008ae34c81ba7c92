// dist::spawn with CPU ranks over Gloo. Each case's ranks are this test program run again with
// the case's name as its only argument, so that each rank reaches the case's spawn call and runs
// the function there. Run by test_ddp.
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dist/spawn.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

// The environment variable `name`, or "" when unset.
std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// Only this case runs in the ranks.
dist::SpawnOptions rerun(const std::string& test_case) {
  return {.args = std::vector<std::string>{test_case}, .grace_seconds = 2};
}

}  // namespace

TEST_CASE("dist spawn: three ranks meet over gloo with kiln-run's environment") {
  const std::string name = "dist spawn: three ranks meet over gloo with kiln-run's environment";
  REQUIRE_NOTHROW(dist::spawn(
      [](int rank) {
        // A failed check here reaches the parent as its message.
        KILN_CHECK(env("RANK") == std::to_string(rank) && env("LOCAL_RANK") == env("RANK") &&
                       env("WORLD_SIZE") == "3" && env("LOCAL_WORLD_SIZE") == "3" &&
                       env("MASTER_ADDR") == "127.0.0.1" && !env("MASTER_PORT").empty(),
                   ValueError, "rank {}: RANK={} LOCAL_RANK={} WORLD_SIZE={} MASTER_ADDR={}", rank,
                   env("RANK"), env("LOCAL_RANK"), env("WORLD_SIZE"), env("MASTER_ADDR"));
        dist::init_process_group("gloo");
        KILN_CHECK(dist::get_rank() == rank && dist::get_world_size() == 3, ValueError,
                   "rank {}: the group says rank {} of {}", rank, dist::get_rank(),
                   dist::get_world_size());
        Tensor t = full({2}, rank + 1.0);
        dist::all_reduce(t);
        KILN_CHECK(t[0].item() == 6.0, ValueError, "rank {}: all_reduce gave {}", rank,
                   t[0].item());
        dist::destroy_process_group();
      },
      3, rerun(name)));
}

TEST_CASE("dist spawn: an error in a rank is raised in the parent naming the rank") {
  const std::string name = "dist spawn: an error in a rank is raised in the parent naming the rank";
  auto fn = [](int rank) { KILN_CHECK(rank != 1, ValueError, "rank one refuses"); };
  CHECK_THROWS_AS(dist::spawn(fn, 2, rerun(name)), DistError);
  CHECK_THROWS_WITH(dist::spawn(fn, 2, rerun(name)),
                    Catch::StartsWith("dist::spawn: rank 1 of 2 failed with kiln::ValueError: "
                                      "rank one refuses"));
}

TEST_CASE("dist spawn: a rank killed by a signal ends the job") {
  const std::string name = "dist spawn: a rank killed by a signal ends the job";
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(dist::spawn(
                        [](int rank) {
                          if (rank == 1) std::raise(SIGKILL);
                          // Rank 0 would wait a minute: spawn stops it (with SIGTERM's default
                          // action, not Catch's report of a fatal signal).
                          std::signal(SIGTERM, SIG_DFL);
                          std::this_thread::sleep_for(std::chrono::seconds(60));
                        },
                        2, rerun(name)),
                    Catch::Contains("rank 1 of 2 was killed by signal 9") &&
                        Catch::Contains("the ranks still running were stopped"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
  CHECK_THROWS_WITH(dist::spawn([](int) {}, 0), Catch::Contains("nprocs must be at least 1"));
}
