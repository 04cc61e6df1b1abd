#!/usr/bin/env bash
# The GPU checks, on a machine with a GPU but without this project's build dependencies: unpacks
# .gpu/bundle.tar.xz (made by scripts/gpu-bundle.sh on the build machine) under /tmp, finds the
# CUDA libraries there, and runs, each step with its own timeout and whatever the others did:
#   1. nvidia-smi (the GPU, its driver, its PCIe link)
#   2. tests/gpu_device_test      device options, copies, kernels, variables on the GPU
#   3. tests/gpu_backend_ops_test every GPU kernel against its CPU kernel, per dtype
#   4. bench/gpu_ops              MatMul/convolutions against FP32 and TF32 peaks, copies against
#                                 the link, the CNN step split into kernels, copies and overhead
#   5. the seed CNN, --worker-device gpu, 1 ps + 1 worker: the worker's images/s
#   6. the seed CNN, 1 ps + 2 workers sharing GPU 0, per_process_gpu_memory_fraction 0.4 each,
#      allow_growth, log_device_placement; the ps masked with CUDA_VISIBLE_DEVICES=-1, the
#      workers given CUDA_VISIBLE_DEVICES=0
#   7. samples/multi_gpu_addn with log_device_placement
# Writes to $OUT (default ./gpu-check-out): summary.txt (the table printed at the end),
# tests.txt (test counts and failures), gpu_ops.txt (the benchmark), placement.txt (device creation,
# masking and placement lines of the runs), nvidia-smi.txt, logs.tar.gz (every log whole).
# Exit status 0 when every step passed (or skipped for want of a GPU), 1 otherwise.
# Run from the repository root:  bash scripts/gpu-check.sh
# Knobs: AF_GPU_CHECK_DEADLINE (seconds for everything, default 330), AF_GPU_CHECK_STEPS (global
# steps of each CNN run, default 1000), AF_GPU_BUNDLE (the tarball), AF_GPU_CHECK_BUNDLED_GLIBC=1
# (run through the bundled glibc even when this machine's would do).
set -u

