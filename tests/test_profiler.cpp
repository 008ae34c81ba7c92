// The profiler on the CPU: a small model's op and backward-node counts against a hand count, the
// nesting of events in time, memory against the allocator's statistics, user ranges, threads, the
// key-averages table and its footer, the Chrome trace as JSON, a DataLoader's worker threads, and
// the scheduled profiler (wait, warm-up and active steps) against torch.profiler's actions.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "temp_dir.h"

using namespace kiln;
using profiler::EventKind;

namespace {

// x [4, 3] -> linear(5) -> relu -> linear(2, no bias) -> sum: forward and backward.
struct TinyModel {
  Tensor x = randn({4, 3});
  Tensor w1 = randn({5, 3}).requires_grad_(), b1 = randn({5}).requires_grad_();
  Tensor w2 = randn({2, 5}).requires_grad_();
  Tensor loss() const { return sum(linear(relu(linear(x, w1, b1)), w2)); }
};

// Names of the events of `kind` on thread 0 at depth 0, with their counts.
std::map<std::string, int> top_level(const std::vector<profiler::Event>& events, EventKind kind) {
  std::map<std::string, int> counts;
  for (const profiler::Event& e : events)
    if (e.thread == 0 && e.depth == 0 && e.kind == kind) ++counts[e.name];
  return counts;
}

}  // namespace

TEST_CASE("profiler: a small model's ops and backward nodes, counted by hand") {
  TinyModel m;
  profiler::Profile prof;
  Tensor loss = m.loss();
  loss.backward();
  prof.stop();
  const auto& events = prof.events();
  // Forward: two linears, a relu and a sum; their internal copies nest inside them.
  CHECK(top_level(events, EventKind::op) ==
        std::map<std::string, int>{{"linear", 2}, {"relu", 1}, {"sum", 1}});
  // Backward: one node per recorded op, and one AccumulateGrad per leaf that requires grad.
  CHECK(top_level(events, EventKind::backward_node) ==
        std::map<std::string, int>{
            {"SumBackward", 1}, {"LinearBackward", 2}, {"ReluBackward", 1}, {"AccumulateGrad", 3}});
  // The ops a backward node runs are its children and carry its name.
  int in_linear_backward = 0;
  for (const profiler::Event& e : events) {
    if (e.kind != EventKind::op || e.parent < 0) continue;
    const profiler::Event& parent = events[static_cast<size_t>(e.parent)];
    if (parent.kind == EventKind::backward_node) {
      CHECK(e.node == parent.name);
      if (e.node == "LinearBackward") ++in_linear_backward;
    }
  }
  CHECK(in_linear_backward >= 3);  // dx of the first linear is not needed; dW1, db1, dx2, dW2 are
}

TEST_CASE("profiler: events nest in time and record shapes, dtypes and device") {
  TinyModel m;
  profiler::Profile prof;
  {
    profiler::RecordFunction forward("forward");
    m.loss().backward();
  }
  prof.stop();
  const auto& events = prof.events();
  REQUIRE_FALSE(events.empty());
  double total_ms = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const profiler::Event& e = events[i];
    INFO(e.name << " (event " << i << ")");
    CHECK(e.end_ns >= e.start_ns);
    CHECK(e.start_ns >= 0);
    CHECK(e.end_ns <= static_cast<int64_t>(prof.wall_ms() * 1e6) + 1);
    if (e.parent >= 0) {
      const profiler::Event& p = events[static_cast<size_t>(e.parent)];
      CHECK(p.start_ns <= e.start_ns);
      CHECK(e.end_ns <= p.end_ns);
      CHECK(e.depth == p.depth + 1);
      CHECK(e.thread == p.thread);
    } else {
      CHECK(e.depth == 0);
    }
    if (e.depth == 0) total_ms += e.host_ms();
  }
  CHECK(total_ms > 0);
  // Everything ran inside the user's range.
  CHECK(events[0].name == "forward");
  CHECK(events[0].kind == EventKind::user_range);
  for (size_t i = 1; i < events.size(); ++i) CHECK(events[i].depth >= 1);
  bool found = false;
  for (const profiler::Event& e : events) {
    if (e.name != "linear" || e.shapes != "[4, 3], [5, 3], [5]") continue;
    found = true;
    CHECK(e.dtypes == "f32, f32, f32");
    CHECK(e.device == Device::cpu());
    CHECK(e.gpu_ms < 0);
  }
  CHECK(found);
}

