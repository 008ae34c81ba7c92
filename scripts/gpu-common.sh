# Sourced by gpu-check.sh and gpu-lab.sh, from the project root, with OUT_DIR, LOG_NAME (the
# archive's name) and BUDGET_S (the run's time budget in seconds) set.
#
# What comes back. The device machine returns at most 8 files from its output folder, so OUT_DIR
# receives only summary.txt (written line by line as the steps finish, so even a run killed from
# outside leaves it) and, from an exit trap, one archive LOG_NAME.tar.gz of the log folder
# LOG_DIR (default: a fresh folder under /tmp), plus whatever a script copies there with
# `deliver` (at most 5 more files). Every log and CSV lives in LOG_DIR; what must not come back
# (checkpoints) in WORK_DIR (default: another fresh folder under /tmp).
#
# Time. Every step runs under `timeout` with what is left of BUDGET_S (less KEEP_S for the
# archive); a step that would start with less than MIN_STEP_S left is skipped, one that the
# budget's end stops is too, and the summary says "skip (time)" for each and lists them at the
# end. A step's own limits (a ctest or sanitizer timeout) still fail it. Exit status: 0 when every
# step passed, 1 when one failed, 2 when none failed but some were skipped for time.
#
# DRY_RUN=1: every step logs its command instead of running it, and passes: the scripts' control
# flow, summary and archive, tested on a machine without a GPU (tests/scripts/).
# The toolkit's nvcc and compute-sanitizer, after whatever PATH already holds.
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOG_DIR="${LOG_DIR:-$(mktemp -d /tmp/kiln-gpu-logs.XXXXXX)}"
mkdir -p "$LOG_DIR"
LOG_DIR=$(cd "$LOG_DIR" && pwd)
export LOG_DIR
# What must not come back (checkpoints): a folder outside LOG_DIR.
WORK_DIR="${WORK_DIR:-$(mktemp -d /tmp/kiln-gpu-work.XXXXXX)}"
mkdir -p "$WORK_DIR"
summary="$OUT_DIR/summary.txt"
: > "$summary"
failed=0
skipped=()
KEEP_S="${KEEP_S:-20}"
MIN_STEP_S="${MIN_STEP_S:-15}"
DRY_RUN="${DRY_RUN:-0}"
deadline=$((SECONDS + BUDGET_S))

note() { echo "$*" | tee -a "$summary"; }

# Seconds left for steps: the budget less what the archive needs.
seconds_left() { echo $((deadline - KEEP_S - SECONDS)); }

step() {  # step NAME COMMAND...: runs it under the time left, logs it, records pass/fail/skip
  local name="$1"; shift
  local start=$SECONDS status left
  left=$(seconds_left)
  if [ "$left" -lt "$MIN_STEP_S" ]; then
    note "skip  $name (time: ${left} s left of the ${BUDGET_S} s budget)"
    skipped+=("$name")
    return 125
  fi
  if [ "$DRY_RUN" = 1 ]; then
    printf 'dry run: %q ' "$@" >"$LOG_DIR/$name.log"
    echo >>"$LOG_DIR/$name.log"
    note "pass  $name (dry run)"
    return 0
  fi
  # A shell function runs in a child bash (exported with export -f), so that timeout can stop it.
  timeout --kill-after=10 "$left" bash -c '"$@"' "$name" "$@" >"$LOG_DIR/$name.log" 2>&1
  status=$?
  if [ $status -eq 0 ]; then
    note "pass  $name ($((SECONDS - start)) s)"
  elif { [ $status -eq 124 ] || [ $status -eq 137 ]; } && [ "$(seconds_left)" -le 0 ]; then
    note "skip  $name (time: stopped after $((SECONDS - start)) s, the ${BUDGET_S} s budget spent): see $name.log"
    skipped+=("$name")
  else
    note "FAIL  $name ($((SECONDS - start)) s, exit $status): see $name.log"
    failed=1
  fi
  return $status
}

# Copies a file the caller wants back on its own (a CSV, a reference file) into OUT_DIR.
deliver() {
  [ -f "$1" ] && cp "$1" "$OUT_DIR/"
}

# The exit trap: the last summary lines, then the archive of every log.
finish() {
  local status=$failed
  trap - EXIT
  [ $status -eq 0 ] && [ ${#skipped[@]} -gt 0 ] && status=2
  case $status in
    0) note "done: every step passed" ;;
    2) note "done: none failed, ${#skipped[@]} skipped for time (${skipped[*]}): run them in another call" ;;
    *) note "done: some steps FAILED${skipped[*]:+; skipped for time: ${skipped[*]}}" ;;
  esac
  cp "$summary" "$LOG_DIR/summary.txt"
  if tar czf "$OUT_DIR/$LOG_NAME.tar.gz" -C "$(dirname "$LOG_DIR")" "$(basename "$LOG_DIR")"; then
    # The device returns no file over 16 MiB.
    [ "$(stat -c %s "$OUT_DIR/$LOG_NAME.tar.gz")" -le 16777216 ] ||
      note "warning: $LOG_NAME.tar.gz is over 16 MiB, more than the device returns"
  else
    note "warning: could not write $LOG_NAME.tar.gz"
  fi
  exit $status
}
# A run stopped from outside (SIGTERM, Ctrl-C) still writes the archive, with a line saying so.
stopped() {
  note "FAIL  stopped by a signal after $SECONDS s"
  failed=1
  finish
}
trap finish EXIT
trap stopped TERM INT

# On a machine without Debian's packages: unpacks .device-carry/ (made by gpu-prepare-carry.sh on
# the build machine) into a private prefix and points CMake and the loader at it, and sets
# carried=1. Without a carry folder it does nothing; a carry folder without packages, or a
# package that does not unpack, fails (a FAIL line) with status 1.
carried=0
# shellcheck disable=SC2034  # carried is read by the scripts that source this one
use_carry() {
  [ -d .device-carry/debs ] || return 0
  local sysroot=/tmp/kiln-sysroot deb debs=(.device-carry/debs/*.deb)
  if [ ! -f "${debs[0]}" ]; then
    note "FAIL  carry: .device-carry/debs holds no .deb (rerun scripts/gpu-prepare-carry.sh)"
    failed=1
    return 1
  fi
  mkdir -p "$sysroot"
  for deb in "${debs[@]}"; do
    if ! dpkg -x "$deb" "$sysroot" 2>>"$LOG_DIR/carry.log"; then
      note "FAIL  carry: dpkg -x $deb failed: see carry.log"
      failed=1
      return 1
    fi
  done
  export CMAKE_PREFIX_PATH="$sysroot/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  carried=1
  note "carry: ${#debs[@]} packages unpacked into $sysroot"
}

# cuDNN loads its engine libraries by name: let the loader see the wheels' folders too.
use_wheel_libraries() {
  local module dir
  for module in nvidia.cudnn nvidia.nccl; do
    dir=$(python3 -c "import $module as m; print(list(m.__path__)[0])" 2>/dev/null) &&
      export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
  return 0
}

# Whether a configure log holds a CMake warning (CMake 4 warns about packages' removed
# compatibility; any other warning is news too): the lines go to configure-warnings.txt.
configure_warnings() {  # LOG
  grep -n "CMake Warning\|CMake Deprecation Warning" "$1" >"$LOG_DIR/configure-warnings.txt"
}
