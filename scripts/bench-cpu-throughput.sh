#!/usr/bin/env bash
# kiln's CPU training throughput against PyTorch's, run alternately so that both see the same
# machine: a shared or throttled host moves single runs by a third, so compare medians of pairs.
#
#   scripts/bench-cpu-throughput.sh [rounds] [build dir] [--amp bf16|fp16] [--torch-malloc glibc]
#                                   [--omp-wait passive] [--model resnet50|vit-mini] [--steps N]
#                                   [--cpu-conv rule|autotune|onednn|direct]
#   (defaults: 5, build, f32, PyTorch with kiln's malloc settings, libgomp's wait policy for both,
#   ResNet-20 on 28x28 images at batch 128 for 20 steps, kiln's convolutions autotuned)
#
# --amp runs both under autocast (PyTorch's CPU autocast). --model resnet50 runs ResNet-50 on
# ImageNet shapes (224x224, 1000 classes) at batch 16, the guides' model, 10 steps unless --steps
# says otherwise; --model vit-mini a small ViT (nn/vit.h) on the 28x28 images at batch 128 with
# AdamW. --cpu-conv is how kiln's CPU conv2d picks its kernels (core/backends.h:
# autotune times them per shape, rule is the fixed choice; the others force one). KILN_CPU_ISA=avx2
# (core/cpu_isa.h) caps kiln's kernels and oneDNN's under kiln, ONEDNN_MAX_CPU_ISA PyTorch's, to
# see what a machine without AVX-512 gets. Needs a release build with benchmarks (cmake
# -DCMAKE_BUILD_TYPE=Release) and Debian's python3-torch for the peer.
#
# Malloc: kiln's CPU allocator raises glibc's mmap and trim thresholds (core/allocator.cpp), so a
# step's freed activations stay in the process; PyTorch's CPU allocator leaves glibc's defaults,
# and its activations page-fault in anew every step, which on a VM can cost it half its speed,
# more on some days than others (docs/results.md). By default PyTorch runs with the same
# thresholds, through GLIBC_TUNABLES, so the two differ in their kernels, not in what the host
# charges for page faults; --torch-malloc glibc gives it glibc's defaults instead.
#
# OpenMP: both run with the same wait policy. By default neither sets one, so libgomp's threads
# spin a while between parallel regions, as a user of either gets; --omp-wait passive sets
# OMP_WAIT_POLICY=PASSIVE for both (what scripts/run.sh gives kiln-train, whose DataLoader workers
# need the cores). Until 2026-11-28 kiln alone ran PASSIVE here (docs/results.md).
set -euo pipefail
positional=() amp=off torch_malloc=kiln omp_wait=default model=resnet20 steps= cpu_conv=autotune
while (($#)); do
  case $1 in
    --amp) amp=${2:?--amp needs bf16 or fp16}; shift 2 ;;
    --model) model=${2:?--model needs resnet20, resnet50 or vit-mini}; shift 2 ;;
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    --cpu-conv) cpu_conv=${2:?--cpu-conv needs rule, autotune, onednn or direct}; shift 2 ;;
    --torch-malloc) torch_malloc=${2:?--torch-malloc needs kiln or glibc}; shift 2 ;;
    --omp-wait) omp_wait=${2:?--omp-wait needs passive or default}; shift 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
rounds=${positional[0]:-5}
build=${positional[1]:-build}
cd "$(dirname "$0")/.."
kiln_bin="$build/benchmarks/train_throughput"
[[ -x "$kiln_bin" ]] || { echo "bench-cpu-throughput: no $kiln_bin; build the benchmarks first" >&2; exit 2; }

case $torch_malloc in
  kiln) torch_env=(GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824) ;;
  glibc) torch_env=() ;;
  *) echo "bench-cpu-throughput: --torch-malloc takes kiln or glibc, not '$torch_malloc'" >&2; exit 2 ;;
esac
echo "PyTorch's malloc: $torch_malloc${torch_env:+ (${torch_env[*]})}"
case $omp_wait in
  default) omp_env=() ;;
  passive) omp_env=(OMP_WAIT_POLICY=PASSIVE) ;;
  *) echo "bench-cpu-throughput: --omp-wait takes passive or default, not '$omp_wait'" >&2; exit 2 ;;
esac
echo "OpenMP wait policy, both: $omp_wait"
case $model in
  resnet20) shape=(--model resnet20 --batch-size 128) steps=${steps:-20} ;;
  resnet50) shape=(--model resnet50 --imagenet --batch-size 16) steps=${steps:-10} ;;
  vit-mini) shape=(--model vit-mini --batch-size 128) steps=${steps:-20} ;;
  *) echo "bench-cpu-throughput: --model takes resnet20, resnet50 or vit-mini, not '$model'" >&2; exit 2 ;;
esac
echo "model: ${shape[*]}, $steps steps; kiln's conv2d: $cpu_conv"

kiln=() torch=()
for ((i = 1; i <= rounds; ++i)); do
  k=$(env "${omp_env[@]}" "$kiln_bin" "${shape[@]}" --threads 2 --steps "$steps" --amp "$amp" \
        --cpu-conv "$cpu_conv" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
  t=$(env "${torch_env[@]}" "${omp_env[@]}" /usr/bin/python3 benchmarks/train_throughput_torch.py \
        "${shape[@]}" --threads 2 --steps "$steps" --amp "$amp" |
      sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
  echo "round $i: kiln $k images/s, torch $t images/s"
  kiln+=("$k") torch+=("$t")
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
km=$(median "${kiln[@]}") tm=$(median "${torch[@]}")
echo "median ($model, $amp): kiln $km images/s, torch $tm images/s, ratio $(awk -v k="$km" -v t="$tm" 'BEGIN {printf "%.2f", k / t}')"