TEST_CASE("profiler: memory matches the allocator's statistics") {
  const Tensor a = randn({1000}), b = randn({1000});
  const MemoryStats before = memory_stats();
  profiler::Profile prof;
  Tensor c = add(a, b);          // one f32 [1000] output
  Tensor d = mul(c, 2.0);        // and one more, the scalar too
  { Tensor scratch = relu(d); }  // allocated and freed inside the profile
  TinyModel m;
  m.loss().backward();
  prof.stop();
  const MemoryStats after = memory_stats();
  const profiler::Profile::MemoryTotals totals = prof.memory_totals();
  CHECK(totals.allocations == after.allocations - before.allocations);
  CHECK(totals.allocated_bytes - totals.freed_bytes == after.current_bytes - before.current_bytes);
  CHECK(totals.frees > 0);
  // The events' own figures are a part of the totals; add's is exactly its output.
  int64_t in_events = 0;
  for (const profiler::Event& e : prof.events()) in_events += e.allocated_bytes;
  CHECK(in_events <= totals.allocated_bytes);
  CHECK(in_events > 0);
  const profiler::Event& add_event = prof.events().front();
  REQUIRE(add_event.name == "add");
  CHECK(add_event.allocated_bytes == 1000 * 4);
  CHECK(add_event.allocations == 1);
}

TEST_CASE("profiler: other threads record under their own thread number") {
  profiler::Profile prof;
  relu(randn({8}));
  std::thread worker([] { sigmoid(randn({8})); });
  worker.join();
  prof.stop();
  bool main_relu = false, worker_sigmoid = false;
  for (const profiler::Event& e : prof.events()) {
    if (e.name == "relu") main_relu = e.thread == 0;
    if (e.name == "sigmoid") worker_sigmoid = e.thread == 1;
  }
  CHECK(main_relu);
  CHECK(worker_sigmoid);
}

TEST_CASE("profiler: key averages, grouped by name or by input shape, sorted by any column") {
  TinyModel m;
  profiler::Profile prof;
  m.loss().backward();
  prof.stop();
  const profiler::KeyAverages by_name = prof.key_averages();
  int64_t linear_calls = 0;
  double self_sum = 0;
  for (const profiler::OpStats& r : by_name.rows) {
    if (r.name == "linear") linear_calls = r.calls;
    CHECK(r.self_host_ms <= r.host_ms + 1e-9);
    self_sum += r.self_host_ms;
  }
  CHECK(linear_calls == 2);
  CHECK(self_sum <= prof.wall_ms() + 1e-6);
  // The two linears have different input shapes: two rows when grouped by shape.
  int linear_rows = 0;
  for (const profiler::OpStats& r : prof.key_averages(true).rows)
    if (r.name == "linear") ++linear_rows;
  CHECK(linear_rows == 2);

  const std::string table = by_name.table({.sort_by = "calls", .row_limit = 3});
  CHECK(table.find("self ms") != std::string::npos);
  CHECK(table.find("GPU ms") == std::string::npos);  // nothing ran on a GPU
  int lines = 0;
  for (char c : table) lines += c == '\n';
  CHECK(lines == 1 + 3 + 1);  // header, three rows, the footer
  for (const char* column :
       {"host_ms", "self_host_ms", "gpu_ms", "self_gpu_ms", "allocated_bytes", "name"})
    CHECK_NOTHROW(by_name.table({.sort_by = column}));
  CHECK_THROWS_WITH(by_name.table({.sort_by = "speed"}), Catch::Contains("speed"));
}

