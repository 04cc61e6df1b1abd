#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs on a GPU machine that has CUDA, cuBLAS and cuDNN but none of
# this project's other dependencies (CAF, oneDNN, ...) into one tarball, .gpu/bundle.tar.xz:
#   bin/    the GPU tests, bench/gpu_ops and the samples the check runs, stripped
#   lib/    every shared library they need that is neither CUDA's nor glibc's (found with ldd;
#           libstdc++ and libgcc_s included)
#   glibc/  this machine's glibc and loader, used by gpu-check.sh only when the GPU machine's glibc
#           is older than the binaries need
#   data/fashion-mnist/  the test set and the first AF_TRAIN_IMAGES (10000) training images
#   MANIFEST  the commit, the CUDA architectures, the glibc the binaries need and the CUDA
#           libraries gpu-check.sh must find on the GPU machine
# Build first (with CUDA, for the GPU's architecture), e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CUDA_ARCHITECTURES=75-virtual;80-real;90-real"
#   cmake --build build -j2 --target gpu_device_test gpu_backend_ops_test bench_gpu_ops distributed_cnn multi_gpu_addn
# then run from the repository root:
#   scripts/gpu-bundle.sh            (AF_BUILD_DIR=build, AF_DATA_DIR=/usr/share/datasets/fashion-mnist)
# Fails (exit 1, saying why) when a binary is missing or not a CUDA build, a library cannot be
# found, or the tarball exceeds 50 MiB.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${AF_BUILD_DIR:-$root/build}
data=${AF_DATA_DIR:-/usr/share/datasets/fashion-mnist}
train_images=${AF_TRAIN_IMAGES:-10000}
out_dir=$root/.gpu
max_bytes=$((50 * 1024 * 1024))

die() { echo "gpu-bundle: $*" >&2; exit 1; }

bins=(tests/gpu_device_test tests/gpu_backend_ops_test bench/gpu_ops samples/distributed_cnn samples/multi_gpu_addn)
for b in "${bins[@]}"; do
  [[ -x $build/$b ]] || die "$build/$b is missing: build it first (see the header of this script)"
  grep -q 'libcudart\.so' <<<"$(ldd "$build/$b")" || die "$build/$b is not a CUDA build (no libcudart): is nvcc found?"
done

# .gpu/ is a build output: keep it out of git (info/exclude is shared by every worktree).
exclude=$(git -C "$root" rev-parse --git-common-dir 2>/dev/null || true)
if [[ -n $exclude ]]; then
  [[ $exclude = /* ]] || exclude=$root/$exclude
  exclude=$exclude/info/exclude
  mkdir -p "$(dirname "$exclude")"
  grep -qx '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >> "$exclude"
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/glibc" "$stage/data/fashion-mnist"

for b in "${bins[@]}"; do
  strip --strip-unneeded -o "$stage/bin/$(basename "$b")" "$build/$b"
done

# CUDA's libraries come from the GPU machine (they must match its driver); glibc's too, unless
# it is too old (then glibc/).
is_cuda() { [[ $1 =~ ^lib(cuda|cudart|cublas|cublasLt|cudnn|nvrtc|nvJitLink|nvidia-ml|cufft|curand|cusolver|cusparse)[._-] ]]; }
is_glibc() { [[ $1 =~ ^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec)\.so|^ld-linux ]]; }
declare -A cuda_needed=()
declare -A seen=()
for b in "${bins[@]}"; do
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    [[ -n ${seen[$name]:-} ]] && continue
    seen[$name]=1
    if [[ $path == "not" ]]; then
      is_cuda "$name" && { cuda_needed[$name]=1; continue; }
      die "$b needs $name, which ldd cannot find here"
    fi
    if is_cuda "$name"; then
      cuda_needed[$name]=1
    elif is_glibc "$name"; then
      cp -L "$path" "$stage/glibc/$name"
    else
      cp -L "$path" "$stage/lib/$name"
    fi
  done < <(ldd "$build/$b")
done
# The loader, for running through the bundled glibc.
loader=$(ldd "$build/bench/gpu_ops" | awk '/ld-linux/ {print $1}')
cp -L "$loader" "$stage/glibc/$(basename "$loader")"

# The highest glibc symbol version anything in bin/ and lib/ needs.
glibc_needed=$(for f in "$stage"/bin/* "$stage"/lib/*; do objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*'; done |
  sed 's/GLIBC_//' | sort -uV | tail -1)

# Fashion-MNIST: the test set whole, a prefix of the training set (the CNN needs both splits).
for f in t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz; do
  [[ -f $data/$f ]] || die "$data/$f is missing (AF_DATA_DIR)"
done
cp "$data"/t10k-*.gz "$stage/data/fashion-mnist/"
python3 - "$data" "$stage/data/fashion-mnist" "$train_images" <<'EOF'
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gzip.open(f"{src}/train-images-idx3-ubyte.gz") as f:
    magic, count, rows, cols = struct.unpack(">IIII", f.read(16))
    n = min(n, count)
    pixels = f.read(n * rows * cols)
with gzip.open(f"{dst}/train-images-idx3-ubyte.gz", "wb") as f:
    f.write(struct.pack(">IIII", magic, n, rows, cols) + pixels)
with gzip.open(f"{src}/train-labels-idx1-ubyte.gz") as f:
    magic, count = struct.unpack(">II", f.read(8))
    labels = f.read(n)
with gzip.open(f"{dst}/train-labels-idx1-ubyte.gz", "wb") as f:
    f.write(struct.pack(">II", magic, n) + labels)
EOF

arch=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
{
  echo "commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | sed -n 1p)"
  echo "cuda_architectures=${arch:-default}"
  echo "glibc_needed=$glibc_needed"
  echo "cuda_libraries=${!cuda_needed[*]}"
  echo "train_images=$train_images"
} > "$stage/MANIFEST"

mkdir -p "$out_dir"
tar -C "$stage" -cf - . | xz -T0 -6 > "$out_dir/bundle.tar.xz.tmp"
mv "$out_dir/bundle.tar.xz.tmp" "$out_dir/bundle.tar.xz"
size=$(stat -c %s "$out_dir/bundle.tar.xz")
cat "$stage/MANIFEST"
echo "bin:   $(cd "$stage/bin" && ls | tr '\n' ' ')"
echo "lib:   $(cd "$stage/lib" && ls | tr '\n' ' ')"
echo "glibc: $(cd "$stage/glibc" && ls | tr '\n' ' ')"
echo "gpu-bundle: .gpu/bundle.tar.xz, $((size / 1024)) KiB"
((size <= max_bytes)) || die "the bundle is $((size / 1048576)) MiB, over the 50 MiB limit"
