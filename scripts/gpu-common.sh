# Sourced by gpu-check.sh and gpu-lab.sh, from the project root with OUT_DIR set: the log folder
# and its summary.txt, `note` and `step`, and what a bare GPU machine needs (the packages carried
# in .device-carry/, the libraries inside PyTorch's wheels).
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
summary="$OUT_DIR/summary.txt"
: > "$summary"
failed=0

note() { echo "$*" | tee -a "$summary"; }

step() {  # step NAME COMMAND...: runs it, logs it, records pass/fail and seconds
  local name="$1"; shift
  local start=$SECONDS status
  "$@" >"$OUT_DIR/$name.log" 2>&1
  status=$?
  if [ $status -eq 0 ]; then
    note "pass  $name ($((SECONDS - start)) s)"
  else
    note "FAIL  $name ($((SECONDS - start)) s, exit $status): see $name.log"
    failed=1
  fi
  return $status
}

# On a machine without Debian's packages: unpacks .device-carry/ (made by gpu-prepare-carry.sh on
# the build machine) into a private prefix and points CMake and the loader at it. Returns 1 when
# there is no carry folder.
use_carry() {
  [ -d .device-carry/debs ] || return 1
  local sysroot=/tmp/kiln-sysroot deb
  mkdir -p "$sysroot"
  for deb in .device-carry/debs/*.deb; do dpkg -x "$deb" "$sysroot"; done
  export CMAKE_PREFIX_PATH="$sysroot/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$sysroot/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  note "carry: $(ls .device-carry/debs | wc -l) packages unpacked into $sysroot"
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