TEST_CASE("profiler: the Chrome trace is JSON with every event") {
  TinyModel m;
  profiler::Profile prof;
  {
    profiler::RecordFunction range("step \"1\"");  // a name that needs escaping
    m.loss().backward();
  }
  prof.stop();
  const auto path = std::filesystem::temp_directory_path() / "kiln_test_profiler_trace.json";
  prof.export_chrome_trace(path.string());
  std::ifstream file(path);
  const nlohmann::json trace = nlohmann::json::parse(file);
  std::filesystem::remove(path);
  size_t complete = 0;
  bool range = false, node = false, shapes = false;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++complete;
    CHECK(e.at("dur").get<double>() >= 0);
    range = range || e.at("name") == "step \"1\"";
    node = node || (e.at("name") == "mm" && e.at("args").contains("backward_node"));
    shapes = shapes || (e.at("name") == "linear" && e.at("args").contains("input_shapes"));
  }
  CHECK(complete == prof.events().size());
  CHECK(range);
  CHECK(node);
  CHECK(shapes);
}

TEST_CASE("profiler: one profile at a time, read after stop") {
  profiler::Profile prof;
  CHECK(profiler::is_recording());
  CHECK_THROWS_AS(profiler::Profile(), ValueError);
  CHECK_THROWS_WITH(prof.events(), Catch::Contains("stop()"));
  prof.stop();
  CHECK_FALSE(profiler::is_recording());
  prof.stop();             // a second stop does nothing
  profiler::Profile next;  // and another may start
  relu(randn({2}));
  next.stop();
  CHECK(next.events().size() == 1);
}

TEST_CASE("profiler: a range left open across profiles does not close the next one's events") {
  std::optional<profiler::Profile> first(std::in_place);
  std::optional<profiler::RecordFunction> range(std::in_place, "outlives its profile");
  first->stop();
  profiler::Profile second;
  {
    profiler::RecordFunction inner("inner");
    range.reset();  // closes in the first profile's terms: the second's "inner" stays open
    relu(randn({2}));
  }
  second.stop();
  REQUIRE(second.events().size() == 2);
  CHECK(second.events()[0].name == "inner");
  CHECK(second.events()[1].name == "relu");
  CHECK(second.events()[1].parent == 0);  // relu ran inside "inner", still open then
  CHECK(first->events().size() == 1);     // the range, ended at the stop
}

TEST_CASE("profiler: nothing is recorded without a profile") {
  profiler::Profile prof;
  prof.stop();
  relu(randn({4}));
  CHECK(prof.events().empty());
}

TEST_CASE("profiler: the GradScaler's unscale and fused optimizer steps are events with bytes") {
  // Two parameters of 15 and 5 f32 elements: 80 bytes of parameters, and of gradients.
  Tensor w = randn({5, 3}).requires_grad_(), b = randn({5}).requires_grad_();
  const Tensor x = randn({4, 3});
  optim::SGD sgd({w, b}, {.lr = 0.1, .momentum = 0.9});
  optim::Adam adam({w, b});
  optim::AdamW adamw({w, b});
  optim::GradScaler scaler;
  profiler::Profile prof;
  scaler.scale(sum(linear(x, w, b))).backward();
  scaler.step(sgd);
  scaler.update();
  adam.step();
  adamw.step();
  prof.stop();
  std::map<std::string, std::vector<int64_t>> bytes;
  for (const profiler::Event& e : prof.events()) bytes[e.name].push_back(e.bytes);
  CHECK(bytes["GradScaler::unscale_"] == std::vector<int64_t>{80});
  CHECK(bytes["SGD::fused_step"] == std::vector<int64_t>{80});
  CHECK(bytes["Adam::fused_step"] == std::vector<int64_t>{80});
  CHECK(bytes["AdamW::fused_step"] == std::vector<int64_t>{80});
  // The table's "data MB" column and the trace's "bytes" carry them.
  const profiler::KeyAverages averages = prof.key_averages();
  CHECK(averages.has_bytes);
  for (const profiler::OpStats& row : averages.rows)
    if (row.name == "SGD::fused_step") CHECK(row.bytes == 80);
  CHECK_THAT(averages.table(), Catch::Contains("data MB"));
  const auto trace = nlohmann::json::parse(prof.chrome_trace_json());
  int with_bytes = 0;
  for (const auto& e : trace["traceEvents"])
    if (e.contains("args") && e["args"].contains("bytes")) ++with_bytes;
  CHECK(with_bytes == 4);
}

