// kiln-bench lab on the GPU. For each problem: inputs from kiln's generator on the device, then
// for each version of the family, in table order:
//
//   1. its outputs filled with NaN, and its scratch (the partials a version leaves in its
//      workspace for a later pass or block to read) filled with NaN too, so a partial it should
//      have written and did not cannot be found there from the version before; one run, and a
//      check against version 0's outputs (version 0 is the reference):
//      |got - want| <= atol + rtol |want| for every element, with a NaN or an infinity failing;
//      the tolerances are set per family below, scaled to the dtype and the number of terms each
//      output sums;
//   2. if it passed, timing: one call sizes the repeats (about 200 ms of calls, 3 to 100), and
//      each timed call is bracketed by CUDA events after a read of twice the L2's size, so every
//      call starts from a cold L2 that holds only clean lines (a write would leave an L2 of dirty
//      lines, whose write-back to DRAM the timed call would pay); the median is reported;
//   3. a row: ms, TFLOP/s (GEMMs) or GB/s (the rest, from the bytes the problem must move at
//      least), % of version 0's speed and % of the device's peak.
//
// With --metrics (the CUDA simulator only) step 2 is replaced by counting step 1's run
// (lab_metrics.h): the row is then its counts and the roofline estimates made from them.
//
// The peaks are computed from the device's attributes, never typed: DRAM bandwidth as
// 2 x memory clock x bus width (double data rate), FLOP rates as SMs x clock x FLOPs per clock and
// SM, the last from a table by compute capability (kArchRates). The memory-bound families are
// also reported against a measured device-to-device copy, the bandwidth a kernel can reach.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/core/cuda_check.h"
#include "kiln/core/cuda_simulated.h"
#include "kiln/kernels/cuda/lab/attention/tiling.h"
#include "kiln/kernels/cuda/lab/attention/versions.h"
#include "kiln/kernels/cuda/lab/gemm/tiling.h"
#include "kiln/kernels/cuda/lab/gemm/versions.h"
#include "kiln/kernels/cuda/lab/gemm_tc/versions.h"
#include "kiln/kernels/cuda/lab/layernorm/tiling.h"
#include "kiln/kernels/cuda/lab/layernorm/versions.h"
#include "kiln/kernels/cuda/lab/reduction/tiling.h"
#include "kiln/kernels/cuda/lab/reduction/versions.h"
#include "kiln/kernels/cuda/lab/softmax/tiling.h"
#include "kiln/kernels/cuda/lab/softmax/versions.h"
#include "kiln/kiln.h"
#include "lab.h"
#include "lab_metrics.h"

namespace kiln::bench {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- the device's ceilings ----

// Dense FLOPs per clock and SM (an FMA counts 2), by compute capability, from NVIDIA's
// architecture whitepapers: f32 is 2 x the FP32 lanes of an SM (64 on GA100, 128 on GA10x, AD10x
// and GH100); tensor is bf16/f16 in with f32 accumulation, dense (GA100 1024 FMA a clock, GA10x
// and AD10x 512 on the data-centre parts (GeForce halves it with f32 accumulation), GH100 2048).
// An architecture not listed gets no "% of peak".
struct ArchRates {
  int major, minor;
  double f32;
  double tensor;
};
constexpr ArchRates kArchRates[] = {
    {8, 0, 128, 2048}, {8, 6, 256, 1024}, {8, 9, 256, 1024}, {9, 0, 256, 4096}};

struct Ceilings {
  std::string name;
  int major = 0, minor = 0, sms = 0;
  double sm_clock_mhz = 0, memory_clock_mhz = 0;
  int bus_bits = 0;
  size_t l2_bytes = 0;
  double dram_gbps = 0;      // 2 x memory clock x bus width
  double f32_tflops = 0;     // 0: architecture not in kArchRates
  double tensor_tflops = 0;  // the same
  double copy_gbps = 0;      // measured: a device-to-device copy, bytes read + written
};

int attribute(cudaDeviceAttr which, int device) {
  int value = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&value, which, device));
  return value;
}

