// What a stopped Profile says: the key-averages table (per name, or per name and input shape) and
// the Chrome trace (host events per thread, GPU intervals per device).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/profiler.h"

namespace kiln::profiler {

namespace {

// An event's time without the events directly nested in it, on the host and on the GPU.
struct SelfTimes {
  std::vector<double> host_ms, gpu_ms;
};

SelfTimes self_times(const std::vector<Event>& events) {
  SelfTimes self;
  self.host_ms.resize(events.size());
  self.gpu_ms.resize(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    self.host_ms[i] = events[i].host_ms();
    self.gpu_ms[i] = std::max(events[i].gpu_ms, 0.0);
  }
  for (const Event& e : events) {
    if (e.parent < 0) continue;
    const auto p = static_cast<size_t>(e.parent);
    self.host_ms[p] -= e.host_ms();
    self.gpu_ms[p] -= std::max(e.gpu_ms, 0.0);
  }
  // GPU intervals of nested ops can overlap their parent's edges by a launch; never below zero.
  for (double& v : self.gpu_ms) v = std::max(v, 0.0);
  for (double& v : self.host_ms) v = std::max(v, 0.0);
  return self;
}

std::string megabytes(int64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1 << 20));
}

std::string fit(const std::string& text, size_t width) {
  return text.size() <= width ? text : text.substr(0, width - 3) + "...";
}

// JSON string contents: quotes, backslashes and control characters escaped.
std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  return out;
}

// Per thread, the time inside its top-level events, which never overlap (one opens at depth 0
// only when none is open on its thread).
std::vector<ThreadTime> thread_times(const std::vector<Event>& events) {
  std::map<int, std::pair<int64_t, int64_t>> per_thread;  // busy ns, events
  for (const Event& e : events) {
    auto& [busy, count] = per_thread[e.thread];
    ++count;
    if (e.depth == 0) busy += e.end_ns - e.start_ns;
  }
  std::vector<ThreadTime> out;
  for (const auto& [thread, figures] : per_thread)
    out.push_back({thread, static_cast<double>(figures.first) * 1e-6, figures.second});
  return out;
}

}  // namespace

KeyAverages Profile::key_averages(bool group_by_shape) const {
  check_stopped("key_averages");
  const SelfTimes self = self_times(events_);
  KeyAverages out;
  out.wall_ms = wall_ms();
  out.by_shape = group_by_shape;
  out.threads = thread_times(events_);
  std::map<std::tuple<std::string, std::string, int>, size_t> row_of;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    const std::string shapes = group_by_shape ? e.shapes : std::string();
    // A Profiler's step ranges, one name per step, make one row (PyTorch's "ProfilerStep*").
    const std::string name = e.name.starts_with("ProfilerStep#") ? "ProfilerStep*" : e.name;
    auto key = std::make_tuple(name, shapes, static_cast<int>(e.kind));
    auto [it, inserted] = row_of.try_emplace(key, out.rows.size());
    if (inserted) out.rows.push_back({name, shapes, e.kind});
    OpStats& row = out.rows[it->second];
    ++row.calls;
    row.host_ms += e.host_ms();
    row.self_host_ms += self.host_ms[i];
    if (e.gpu_ms >= 0) {
      out.has_gpu = true;
      row.gpu_ms += e.gpu_ms;
      row.self_gpu_ms += self.gpu_ms[i];
    }
    row.allocated_bytes += e.allocated_bytes;
    row.freed_bytes += e.freed_bytes;
    row.bytes += e.bytes;
    out.has_bytes = out.has_bytes || e.bytes > 0;
  }
  return out;
}

