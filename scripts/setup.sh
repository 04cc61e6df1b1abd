#!/usr/bin/env bash
# Installs every Debian package actorflow needs to build, test and run its demo.
# Idempotent: packages already present are skipped. Uses sudo when not root.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config git ccache
  libcaf-dev libmsgpack-cxx-dev libtomlplusplus-dev libdnnl-dev
  zlib1g-dev libssl-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler libleveldb-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  tmux python3-venv curl
  chromium libjs-chart.js
)
missing=()
for p in "${PKGS[@]}"; do
  [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "setup: all dependencies present"
