#include "lab_metrics.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lab_kernel_resources.h"

namespace kiln::bench {

const std::vector<GpuPeaks>& published_gpus() {
  // H100 SXM5 and H200 SXM (the same GH100 compute, HBM3 against HBM3e) and A100 SXM4 80GB.
  static const std::vector<GpuPeaks> gpus = {
      {"H100", 3350, 66.9, 989.4}, {"H200", 4800, 66.9, 989.4}, {"A100", 2039, 19.5, 312.0}};
  return gpus;
}

namespace {

// "vectorized_kernel<kVector>" and "detail::vectorized_kernel" -> "vectorized_kernel".
std::string base_name(const std::string& launched) {
  std::string name = launched.substr(0, launched.find('<'));
  const std::size_t colons = name.rfind("::");
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

}  // namespace

VersionCounts sum_counts(const std::vector<sim::KernelCounts>& kernels, const std::string& family) {
  VersionCounts v;
  const sim::KernelCounts* busiest = nullptr;
  for (const sim::KernelCounts& k : kernels) {
    v.total += k;
    ++v.kernels;
    if (k.instructions > 0) ++v.counted_kernels;
    if (k.instructions > 0 && (!busiest || k.instructions > busiest->instructions)) busiest = &k;
  }
  if (!busiest) return v;
  int registers = -1, static_shared = 0;
  for (const LabKernelResources& r : kLabKernelResources)
    if (family == r.family && base_name(busiest->kernel) == r.kernel) {
      registers = std::max(registers, r.registers);
      static_shared = std::max(static_shared, r.static_shared);
    }
  if (registers >= 0)
    v.occupancy =
        theoretical_occupancy(registers, busiest->threads_per_block,
                              busiest->dynamic_shared_bytes + static_cast<unsigned>(static_shared));
  return v;
}

namespace {

double ratio(double a, double b) {
  return b > 0 ? a / b : 0;
}

struct Derived {
  double requests, sectors_per_request, coalescing_pct, shared_requests, conflicts_per_request,
      lanes_pct, sector_bytes, bytes, intensity;
};

std::string occupancy(const VersionCounts& v) {
  if (v.occupancy < 0) return "?";
  char text[16];
  std::snprintf(text, sizeof text, "%.0f", 100 * v.occupancy);
  return text;
}

Derived derive(const VersionCounts& v) {
  const sim::KernelCounts& t = v.total;
  Derived d{};
  d.requests = static_cast<double>(t.load_requests + t.store_requests + t.atomic_requests);
  const double sectors = static_cast<double>(t.load_sectors + t.store_sectors + t.atomic_sectors);
  const double used = static_cast<double>(t.load_bytes + t.store_bytes + t.atomic_bytes);
  d.sectors_per_request = ratio(sectors, d.requests);
  d.coalescing_pct = 100 * ratio(used, 32 * sectors);
  d.sector_bytes = 32 * sectors;
  d.shared_requests = static_cast<double>(t.shared_load_requests + t.shared_store_requests);
  const double wavefronts =
      static_cast<double>(t.shared_load_wavefronts + t.shared_store_wavefronts);
  const double ideal = static_cast<double>(t.shared_load_ideal + t.shared_store_ideal);
  d.conflicts_per_request = ratio(wavefronts - ideal, d.shared_requests);
  d.lanes_pct = 100 * ratio(static_cast<double>(t.active_lanes), static_cast<double>(t.lane_slots));
  d.bytes = static_cast<double>(t.unique_read_bytes + t.unique_write_bytes);
  d.intensity = ratio(v.flops, d.bytes);
  return d;
}

// The roofline's time on one GPU in microseconds, and the bound that sets it.
std::string roofline(const VersionCounts& v, const Derived& d, const GpuPeaks& gpu) {
  const double memory_us = d.bytes / (gpu.dram_gbps * 1e9) * 1e6;
  const double math_us = v.flops / ((v.tensor ? gpu.tensor_tflops : gpu.f32_tflops) * 1e12) * 1e6;
  char text[48];
  std::snprintf(text, sizeof text, "%.3g %s", std::max(memory_us, math_us),
                memory_us >= math_us ? "mem" : (v.tensor ? "tensor" : "f32"));
  return text;
}

std::string human(double v) {
  char text[32];
  if (v >= 1e9)
    std::snprintf(text, sizeof text, "%.3gG", v / 1e9);
  else if (v >= 1e6)
    std::snprintf(text, sizeof text, "%.3gM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(text, sizeof text, "%.3gk", v / 1e3);
  else
    std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

}  // namespace

void print_counts_header(std::FILE* out) {
  std::fprintf(out,
               "  counted on the simulator; the times are a roofline estimate from the counts "
               "(us), not a measurement\n");
  std::fprintf(out, "  %-22s %8s %7s %8s %9s %7s %5s %8s %8s %8s %7s", "version", "sect/req",
               "coal%", "shm req", "confl/req", "lanes%", "occ%", "sectorB", "bytes", "FLOPs",
               "FLOP/B");
  for (const GpuPeaks& gpu : published_gpus()) std::fprintf(out, " %12s", gpu.name);
  std::fprintf(out, " %8s\n", "CPU s");
}

void print_counts_row(std::FILE* out, const std::string& version, const VersionCounts& v) {
  if (v.counted_kernels == 0) {
    std::fprintf(out, "  %-22s %s\n", version.c_str(),
                 v.kernels == 0 ? "no simulated kernel (a CPU stand-in for a library)"
                                : "its kernels are not compiled for counting");
    return;
  }
  const Derived d = derive(v);
  std::fprintf(out, "  %-22s %8.2f %7.1f %8s %9.2f %7.1f %5s %8s %8s %8s %7.2f", version.c_str(),
               d.sectors_per_request, d.coalescing_pct, human(d.shared_requests).c_str(),
               d.conflicts_per_request, d.lanes_pct, occupancy(v).c_str(),
               human(d.sector_bytes).c_str(), human(d.bytes).c_str(), human(v.flops).c_str(),
               d.intensity);
  for (const GpuPeaks& gpu : published_gpus())
    std::fprintf(out, " %12s", roofline(v, d, gpu).c_str());
  std::fprintf(out, " %8.2f\n", v.cpu_seconds);
  std::fflush(out);
}

void write_counts_csv_header(std::FILE* csv) {
  std::fprintf(csv,
               "family,problem,version,kernels,counted_kernels,global_requests,"
               "sectors_per_request,coalescing_pct,shared_requests,conflicts_per_request,"
               "lanes_pct,occupancy_pct,sector_bytes,bytes,flops,intensity,shared_load_requests,"
               "shared_load_ways,shared_store_requests,shared_store_ways");
  for (const GpuPeaks& gpu : published_gpus()) std::fprintf(csv, ",%s_estimate", gpu.name);
  std::fprintf(csv, ",cpu_seconds\n");
}

void write_counts_csv_row(std::FILE* csv, const std::string& family, const std::string& problem,
                          const std::string& version, const VersionCounts& v) {
  const Derived d = derive(v);
  std::fprintf(csv, "%s,%s,%s,%d,%d,%.0f,%.3f,%.2f,%.0f,%.3f,%.2f,%s,%.0f,%.0f,%.0f,%.4f",
               family.c_str(), problem.c_str(), version.c_str(), v.kernels, v.counted_kernels,
               d.requests, d.sectors_per_request, d.coalescing_pct, d.shared_requests,
               d.conflicts_per_request, d.lanes_pct, occupancy(v).c_str(), d.sector_bytes, d.bytes,
               v.flops, d.intensity);
  const sim::KernelCounts& t = v.total;
  std::fprintf(csv, ",%llu,%.3f,%llu,%.3f", static_cast<unsigned long long>(t.shared_load_requests),
               ratio(static_cast<double>(t.shared_load_wavefronts),
                     static_cast<double>(t.shared_load_ideal)),
               static_cast<unsigned long long>(t.shared_store_requests),
               ratio(static_cast<double>(t.shared_store_wavefronts),
                     static_cast<double>(t.shared_store_ideal)));
  for (const GpuPeaks& gpu : published_gpus())
    std::fprintf(csv, ",%s", v.counted_kernels ? roofline(v, d, gpu).c_str() : "");
  std::fprintf(csv, ",%.3f\n", v.cpu_seconds);
  std::fflush(csv);
}

}  // namespace kiln::bench
