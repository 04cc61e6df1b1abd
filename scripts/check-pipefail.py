#!/usr/bin/env python3
"""Fails when a shell script that sets `pipefail` pipes a producer into a reader that stops early.

    scripts/check-pipefail.py SOURCE_DIR   check every tracked bash script under SOURCE_DIR
    scripts/check-pipefail.py --self-test  check the checker on pipelines it must and must not flag

Why: a reader that stops at its first match or line (`grep -q`, `grep -m`, `grep -l`, `head`,
`read`, a sed script that quits, an awk program that exits) closes the pipe while the producer may
still be writing; the producer then dies of SIGPIPE and, under `set -o pipefail`, the pipeline
fails at random. `ldd B | grep -q libcudart` in scripts/test-install.sh failed one run in 300 that
way and failed CI (docs/testing.md, "Flaky tests found and their causes"). Match on captured output
instead (`grep -q X <<<"$(producer)"`), or let the producer stop itself (`grep -m1 X FILE`).

A pipeline known to be safe (the producer writes all it has in one write of a few bytes) may stay
when its line carries the comment `# pipefail-ok: <why>`.

Exit status: 0 when nothing is found, 1 with one line per finding (file:line: the pipeline and the
rule), 2 on a usage error. Reads files only; no state.
"""
import os
import re
import subprocess
import sys

EARLY_GREP_SHORT = set("qml")  # -q (quiet), -m N (max count), -l (files with matches); -L too
EARLY_GREP_LONG = ("--quiet", "--silent", "--max-count", "--files-with-matches", "--files-without-match")


