// Process groups over Gloo and kiln's ring all-reduce, with ranks as threads of this process
// (tests/support/dist_ranks.h). Inputs are small integers, so every sum is exact in every dtype
// and results are compared bit for bit: rank r's input element i is ((r + 1) * (i % 7) - 3 * r)
// rounded to the dtype.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist_ranks.h"
#include "kiln/dist/net.h"
#include "kiln/dist/process_group.h"
#include "kiln/dist/ring.h"
#include "kiln/dist/store.h"
#include "kiln/kiln.h"
#include "temp_dir.h"

using namespace kiln;
using kiln::dist::ProcessGroup;
using kiln::dist::ReduceOp;
using kiln::testing::expected_reduction;
using kiln::testing::rank_input;
using kiln::testing::run_ranks;

namespace {

const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64};

const char* op_label(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : op == ReduceOp::average ? "average" : "max";
}

}  // namespace

TEST_CASE("dist: gloo all_reduce sums, averages and takes the max over 1 to 4 ranks") {
  for (int n : {1, 2, 3, 4}) {
    for (DType dtype : kDTypes) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::average, ReduceOp::max}) {
        if (op == ReduceOp::average && dtype == DType::i64) continue;
        INFO(n << " ranks, " << dtype_name(dtype) << ", " << op_label(op));
        const int64_t numel = 37;
        auto got = run_ranks<Tensor>(n, "all_reduce", [&](ProcessGroup& g) {
          Tensor t = rank_input(g.rank(), numel, dtype);
          g.all_reduce(t, op);
          return t;
        });
        // An average of integers divided by 3 is not exact in f16/bf16: both sides round once.
        const Tensor want = expected_reduction(n, numel, dtype, op);
        for (const Tensor& t : got) CHECK(equal(t, want));
      }
    }
  }
}

TEST_CASE("dist: gloo broadcast, all_gather, reduce_scatter and barrier") {
  for (int n : {1, 2, 3}) {
    INFO(n << " ranks");
    struct Out {
      Tensor broadcast;
      std::vector<Tensor> gathered;
      Tensor scattered;
    };
    auto got = run_ranks<Out>(n, "collectives", [&](ProcessGroup& g) {
      Out out;
      out.broadcast = rank_input(g.rank(), 11, DType::f32);
      g.broadcast(out.broadcast, n - 1);
      for (int r = 0; r < n; ++r) out.gathered.push_back(empty({3, 2}, DType::f64));
      g.all_gather(out.gathered, rank_input(g.rank(), 6, DType::f64).view({3, 2}));
      std::vector<Tensor> parts;
      for (int r = 0; r < n; ++r) parts.push_back(add(rank_input(g.rank(), 5, DType::f32), r));
      out.scattered = empty({5}, DType::f32);
      g.reduce_scatter(out.scattered, parts);
      g.barrier();
      return out;
    });
    for (int rank = 0; rank < n; ++rank) {
      CHECK(equal(got[rank].broadcast, rank_input(n - 1, 11, DType::f32)));
      for (int r = 0; r < n; ++r)
        CHECK(equal(got[rank].gathered[r], rank_input(r, 6, DType::f64).view({3, 2})));
      // Part `rank` of every rank: sum over q of (rank_input(q) + rank).
      CHECK(equal(got[rank].scattered,
                  add(expected_reduction(n, 5, DType::f32, ReduceOp::sum), 1.0 * n * rank)));
    }
  }
}

TEST_CASE("dist: async collectives complete in the order they were called") {
  auto got = run_ranks<std::vector<Tensor>>(3, "async", [](ProcessGroup& g) {
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<dist::Work>> works;
    for (int k = 0; k < 8; ++k) {
      ts.push_back(full({1000}, k + g.rank(), DType::f32));
      works.push_back(g.all_reduce_async(ts.back(), ReduceOp::sum));
    }
    for (auto& w : works) w->wait();
    for (auto& w : works)
      if (!w->is_completed()) throw Error("a waited Work is not completed");
    return ts;
  });
  for (const auto& ts : got)
    for (int k = 0; k < 8; ++k) CHECK(equal(ts[k], full({1000}, 3.0 * k + 3, DType::f32)));
}