t_start=$(date +%s)
deadline=$((t_start + ${AF_GPU_CHECK_DEADLINE:-330}))
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle=${AF_GPU_BUNDLE:-$root/.gpu/bundle.tar.xz}
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/af-gpu-check.XXXXXX)
logs=$work/logs
mkdir -p "$logs"
bg_pids=()
cleanup() {
  for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${bg_pids[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT

note() { echo "gpu-check: $*" | tee -a "$logs/gpu-check.log"; }

if [[ ! -f $bundle ]]; then
  echo "gpu-check: $bundle is missing: run scripts/gpu-bundle.sh on the build machine and carry .gpu" | tee "$OUT/summary.txt"
  exit 1
fi
if ! tar -xJf "$bundle" -C "$work"; then
  echo "gpu-check: cannot unpack $bundle" | tee "$OUT/summary.txt"
  exit 1
fi
note "bundle: $(tr '\n' ' ' < "$work/MANIFEST")"

# ---- the CUDA libraries of this machine ------------------------------------------------------------
search=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/cuda-*/lib64 /usr/local/cuda-*/targets/x86_64-linux/lib \
         /usr/lib/x86_64-linux-gnu /usr/lib64 /lib/x86_64-linux-gnu; do
  [[ -d $d ]] && search+=("$d")
done
if command -v python3 >/dev/null; then
  while read -r sp; do
    for d in "$sp"/nvidia/*/lib; do [[ -d $d ]] && search+=("$d"); done
  done < <(python3 -c 'import site, sys
for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path: print(p)' 2>/dev/null | sort -u)
fi
libpath=$work/lib
missing=()
for lib in $(sed -n 's/^cuda_libraries=//p' "$work/MANIFEST"); do
  found=""
  for d in "${search[@]}"; do
    if [[ -e $d/$lib ]]; then found=$d; break; fi
  done
  if [[ -n $found ]]; then
    note "found $lib in $found"
    [[ ":$libpath:" == *":$found:"* ]] || libpath=$libpath:$found
  else
    note "NOT FOUND: $lib (searched ${search[*]})"
    missing+=("$lib")
  fi
done
# cuDNN 9 loads its engine libraries from its own directory: make sure they are there too.
for d in ${libpath//:/ }; do
  ls "$d"/libcudnn_*.so.9 >/dev/null 2>&1 && note "cuDNN engine libraries in $d: $(cd "$d" && ls libcudnn_*.so.9 | tr '\n' ' ')"
done

# glibc: the bundled one (through its loader) when this machine's is older than the binaries need.
need=$(sed -n 's/^glibc_needed=//p' "$work/MANIFEST")
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
run=()
if [[ ${AF_GPU_CHECK_BUNDLED_GLIBC:-0} == 1 ]] ||
   [[ -n $need && -n $have && $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1) != "$need" ]]; then
  loader=$(ls "$work"/glibc/ld-linux* | head -1)
  run=("$loader" --library-path "$libpath:$work/glibc")
  note "glibc $have here, the binaries need $need: running them through the bundled glibc ($loader)"
else
  export LD_LIBRARY_PATH=$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  note "glibc ${have:-?} here, the binaries need ${need:-?}: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
fi
for b in "$work"/bin/*; do
  if [[ ${#run[@]} -eq 0 ]]; then
    nf=$(ldd "$b" 2>&1 | grep 'not found' | tr -s ' \t' ' ')
    [[ -n $nf ]] && note "$(basename "$b") cannot load:$nf"
  fi
done
bin=$work/bin

# ---- steps ---------------------------------------------------------------------------------------------
results=()  # "name|status|seconds|figures"
remaining() { echo $((deadline - $(date +%s))); }
# step NAME LIMIT CMD...: runs CMD with the smaller of LIMIT and the time left, output to
# $logs/NAME.log; sets step_rc and step_secs.
step() {
  local name=$1 limit=$2
  shift 2
  local left
  left=$(remaining)
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    step_rc=124
    step_secs=0
    echo "not run: out of time" > "$logs/$name.log"
    return
  fi
  local t0
  t0=$(date +%s)
  note "running $name (limit ${limit}s)"
  timeout -k 5 "$limit" "$@" > "$logs/$name.log" 2>&1
  step_rc=$?
  step_secs=$(($(date +%s) - t0))
}
status_of() {  # rc [skipped-flag]
  if [[ $1 -eq 124 || $1 -eq 137 ]]; then echo "TIMEOUT"
  elif [[ $1 -ne 0 ]]; then echo "FAIL(rc=$1)"
  elif [[ ${2:-0} -eq 1 ]]; then echo "SKIPPED"
  else echo "OK"; fi
}

# 1. nvidia-smi
gpu_present=0
if command -v nvidia-smi >/dev/null; then
  step nvidia-smi 20 nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,clocks.max.sm \
    --format=csv >> "$logs/nvidia-smi.log" 2>&1
  nvidia-smi topo -m >> "$logs/nvidia-smi.log" 2>&1
  [[ $step_rc -eq 0 ]] && gpu_present=1
  results+=("nvidia-smi|$(status_of $step_rc)|$step_secs|$(nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader 2>/dev/null | head -1)")
else
  echo "nvidia-smi: not installed (no NVIDIA driver on this machine)" > "$logs/nvidia-smi.log"
  results+=("nvidia-smi|SKIPPED|0|not installed")
fi
cp "$logs/nvidia-smi.log" "$OUT/nvidia-smi.txt"

# 2, 3. the GPU tests
gtest_figures() {  # log -> "N passed, N failed, N skipped"
  local log=$1 p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  echo "${p:-0} passed, ${f:-0} failed, ${s:-0} skipped"
}
: > "$OUT/tests.txt"
for t in gpu_device_test gpu_backend_ops_test; do
  limit=75
  [[ $t == gpu_device_test ]] && limit=60
  step "$t" "$limit" "${run[@]}" "$bin/$t"
  figures=$(gtest_figures "$logs/$t.log")
  skipped=0
  [[ $figures == "0 passed"* ]] && skipped=1
  grep -q "no CUDA GPU visible" "$logs/$t.log" && [[ $gpu_present -eq 0 ]] && skipped=1
  results+=("$t|$(status_of $step_rc $skipped)|$step_secs|$figures")
  {
    echo "== $t: $figures (rc $step_rc, ${step_secs}s)"
    grep -E '^\[  FAILED  \]|Failure$|^Value of|^  Actual|^Expected|: (InvalidArgument|Internal|Unimplemented|ResourceExhausted|NotFound|FailedPrecondition)' "$logs/$t.log" | head -80
    grep -m3 -A1 'Skipped$' "$logs/$t.log"
    tail -3 "$logs/$t.log"
  } >> "$OUT/tests.txt"
done

# 4. bench/gpu_ops
step gpu_ops 75 "${run[@]}" "$bin/gpu_ops"
cp "$logs/gpu_ops.log" "$OUT/gpu_ops.txt"
skipped=0
grep -q '^skipped:' "$logs/gpu_ops.log" && skipped=1
figures=$(grep '^RESULT' "$logs/gpu_ops.log" | tr '\n' ' ' | sed 's/RESULT //g' | cut -c1-400)
[[ $skipped -eq 1 ]] && figures=$(head -1 "$logs/gpu_ops.log")
results+=("gpu_ops|$(status_of $step_rc $skipped)|$step_secs|$figures")

# 5, 6. the seed CNN as processes on loopback
free_ports() {
  python3 -c 'import socket
ss = [socket.socket() for _ in range('"$1"')]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))
for s in ss: s.close()'
}
export ACTORFLOW_SECRET=${ACTORFLOW_SECRET:-gpu-check-secret-$RANDOM$RANDOM}
steps=${AF_GPU_CHECK_STEPS:-1000}
data=$work/data/fashion-mnist
# cnn_run NAME WORKERS LIMIT: 1 ps (GPUs masked) + WORKERS workers on GPU 0.
cnn_run() {
  local name=$1 workers=$2 limit=$3
  local dir=$work/$name
  mkdir -p "$dir"
  read -r -a ports <<< "$(free_ports $((workers + 1)))"
  local worker_list=""
  for ((i = 1; i <= workers; ++i)); do worker_list+="${worker_list:+, }\"127.0.0.1:${ports[$i]}\""; done
  cat > "$dir/cluster.toml" <<EOF
[cluster]
name = "gpu-check-$name"
[jobs]
ps = ["127.0.0.1:${ports[0]}"]
worker = [$worker_list]
[server]
log_device_placement = true
gpu_memory_fraction = 0.4
allow_growth = true
[supervisor]
chief = "worker/0"
logdir = "$dir/logs"
save_checkpoint_secs = 0
save_summaries_secs = 0
EOF
  (cd "$dir" && CUDA_VISIBLE_DEVICES=-1 exec "${run[@]}" "$bin/distributed_cnn" --cluster cluster.toml --job ps --task 0) \
    > "$logs/$name-ps.log" 2>&1 &
  local ps_pid=$!
  bg_pids+=("$ps_pid")
  local wpids=()
  for ((i = 0; i < workers; ++i)); do
    (cd "$dir" && CUDA_VISIBLE_DEVICES=0 exec timeout -k 5 "$limit" "${run[@]}" "$bin/distributed_cnn" \
       --cluster cluster.toml --job worker --task "$i" --worker-device gpu --steps "$steps" --print-every 200 \
       --data "$data") > "$logs/$name-worker$i.log" 2>&1 &
    wpids+=($!)
  done
  local rc=0
  for p in "${wpids[@]}"; do
    wait "$p" || rc=$?
  done
  kill "$ps_pid" 2>/dev/null
  wait "$ps_pid" 2>/dev/null
  step_rc=$rc
}
cnn_figures() {  # name workers
  local out="" i ips acc
  for ((i = 0; i < $2; ++i)); do
    ips=$(sed -n 's/^Images-Per-Sec: //p' "$logs/$1-worker$i.log" | tail -1)
    acc=$(sed -n 's/^Test-Accuracy: //p' "$logs/$1-worker$i.log" | tail -1)
    out+="worker$i ${ips:-?} images/s (test accuracy ${acc:-?}); "
  done
  echo "$out"
}
for cfg in "cnn_1worker 1 60" "cnn_2workers 2 75"; do
  read -r name workers limit <<< "$cfg"
  left=$(remaining)
  ((left < limit)) && limit=$left
  if ((limit < 10)); then
    results+=("$name|TIMEOUT|0|not run: out of time")
    continue
  fi
  note "running $name (limit ${limit}s)"
  t0=$(date +%s)
  cnn_run "$name" "$workers" "$limit"
  secs=$(($(date +%s) - t0))
  figures=$(cnn_figures "$name" "$workers")
  skipped=0
  grep -q "Created device .*GPU" "$logs/$name-worker0.log" || skipped=1
  [[ $skipped -eq 1 ]] && figures+="(no GPU: soft-placed on the CPU)"
  results+=("$name|$(status_of $step_rc $skipped)|$secs|$figures")
done

# 7. multi_gpu_addn
step multi_gpu_addn 20 "${run[@]}" "$bin/multi_gpu_addn"
results+=("multi_gpu_addn|$(status_of $step_rc)|$step_secs|$(grep -A1 '^\[\[' "$logs/multi_gpu_addn.log" | tr '\n' ' ' | tr -s ' ')")

# ---- placement extract, logs, summary ---------------------------------------------------------------------
{
  for f in "$logs"/cnn_*-*.log "$logs/multi_gpu_addn.log"; do
    [[ -f $f ]] || continue
    echo "== $(basename "$f" .log)"
    grep -E "Created device|No CUDA GPU visible|No usable CUDA GPU|gpu_memory_fraction" "$f" | head -6
    soft=$(grep -c "soft placement put it on" "$f")
    if ((soft > 0)); then
      echo "soft placement moved $soft ops (the requested device is missing or lacks the kernel), e.g.:"
      grep "soft placement put it on" "$f" | sed -E 's/.*placer\.cc:[0-9]+\] //' | head -4 | sed 's/^/  /'
    fi
    # The placer's lines ("I placer.cc:N] name: (Op): /job:...device:T:N"): ops per device, and some.
    placed=$(grep -E 'placer\.cc:[0-9]+\] .*: \([A-Za-z0-9_]+\): /job:' "$f")
    if [[ -n $placed ]]; then
      echo "ops placed per device:"
      sed -E 's/.*\): (\/job:[^ ]+)$/\1/' <<< "$placed" | sort | uniq -c | sed 's/^/  /'
      grep -E '\] (conv1/Conv2D|fully_connected/MatMul|gradients/Conv2DBackpropFilter|AddN|MatMul)[_0-9]*: |ApplyAdam\): |\(VariableV2\): ' <<< "$placed" |
        sed -E 's/.*placer\.cc:[0-9]+\] //' | sort -u | head -10 | sed 's/^/  /'
    fi
  done
} > "$OUT/placement.txt" 2>&1

{
  printf '%-22s %-12s %6s  %s\n' step status secs figures
  for r in "${results[@]}"; do
    IFS='|' read -r n s secs fig <<< "$r"
    printf '%-22s %-12s %6s  %s\n' "$n" "$s" "$secs" "$fig"
  done
  echo "total $(($(date +%s) - t_start))s; bundle $(sed -n 's/^commit=//p' "$work/MANIFEST"); ${#missing[@]} CUDA libraries missing${missing:+: ${missing[*]}}"
} > "$OUT/summary.txt"
cp "$OUT/summary.txt" "$logs/summary.log"
tar -C "$work" -czf "$OUT/logs.tar.gz" logs
cat "$OUT/summary.txt"
failed=0
for r in "${results[@]}"; do
  IFS='|' read -r n s _ <<< "$r"
  [[ $s == OK || $s == SKIPPED ]] || failed=1
done
rm -rf "$work"
exit $failed