def strip_comments_and_heredocs(text):
    """Returns text with comments and here-document bodies blanked (newlines kept, so line numbers
    hold) and a set of line numbers that carry a `# pipefail-ok` marker."""
    out = []
    ok_lines = set()
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.search(r"#\s*pipefail-ok\b", line):
            ok_lines.add(i + 1)
        res = []
        quote = None
        j = 0
        heredoc = None
        while j < len(line):
            c = line[j]
            if quote:
                res.append(c)
                if c == "\\" and quote == '"' and j + 1 < len(line):
                    res.append(line[j + 1])
                    j += 2
                    continue
                if c == quote:
                    quote = None
            elif c == "\\" and j + 1 < len(line):
                res.append(line[j:j + 2])
                j += 2
                continue
            elif c in "'\"":
                quote = c
                res.append(c)
            elif c == "#" and (j == 0 or line[j - 1] in " \t;(|&"):
                break
            else:
                if c == "<" and line.startswith("<<", j) and not line.startswith("<<<", j):
                    m = re.match(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2", line[j:])
                    if m:
                        heredoc = (m.group(1) == "-", m.group(3))
                res.append(c)
            j += 1
        out.append("".join(res))
        i += 1
        if heredoc:
            dash, word = heredoc
            while i < len(lines):
                body = lines[i].lstrip("\t") if dash else lines[i]
                out.append("")
                i += 1
                if body == word:
                    break
    return "\n".join(out), ok_lines


def pipe_readers(code):
    """Yields (line, reader_text) for every command that reads a pipe (the part after a `|` that
    is not `||`), up to the end of that command."""
    n = len(code)
    quote = None
    i = 0
    while i < n:
        c = code[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = None
            i += 1
            continue
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            quote = c
            i += 1
            continue
        if c == "|":
            if i + 1 < n and code[i + 1] == "|":
                i += 2
                continue
            if i > 0 and code[i - 1] == "|":
                i += 1
                continue
            k = i + 1
            if k < n and code[k] == "&":  # |& also pipes stderr
                k += 1
            while k < n and code[k] in " \t\n\\":
                k += 1
            end = k
            q = None
            while end < n:
                d = code[end]
                if q:
                    if d == "\\" and q == '"':
                        end += 2
                        continue
                    if d == q:
                        q = None
                elif d in "'\"":
                    q = d
                elif d == "\\" and end + 1 < n:
                    end += 2
                    continue
                elif d in "\n;&|)":
                    break
                end += 1
            yield code.count("\n", 0, i) + 1, code[k:end]
            i = end
            continue
        i += 1


def words(segment):
    """Shell words of one command, quotes removed (no expansion)."""
    result = []
    for m in re.finditer(r"""'([^']*)'|"((?:\\.|[^"\\])*)"|(\S+)""", segment):
        result.append(next(g for g in m.groups() if g is not None))
    return result


def stops_early(segment):
    """Returns a description of why the reader `segment` may stop before its input ends, or None."""
    w = words(segment)
    while w and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w[0]):
        w = w[1:]
    while w and w[0] in ("command", "sudo", "env", "exec"):
        w = w[1:]
    if not w:
        return None
    cmd, args = os.path.basename(w[0]), w[1:]
    if cmd == "head":
        return "head stops after its first lines"
    if cmd == "read":
        return "read takes one line"
    if cmd in ("grep", "egrep", "fgrep"):
        skip = False
        for a in args:
            if skip:  # the argument of -e/-f/-A/-B/-C/-D given as the next word
                skip = False
                continue
            if a == "--":
                break
            if a.startswith("--"):
                if a.split("=")[0] in EARLY_GREP_LONG:
                    return f"grep {a} stops at its first match"
            elif a.startswith("-") and len(a) > 1:
                flags = a[1:]
                for pos, ch in enumerate(flags):
                    if ch in EARLY_GREP_SHORT or ch == "L":
                        return f"grep -{ch} stops early"
                    if ch in "efABCD":  # takes the rest of the word, or the next word
                        skip = pos == len(flags) - 1
                        break
        return None
    if cmd == "sed":
        for a in args:
            if not a.startswith("-") and re.search(r"(^|[;{}/\s0-9$])[qQ]\s*[0-9]*\s*($|[;}])", a):
                return "the sed script quits"
        return None
    if cmd in ("awk", "gawk", "mawk"):
        for a in args:
            if re.search(r"\bexit\b", a):
                return "the awk program exits"
        return None
    return None


def sets_pipefail(code):
    return re.search(r"\bset\s+(-[a-zA-Z]*o\s+|-o\s+)pipefail\b|\bset\s+-o\s+pipefail\b", code) is not None


def check_text(text, name):
    code, ok_lines = strip_comments_and_heredocs(text)
    if not sets_pipefail(code):
        return []
    findings = []
    for line, segment in pipe_readers(code):
        why = stops_early(segment)
        if why and line not in ok_lines:
            findings.append(f"{name}:{line}: '| {segment.strip()}': {why}; under pipefail the "
                            "producer's SIGPIPE fails the pipeline at random. Match on captured output "
                            "(grep -q X <<<\"$(producer)\") or mark '# pipefail-ok: <why>'")
    return findings


def bash_scripts(root):
    try:
        names = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                               text=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        names = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            names += [os.path.relpath(os.path.join(d, f), root) for f in files]
    for name in sorted(n for n in names if n):
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            continue
        if name.endswith(".sh"):
            yield name, path
            continue
        with open(path, "rb") as f:
            first = f.readline(200)
        if first.startswith(b"#!") and b"bash" in first:
            yield name, path


SELF_TEST_BAD = [
    "ldd b | grep -q libcudart",
    "ls x | head -1",
    "x=$(a |\n  grep -m1 y)",
    "a | sed -n '/x/{p;q}'",
    "a | awk '/x/ { print; exit }'",
    "a | grep -lq x",
    "a | grep --quiet x",
    "a |& grep -qE 'x|y'",
    "a | read -r v",
    "if a | LC_ALL=C grep -q x; then :; fi",
    "a | grep x | head -n 3",
]
SELF_TEST_GOOD = [
    "a || grep -q x f",
    "grep -q x <<<\"$(a)\"",
    "a | grep x | wc -l",
    "echo \"a | head\"",
    "echo 'b | grep -q'",
    "# a | head",
    "a | while read -r l; do :; done",
    "cat <<'E'\na | head\nE",
    "cat <<-E\n\ta | grep -q x\n\tE",
    "a | head -1  # pipefail-ok: one short line",
    "a | sed -n 's/x/y/p'",
    "a | grep -e -q x",
    "a | awk '{ print $1 }'",
    "grep -m3 x file",
]


def self_test():
    failures = []
    for body in SELF_TEST_BAD:
        if len(check_text("set -euo pipefail\n" + body + "\n", "bad")) != 1:
            failures.append(f"not flagged exactly once: {body!r}")
        if check_text("set -eu\n" + body + "\n", "no-pipefail"):
            failures.append(f"flagged without pipefail: {body!r}")
    for body in SELF_TEST_GOOD:
        found = check_text("set -o pipefail\n" + body + "\n", "good")
        if found:
            failures.append(f"flagged but fine: {body!r}: {found}")
    for f in failures:
        print("self-test: " + f)
    print(f"self-test: {len(SELF_TEST_BAD)} bad and {len(SELF_TEST_GOOD)} good pipelines, "
          f"{len(failures)} wrong")
    return 1 if failures else 0


def main(argv):
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if argv[1] == "--self-test":
        return self_test()
    root = argv[1]
    findings = []
    count = 0
    for name, path in bash_scripts(root):
        count += 1
        with open(path, encoding="utf-8", errors="replace") as f:
            findings += check_text(f.read(), name)
    for f in findings:
        print(f)
    print(f"check-pipefail: {count} bash scripts, {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