TEST_CASE("dist: the ring all-reduce matches gloo's for every size and dtype") {
  for (int n : {2, 3, 4}) {
    for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{7}, int64_t{1001}}) {
      for (DType dtype : kDTypes) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
          INFO(n << " ranks, " << numel << " elements, " << dtype_name(dtype) << ", "
                 << op_label(op));
          dist::RingOptions small_segments;
          small_segments.segment_bytes = 40;  // several segments a chunk even at these sizes
          auto got = run_ranks<std::vector<Tensor>>(n, "ring", [&](ProcessGroup& g) {
            Tensor ring = rank_input(g.rank(), numel, dtype);
            Tensor library = ring.clone();
            dist::ring_all_reduce(g, ring, op, small_segments);
            g.all_reduce(library, op);
            return std::vector<Tensor>{ring, library};
          });
          for (const auto& r : got) {
            CHECK(equal(r[0], r[1]));
            CHECK(equal(r[0], expected_reduction(n, numel, dtype, op)));
          }
        }
      }
    }
  }
}

TEST_CASE("dist: the ring all-reduce of 100 MB over 4 ranks") {
  const int64_t numel = 25 * 1000 * 1000;  // f32: 100 MB
  auto got = run_ranks<std::vector<Tensor>>(4, "ring-100mb", [&](ProcessGroup& g) {
    Tensor ring = rank_input(g.rank(), numel, DType::f32);
    Tensor library = ring.clone();
    dist::ring_all_reduce(g, ring, ReduceOp::average);
    g.all_reduce(library, ReduceOp::average);
    return std::vector<Tensor>{ring, library};
  });
  for (const auto& r : got) CHECK(equal(r[0], r[1]));
  CHECK(equal(got[0][0], expected_reduction(4, numel, DType::f32, ReduceOp::average)));
}

// Channels-last tensors (a 4-D weight or activation after to(MemoryFormat::channels_last)) go
// through the collectives as the block of memory they fill, as PyTorch's do; gathered parts must
// lie in the same order, or the bytes would land on the wrong elements.
TEST_CASE("dist: channels-last tensors take part in collectives; parts in another layout do not") {
  const Shape shape{2, 3, 2, 2};
  auto input = [&](int rank) {
    return rank_input(rank, 24, DType::f32).view(shape).to(MemoryFormat::channels_last);
  };
  auto got = run_ranks<std::vector<std::string>>(2, "channels-last", [&](ProcessGroup& g) {
    std::vector<std::string> out;
    auto expect = [&](bool ok, const char* what) { out.push_back(ok ? "ok" : what); };
    const Tensor sum = expected_reduction(2, 24, DType::f32, ReduceOp::sum).view(shape);
    Tensor x = input(g.rank());
    g.all_reduce(x);
    expect(equal(x, sum) && x.is_contiguous(MemoryFormat::channels_last), "all_reduce");
    Tensor ring = input(g.rank());
    dist::ring_all_reduce(g, ring, ReduceOp::sum);
    expect(equal(ring, sum), "ring_all_reduce");
    Tensor b = input(g.rank());
    g.broadcast(b, 1);
    expect(equal(b, input(1)), "broadcast");
    std::vector<Tensor> parts = {
        empty(shape, DType::f32, Device::cpu(), MemoryFormat::channels_last),
        empty(shape, DType::f32, Device::cpu(), MemoryFormat::channels_last)};
    g.all_gather(parts, input(g.rank()));
    expect(equal(parts[0], input(0)) && equal(parts[1], input(1)), "all_gather");
    try {
      g.all_gather({zeros(shape), zeros(shape)}, input(g.rank()));
      out.push_back("no error");
    } catch (const Error& e) {
      out.push_back(e.what());
    }
    return out;
  });
  for (const auto& r : got) {
    REQUIRE(r.size() == 5);
    for (size_t i = 0; i < 4; ++i) CHECK(r[i] == "ok");
    CHECK_THAT(r[4], Catch::Contains("all_gather") &&
                         Catch::Contains("must be [2, 3, 2, 2] f32 cpu channels_last") &&
                         Catch::Contains("got [2, 3, 2, 2] f32 cpu contiguous"));
  }
}