Ceilings read_ceilings(int device) {
  Ceilings c;
  c.name = cuda::device_name(device);
  c.major = attribute(cudaDevAttrComputeCapabilityMajor, device);
  c.minor = attribute(cudaDevAttrComputeCapabilityMinor, device);
  c.sms = attribute(cudaDevAttrMultiProcessorCount, device);
  c.sm_clock_mhz = attribute(cudaDevAttrClockRate, device) / 1e3;            // kHz
  c.memory_clock_mhz = attribute(cudaDevAttrMemoryClockRate, device) / 1e3;  // kHz
  c.bus_bits = attribute(cudaDevAttrGlobalMemoryBusWidth, device);
  c.l2_bytes = static_cast<size_t>(attribute(cudaDevAttrL2CacheSize, device));
  c.dram_gbps = 2.0 * c.memory_clock_mhz * 1e6 * (c.bus_bits / 8.0) / 1e9;
  for (const ArchRates& rates : kArchRates)
    if (rates.major == c.major && rates.minor == c.minor) {
      c.f32_tflops = c.sms * c.sm_clock_mhz * 1e6 * rates.f32 / 1e12;
      c.tensor_tflops = c.sms * c.sm_clock_mhz * 1e6 * rates.tensor / 1e12;
    }
  return c;
}

// ---- timing ----

class Timer {
 public:
  // On the CUDA simulator there is no L2 to evict, and summing twice its reported size on every
  // repeat would take most of a run whose times mean nothing there: no flush.
  Timer(const Ceilings& ceilings, int repeats, Device device) : repeats_(repeats) {
    if (!cuda::is_simulated())
      flush_ = zeros(
          {static_cast<int64_t>(2 * std::max<size_t>(ceilings.l2_bytes, 1 << 20) / sizeof(float))},
          DType::f32, device);
  }

  // Median milliseconds of run() over the repeats, each from a cold L2.
  double median_ms(const std::function<void()>& run) {
    const double first = timed(run);
    const int repeats = repeats_ > 0
                            ? repeats_
                            : static_cast<int>(std::clamp(
                                  std::ceil(kBudgetMs / std::max(first, 1e-3)), 3.0, 100.0));
    std::vector<cuda::Event> starts, stops;
    starts.reserve(repeats);
    stops.reserve(repeats);
    for (int r = 0; r < repeats; ++r) {
      starts.emplace_back(true);
      stops.emplace_back(true);
    }
    for (int r = 0; r < repeats; ++r) {
      flush();
      starts[r].record();
      run();
      stops[r].record();
    }
    stops.back().synchronize();
    std::vector<double> ms;
    for (int r = 0; r < repeats; ++r) ms.push_back(starts[r].elapsed_time(stops[r]));
    std::sort(ms.begin(), ms.end());
    return repeats % 2 ? ms[repeats / 2] : (ms[repeats / 2 - 1] + ms[repeats / 2]) / 2;
  }

 private:
  static constexpr double kBudgetMs = 200.0;

  double timed(const std::function<void()>& run) {
    cuda::Event start(true), stop(true);
    flush();
    start.record();
    run();
    stop.record();
    stop.synchronize();
    return start.elapsed_time(stop);
  }
  // Reads twice the L2's size (kiln's sum, which writes only its blocks' partials and one
  // float): whatever the last call left in L2 is evicted, its dirty lines written back here,
  // outside the timed region, and L2 is left holding clean lines, which cost nothing to evict.
  void flush() {
    if (flush_.defined()) flush_sum_ = flush_.sum();
  }

  int repeats_;
  Tensor flush_;
  Tensor flush_sum_;
};

// GB/s of a device-to-device copy of 1 GiB (bytes read + written), the median of 10.
double measure_copy_gbps(Timer& timer, Device device) {
  const int64_t bytes = int64_t{1} << 30;
  const Tensor src = zeros({bytes}, DType::u8, device), dst = empty({bytes}, DType::u8, device);
  const double ms = timer.median_ms([&] {
    KILN_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), static_cast<size_t>(bytes),
                                    cudaMemcpyDeviceToDevice, cuda::current_stream_handle()));
  });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

// ---- checks ----

// One output of a version, and how close to version 0's it must be.
struct Output {
  const char* name;
  Tensor tensor;
  double atol;
  double rtol;
};

struct CheckResult {
  bool ok = true;
  double worst = 0.0;  // the largest |got - want| / (atol + rtol |want|): at most 1 to pass
  std::string failed;  // the outputs that failed
};

