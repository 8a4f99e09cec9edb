#!/usr/bin/env bash
# Tests of test/summarize.py on made-up logs: the CI verdict depends on it counting right.
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
summarize="${top_srcdir:-$(dirname "$0")/../..}/test/summarize.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mk() {  # mk DIR NAME VERDICT: a suite with the log read from stdin
    mkdir -p "$1"; cat > "$1/$2.log"; printf ':test-result: %s\n' "$3" > "$1/$2.trs"
}

mk "$tmp/a/test" gt PASS <<'LOG'
[       OK ] A.one (0 ms)
[       OK ] Suite/B.two/tcp_lo (3 ms)
x.cc:10: Skipped
no device here
[  SKIPPED ] A.skipped (0 ms)
LOG
mk "$tmp/a/test" tap PASS <<'LOG'
ok 1 - first
ok 2 - second # SKIP not today
LOG
check_output "passing suites are counted"       '^3 passed, 0 failed, 2 skipped$' python3 "$summarize" "a=$tmp/a"
check_output "skip reasons are listed"          'A.skipped: no device here'       python3 "$summarize" "a=$tmp/a"
check        "all passing exits 0"                                                python3 "$summarize" "a=$tmp/a"

mk "$tmp/interleaved/test" gt PASS <<'LOG'
[       OK ] A.one (0 ms)
[12:00:00.000001] [host:1:1] ib WARN  x.cc:1 endpoint failed (connection refused)[       OK ] A.two/siw (3 ms)
LOG
check_output "a case after a log line on the same line counts" '^2 passed, 0 failed$' python3 "$summarize" "i=$tmp/interleaved"

mk "$tmp/b/test" gt FAIL <<'LOG'
[       OK ] A.one (0 ms)
[  FAILED  ] Suite/B.two/tcp_lo, where GetParam() = tcp_lo (3 ms)
LOG
check_output "parameterized failure is counted" '^1 passed, 1 failed$'            python3 "$summarize" "b=$tmp/b"
check        "a failure exits non-zero"         bash -c "! python3 '$summarize' 'b=$tmp/b'"

mk "$tmp/c/test" gt ERROR <<'LOG'
[       OK ] A.one (0 ms)
[ RUN      ] A.crashes
LOG
check_output "a crashed suite counts as a failure" '^1 passed, 1 failed$'         python3 "$summarize" "c=$tmp/c"
check_output "a crashed suite's last lines are shown" '^      \| \[ RUN      \] A.crashes$' python3 "$summarize" "c=$tmp/c"

mk "$tmp/f/test" gt FAIL <<'LOG'
[ RUN      ] A.fails
[12:00:00.000001] [host:1:1] ib WARN  x.cc:1 endpoint failed (connection refused)
x.cc:20: Failure
Expected equality of these values: "" and err
[  FAILED  ] A.fails (5 ms)
[ RUN      ] A.passes
[       OK ] A.passes (1 ms)
LOG
check_output "a failed case's own output is shown" '^      \| x.cc:20: Failure$'   python3 "$summarize" "f=$tmp/f"
check_output "with the library's log before it"   'endpoint failed \(connection refused\)$' python3 "$summarize" "f=$tmp/f"
check        "and nothing of the next case"        bash -c "! python3 '$summarize' 'f=$tmp/f' | grep -q 'A.passes ('"

mk "$tmp/d/test" tap FAIL <<'LOG'
ok 1 - fine
not ok 2 - broken
LOG
check_output "TAP failures are counted"         '^1 passed, 1 failed$'            python3 "$summarize" "d=$tmp/d"

mkdir -p "$tmp/e"
check_output "no suite at all is a failure"     '^0 passed, 1 failed$'            python3 "$summarize" "e=$tmp/e"
check_output "several trees add up"             '^4 passed, 1 failed, 2 skipped$' python3 "$summarize" "a=$tmp/a" "d=$tmp/d"
finish