TEST_CASE("profiler: a model without collectives or fused work has no data column") {
  TinyModel m;
  profiler::Profile prof;
  m.loss().backward();
  prof.stop();
  const profiler::KeyAverages averages = prof.key_averages();
  CHECK_FALSE(averages.has_bytes);
  CHECK_THAT(averages.table(), !Catch::Contains("data MB"));
}

namespace {

// Each thread's time inside its top-level events, in nanoseconds (they do not overlap on one
// thread).
std::map<int, int64_t> busy_ns(const std::vector<profiler::Event>& events) {
  std::map<int, int64_t> busy;
  for (const profiler::Event& e : events)
    if (e.depth == 0) busy[e.thread] += e.end_ns - e.start_ns;
  return busy;
}

std::string last_line(const std::string& text) {
  const size_t end = text.find_last_not_of('\n');
  const size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - begin);
}

}  // namespace

TEST_CASE("profiler: the footer gives each thread's time in events, never their sum") {
  profiler::Profile prof;
  {
    // The worker's range lies inside the main thread's: summed, they count that time twice.
    profiler::RecordFunction outer("main thread");
    std::thread worker([] {
      profiler::RecordFunction inner("worker thread");
      relu(randn({64}));
    });
    worker.join();
  }
  prof.stop();
  const std::map<int, int64_t> busy = busy_ns(prof.events());
  REQUIRE(busy.size() == 2);
  const double wall_ms = prof.wall_ms();
  const std::string footer = last_line(prof.key_averages().table());
  INFO(footer);
  CHECK_THAT(footer, Catch::Contains(fmt::format("{:.3f} ms profiled", wall_ms)));
  for (const auto& [thread, ns] : busy) {
    const double ms = static_cast<double>(ns) * 1e-6;
    CHECK(ms <= wall_ms);
    CHECK_THAT(footer, Catch::Contains(fmt::format("thread {} {:.3f} ms ({:.1f}%)", thread, ms,
                                                   100.0 * ms / wall_ms)));
  }
  CHECK_THAT(footer, Catch::Contains("add up over threads"));
}

TEST_CASE("profiler: a DataLoader's workers record reading, transforms and collating") {
  kiln::testing::TempDir dir("kiln_profiler_loader");
  for (int i = 0; i < 8; ++i) {
    const std::filesystem::path folder = dir.path / std::to_string(i % 2);
    std::filesystem::create_directories(folder);
    data::write_image((folder / (std::to_string(i) + ".png")).string(),
                      full({3, 8, 8}, 10.0 * i).to(DType::u8));
  }
  data::DataLoader loader(std::make_shared<data::ImageFolder>(dir.path.string()),
                          data::compose({data::resize(6), data::center_crop(4), data::to_float()}),
                          {.batch_size = 2, .num_workers = 2});
  profiler::Profile prof;
  int batches = 0;
  while (auto batch = loader.next()) ++batches;
  prof.stop();
  REQUIRE(batches == 4);
  std::map<std::string, std::multiset<int>> threads;  // per name, the thread of each event
  for (const profiler::Event& e : prof.events()) threads[e.name].insert(e.thread);
  const std::multiset<int>& fetches = threads["DataLoader: fetch batch"];
  REQUIRE(fetches.size() == 4);
  const std::set<int> workers(fetches.begin(), fetches.end());
  CHECK(workers.size() == 2);  // two worker threads, each a thread of its own in the profile
  CHECK(workers.count(0) == 0);
  for (const char* name : {"read_image", "decode_image", "resize", "center_crop", "to_float"}) {
    INFO(name);
    CHECK(threads[name].size() == 8);  // one per image
    CHECK(std::set<int>(threads[name].begin(), threads[name].end()) == workers);
  }
  CHECK(threads["collate"].size() == 4);
  CHECK(std::set<int>(threads["collate"].begin(), threads["collate"].end()) == workers);
  // The training loop's side: next() on thread 0, once per batch and once for the end.
  CHECK(threads["DataLoader::next"] == std::multiset<int>{0, 0, 0, 0, 0});
  // Reading an image happens inside fetching its batch.
  for (const profiler::Event& e : prof.events()) {
    if (e.name != "read_image") continue;
    REQUIRE(e.parent >= 0);
    CHECK(prof.events()[static_cast<size_t>(e.parent)].name == "DataLoader: fetch batch");
  }
}