TEST_CASE("dist: bad arguments are refused with the collective and the rank named") {
  auto errors = run_ranks<std::vector<std::string>>(2, "errors", [](ProcessGroup& g) {
    std::vector<std::string> messages;
    auto expect_error = [&](auto&& call) {
      try {
        call();
        messages.push_back("no error");
      } catch (const Error& e) {
        messages.push_back(e.what());
      }
    };
    expect_error([&] { g.all_reduce(zeros({4, 3}).t()); });
    expect_error([&] { g.all_gather({zeros({2})}, zeros({2})); });
    expect_error([&] { g.all_gather({zeros({2}), zeros({3})}, zeros({2})); });
    expect_error([&] { g.broadcast(zeros({2}), 5); });
    expect_error([&] { g.send_async(zeros({2}), g.rank(), 0); });
    return messages;
  });
  for (const auto& messages : errors) {
    REQUIRE(messages.size() == 5);
    CHECK_THAT(messages[0], Catch::Contains("all_reduce") && Catch::Contains("contiguous") &&
                                Catch::Contains("rank"));
    CHECK_THAT(messages[1], Catch::Contains("one of the outputs per rank (2), got 1"));
    CHECK_THAT(messages[2], Catch::Contains("[3] f32 cpu"));
    CHECK_THAT(messages[3], Catch::Contains("root must be a rank below 2"));
    CHECK_THAT(messages[4], Catch::Contains("another rank"));
  }
  CHECK_THROWS_WITH(
      dist::new_process_group("mpi", dist::make_memory_store(std::chrono::seconds(1)), 0, 1, "x"),
      Catch::Contains("unknown backend 'mpi'"));
#if !KILN_WITH_NCCL
  CHECK_THROWS_AS(
      dist::new_process_group("nccl", dist::make_memory_store(std::chrono::seconds(1)), 0, 1, "x"),
      NotImplementedError);
#endif
}

TEST_CASE("dist: a rank that never joins a collective fails the others after the timeout") {
  const auto start = std::chrono::steady_clock::now();
  auto got = run_ranks<std::string>(
      2, "timeout",
      [](ProcessGroup& g) -> std::string {
        if (g.rank() == 1) {  // alive, connected, and never calls all_reduce
          std::this_thread::sleep_for(std::chrono::seconds(4));
          return "";
        }
        try {
          g.all_reduce(zeros({4}));
        } catch (const DistError& e) {
          return e.what();
        }
        return "no error";
      },
      std::chrono::milliseconds(1500));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(got[0]);
  CHECK_THAT(got[0], Catch::Contains("rank 0 of 2") && Catch::Contains("all_reduce") &&
                         Catch::Contains("imed out"));
  // The heartbeats tell why: rank 1 answers, and has not started the collective.
  CHECK_THAT(got[0], Catch::Contains("alive but not at this collective: rank 1 (rank 1 has "
                                     "started 0 collectives of the group; this one is number 1"));
  CHECK_THAT(got[0], !Catch::Contains("not answering"));
  CHECK(seconds < 30);
}

TEST_CASE("dist: without a launcher the default group is a group of one") {
  dist::init_process_group("gloo");
  CHECK(dist::is_initialized());
  CHECK(dist::get_rank() == 0);
  CHECK(dist::get_world_size() == 1);
  Tensor t = full({3}, 2.0);
  dist::all_reduce(t, ReduceOp::average);
  CHECK(equal(t, full({3}, 2.0)));
  CHECK_THROWS_AS(dist::init_process_group("gloo"), DistError);
  dist::destroy_process_group();
  CHECK_FALSE(dist::is_initialized());
  CHECK_THROWS_WITH(dist::default_group(), Catch::Contains("init_process_group"));
}

