#!/usr/bin/env bash
# kiln's CPU training throughput under each way conv2d may pick its kernels (backends::CpuConv:
# autotune, the fixed rule, oneDNN or kiln's direct kernels forced), run alternately so that all
# see the same machine, medians in images/s: whether the autotuner stays level with the best fixed
# choice. Run it under ISA caps to see the picks change with the level:
#
#   scripts/bench-cpu-conv-picks.sh [rounds] [build dir] [--amp bf16] [--model resnet50] [--steps N]
#   KILN_CPU_ISA=avx2 scripts/bench-cpu-conv-picks.sh 3          # kiln's kernels and oneDNN at AVX2
#   ONEDNN_MAX_CPU_ISA=AVX2 scripts/bench-cpu-conv-picks.sh 3    # oneDNN alone at AVX2
#
# (defaults: 3 rounds, build, f32, ResNet-20 at batch 128 for 10 steps; ResNet-50 at 224x224 and
# batch 16 for 4.) benchmarks/conv2d_cpu --cpu-conv autotune prints each layer's candidates' times
# and the autotuner's pick.
set -euo pipefail
positional=() amp=off model=resnet20 steps=
while (($#)); do
  case $1 in
    --amp) amp=${2:?--amp needs bf16 or fp16}; shift 2 ;;
    --model) model=${2:?--model needs resnet20 or resnet50}; shift 2 ;;
    --steps) steps=${2:?--steps needs a number}; shift 2 ;;
    *) positional+=("$1"); shift ;;
  esac
done
rounds=${positional[0]:-3}
build=${positional[1]:-build}
cd "$(dirname "$0")/.."
kiln_bin="$build/benchmarks/train_throughput"
[[ -x "$kiln_bin" ]] || { echo "bench-cpu-conv-picks: no $kiln_bin; build the benchmarks first" >&2; exit 2; }
case $model in
  resnet20) shape=(--model resnet20 --batch-size 128) steps=${steps:-10} ;;
  resnet50) shape=(--model resnet50 --imagenet --batch-size 16) steps=${steps:-4} ;;
  *) echo "bench-cpu-conv-picks: --model takes resnet20 or resnet50, not '$model'" >&2; exit 2 ;;
esac
picks=(autotune rule onednn direct)
echo "model: ${shape[*]}, $steps steps, amp $amp; KILN_CPU_ISA=${KILN_CPU_ISA:-} ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-}"
declare -A results
for ((i = 1; i <= rounds; ++i)); do
  line="round $i:"
  for pick in "${picks[@]}"; do
    r=$("$kiln_bin" "${shape[@]}" --threads 2 --steps "$steps" --amp "$amp" --cpu-conv "$pick" |
        sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
    results[$pick]+="$r "
    line+=" $pick $r"
  done
  echo "$line"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
line="median:"
for pick in "${picks[@]}"; do
  read -r -a values <<< "${results[$pick]}"
  line+=" $pick $(median "${values[@]}")"
done
echo "$line"