CheckResult check(const std::vector<Output>& outputs, const std::vector<Tensor>& reference) {
  CheckResult result;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Output& o = outputs[i];
    const Tensor ratio = abs(o.tensor - reference[i]) / (abs(reference[i]) * o.rtol + o.atol);
    const double worst = ratio.max().item(), total = ratio.sum().item();  // NaN shows in the sum
    const bool ok = std::isfinite(total) && worst <= 1.0;
    result.worst = std::max(result.worst, std::isfinite(total) ? worst : kNaN);
    if (!ok) {
      result.ok = false;
      result.failed += (result.failed.empty() ? "" : ",") + std::string(o.name);
    }
  }
  return result;
}

// ---- rows ----

// The folder under kernels/cuda/lab of a family's table: layernorm_forward and layernorm_backward
// are both layernorm's, attention_forward, attention_tc and attention_backward attention's.
std::string lab_folder(const std::string& family) {
  for (const char* folder : {"layernorm", "attention"})
    if (family.rfind(folder, 0) == 0) return folder;
  return family;
}

enum class Bound { f32_math, tensor_math, memory };

struct Work {
  double flops = 0;  // GEMMs
  double bytes = 0;  // what the problem must move at least
  Bound bound = Bound::memory;
  // --metrics: the FLOPs the family's formula gives the problem, for its arithmetic intensity
  // (GEMMs: 2mnk; the others: per element, an exp or a division counted as one)
  double nominal_flops = 0;
};

struct Row {
  std::string family, problem, name;
  int version = 0;
  double ms = kNaN, rate = kNaN, pct_v0 = kNaN, pct_peak = kNaN, pct_copy = kNaN;
  std::string unit, checked;
  double flops = 0, bytes = 0;
};

std::string number(double v, int decimals) {
  if (!std::isfinite(v)) return "";
  return fmt::format("{:.{}f}", v, decimals);
}

class Lab {
 public:
  Lab(const LabOptions& options, Device device)
      : options_(options),
        device_(device),
        ceilings_(read_ceilings(device.index)),
        timer_(ceilings_, options.repeats, device) {}

  void print_device() {
    const Ceilings& c = ceilings_;
    std::printf(
        "kiln-bench lab: %s, compute capability %d.%d, %d SMs at %.0f MHz, %d-bit memory "
        "at %.0f MHz, %.0f MiB L2\n",
        c.name.c_str(), c.major, c.minor, c.sms, c.sm_clock_mhz, c.bus_bits, c.memory_clock_mhz,
        c.l2_bytes / 1048576.0);
    std::printf(
        "peaks from the device's attributes: DRAM %.0f GB/s; f32 %s TFLOP/s; tensor "
        "bf16/f16 (dense, f32 accumulate) %s TFLOP/s\n",
        c.dram_gbps, c.f32_tflops > 0 ? number(c.f32_tflops, 1).c_str() : "unknown",
        c.tensor_tflops > 0 ? number(c.tensor_tflops, 0).c_str() : "unknown");
  }

  void measure_copy() {
    ceilings_.copy_gbps = measure_copy_gbps(timer_, device_);
    std::printf("measured device-to-device copy (1 GiB, read + write): %.0f GB/s\n",
                ceilings_.copy_gbps);
  }

  ~Lab() {
    if (counts_csv_) std::fclose(counts_csv_);
  }
  Lab(const Lab&) = delete;
  Lab& operator=(const Lab&) = delete;

  void open_csv() {
    if (options_.csv.empty()) return;
    if (options_.metrics) {
      counts_csv_ = std::fopen(options_.csv.c_str(), "w");
      if (!counts_csv_) throw Error("kiln-bench lab: cannot write " + options_.csv);
      write_counts_csv_header(counts_csv_);
      return;
    }
    csv_.open(options_.csv);
    if (!csv_) throw Error("kiln-bench lab: cannot write " + options_.csv);
    const Ceilings& c = ceilings_;
    const std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    csv_ << "# kiln-bench lab\n# gpu=" << c.name << "\n# compute_capability=" << c.major << "."
         << c.minor << "\n# sms=" << c.sms << "\n# sm_clock_mhz=" << c.sm_clock_mhz
         << "\n# memory_clock_mhz=" << c.memory_clock_mhz << "\n# memory_bus_bits=" << c.bus_bits
         << "\n# l2_bytes=" << c.l2_bytes << "\n# dram_gbps=" << number(c.dram_gbps, 1)
         << "\n# f32_tflops=" << number(c.f32_tflops, 2)
         << "\n# tensor_tflops=" << number(c.tensor_tflops, 1)
         << "\n# copy_gbps=" << number(c.copy_gbps, 1) << "\n# date=" << date << "\n";
    csv_ << "family,version,name,ms,rate,unit,pct_v0,pct_peak,checked,problem,flops,bytes\n";
    csv_.flush();
  }

