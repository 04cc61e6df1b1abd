#!/usr/bin/env python3
"""Fails when a source file includes against the project's layer order.

Usage: check-layers.py [SOURCE_DIR]   (default: the checkout this script lives in)

The layers, lowest first (docs/architecture.md, "Layers"):

    core < tensor < graph < device < runtime < net < actors
                                                        < train/session < models < cli

beside the chain (each may include only what it lists, and is included from above):

    config  (cluster files, fault plans)        may include core
    data    (datasets, idx, checkpoint files,   may include core, tensor
             TensorFlow checkpoints in data/tf/)
    train   (optimizers, variable collections)  may include core, tensor, graph

A file's layer is its top-level directory (device/cuda/ is device; train/session/ is its own
layer). A file may include its own layer and the layers its layer lists below. A public header
(include/actorflow/X.h, included as "actorflow/X.h") counts as every layer it includes,
transitively, so <actorflow/train.h> is graph-level and <actorflow/embedding.h> actors-level.
tests/, bench/, samples/ and include/actorflow/ itself are not checked (they sit on top).
CAF (<caf/...>) sits just below net: core, config, tensor, data, graph, device, train and runtime
never include it.

Every violation is printed as `file:line: includes X (layer L2 above L1)`; the exit status is 1
when there is one, 0 otherwise.
"""
import os
import re
import sys

# rank: used only to word the message; allowed: what a layer may include (besides itself).
LAYERS = {
    "core": (0, []),
    "config": (1, ["core"]),
    "tensor": (1, ["core"]),
    "data": (2, ["core", "tensor"]),
    "graph": (2, ["core", "tensor"]),
    "device": (3, ["core", "tensor", "graph"]),
    "train": (3, ["core", "tensor", "graph"]),
    "runtime": (4, ["core", "tensor", "graph", "device"]),
    "net": (5, ["core", "tensor", "graph", "device", "runtime", "config"]),
    "actors": (6, ["core", "tensor", "graph", "device", "runtime", "config", "data", "net"]),
    "train/session": (7, ["core", "tensor", "graph", "device", "runtime", "config", "data", "net",
                          "actors", "train"]),
    "models": (8, ["core", "tensor", "graph", "device", "runtime", "config", "data", "net",
                   "actors", "train", "train/session"]),
    "cli": (9, ["core", "tensor", "graph", "device", "runtime", "config", "data", "net", "actors",
                "train", "train/session", "models"]),
}

# Includes allowed against the order, each with its reason: (including file, included path).
EXCEPTIONS = {
    ("device/cpu/io_kernels.cc", "data/tf/tf_checkpoint.h"):
        "the kernels of TensorFlow's SaveV2/RestoreV2 write and read the bundle format; data/tf/ "
        "depends on core and tensor only (same library, af_base), so no cycle",
    ("device/cpu/io_kernels.cc", "data/tf/tf_checkpoint_data.h"):
        "RestoreV2 derives a variable's optimizer slots as the Saver does (one rule for both)",
    ("device/cpu/io_kernels.cc", "data/variable_slots.h"):
        "SaveV2/RestoreV2 read and write the slot blobs of VariableSlots/RestoreVariableSlots",
}

# Headers of plain data that include nothing of the tree: any layer may include them, each with
# its reason.
PLAIN_DATA = {
    "device/device_options.h": "the device fields of a server's options (cpu_devices, visible_devices, "
                               "gpu_memory_fraction, allow_growth), declared once for config/, the public "
                               "LocalServerOptions and device creation",
    "device/slot_ids.h": "the ids of optimizer slots (an enum), shared by the optimizer math (device/), the "
                         "slot blob format and TensorFlow's slot names (data/)",
}

SOURCE_EXT = (".h", ".cc", ".cu", ".cuh")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
CAF_RE = re.compile(r'^\s*#\s*include\s+<(caf/[^>]+)>')
# The layers that never see CAF (an angle-bracket include of caf/ is a violation there).
NO_CAF = {"core", "config", "tensor", "data", "graph", "device", "train", "runtime"}


def layer_of(rel):
    """The layer of a path relative to the source root, or None when it is not checked."""
    parts = rel.split("/")
    if parts[0] == "train" and len(parts) > 2 and parts[1] == "session":
        return "train/session"
    return parts[0] if parts[0] in LAYERS and len(parts) > 1 else None


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE_RE.match(line) or CAF_RE.match(line)
            if m:
                yield n, m.group(1)


def public_layers(root, header, memo, stack=()):
    """Every layer the public header actorflow/<header> reaches, transitively."""
    if header in memo:
        return memo[header]
    if header in stack:
        return set()
    out = set()
    path = os.path.join(root, "include", header)
    if os.path.exists(path):
        for _, inc in includes(path):
            if inc.startswith("actorflow/"):
                out |= public_layers(root, inc, memo, stack + (header,))
            elif inc not in PLAIN_DATA:
                layer = layer_of(inc)
                if layer:
                    out.add(layer)
    memo[header] = out
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    memo = {}
    violations = []
    for top in sorted(set(l.split("/")[0] for l in LAYERS)):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                own = layer_of(rel)
                if own is None:
                    continue
                allowed = set(LAYERS[own][1]) | {own}
                for line, inc in includes(os.path.join(root, rel)):
                    if inc.startswith("caf/"):
                        if own in NO_CAF and (rel, inc) not in EXCEPTIONS:
                            violations.append("%s:%d: includes %s (layer caf above %s)" % (rel, line, inc, own))
                        continue
                    if inc in PLAIN_DATA:
                        continue
                    if inc.startswith("actorflow/"):
                        targets = public_layers(root, inc, memo)
                    else:
                        target = layer_of(inc)
                        targets = {target} if target else set()
                    for t in sorted(targets - allowed):
                        if (rel, inc) in EXCEPTIONS:
                            continue
                        where = "above" if LAYERS[t][0] >= LAYERS[own][0] else "beside"
                        violations.append("%s:%d: includes %s (layer %s %s %s)" %
                                          (rel, line, inc, t, where, own))
    for header in sorted(PLAIN_DATA):
        for line, inc in includes(os.path.join(root, header)):
            if INCLUDE_RE.match('#include "%s"' % inc):
                violations.append("%s:%d: includes %s (a plain-data header includes nothing of the tree)" %
                                  (header, line, inc))
    for v in violations:
        print(v)
    if violations:
        print("%d include(s) against the layer order (scripts/check-layers.py)" % len(violations))
        return 1
    print("layers: no include against the order")
    return 0


if __name__ == "__main__":
    sys.exit(main())
