#!/usr/bin/env python3
"""Reads the logs `make check` left in one or more build trees and prints one summary.

Usage: summarize.py LABEL=BUILD_DIR [LABEL=BUILD_DIR ...]

Every test the automake harness ran has a .trs (its verdict) and a .log (its output).
gtest logs are counted per test case ("[       OK ]", "[  FAILED  ]", "[  SKIPPED ]"),
TAP-style shell tests per "ok"/"not ok" line. A suite whose verdict is FAIL or ERROR
without a failed case in its log (a crash, a watchdog abort, a build failure) counts
as one failure, so nothing is lost. The last line is "N passed, N failed[, N skipped]".
"""
import os
import re
import sys

# "[  FAILED  ] Suite.Name/param, where GetParam() = ... (12 ms)" for parameterized tests.
# Searched, not matched at the line start: where stdout and stderr reach the log through
# separate channels (the rdma-vm), a log line of the library can precede gtest's on one line.
GTEST_CASE = re.compile(r"\[\s+(OK|FAILED|SKIPPED)\s+\] ([^\s,]+)(,.*)? \(\d+ ms\)$")
GTEST_RUN = re.compile(r"\[ RUN      \] (\S+)$")
# Lines of a failed case's own output shown under "Failed tests:" (its last ones: the
# assertion and what the library logged just before), so that a failure seen only in a
# CI log's tail still says why.
DETAIL_LINES = 12
DETAIL_WIDTH = 240
TAP_CASE = re.compile(r"^(ok|not ok) \d+ - (.*?)(\s+# SKIP\s*(.*))?$")


def read_verdict(trs_path):
    with open(trs_path, errors="replace") as f:
        for line in f:
            if line.startswith(":test-result:"):
                return line.split(":", 2)[2].strip()
    return "ERROR"


def parse_log(log_path):
    """Returns (passed, failed, skipped, skip reasons, failure details) of one log."""
    passed, failed, skipped = [], [], []
    skip_reason, detail = {}, {}
    pending_reason = None
    run_start = {}
    try:
        lines = open(log_path, errors="replace").read().splitlines()
    except OSError:
        return passed, failed, skipped, skip_reason, detail
    for i, line in enumerate(lines):
        m = GTEST_RUN.search(line)
        if m:
            run_start[m.group(1)] = i + 1
            continue
        m = GTEST_CASE.search(line)
        if m:
            kind, name, _ = m.groups()
            if kind == "OK":
                passed.append(name)
            elif kind == "FAILED":
                failed.append(name)
                start = run_start.get(name)
                if start is not None:
                    own = [l.rstrip() for l in lines[start:i] if l.strip()]
                    detail[name] = [l[:DETAIL_WIDTH] for l in own[-DETAIL_LINES:]]
            else:
                skipped.append(name)
                skip_reason[name] = pending_reason or "no reason given"
            pending_reason = None
            continue
        if line.endswith(": Skipped") and i + 1 < len(lines):
            pending_reason = lines[i + 1].strip() or None
            continue
        m = TAP_CASE.match(line)
        if m:
            kind, name, skip, reason = m.groups()
            if skip:
                skipped.append(name)
                skip_reason[name] = reason or "no reason given"
            elif kind == "ok":
                passed.append(name)
            else:
                failed.append(name)
    return passed, failed, skipped, skip_reason, detail


def log_tail(log_path):
    """The last non-empty lines of a log: what a suite printed before it crashed or hung."""
    try:
        lines = [l.rstrip() for l in open(log_path, errors="replace").read().splitlines() if l.strip()]
    except OSError:
        return []
    return [l[:DETAIL_WIDTH] for l in lines[-DETAIL_LINES:]]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    total_pass = total_fail = total_skip = 0
    failures, skips = [], []
    for spec in argv[1:]:
        label, _, root = spec.partition("=")
        suites = 0
        for dirpath, _, files in os.walk(root):
            if os.path.relpath(dirpath, root).split(os.sep)[0] in ("install", "sanitize") and dirpath != root:
                continue
            for name in sorted(files):
                if not name.endswith(".trs"):
                    continue
                suites += 1
                base = os.path.join(dirpath, name[:-4])
                verdict = read_verdict(base + ".trs")
                passed, failed, skipped, reasons, detail = parse_log(base + ".log")
                suite = os.path.relpath(base, root)
                if verdict in ("FAIL", "ERROR") and not failed:
                    failed = [f"{suite} (suite exited with {verdict}: crash, abort or watchdog; see {base}.log)"]
                    detail[failed[0]] = log_tail(base + ".log")
                total_pass += len(passed)
                total_fail += len(failed)
                total_skip += len(skipped)
                for n in failed:
                    failures.append(f"[{label}] {suite}: {n}")
                    failures += ["    | " + l for l in detail.get(n, [])]
                skips += [f"[{label}] {suite}: {n}: {reasons.get(n, '')}" for n in skipped]
                print(f"  [{label}] {suite}: {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
        if suites == 0:
            failures.append(f"[{label}] no test suite ran in {root} (did the build fail? see {root}/check.out)")
            total_fail += 1
            print(f"  [{label}] no test suite ran in {root}")
    if skips:
        print("\nSkipped tests and why:")
        for s in skips:
            print("  " + s)
    if failures:
        print("\nFailed tests:")
        for f in failures:
            print("  " + f)
    print()
    line = f"{total_pass} passed, {total_fail} failed"
    if total_skip:
        line += f", {total_skip} skipped"
    print(line)
    return 0 if total_fail == 0 and total_pass > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