  bool selected(const std::string& name) const {
    if (options_.only.empty()) return true;
    for (const std::string& wanted : options_.only)
      if (name == wanted || name.rfind(wanted + "_", 0) == 0) return true;
    return false;
  }

  // Runs, checks and times every version of a family on one problem. `scratch`: byte tensors
  // (views of a workspace) that a version writes before it reads them; each is filled with 0xFF
  // bytes, every float a NaN, before each version's checked run.
  template <class Args>
  void run(const std::string& family, const std::string& problem,
           const std::vector<lab::LabVersion<Args>>& versions, const Args& args,
           const std::vector<Output>& outputs, const Work& work,
           const std::vector<Tensor>& scratch = {}) {
    std::printf("\n%s  %s\n", family.c_str(), problem.c_str());
    if (options_.metrics)
      print_counts_header(stdout);
    else
      std::printf("  %-22s %10s %12s %8s %8s %8s  %s\n", "version",
                  cuda::is_simulated() ? "CPU ms" : "ms", work.flops > 0 ? "TFLOP/s" : "GB/s",
                  "% v0", "% peak", work.bound == Bound::memory ? "% copy" : "", "check");
    std::vector<Tensor> reference;
    double v0_ms = kNaN;
    for (size_t i = 0; i < versions.size(); ++i) {
      const lab::LabVersion<Args>& version = versions[i];
      if (i > 0 && !selected(version.name)) continue;
      Row row;
      VersionCounts counts;
      row.family = family;
      row.problem = problem;
      row.name = version.name;
      row.version = static_cast<int>(i);
      row.flops = work.flops;
      row.bytes = work.bytes;
      row.unit = work.flops > 0 ? "TFLOP/s" : "GB/s";
      try {
        for (const Output& o : outputs) {
          Tensor poisoned = o.tensor;  // a version that leaves an element unwritten fails
          poisoned.fill_(kNaN);
        }
        for (Tensor bytes : scratch) bytes.fill_(0xFF);  // a partial left unwritten reads as NaN
        cuda::synchronize();
        if (options_.metrics) {
          cuda::take_simulator_counts();
          cuda::set_simulator_counting(true);
        }
        const auto started = std::chrono::steady_clock::now();
        version.run(args);
        cuda::synchronize();
        if (options_.metrics) {
          cuda::set_simulator_counting(false);
          counts = sum_counts(cuda::take_simulator_counts(), lab_folder(family));
          counts.flops = work.nominal_flops;
          counts.tensor = work.bound == Bound::tensor_math;
          counts.cpu_seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        }
        bool passed = true;
        if (i == 0) {
          for (const Output& o : outputs) reference.push_back(o.tensor.clone());
          row.checked = "reference";
        } else {
          const CheckResult result = check(outputs, reference);
          passed = result.ok;
          row.checked = passed ? "pass" : "FAIL " + result.failed;
          if (!passed) failed_ = true;
          row.checked += " (worst " + number(result.worst, 3) + " of tol)";
        }
        if (passed && !options_.metrics) {
          row.ms = timer_.median_ms([&] { version.run(args); });
          if (i == 0) v0_ms = row.ms;
          fill_rates(row, work, v0_ms);
        }
      } catch (const std::exception& e) {
        if (options_.metrics) cuda::set_simulator_counting(false);
        row.checked = std::string("ERROR ") + e.what();
        failed_ = true;
      }
      if (options_.metrics) {
        print_counts_row(stdout, version.name, counts);
        if (row.checked != "reference" && row.checked.rfind("pass", 0) != 0)
          std::printf("  %-22s %s\n", "", row.checked.c_str());
        if (counts_csv_) write_counts_csv_row(counts_csv_, family, problem, version.name, counts);
      } else {
        print(row, work);
        write_csv(row);
      }
      if (i == 0 && row.checked != "reference") {
        std::printf("  (version 0 did not run: the others have no reference)\n");
        return;
      }
    }
  }

  bool failed() const { return failed_; }
  const Ceilings& ceilings() const { return ceilings_; }
  Device device() const { return device_; }

