#include "kiln/core/cpu_isa.h"

#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln {

namespace {

constexpr CpuIsa kLevels[] = {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512, CpuIsa::avx512_bf16};

#if defined(__x86_64__) || defined(__i386__)
bool bit(uint32_t reg, int n) {
  return (reg >> n) & 1u;
}

// The register state the operating system saves on a context switch (XCR0): AVX's upper halves
// need bits 1-2, AVX-512's mask and upper registers bits 5-7. A CPU with the instructions under
// an OS that does not save their state cannot use them. (Inline assembly: the _xgetbv intrinsic
// would need this file compiled with -mxsave.)
uint64_t enabled_state() {
  uint32_t eax = 0, edx = 0;
  __asm__("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

// cpuid rather than __builtin_cpu_supports: clang 14's builtin knows neither "f16c" nor
// "avx512bf16".
CpuIsa detect() {
  uint32_t eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return CpuIsa::baseline;
  const bool fma = bit(ecx, 12), osxsave = bit(ecx, 27), avx = bit(ecx, 28), f16c = bit(ecx, 29);
  if (!osxsave || !avx || !fma || !f16c) return CpuIsa::baseline;
  const uint64_t state = enabled_state();
  if ((state & 0x6) != 0x6) return CpuIsa::baseline;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !bit(ebx, 5)) return CpuIsa::baseline;
  const bool avx512 = bit(ebx, 16) && bit(ebx, 17) && bit(ebx, 30) && bit(ebx, 31);
  if (!avx512 || (state & 0xe0) != 0xe0) return CpuIsa::avx2;
  const uint32_t max_subleaf = eax;
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && bit(eax, 5))
    return CpuIsa::avx512_bf16;
  return CpuIsa::avx512;
}
#else
CpuIsa detect() {
  return CpuIsa::baseline;
}
#endif

std::string names() {
  std::string all;
  for (CpuIsa isa : kLevels) all += (all.empty() ? "" : ", ") + std::string(cpu_isa_name(isa));
  return all;
}

CpuIsa from_environment() {
  const CpuIsa best = cpu_isa_supported();
  const char* value = std::getenv("KILN_CPU_ISA");
  if (value == nullptr || *value == '\0') return best;
  try {
    const CpuIsa cap = parse_cpu_isa(value);
    return cap < best ? cap : best;
  } catch (const ValueError& e) {
    throw ValueError(std::string("KILN_CPU_ISA: ") + e.what());
  }
}

// -1 until the first use reads KILN_CPU_ISA.
std::atomic<int> chosen{-1};

}  // namespace

CpuIsa parse_cpu_isa(const std::string& name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (CpuIsa isa : kLevels)
    if (lower == cpu_isa_name(isa)) return isa;
  throw ValueError("unknown instruction set '" + name + "'; expected one of " + names());
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::baseline:
      return "baseline";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
    case CpuIsa::avx512_bf16:
      return "avx512_bf16";
  }
  return "unknown";
}

CpuIsa cpu_isa_supported() {
  static const CpuIsa best = detect();
  return best;
}

CpuIsa cpu_isa() {
  int isa = chosen.load(std::memory_order_relaxed);
  if (isa < 0) {
    // Two threads may both read the environment here; they store the same value.
    isa = static_cast<int>(from_environment());
    chosen.store(isa, std::memory_order_relaxed);
  }
  return static_cast<CpuIsa>(isa);
}

CpuIsa set_cpu_isa(CpuIsa isa) {
  KILN_CHECK(isa <= cpu_isa_supported(), ValueError,
             "set_cpu_isa: this CPU cannot run {} (its best is {})", cpu_isa_name(isa),
             cpu_isa_name(cpu_isa_supported()));
  const CpuIsa previous = cpu_isa();
  chosen.store(static_cast<int>(isa), std::memory_order_relaxed);
  return previous;
}

}  // namespace kiln