namespace {

// torch.profiler.ProfilerAction as one letter: N(one), W(armup), R(ecord), S (record and save).
std::string actions(const profiler::Schedule& schedule, int64_t steps) {
  std::string out;
  for (int64_t step = 0; step < steps; ++step) {
    switch (schedule(step)) {
      case profiler::ProfilerAction::none:
        out += 'N';
        break;
      case profiler::ProfilerAction::warmup:
        out += 'W';
        break;
      case profiler::ProfilerAction::record:
        out += 'R';
        break;
      case profiler::ProfilerAction::record_and_save:
        out += 'S';
        break;
    }
  }
  return out;
}

// The names of the user ranges "step <n>" in a profile, in order.
std::vector<std::string> step_ranges(const profiler::Profile& trace) {
  std::vector<std::string> names;
  for (const profiler::Event& e : trace.events())
    if (e.kind == EventKind::user_range && e.name.rfind("step ", 0) == 0) names.push_back(e.name);
  return names;
}

// A training loop's iteration: a range named for the step with an op in it.
void iteration(int64_t step) {
  profiler::RecordFunction range(fmt::format("step {}", step));
  relu(randn({4}));
}

}  // namespace

TEST_CASE("profiler: schedule's actions are torch.profiler.schedule's") {
  using profiler::schedule;
  // Written out from torch.profiler.schedule's definition: skip_first steps, then cycles of
  // wait, warmup and active steps (the last one saves), `repeat` of them (0: for ever).
  CHECK(actions(schedule(1, 1, 2, 1), 8) == "NWRSNNNN");
  CHECK(actions(schedule(1, 1, 2, 2, 1), 12) == "NNWRSNWRSNNN");
  CHECK(actions(schedule(0, 0, 1), 5) == "SSSSS");
  CHECK(actions(schedule(2, 0, 3), 13) == "NNRRSNNRRSNNR");
  CHECK(actions(schedule(0, 2, 1, 3, 2), 15) == "NNWWSWWSWWSNNNN");
  CHECK(actions(schedule(3, 0, 1, 1, 0), 6) == "NNNSNN");
  CHECK(actions(schedule(0, 1, 4, 0, 3), 14) == "NNNWRRRSWRRRSW");
  CHECK(profiler::action_name(profiler::ProfilerAction::record_and_save) ==
        std::string("record_and_save"));

  CHECK_THROWS_WITH(
      schedule(1, 1, 0),
      Catch::Contains("active must be at least 1 (the steps recorded per cycle), got 0"));
  CHECK_THROWS_AS(schedule(-1, 1, 1), ValueError);
  CHECK_THROWS_WITH(schedule(0, 0, 1, -2), Catch::Contains("repeat=-2"));
  CHECK_THROWS_WITH(schedule(0, 0, 1, 0, -1), Catch::Contains("skip_first=-1"));
  CHECK_THROWS_WITH(schedule(0, 0, 1)(-1), Catch::Contains("step >= 0, got -1"));
}