 private:
  void fill_rates(Row& row, const Work& work, double v0_ms) const {
    const double seconds = row.ms * 1e-3;
    row.pct_v0 = 100.0 * v0_ms / row.ms;
    if (work.flops > 0) {
      row.rate = work.flops / seconds / 1e12;
      const double peak =
          work.bound == Bound::tensor_math ? ceilings_.tensor_tflops : ceilings_.f32_tflops;
      if (peak > 0) row.pct_peak = 100.0 * row.rate / peak;
    } else {
      row.rate = work.bytes / seconds / 1e9;
      row.pct_peak = 100.0 * row.rate / ceilings_.dram_gbps;
      if (ceilings_.copy_gbps > 0) row.pct_copy = 100.0 * row.rate / ceilings_.copy_gbps;
    }
    // A CPU's time against a GPU's peak says nothing: the simulator's rows leave it out.
    if (cuda::is_simulated()) row.pct_peak = kNaN;
  }

  void print(const Row& row, const Work& work) const {
    std::printf("  %-22s %10s %12s %8s %8s %8s  %s\n", row.name.c_str(), number(row.ms, 4).c_str(),
                number(row.rate, work.flops > 0 ? 2 : 1).c_str(), number(row.pct_v0, 1).c_str(),
                number(row.pct_peak, 1).c_str(), number(row.pct_copy, 1).c_str(),
                row.checked.c_str());
    std::fflush(stdout);
  }

  // Fields with commas or quotes are quoted, as RFC 4180 says.
  static std::string field(const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string quoted = "\"";
    for (char ch : text) quoted += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return quoted + "\"";
  }

  void write_csv(const Row& row) {
    if (!csv_.is_open()) return;
    csv_ << field(row.family) << ',' << row.version << ',' << field(row.name) << ','
         << number(row.ms, 5) << ',' << number(row.rate, 3) << ',' << row.unit << ','
         << number(row.pct_v0, 2) << ',' << number(row.pct_peak, 2) << ',' << field(row.checked)
         << ',' << field(row.problem) << ',' << number(row.flops, 0) << ',' << number(row.bytes, 0)
         << '\n';
    csv_.flush();
  }

  LabOptions options_;
  Device device_;
  Ceilings ceilings_;
  Timer timer_;
  std::ofstream csv_;
  std::FILE* counts_csv_ = nullptr;  // --metrics --csv
  bool failed_ = false;
};

// ---- the families ----

// The nominal FLOPs of the memory-bound families are so many an element: a sum 1; softmax 5 (the
// max, x - max, its exp, the sum, the scaling); layer norm forward 8 (the mean's add, the
// variance's subtract, multiply and add, (x - mean) * rstd * weight + bias), backward 13 (x-hat
// 2, weight * dy 1, the two row sums 3, dx 4, dweight 2 and dbias 1).
double elements(int64_t rows, int64_t cols) {
  return static_cast<double>(rows) * static_cast<double>(cols);
}

void run_gemm(Lab& lab, int64_t m, int64_t n, int64_t k) {
  const Device d = lab.device();
  const Tensor a = uniform({m, k}, -1, 1, DType::f32, d), b = uniform({k, n}, -1, 1, DType::f32, d);
  const Tensor c = empty({m, n}, DType::f32, d);
  const lab::GemmArgs args{a.data<float>(), b.data<float>(), c.data<float>(), m, n, k};
  // f32 products of values in [-1, 1], k of them a sum: the rounding of a sum grows about as
  // sqrt(k), and every version and cuBLAS add in different orders.
  const double tol = 1e-5 * std::sqrt(static_cast<double>(k));
  lab.run("gemm", fmt::format("m={} n={} k={}", m, n, k), lab::gemm_versions(), args,
          {{"C", c, tol, tol}},
          {lab::gemm::flops(m, n, k), lab::gemm::bytes_moved(m, n, k, 4, 4), Bound::f32_math,
           lab::gemm::flops(m, n, k)});
}

