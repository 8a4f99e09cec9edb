#!/usr/bin/env bash
# docs/configuration.md is generated from the configuration tables (loom_info -cm) and
# committed; this fails when the committed copy differs from what the code generates.
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
info="${top_builddir:-.}/tools/info/loom_info"
committed="${top_srcdir:-$(dirname "$0")/../..}/docs/configuration.md"

generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
LOOM_LOG_FILE=stderr "$info" -cm >"$generated" 2>/dev/null

up_to_date() { cmp -s "$committed" "$generated"; }

check_output "-cm documents the global table"  '^\| `LOOM_LOG_LEVEL` \| `warn` \|'  cat "$generated"
check        "docs/configuration.md is up to date"                                up_to_date
if ! up_to_date; then
    echo "# docs/configuration.md differs from what loom_info -cm generates; to update it run"
    echo "#   make -C ${top_builddir:-<build dir>} update-docs"
    echo "# and commit the result. Differences (committed -> generated):"
    diff -u "$committed" "$generated" | head -40 | sed 's/^/#   /'
fi
finish
