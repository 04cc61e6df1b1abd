#!/usr/bin/env bash
# Installs the build in $1 (default ./build) into a temporary prefix with `cmake --install`, then
# configures, builds and runs tests/install_consumer, an outside project that does
# find_package(actorflow CONFIG REQUIRED) and links actorflow::actorflow. Exits non-zero naming
# the step that failed. The build's compiler and linker flags (e.g. the sanitizers) are passed on.
# It also checks the installed headers: no public header but <actorflow/embedding.h> brings a CAF
# header (scripts/check-public-headers.sh on the installed tree), nor does the consumer's main.cc;
# and the consumer's second program, `embedder`, runs a step through <actorflow/embedding.h>.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$src/build}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# No "producer | grep -q / head" pipelines in this script: under pipefail the producer's SIGPIPE,
# when the reader stops early, fails the pipeline at random (ldd | grep -q did, 1 run in 300).
cache_get() { sed -n "/^$1:[A-Z]*=/{s/^[^=]*=//p;q}" "$build/CMakeCache.txt"; }
echo "install: cmake --install $build --prefix $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; echo "FAILED: cmake --install"; exit 1; }
test -f "$tmp/prefix/lib/cmake/actorflow/actorflowConfig.cmake" || { echo "FAILED: no actorflowConfig.cmake installed"; exit 1; }
test -x "$tmp/prefix/bin/actorflow" || { echo "FAILED: the actorflow binary was not installed"; exit 1; }
cxx="$(cache_get CMAKE_CXX_COMPILER)"
echo "headers: the installed public headers bring no CAF header"
"$src/scripts/check-public-headers.sh" "$cxx" "$tmp/prefix/include" "$tmp/prefix/include/actorflow/internal" \
  || { echo "FAILED: the installed public headers"; exit 1; }
"$cxx" -std=c++17 -DMSGPACK_NO_BOOST=1 -fsyntax-only -H -I"$tmp/prefix/include" -I"$tmp/prefix/include/actorflow/internal" \
  "$src/tests/install_consumer/main.cc" 2>"$tmp/consumer-headers.txt" \
  || { cat "$tmp/consumer-headers.txt"; echo "FAILED: compiling the consumer against the installed headers only"; exit 1; }
if grep -m3 -E '^\.+ .*caf/' "$tmp/consumer-headers.txt"; then
  echo "FAILED: the consumer's main.cc (public headers only) opens CAF headers"; exit 1
fi
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
echo "configure: tests/install_consumer against $tmp/prefix"
cmake -S "$src/tests/install_consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$(cache_get CMAKE_CXX_FLAGS)" \
  -DCMAKE_EXE_LINKER_FLAGS="$(cache_get CMAKE_EXE_LINKER_FLAGS)" "${launcher[@]}" >"$tmp/configure.log" 2>&1 \
  || { cat "$tmp/configure.log"; echo "FAILED: configuring the consumer"; exit 1; }