std::string KeyAverages::table(const TableOptions& options) const {
  using Key = double (*)(const OpStats&);
  static const std::map<std::string, Key> columns = {
      {"calls", [](const OpStats& r) { return static_cast<double>(r.calls); }},
      {"host_ms", [](const OpStats& r) { return r.host_ms; }},
      {"self_host_ms", [](const OpStats& r) { return r.self_host_ms; }},
      {"gpu_ms", [](const OpStats& r) { return r.gpu_ms; }},
      {"self_gpu_ms", [](const OpStats& r) { return r.self_gpu_ms; }},
      {"allocated_bytes", [](const OpStats& r) { return static_cast<double>(r.allocated_bytes); }},
  };
  std::vector<OpStats> sorted = rows;
  if (options.sort_by == "name") {
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const OpStats& a, const OpStats& b) { return a.name < b.name; });
  } else {
    auto it = columns.find(options.sort_by);
    KILN_CHECK(it != columns.end(), ValueError,
               "profiler table: unknown sort column '{}' (expected calls, host_ms, self_host_ms, "
               "gpu_ms, self_gpu_ms, allocated_bytes or name)",
               options.sort_by);
    const Key key = it->second;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [key](const OpStats& a, const OpStats& b) { return key(a) > key(b); });
  }
  if (options.row_limit > 0 && sorted.size() > static_cast<size_t>(options.row_limit))
    sorted.resize(static_cast<size_t>(options.row_limit));

  std::string out = fmt::format("{:<36} {:>8} {:>7} {:>11} {:>11} {:>7}", "name", "kind", "calls",
                                "host ms", "self ms", "self %");
  if (has_gpu) out += fmt::format(" {:>11} {:>11}", "GPU ms", "self GPU ms");
  out += fmt::format(" {:>10} {:>10}", "alloc MB", "freed MB");
  if (has_bytes) out += fmt::format(" {:>10}", "data MB");
  if (by_shape) out += "  input shapes";
  out += "\n";
  for (const OpStats& r : sorted) {
    out += fmt::format("{:<36} {:>8} {:>7} {:>11.3f} {:>11.3f} {:>6.1f}%", fit(r.name, 36),
                       kind_name(r.kind), r.calls, r.host_ms, r.self_host_ms,
                       wall_ms > 0 ? 100.0 * r.self_host_ms / wall_ms : 0.0);
    if (has_gpu) out += fmt::format(" {:>11.3f} {:>11.3f}", r.gpu_ms, r.self_gpu_ms);
    out += fmt::format(" {:>10} {:>10}", megabytes(r.allocated_bytes), megabytes(r.freed_bytes));
    if (has_bytes) out += fmt::format(" {:>10}", r.bytes > 0 ? megabytes(r.bytes) : "-");
    if (by_shape) out += "  " + r.shapes;
    out += "\n";
  }
  // Per thread, not summed: threads run at once (a DataLoader's workers, gloo's communication
  // thread), so their events' times together may exceed the wall time.
  std::string per_thread;
  for (const ThreadTime& t : threads)
    per_thread += fmt::format("{}thread {} {:.3f} ms ({:.1f}%)", per_thread.empty() ? "" : ", ",
                              t.thread, t.busy_ms, wall_ms > 0 ? 100.0 * t.busy_ms / wall_ms : 0.0);
  if (threads.empty()) per_thread = "none";
  out += fmt::format(
      "{} rows; {:.3f} ms profiled; time in top-level events per thread: {} (the rest "
      "ran outside any recorded event{})\n",
      rows.size(), wall_ms, per_thread,
      threads.size() > 1 ? "; self times add up over threads, as does self %" : "");
  return out;
}

std::string Profile::chrome_trace_json() const {
  check_stopped("chrome_trace_json");
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out += R"({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "kiln host"}})";
  std::map<int, bool> gpu_devices;
  // One lane per stream: the default stream is lane 0, the others 1, 2, ... in order of first use.
  std::map<uint64_t, int> lanes{{0, 0}};
  auto stream_lane = [&](uint64_t stream) {
    return lanes.try_emplace(stream, static_cast<int>(lanes.size())).first->second;
  };
  for (const Event& e : events_) {
    const double ts_us = static_cast<double>(e.start_ns) * 1e-3;
    const double dur_us = static_cast<double>(e.end_ns - e.start_ns) * 1e-3;
    std::string args =
        fmt::format(R"("kind": "{}", "device": "{}", "allocated_bytes": {}, )"
                    R"("freed_bytes": {})",
                    kind_name(e.kind), e.device.str(), e.allocated_bytes, e.freed_bytes);
    if (!e.shapes.empty())
      args += fmt::format(R"(, "input_shapes": "{}", "input_dtypes": "{}")", json_escape(e.shapes),
                          json_escape(e.dtypes));
    if (e.bytes > 0) args += fmt::format(R"(, "bytes": {})", e.bytes);
    if (!e.node.empty()) args += fmt::format(R"(, "backward_node": "{}")", json_escape(e.node));
    out += fmt::format(
        ",\n{{\"name\": \"{}\", \"cat\": \"{}\", \"ph\": \"X\", \"ts\": {:.3f}, \"dur\": {:.3f}, "
        "\"pid\": 0, \"tid\": {}, \"args\": {{{}}}}}",
        json_escape(e.name), kind_name(e.kind), ts_us, dur_us, e.thread, args);
    if (e.gpu_ms >= 0) {
      gpu_devices[e.device.index] = true;
      // GPU intervals are measured from the device's first timing event, placed at the start of
      // the profile: the GPU lane shows their order and lengths, its offset from the host lane is
      // approximate.
      out += fmt::format(
          ",\n{{\"name\": \"{}\", \"cat\": \"gpu\", \"ph\": \"X\", \"ts\": {:.3f}, \"dur\": "
          "{:.3f}, \"pid\": {}, \"tid\": {}, \"args\": {{\"host_thread\": {}, \"stream\": "
          "\"{:#x}\"}}}}",
          json_escape(e.name), e.gpu_start_ms * 1e3, e.gpu_ms * 1e3, 1 + e.device.index,
          stream_lane(e.stream), e.thread, e.stream);
    }
  }
  for (const auto& [device, unused] : gpu_devices)
    out += fmt::format(
        ",\n{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {}, \"args\": {{\"name\": "
        "\"GPU {}\"}}}}",
        1 + device, device);
  out += "\n]}\n";
  return out;
}

void Profile::export_chrome_trace(const std::string& path) const {
  const std::string json = chrome_trace_json();
  const std::string temp = path + ".tmp";
  {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(file.good(), Error, "profiler: cannot write {}", temp);
    file << json;
    file.close();
    KILN_CHECK(file.good(), Error, "profiler: writing {} failed", temp);
  }
  KILN_CHECK(std::rename(temp.c_str(), path.c_str()) == 0, Error,
             "profiler: cannot rename {} to {}", temp, path);
}

}  // namespace kiln::profiler