namespace {

// Sets environment variables for one scope, restoring the previous values.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.push_back({name, old ? std::optional<std::string>(old) : std::nullopt});
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (auto& [name, old] : saved_) {
      if (old)
        ::setenv(name.c_str(), old->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace

TEST_CASE("dist: the launch environment of kiln-run, mpirun and srun, and its errors") {
  {
    ScopedEnv env({{"RANK", "2"},
                   {"WORLD_SIZE", "4"},
                   {"LOCAL_RANK", "0"},
                   {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "10.0.0.1"},
                   {"MASTER_PORT", "29500"}});
    const dist::LaunchEnv e = dist::launch_env();
    CHECK(e.launcher == "kiln-run");
    CHECK((e.rank == 2 && e.world_size == 4 && e.local_rank == 0 && e.local_world_size == 2));
    CHECK((e.master_addr == "10.0.0.1" && e.master_port == 29500));
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_MCA_ess_base_jobid", "77"}});
    const dist::LaunchEnv e = dist::launch_env();
    CHECK(e.launcher == "mpirun");
    CHECK((e.rank == 1 && e.world_size == 2 && e.master_addr.empty()));
    CHECK_THAT(e.file_store, Catch::Contains("kiln-store-77"));
  }
  {
    // Across machines the file store (this machine's temporary folder) would never meet.
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                   {"OMPI_MCA_ess_base_jobid", "77"}});
    CHECK_THROWS_WITH(dist::launch_env(),
                      Catch::Contains("across machines (2 of the 4 ranks on this one) without "
                                      "MASTER_ADDR and MASTER_PORT"));
  }
  {
    ScopedEnv env({{"RANK", "4"}, {"WORLD_SIZE", "4"}});
    CHECK_THROWS_WITH(dist::launch_env(), Catch::Contains("RANK=4 is not below WORLD_SIZE=4"));
  }
  {
    ScopedEnv env({{"RANK", "x"}, {"WORLD_SIZE", "4"}});
    CHECK_THROWS_WITH(dist::launch_env(), Catch::Contains("RANK='x' is not a whole number"));
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
    ::unsetenv("MASTER_PORT");
    CHECK_THROWS_WITH(dist::launch_env(), Catch::Contains("MASTER_PORT is not"));
  }
}

TEST_CASE("dist: the srun steps of one job meet in file stores of their own") {
  // A second step named after the job alone would read the first step's keys, its NCCL id
  // among them.
  auto store_of_step = [](const char* step) {
    ScopedEnv env({{"SLURM_PROCID", "0"},
                   {"SLURM_NTASKS", "2"},
                   {"SLURM_JOB_ID", "4242"},
                   {"SLURM_STEP_ID", step}});
    return dist::launch_env().file_store;
  };
  const std::string first = store_of_step("0"), second = store_of_step("1");
  CHECK_THAT(first, Catch::Contains("kiln-store-4242"));
  CHECK(first != second);
}

TEST_CASE("dist: each rank's GPU, with all of a machine's GPUs visible or one per process") {
  auto rank = [](int local_rank, int local_world_size) {
    dist::LaunchEnv env;
    env.local_rank = local_rank;
    env.local_world_size = local_world_size;
    return env;
  };
  // torchrun's convention: every process sees the machine's GPUs and takes cuda:LOCAL_RANK.
  CHECK(dist::local_device(rank(3, 8), 8) == 3);
  // SLURM --gpus-per-task=1, or CUDA_VISIBLE_DEVICES=$LOCAL_RANK: the one GPU a process sees.
  CHECK(dist::local_device(rank(3, 8), 1) == 0);
  // Two GPUs bound to each of 4 processes: one of the process's own.
  CHECK(dist::local_device(rank(3, 4), 2) == 1);
  CHECK_THROWS_WITH(dist::local_device(rank(0, 1), 0), Catch::Contains("none is visible"));
}

TEST_CASE("dist: an inconsistent launch environment is refused, naming the variable") {
  struct Case {
    std::vector<std::pair<std::string, std::string>> set;
    const char* says;
  };
  const std::pair<std::string, std::string> master[] = {{"MASTER_ADDR", "127.0.0.1"},
                                                        {"MASTER_PORT", "29500"}};
  const Case cases[] = {
      {{{"WORLD_SIZE", "2"}}, "WORLD_SIZE=2 is set but RANK is not"},
      {{{"RANK", "1"}}, "RANK=1 is set but WORLD_SIZE is not"},
      {{{"RANK", "3"}, {"WORLD_SIZE", "2"}, master[0], master[1]},
       "RANK=3 is not below WORLD_SIZE=2: ranks count from 0"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK='-1' is not a whole number of at least 0"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "two"}},
       "WORLD_SIZE='two' is not a whole number of at least 1"},
      {{{"LOCAL_RANK", "0"}}, "LOCAL_RANK=0 is set but RANK and WORLD_SIZE are not"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
       "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
       "LOCAL_WORLD_SIZE=2 is set but LOCAL_RANK is not"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "3"}},
       "LOCAL_WORLD_SIZE=3 is more than WORLD_SIZE=2"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}},
       "RANK and WORLD_SIZE=2 are set but MASTER_ADDR and MASTER_PORT are not"},
      {{{"MASTER_PORT", "29500"}}, "MASTER_PORT=29500 is set but MASTER_ADDR is not"},
      {{{"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_SIZE=2 is set but OMPI_COMM_WORLD_RANK"},
  };
  // An empty value reads as unset: each case starts from none of the variables.
  std::vector<std::pair<std::string, std::string>> none;
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"})
    none.emplace_back(name, "");
  ScopedEnv clean(none);
  for (const Case& c : cases) {
    ScopedEnv env(c.set);
    INFO(c.says);
    CHECK_THROWS_WITH(dist::launch_env(), Catch::Contains(c.says));
  }
  // Slurm's allocation sets SLURM_NTASKS outside srun too: without SLURM_PROCID, one process.
  ScopedEnv allocation(std::vector<std::pair<std::string, std::string>>{{"SLURM_NTASKS", "4"}});
  const dist::LaunchEnv e = dist::launch_env();
  CHECK((e.launcher == "none" && e.world_size == 1));
}