TEST_CASE("profiler: on_trace_ready gets each cycle's active steps, and only theirs") {
  int64_t current = 0;                        // the loop's step
  std::vector<int64_t> called_in;             // the step() that ended each cycle
  std::vector<std::vector<std::string>> got;  // each cycle's "step <n>" ranges
  std::vector<int64_t> relu_calls;
  profiler::Profiler prof(profiler::schedule(/*wait=*/1, /*warmup=*/1, /*active=*/2, /*repeat=*/2),
                          [&](const profiler::Profile& trace, int64_t cycle) {
                            CHECK(cycle == static_cast<int64_t>(got.size()));
                            CHECK_FALSE(trace.recording());
                            called_in.push_back(current);
                            got.push_back(step_ranges(trace));
                            for (const profiler::OpStats& row : trace.key_averages().rows)
                              if (row.name == "relu") relu_calls.push_back(row.calls);
                          });
  for (current = 0; current < 10; ++current) {
    CHECK(prof.step_num() == current);
    iteration(current);
    prof.step();
  }
  prof.stop();
  // Steps 0-3: wait, warm-up, two recorded; 4-7 the same; then nothing.
  CHECK(got == std::vector<std::vector<std::string>>{{"step 2", "step 3"}, {"step 6", "step 7"}});
  CHECK(called_in == std::vector<int64_t>{3, 7});
  CHECK(relu_calls == std::vector<int64_t>{2, 2});
  CHECK(prof.cycles() == 2);
  REQUIRE(prof.last_trace() != nullptr);
  // Each recorded step is a range of its own, as PyTorch's ProfilerStep#n, around the loop's.
  std::map<std::string, std::string> parent_of;
  const auto& events = prof.last_trace()->events();
  for (const profiler::Event& e : events)
    if (e.parent >= 0) parent_of[e.name] = events[static_cast<size_t>(e.parent)].name;
  CHECK(parent_of["step 6"] == "ProfilerStep#6");
  CHECK(parent_of["step 7"] == "ProfilerStep#7");
  // In the table, the steps' ranges are one row, as PyTorch's.
  int64_t step_rows = 0, step_calls = 0;
  for (const profiler::OpStats& row : prof.last_trace()->key_averages().rows) {
    step_rows += row.name.starts_with("ProfilerStep");
    if (row.name == "ProfilerStep*") step_calls = row.calls;
  }
  CHECK(step_rows == 1);
  CHECK(step_calls == 2);
  CHECK_FALSE(profiler::is_recording());
}

TEST_CASE("profiler: stop and the destructor hand on a recorded cycle cut short") {
  std::vector<std::vector<std::string>> got;
  auto handler = [&](const profiler::Profile& trace, int64_t) {
    got.push_back(step_ranges(trace));
  };
  {
    // Warm-up, then three recorded steps, for ever: stopped in the second cycle's first record.
    profiler::Profiler prof(profiler::schedule(0, 1, 3), handler);
    for (int64_t step = 0; step < 6; ++step) {
      iteration(step);
      if (step < 5) prof.step();
    }
    CHECK(prof.current_action() == profiler::ProfilerAction::record);
    prof.stop();
    CHECK(prof.stopped());
    prof.stop();  // a second stop does nothing
    CHECK_THROWS_WITH(prof.step(), Catch::Contains("profiler::Profiler::step: the profiler was "
                                                   "stopped at step 5"));
  }
  CHECK(got == std::vector<std::vector<std::string>>{{"step 1", "step 2", "step 3"}, {"step 5"}});

  got.clear();
  {
    profiler::Profiler prof(profiler::schedule(1, 0, 5), handler);
    iteration(0);
    prof.step();
    iteration(1);
    prof.step();
    iteration(2);
  }  // the destructor stops it in the cycle's second recorded step
  CHECK(got == std::vector<std::vector<std::string>>{{"step 1", "step 2"}});

  got.clear();
  {
    profiler::Profiler prof(profiler::schedule(0, 2, 1), handler);
    iteration(0);
    prof.step();
    iteration(1);
    CHECK(profiler::is_recording());  // warming up
  }                                   // a warm-up cut short is thrown away
  CHECK(got.empty());
  CHECK_FALSE(profiler::is_recording());
}