echo "build: the consumer"
cmake --build "$tmp/consumer" -j"${AF_JOBS:-2}" >"$tmp/build.log" 2>&1 || { tail -50 "$tmp/build.log"; echo "FAILED: building the consumer"; exit 1; }
echo "CPU-only: the consumer links no CUDA library, its configuration found no CUDA toolkit"
if ldd "$tmp/consumer/consumer" | grep -E 'libcuda|libcublas|libcudnn'; then echo "FAILED: a CPU-only program links CUDA"; exit 1; fi
if grep -q '^CUDAToolkit' "$tmp/consumer/CMakeCache.txt"; then echo "FAILED: find_package(actorflow) looked for the CUDA toolkit"; exit 1; fi
rss_kb="$(python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$tmp/consumer/mnist_port" --steps)"
echo "CPU-only: RSS at main() (mnist_port exiting on a bad flag): ${rss_kb} KB"
(( rss_kb < 40 * 1024 )) || { echo "FAILED: a CPU-only program takes ${rss_kb} KB before it runs anything (bound 40 MB)"; exit 1; }
echo "run: the consumer"
out="$("$tmp/consumer/consumer" 2>"$tmp/consumer.err")" || { echo "$out"; cat "$tmp/consumer.err"; echo "FAILED: the consumer's values"; exit 1; }
echo "$out"
if grep -i cuda "$tmp/consumer.err"; then echo "FAILED: a CPU-only program logs about CUDA"; exit 1; fi
[[ "$out" == "w = 0.8, global_step = 1" ]] || { echo "FAILED: unexpected output"; exit 1; }
echo "run: the embedder (<actorflow/embedding.h>)"
out="$("$tmp/consumer/embedder")" || { echo "$out"; echo "FAILED: the embedder"; exit 1; }
echo "$out"
[[ "$out" == "y = [3, 6]" ]] || { echo "FAILED: unexpected embedder output"; exit 1; }
echo "run: mnist_port (seed 002's port) as 1 ps + 1 worker from seed 002's host flags, 20 steps"
ports=($(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])'))
flags=(--ps_hosts=127.0.0.1:${ports[0]} --worker_hosts=127.0.0.1:${ports[1]})
# From $tmp: without a cluster file the chief checkpoints into ./logs (the seed's LOG_DIR), which
# must not be the build directory other tests run in.
(cd "$tmp" && exec "$tmp/consumer/mnist_port" "${flags[@]}" --job_name=ps --task_index=0) >"$tmp/ps.log" 2>&1 &
ps_pid=$!
out="$(cd "$tmp" && timeout 300 "$tmp/consumer/mnist_port" "${flags[@]}" --job_name=worker --task_index=0 --steps 20 2>&1)" \
  || { echo "$out"; kill "$ps_pid"; echo "FAILED: mnist_port's worker"; exit 1; }
kill -TERM "$ps_pid"; wait "$ps_pid" || { cat "$tmp/ps.log"; echo "FAILED: mnist_port's ps did not stop cleanly"; exit 1; }
grep -E '^Test-Accuracy: 0\.[0-9]+' <<<"$out" || { echo "$out"; echo "FAILED: no test accuracy from mnist_port"; exit 1; }
if [[ -f "$tmp/prefix/lib/cmake/actorflow/actorflowCudaTargets.cmake" ]]; then
  echo "cuda component: gpu_consumer (main.cc with actorflow::cuda)"
  cmake -S "$src/tests/install_consumer" -B "$tmp/gpu-consumer" -DCONSUMER_CUDA=ON -DCMAKE_PREFIX_PATH="$tmp/prefix" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$(cache_get CMAKE_CXX_FLAGS)" \
    -DCMAKE_EXE_LINKER_FLAGS="$(cache_get CMAKE_EXE_LINKER_FLAGS)" "${launcher[@]}" >"$tmp/gpu-configure.log" 2>&1 \
    || { cat "$tmp/gpu-configure.log"; echo "FAILED: configuring the consumer with COMPONENTS cuda"; exit 1; }
  cmake --build "$tmp/gpu-consumer" -j"${AF_JOBS:-2}" >"$tmp/gpu-build.log" 2>&1 \
    || { tail -50 "$tmp/gpu-build.log"; echo "FAILED: building gpu_consumer"; exit 1; }
  grep -q libcudart <<<"$(ldd "$tmp/gpu-consumer/gpu_consumer")" || { echo "FAILED: gpu_consumer does not link the CUDA runtime"; exit 1; }
  out="$("$tmp/gpu-consumer/gpu_consumer" 2>"$tmp/gpu-consumer.err")" || { cat "$tmp/gpu-consumer.err"; echo "FAILED: gpu_consumer"; exit 1; }
  [[ "$out" == "w = 0.8, global_step = 1" ]] || { echo "$out"; echo "FAILED: gpu_consumer's values"; exit 1; }
  # Its CUDA backend registered: it either made GPU devices or said why there are none.
  grep -qE 'CUDA GPU|GPU:0' "$tmp/gpu-consumer.err" || { cat "$tmp/gpu-consumer.err"; echo "FAILED: gpu_consumer has no CUDA backend"; exit 1; }
  echo "$out"
else
  echo "cuda component: not in this package (built without CUDA)"
fi
echo "OK: an outside project built and ran against the installed actorflow"