void run_gemm_tc(Lab& lab, int64_t m, int64_t n, int64_t k, const std::string& dtype_name) {
  const Device d = lab.device();
  const DType dtype = dtype_name == "f16" ? DType::f16 : DType::bf16;
  const Tensor a = uniform({m, k}, -1, 1, dtype, d), b = uniform({k, n}, -1, 1, dtype, d);
  const Tensor c = empty({m, n}, DType::f32, d);
  const lab::GemmTcArgs args{a.data_ptr(), b.data_ptr(), c.data<float>(), m, n, k, dtype};
  // The products of 16-bit floats are exact in f32; what differs is the order and the precision
  // of the tensor cores' f32 additions, looser than FFMA's: 5x the f32 tolerance.
  const double tol = 5e-5 * std::sqrt(static_cast<double>(k));
  lab.run("gemm_tc", fmt::format("{} m={} n={} k={}", dtype_name, m, n, k), lab::gemm_tc_versions(),
          args, {{"C", c, tol, tol}},
          {lab::gemm::flops(m, n, k), lab::gemm::bytes_moved(m, n, k, 2, 4), Bound::tensor_math,
           lab::gemm::flops(m, n, k)});
}

void run_reduction(Lab& lab, int64_t rows, int64_t cols) {
  const Device d = lab.device();
  // Integers in {-1, 0, 1}: every partial sum is an integer far below 2^24, exact in f32, so
  // every order of addition gives the same bits and the check asks for equality.
  const Tensor x = randint(-1, 2, {rows, cols}, DType::f32, d);
  const Tensor out = empty({rows}, DType::f32, d);
  const Tensor workspace =
      zeros({static_cast<int64_t>(lab::reduction_workspace_bytes(rows, cols))}, DType::u8, d);
  const lab::ReductionArgs args{x.data<float>(), out.data<float>(), rows, cols,
                                workspace.data_ptr()};
  // The partials past v5's counters: v4's and v5's first passes (and v1's and v2's later ones)
  // leave the same values in the same places, so only a poisoned region shows one left unwritten.
  const lab::reduction::WorkspaceLayout layout = lab::reduction::workspace_layout(rows, cols);
  const Tensor partials = workspace.slice(0, static_cast<int64_t>(layout.first_offset),
                                          static_cast<int64_t>(layout.bytes));
  lab.run("reduction", fmt::format("rows={} cols={}", rows, cols), lab::reduction_versions(), args,
          {{"out", out, 0.5, 0.0}},
          {0, lab::reduction::bytes_moved(rows, cols), Bound::memory, elements(rows, cols)},
          {partials});
}

void run_softmax(Lab& lab, int64_t rows, int64_t cols) {
  const Device d = lab.device();
  const Tensor x = uniform({rows, cols}, -5, 5, DType::f32, d);
  const Tensor y = empty({rows, cols}, DType::f32, d);
  const lab::SoftmaxArgs args{x.data<float>(), y.data<float>(), rows, cols};
  // Each output is relative to its row's sum of cols exponentials.
  const double rtol = 2e-6 * std::sqrt(static_cast<double>(cols));
  lab.run("softmax", fmt::format("rows={} cols={}", rows, cols), lab::softmax_versions(), args,
          {{"y", y, 1e-10, rtol}},
          {0, lab::softmax::bytes_moved(rows, cols), Bound::memory, 5 * elements(rows, cols)});
}