TEST_CASE("profiler: a Profiler refuses an empty schedule, and a busy profiler") {
  CHECK_THROWS_WITH(profiler::Profiler(profiler::Schedule()),
                    Catch::Contains("profiler::Profiler: expected a schedule"));
  profiler::Profile other;
  CHECK_THROWS_WITH(profiler::Profiler(profiler::schedule(0, 0, 1)),
                    Catch::Contains("another Profile is recording"));
  profiler::Profiler waiting(profiler::schedule(1, 0, 1));  // nothing to record at step 0
  CHECK_THROWS_AS(waiting.step(), ValueError);              // step 1 would record
  other.stop();
}

TEST_CASE("profiler: on_trace_ready's error comes out of step(), and the next step goes on") {
  int calls = 0;
  profiler::Profiler prof(profiler::schedule(0, 0, 1), [&](const profiler::Profile&, int64_t) {
    if (++calls == 1) throw Error("handler failed");
  });
  iteration(0);
  CHECK_THROWS_WITH(prof.step(), "handler failed");
  CHECK(profiler::is_recording());  // step 1 records
  iteration(1);
  prof.step();
  CHECK(calls == 2);
  REQUIRE(prof.last_trace() != nullptr);
  CHECK(step_ranges(*prof.last_trace()) == std::vector<std::string>{"step 1"});
}

TEST_CASE("profiler: chrome_trace_handler writes a trace per cycle into a folder") {
  kiln::testing::TempDir dir("kiln_profiler_traces");
  const std::string traces = (dir.path / "traces").string();
  {
    profiler::Profiler prof(profiler::schedule(0, 1, 1, 2),
                            profiler::chrome_trace_handler(traces, "rank0"));
    for (int64_t step = 0; step < 6; ++step) {
      iteration(step);
      prof.step();
    }
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(traces))
    files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files == std::vector<std::string>{"rank0_0.json", "rank0_1.json"});
  for (int cycle = 0; cycle < 2; ++cycle) {
    std::ifstream file(std::filesystem::path(traces) / files[static_cast<size_t>(cycle)]);
    const nlohmann::json trace = nlohmann::json::parse(file);
    std::set<std::string> names;
    for (const auto& e : trace.at("traceEvents")) names.insert(e.at("name").get<std::string>());
    const int recorded = 2 * cycle + 1;  // steps 1 and 3 record; 0 and 2 warm up
    CHECK(names.count(fmt::format("step {}", recorded)) == 1);
    CHECK(names.count(fmt::format("ProfilerStep#{}", recorded)) == 1);
    CHECK(names.count(fmt::format("step {}", recorded - 1)) == 0);
  }
  CHECK_THROWS_WITH(profiler::chrome_trace_handler(""), Catch::Contains("expected a folder"));
}

TEST_CASE("profiler: a range held across step() closes its own event, not the step's") {
  std::vector<profiler::Event> events;
  {
    profiler::Profiler prof(
        profiler::schedule(0, 0, 2, 1),
        [&](const profiler::Profile& trace, int64_t) { events = trace.events(); });
    std::optional<profiler::RecordFunction> held(std::in_place, "held");
    prof.step();  // ends ProfilerStep#0 while "held" is open
    relu(randn({2}));
    held.reset();
    prof.step();
  }
  std::map<std::string, profiler::Event> by_name;
  for (const profiler::Event& e : events) by_name[e.name] = e;
  REQUIRE(by_name.count("ProfilerStep#0") == 1);
  REQUIRE(by_name.count("ProfilerStep#1") == 1);
  REQUIRE(by_name.count("held") == 1);
  // The steps follow each other; "held" spans the boundary and ends inside step 1.
  CHECK(by_name["ProfilerStep#0"].end_ns <= by_name["ProfilerStep#1"].start_ns);
  CHECK(by_name["held"].start_ns >= by_name["ProfilerStep#0"].start_ns);
  CHECK(by_name["held"].end_ns >= by_name["ProfilerStep#1"].start_ns);
  CHECK(by_name["held"].end_ns <= by_name["ProfilerStep#1"].end_ns);
}