namespace {

// What this process writes to stderr (fd 2) while it lives.
class CapturedStderr {
 public:
  CapturedStderr() : saved_(::dup(2)) {
    std::fflush(stderr);
    const int fd = ::open(dir_.file("stderr").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~CapturedStderr() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
  }
  CapturedStderr(const CapturedStderr&) = delete;
  CapturedStderr& operator=(const CapturedStderr&) = delete;
  std::string text() const {
    std::fflush(stderr);
    std::ifstream in(dir_.file("stderr"));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

 private:
  kiln::testing::TempDir dir_{"kiln_stderr"};
  int saved_;
};

}  // namespace

TEST_CASE("dist: a rank waiting at the rendezvous says how many it waits for, and where") {
  const auto late_by = dist::kRendezvousReportAfter + std::chrono::milliseconds(1500);
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);
  CapturedStderr captured;
  std::string late_error;
  std::thread late([&] {
    std::this_thread::sleep_for(late_by);
    try {
      auto group = dist::new_process_group(
          "gloo", dist::make_tcp_store("127.0.0.1", 29733, false, options.timeout), 1, 2, "late",
          options);
    } catch (const std::exception& e) {
      late_error = e.what();
    }
  });
  std::string error;
  try {
    auto group = dist::new_process_group(
        "gloo", dist::make_tcp_store("127.0.0.1", 29733, true, options.timeout), 0, 2, "late",
        options);
    late.join();
  } catch (const std::exception& e) {
    late.join();
    error = e.what();
  }
  CHECK(error.empty());
  CHECK(late_error.empty());
  INFO(captured.text());
  CHECK_THAT(captured.text(),
             Catch::Contains("rank 0 of 2 waiting for 1 more rank(s) at the rendezvous (TCP store "
                             "at 127.0.0.1:29733, group 'late'): 1 of 2 arrived"));
}

TEST_CASE(
    "dist: across machines a rank says where it listens: GLOO_SOCKET_IFNAME and gloo_hostname") {
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);
  options.single_machine =
      false;  // as init_process_group sets it when LOCAL_WORLD_SIZE < WORLD_SIZE
  for (const bool by_interface : {true, false}) {
    std::optional<ScopedEnv> iface;
    if (by_interface)
      iface.emplace(std::vector<std::pair<std::string, std::string>>{{"GLOO_SOCKET_IFNAME", "lo"}});
    options.gloo_hostname = by_interface ? "" : "127.0.0.1";
    const int port = by_interface ? 29738 : 29739;
    CapturedStderr captured;
    std::vector<double> sums(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        try {
          auto group = dist::new_process_group(
              "gloo", dist::make_tcp_store("127.0.0.1", port, r == 0, options.timeout), r, 2,
              "listen", options);
          Tensor t = full({4}, 1.0 + r);
          group->all_reduce(t);
          sums[r] = t.sum().item();
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (std::thread& t : ranks) t.join();
    INFO(captured.text());
    CHECK((errors[0].empty() && errors[1].empty()));
    CHECK((sums[0] == 12.0 && sums[1] == 12.0));
    for (int r = 0; r < 2; ++r)
      CHECK_THAT(
          captured.text(),
          Catch::Contains("group 'listen', rank " + std::to_string(r) + " of 2): listening on " +
                          (by_interface ? "interface lo (127.0.0.1), from GLOO_SOCKET_IFNAME"
                                        : "127.0.0.1 (interface lo), from "
                                          "ProcessGroupOptions::gloo_hostname")));
  }
}

TEST_CASE(
    "dist: across machines a master reached through loopback with no other machine is refused") {
  // The route to the master is loopback here, and no rank from elsewhere shows the address the
  // other machines see: the group says so and names GLOO_SOCKET_IFNAME, after the timeout.
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(500);
  options.single_machine = false;
  CHECK_THROWS_WITH(
      dist::new_process_group("gloo",
                              dist::make_tcp_store("127.0.0.1", 29737, true, options.timeout), 0, 1,
                              "lonely", options),
      Catch::Contains("the route to the master (TCP store at 127.0.0.1:29737) is loopback "
                      "(127.0.0.1)") &&
          Catch::Contains("set GLOO_SOCKET_IFNAME"));
}

TEST_CASE("dist: a rank alone at the rendezvous gives up after the timeout, with the count") {
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(500);
  CHECK_THROWS_WITH(
      dist::new_process_group("gloo", dist::make_memory_store(options.timeout), 0, 3, "alone",
                              options),
      Catch::Contains("rank 0 of 3: 1 of the 3 ranks arrived at the rendezvous (in-process store) "
                      "within 500 ms"));
}

TEST_CASE("dist: a rank waiting for rank 0's store says so, and where") {
  const auto late_by = dist::kRendezvousReportAfter + std::chrono::milliseconds(1500);
  const auto timeout = std::chrono::seconds(60);
  CapturedStderr captured;
  std::unique_ptr<dist::Store> server;
  std::thread rank0([&] {
    std::this_thread::sleep_for(late_by);
    server = dist::make_tcp_store("127.0.0.1", 29734, true, timeout);
  });
  std::string error;
  try {
    auto client = dist::make_tcp_store("127.0.0.1", 29734, false, timeout);
  } catch (const std::exception& e) {
    error = e.what();
  }
  rank0.join();
  CHECK(error.empty());
  INFO(captured.text());
  CHECK_THAT(captured.text(), Catch::Contains("waiting for rank 0's store at 127.0.0.1:29734"));
}

TEST_CASE("dist: the file and TCP stores: set, get, wait, add, and a key that never comes") {
  kiln::testing::TempDir dir("kiln_store");
  const auto ms = std::chrono::milliseconds(300);
  std::vector<std::shared_ptr<dist::Store>> stores = {
      dist::make_file_store((dir.path / "store").string(), ms),
      dist::make_tcp_store("127.0.0.1", 29731, true, ms), dist::make_memory_store(ms)};
  for (auto& s : stores) {
    s->set("a/b", {'x', 'y'});
    CHECK(s->get("a/b") == std::vector<char>{'x', 'y'});
    s->wait({"a/b"});
    CHECK(s->add("n", 2) == 2);
    CHECK(s->add("n", 3) == 5);
    CHECK_THROWS_WITH(s->get("never"), Catch::Contains("'never'") && Catch::Contains("300 ms"));
  }
}

TEST_CASE("dist: KILN_NCCL_BLOCKING_WAIT from the environment") {
  {
    ScopedEnv env(
        std::vector<std::pair<std::string, std::string>>{{"KILN_NCCL_BLOCKING_WAIT", "1"}});
    CHECK(dist::blocking_wait_from_env());
  }
  {
    ScopedEnv env(
        std::vector<std::pair<std::string, std::string>>{{"KILN_NCCL_BLOCKING_WAIT", "0"}});
    CHECK_FALSE(dist::blocking_wait_from_env());
  }
  {
    ScopedEnv env(
        std::vector<std::pair<std::string, std::string>>{{"KILN_NCCL_BLOCKING_WAIT", "yes"}});
    CHECK_THROWS_WITH(
        dist::blocking_wait_from_env(),
        Catch::Contains("KILN_NCCL_BLOCKING_WAIT: expected 1") && Catch::Contains("got 'yes'"));
  }
  ::unsetenv("KILN_NCCL_BLOCKING_WAIT");
  CHECK_FALSE(dist::blocking_wait_from_env());
}

TEST_CASE("dist: the address of this machine that routes to the master") {
  CHECK(dist::route_source("127.0.0.1", 29735) == "127.0.0.1");
  CHECK(dist::interface_of("127.0.0.1") == "lo");
  CHECK(dist::address_of_interface("lo") == "127.0.0.1");
  CHECK(dist::interface_of("192.0.2.1").empty());  // TEST-NET-1: no machine's address
  std::string error;
  CHECK(dist::route_source("no-such-host.invalid", 29735, &error).empty());
  CHECK_THAT(error, Catch::Contains("cannot resolve no-such-host.invalid"));
  for (const char* loopback : {"127.0.0.1", "127.0.1.1", "::1", "localhost", "::ffff:127.0.0.1"})
    CHECK(dist::is_loopback_address(loopback));
  for (const char* other : {"10.0.0.1", "::ffff:10.0.0.1", "fe80::1", "1.27.0.0"})
    CHECK_FALSE(dist::is_loopback_address(other));
  sockaddr_in6 mapped{};
  mapped.sin6_family = AF_INET6;
  REQUIRE(::inet_pton(AF_INET6, "::ffff:10.1.2.3", &mapped.sin6_addr) == 1);
  CHECK(dist::numeric_address(reinterpret_cast<const sockaddr*>(&mapped)) == "10.1.2.3");
  // Both ends of a store on this machine route through loopback; no client came from elsewhere,
  // so the server has no address of the master as other machines see it.
  const auto ms = std::chrono::milliseconds(300);
  auto server = dist::make_tcp_store("127.0.0.1", 29736, true, ms);
  auto client = dist::make_tcp_store("127.0.0.1", 29736, false, ms);
  CHECK(server->local_address() == "127.0.0.1");
  CHECK(client->local_address() == "127.0.0.1");
  CHECK_THROWS_WITH(client->get(dist::kStoreReachedAtKey), Catch::Contains("300 ms"));
  CHECK(dist::make_memory_store(ms)->local_address().empty());
}

TEST_CASE("dist: an average of integers is refused by gloo and by the ring") {
  auto got = run_ranks<std::vector<std::string>>(2, "int-average", [](ProcessGroup& g) {
    std::vector<std::string> messages;
    for (int k = 0; k < 2; ++k) {
      try {
        Tensor t = ones({4}, DType::i64);
        if (k == 0)
          g.all_reduce(t, ReduceOp::average);
        else
          dist::ring_all_reduce(g, t, ReduceOp::average);
        messages.push_back("no error");
      } catch (const DTypeError& e) {
        messages.push_back(e.what());
      }
    }
    return messages;
  });
  for (const auto& m : got) {
    CHECK_THAT(m[0], Catch::Contains("average needs a floating-point tensor, got i64"));
    CHECK_THAT(m[1], Catch::Contains("ring_all_reduce: an average needs a floating-point"));
  }
}

TEST_CASE("dist: KILN_DIST_TIMEOUT bounds the default group's waits, and is checked") {
  {
    ScopedEnv env(std::vector<std::pair<std::string, std::string>>{{"KILN_DIST_TIMEOUT", "2.5"}});
    REQUIRE(dist::timeout_from_env().has_value());
    CHECK(dist::timeout_from_env()->count() == 2500);
    dist::init_process_group("gloo");
    CHECK(dist::default_group().timeout().count() == 2500);
    dist::destroy_process_group();
    // A program's own timeout wins over the variable.
    dist::ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(7);
    dist::init_process_group("gloo", options);
    CHECK(dist::default_group().timeout().count() == 7000);
    dist::destroy_process_group();
  }
  for (const char* bad : {"abc", "0", "-3", "inf", "5s"}) {
    ScopedEnv env(std::vector<std::pair<std::string, std::string>>{{"KILN_DIST_TIMEOUT", bad}});
    CHECK_THROWS_WITH(dist::init_process_group("gloo"),
                      Catch::Contains("KILN_DIST_TIMEOUT") && Catch::Contains(bad));
  }
  CHECK_FALSE(dist::is_initialized());
}