void run_layernorm(Lab& lab, int64_t rows, int64_t cols) {
  const Device d = lab.device();
  const Tensor x = uniform({rows, cols}, -2, 3, DType::f32, d);  // a mean far from 0
  const Tensor weight = uniform({cols}, 0.5, 1.5, DType::f32, d);
  const Tensor bias = uniform({cols}, -0.5, 0.5, DType::f32, d);
  const Tensor y = empty({rows, cols}, DType::f32, d), mean = empty({rows}, DType::f32, d),
               rstd = empty({rows}, DType::f32, d);
  const lab::LayerNormForwardArgs forward{x.data<float>(),
                                          weight.data<float>(),
                                          bias.data<float>(),
                                          y.data<float>(),
                                          mean.data<float>(),
                                          rstd.data<float>(),
                                          rows,
                                          cols};
  // Statistics of cols terms, in f32 by the lab's versions and in double by kiln's.
  const double row_tol = 2e-6 * std::sqrt(static_cast<double>(cols));
  const std::string problem = fmt::format("rows={} cols={}", rows, cols);
  lab.run("layernorm_forward", problem, lab::layernorm_forward_versions(), forward,
          {{"y", y, row_tol, row_tol},
           {"mean", mean, row_tol, row_tol},
           {"rstd", rstd, row_tol, row_tol}},
          {0, lab::layernorm::forward_bytes(rows, cols), Bound::memory, 8 * elements(rows, cols)});

  // The backward from version 0's statistics.
  lab::layernorm::v0_kiln(forward);
  const Tensor dy = uniform({rows, cols}, -1, 1, DType::f32, d);
  const Tensor dx = empty({rows, cols}, DType::f32, d), dweight = empty({cols}, DType::f32, d),
               dbias = empty({cols}, DType::f32, d);
  const Tensor workspace = empty(
      {static_cast<int64_t>(lab::layernorm_backward_workspace_bytes(rows, cols))}, DType::u8, d);
  const lab::LayerNormBackwardArgs backward{x.data<float>(),
                                            weight.data<float>(),
                                            mean.data<float>(),
                                            rstd.data<float>(),
                                            dy.data<float>(),
                                            dx.data<float>(),
                                            dweight.data<float>(),
                                            dbias.data<float>(),
                                            rows,
                                            cols,
                                            workspace.data_ptr()};
  // dweight and dbias add rows terms each, in f32 (the reference adds in double).
  const double column_tol = 1e-5 * std::sqrt(static_cast<double>(rows));
  const double dx_tol = 5e-6 * std::sqrt(static_cast<double>(cols));
  lab.run("layernorm_backward", problem, lab::layernorm_backward_versions(), backward,
          {{"dx", dx, dx_tol, dx_tol},
           {"dweight", dweight, column_tol, column_tol},
           {"dbias", dbias, column_tol, column_tol}},
          {0, lab::layernorm::backward_bytes(rows, cols), Bound::memory, 13 * elements(rows, cols)},
          {workspace});
}

// Attention's three tables on one problem: the f32 forward, the tensor-core forward (bf16 or f16
// inputs), and the backward from version 0's forward.
void run_attention(Lab& lab, const LabOptions& o) {
  namespace a = lab::attention;
  const Device d = lab.device();
  const int64_t bh = o.batch_heads, l = o.queries, s = o.keys, dim = o.head_dim;
  const Tensor q = uniform({bh, l, dim}, -3, 3, DType::f32, d);
  const Tensor k = uniform({bh, s, dim}, -3, 3, DType::f32, d);
  const Tensor v = uniform({bh, s, dim}, -1, 1, DType::f32, d);
  const Tensor out = empty({bh, l, dim}, DType::f32, d), lse = empty({bh, l}, DType::f32, d);
  const Tensor workspace =
      empty({static_cast<int64_t>(lab::attention_workspace_bytes(bh, l, s))}, DType::u8, d);
  lab::AttentionArgs args{q.data_ptr(),
                          k.data_ptr(),
                          v.data_ptr(),
                          out.data<float>(),
                          lse.data<float>(),
                          bh,
                          l,
                          s,
                          dim,
                          static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim))),
                          o.causal,
                          DType::f32,
                          workspace.data_ptr()};
  const std::string problem =
      fmt::format("bh={} L={} S={} D={}{}", bh, l, s, dim, o.causal ? " causal" : "");
  const double forward_flops = a::forward_flops(bh, l, s, dim, o.causal);
  // Sums of S terms (the scores' D), in f32 by every version.
  const double tol = 2e-6 * std::sqrt(static_cast<double>(s * dim)) + 1e-6;
  lab.run("attention_forward", problem, lab::attention_forward_versions(), args,
          {{"O", out, tol, tol}, {"lse", lse, tol, tol}},
          {forward_flops, a::forward_bytes(bh, l, s, dim, 4), Bound::f32_math, forward_flops},
          {workspace});

  // The tensor-core table on the same values rounded to 16 bits; v4 rounds P too.
  const DType half = o.dtype == "f16" ? DType::f16 : DType::bf16;
  const Tensor q16 = q.to(half), k16 = k.to(half), v16 = v.to(half);
  lab::AttentionArgs tc = args;
  tc.q = q16.data_ptr();
  tc.k = k16.data_ptr();
  tc.v = v16.data_ptr();
  tc.dtype = half;
  const double o_tol = half == DType::bf16 ? 8e-3 : 1e-3;
  lab.run("attention_tc", fmt::format("{} {}", o.dtype, problem), lab::attention_tc_versions(), tc,
          {{"O", out, o_tol, o_tol}, {"lse", lse, 2e-5, 2e-5}},
          {forward_flops, a::forward_bytes(bh, l, s, dim, 2), Bound::tensor_math, forward_flops},
          {workspace});

  // The backward from version 0's forward.
  lab::attention::v0_kiln(args);
  const Tensor dout = uniform({bh, l, dim}, -1, 1, DType::f32, d);
  const Tensor dq = empty({bh, l, dim}, DType::f32, d), dk = empty({bh, s, dim}, DType::f32, d),
               dv = empty({bh, s, dim}, DType::f32, d);
  const lab::AttentionBackwardArgs backward{q.data<float>(),
                                            k.data<float>(),
                                            v.data<float>(),
                                            out.data<float>(),
                                            lse.data<float>(),
                                            dout.data<float>(),
                                            dq.data<float>(),
                                            dk.data<float>(),
                                            dv.data<float>(),
                                            bh,
                                            l,
                                            s,
                                            dim,
                                            args.scale,
                                            o.causal,
                                            workspace.data_ptr()};
  const double grad_tol = 1e-5 * std::sqrt(static_cast<double>(std::max(l, s) * dim)) + 1e-5;
  const double backward_flops = a::backward_flops(bh, l, s, dim, o.causal);
  lab.run("attention_backward", problem, lab::attention_backward_versions(), backward,
          {{"dQ", dq, grad_tol, grad_tol},
           {"dK", dk, grad_tol, grad_tol},
           {"dV", dv, grad_tol, grad_tol}},
          {backward_flops, a::backward_bytes(bh, l, s, dim), Bound::f32_math, backward_flops},
          {workspace});
}

