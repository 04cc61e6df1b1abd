#!/usr/bin/env bash
# Validates `actorflow k8s` output against the Kubernetes OpenAPI schemas, offline, with pip's
# kubernetes-validate (strict: unknown fields are errors) in a project-local venv .venv-k8s.
#   scripts/k8s-validate.sh BUILD_DIR [KUBERNETES_VERSION]
# Exit 0 when every document of every sample passes; 1 when one fails; 77 (ctest SKIP) when
# python3-venv is missing or kubernetes-validate cannot be installed (no network).
set -euo pipefail
BUILD=${1:?usage: k8s-validate.sh BUILD_DIR [KUBERNETES_VERSION]}
K8S_VERSION=${2:-1.30.0}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
AF="$BUILD/actorflow"
VENV="$ROOT/.venv-k8s"
SKIP=77

if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    echo "SKIP: python3 venv/ensurepip missing (apt-get install python3-venv)"
    exit $SKIP
  fi
  rm -rf "$VENV"
  python3 -m venv "$VENV" >/dev/null || { echo "SKIP: cannot create $VENV"; exit $SKIP; }
  if ! timeout 300 "$VENV/bin/pip" install -q --disable-pip-version-check kubernetes-validate; then
    rm -rf "$VENV"
    echo "SKIP: cannot install kubernetes-validate from PyPI (no network?)"
    exit $SKIP
  fi
fi
validate() { "$VENV/bin/kubernetes-validate" -k "$K8S_VERSION" --strict --quiet "$@"; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Seed 002's job with a secret, as docs/kubernetes.md deploys it.
printf 'k8s-validate-secret\n' > "$TMP/cluster.key"
chmod 600 "$TMP/cluster.key"
cat > "$TMP/secret.toml" <<'TOML'
[cluster]
name = "mnist"
secret_file = "cluster.key"
[jobs]
ps = ["localhost:2222"]
worker = ["localhost:2223", "localhost:2224"]
TOML
# TLS (certificates from `actorflow certs`), sparse per-task options, the training as the program.
cat > "$TMP/tls.toml" <<'TOML'
[cluster]
name = "cnn_tls"
tls_dir = "certs"
[jobs]
ps = ["localhost:3222", "localhost:3223"]
worker = ["localhost:3224", "localhost:3225", "localhost:3226"]
[server]
metrics_port = 9200
[tasks."worker/2"]
cpu_devices = 2
TOML
"$AF" certs --cluster "$TMP/tls.toml" --out "$TMP/certs" >/dev/null

"$AF" k8s --cluster "$TMP/secret.toml" --image registry.example/actorflow:test > "$TMP/secret.yaml"
"$AF" k8s --cluster "$TMP/tls.toml" --image registry.example/actorflow:test --namespace training \
  --program "worker=distributed_cnn --steps 500" > "$TMP/tls.yaml"
# JSON: stdout is one v1 List (no schema of its own); --out writes each object as its own file.
# --tools adds the tools Pod and its Secret (with TLS: the tools' certificate).
"$AF" k8s --cluster "$TMP/secret.toml" --image registry.example/actorflow:test --format json --out "$TMP/json" \
  --tools 2>/dev/null
"$AF" k8s --cluster "$TMP/tls.toml" --image registry.example/actorflow:test --out "$TMP/out" --tools 2>/dev/null
ls "$TMP"/out/*-pod-tools.yaml "$TMP"/json/*-pod-tools.json >/dev/null

status=0
for f in "$TMP/secret.yaml" "$TMP/tls.yaml" "$TMP"/out/*.yaml "$TMP"/json/*.json; do
  docs=$(grep -c '^kind: \|^  "kind": ' "$f" || true)
  if validate "$f"; then
    echo "ok   $(basename "$f") ($docs objects, Kubernetes $K8S_VERSION, strict)"
  else
    echo "FAIL $(basename "$f")"
    status=1
  fi
done
# The check itself must be able to fail: an unknown field in a StatefulSet is refused.
sed 's/^  podManagementPolicy:/  podManagementPolicyy:/' "$TMP/secret.yaml" > "$TMP/broken.yaml"
if validate "$TMP/broken.yaml" >/dev/null 2>&1; then
  echo "FAIL the strict validation accepted an unknown field (podManagementPolicyy)"
  status=1
else
  echo "ok   an unknown field is refused (the validation is strict)"
fi
exit $status
