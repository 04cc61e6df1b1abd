#!/usr/bin/env python3
"""How many translation units include a header, directly or transitively.

    scripts/header-reach.py [--build DIR] [--scan] [--list] [HEADER...]

Reads DIR/compile_commands.json (default: build/) and, for each translation unit, the
dependency file the build wrote next to its object (`<object>.d`, gcc's -MD output). With
--scan (or for a unit without a .d file) it runs the unit's own compile command with
`-MM -MF -` instead (slower; independent of whether the build is up to date). A header is
given relative to the source tree (config/cluster_spec.h), or as a path suffix that must match
a dependency (caf/all.hpp matches /usr/include/caf/all.hpp).

Prints, for each header, the number of units that include it out of all units; with --list
also the units. Then lists the units under models/, samples/ and bench/ that include any
caf/ header (the CAF reach of the demo, benches and samples). With no HEADER it reports the
default set: include/actorflow/server.h, actors/server.h, config/cluster_spec.h, caf/all.hpp.
Exit status 0; 2 on a missing compile_commands.json.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

DEFAULT_HEADERS = ["include/actorflow/server.h", "actors/server.h", "config/cluster_spec.h", "caf/all.hpp"]
WATCHED_DIRS = ("models/", "samples/", "bench/")


def parse_depfile(text):
    """The dependencies (not the target) of a make-style dependency file."""
    text = text.replace("\\\n", " ")
    deps = []
    for line in text.splitlines():
        if ":" not in line:
            continue
        _, _, rest = line.partition(": ")
        deps.extend(rest.split())
    return deps


def unit_deps(entry, scan):
    directory = entry["directory"]
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    obj = None
    if "-o" in args:
        obj = args[args.index("-o") + 1]
    dfile = os.path.join(directory, obj + ".d") if obj else None
    if not scan and dfile and os.path.exists(dfile):
        with open(dfile) as f:
            deps = parse_depfile(f.read())
    else:
        cmd = [a for i, a in enumerate(args) if a != "-o" and (i == 0 or args[i - 1] != "-o")]
        cmd = [a for a in cmd if a != "-c"] + ["-MM", "-MF", "-"]
        out = subprocess.run(cmd, cwd=directory, capture_output=True, text=True)
        deps = parse_depfile(out.stdout)
        # -MM leaves out system headers: add them back with -M when a caf/ count is needed.
        out = subprocess.run(cmd[:-3] + ["-M", "-MF", "-"], cwd=directory, capture_output=True, text=True)
        deps = parse_depfile(out.stdout) or deps
    return [os.path.normpath(os.path.join(directory, d)) for d in deps]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--build", default=os.path.join(src, "build"))
    ap.add_argument("--scan", action="store_true", help="run the compiler with -M instead of reading .d files")
    ap.add_argument("--list", action="store_true", help="list the units that include each header")
    ap.add_argument("headers", nargs="*")
    a = ap.parse_args()
    ccj = os.path.join(a.build, "compile_commands.json")
    if not os.path.exists(ccj):
        print(f"no {ccj}: configure the build first", file=sys.stderr)
        return 2
    with open(ccj) as f:
        entries = json.load(f)
    units = []
    for e in entries:
        name = os.path.relpath(os.path.normpath(os.path.join(e["directory"], e["file"])), src)
        units.append((name, set(unit_deps(e, a.scan))))
    total = len(units)

    def matches(dep, header):
        if os.path.isabs(header):
            return dep == header
        full = os.path.normpath(os.path.join(src, header))
        return dep == full or dep.endswith("/" + header)

    print(f"{total} translation units ({ccj})")
    for h in a.headers or DEFAULT_HEADERS:
        hits = sorted(n for n, deps in units if any(matches(d, h) for d in deps))
        print(f"{len(hits):4d} / {total}  {h}")
        if a.list:
            for n in hits:
                print(f"           {n}")
    caf_units = sorted(n for n, deps in units
                       if n.startswith(WATCHED_DIRS) and any("/caf/" in d for d in deps))
    print(f"units under {', '.join(WATCHED_DIRS)} that include a caf/ header: {len(caf_units)}")
    for n in caf_units:
        print(f"           {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