void run_family(Lab& lab, const std::string& family, LabOptions o) {
  fill_family_defaults(family, o);
  if (family == "gemm") run_gemm(lab, o.m, o.n, o.k);
  if (family == "gemm_tc") run_gemm_tc(lab, o.m, o.n, o.k, o.dtype);
  if (family == "reduction") run_reduction(lab, o.rows, o.cols);
  if (family == "softmax") run_softmax(lab, o.rows, o.cols);
  if (family == "layernorm") run_layernorm(lab, o.rows, o.cols);
  if (family == "attention") run_attention(lab, o);
  cuda::empty_cache();
}

// `all`: the sizes of the tables in docs/kernels/, chosen to fit in about 5 minutes on an H200
// (the naive GEMMs at 8192^3 take the longest, a second or two a call).
void run_all(Lab& lab, const LabOptions& options) {
  if (options.simulated) {  // each family once at the simulator's sizes
    for (const std::string& family : lab_families()) run_family(lab, family, options);
    return;
  }
  const auto with = [&](int64_t rows, int64_t cols) {
    LabOptions o = options;
    o.rows = rows;
    o.cols = cols;
    return o;
  };
  run_family(lab, "reduction", with(1, int64_t{1} << 28));
  run_family(lab, "reduction", with(65536, 4096));
  run_family(lab, "softmax", with(65536, 4096));
  run_family(lab, "softmax", with(262144, 1024));
  run_family(lab, "layernorm", with(65536, 4096));
  run_family(lab, "layernorm", with(262144, 1024));
  for (int64_t size : {4096, 8192}) {
    LabOptions o = options;
    o.m = o.n = o.k = size;
    run_family(lab, "gemm", o);
    o.dtype = "bf16";
    run_family(lab, "gemm_tc", o);
  }
  for (bool causal : {false, true}) {
    LabOptions o = options;
    o.dtype = "bf16";
    o.causal = causal;
    run_family(lab, "attention", o);
  }
}

}  // namespace

int run_lab_gpu(const LabOptions& options) {
  const Device device = Device::cuda(cuda::current_device());
  Lab lab(options, device);
  lab.print_device();
  const bool memory_bound =
      options.family != "gemm" && options.family != "gemm_tc" && options.family != "attention";
  if (memory_bound && !cuda::is_simulated()) lab.measure_copy();
  if (cuda::is_simulated())
    std::printf("on the CUDA simulator: times are the CPU's, and say little about a GPU%s\n",
                options.metrics ? "; the counts are what a GPU's warps would issue" : "");
  lab.open_csv();
  const auto start = std::chrono::steady_clock::now();
  if (options.family == "all")
    run_all(lab, options);
  else
    run_family(lab, options.family, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\nkiln-bench lab: %s in %.0f s%s\n", options.family.c_str(), seconds,
              lab.failed() ? "; some versions FAILED their check" : "; every version checked");
  return lab.failed() ? 1 : 0;
}

}  // namespace kiln::bench
