#!/bin/sh
# Regenerates configure and Makefile.in from configure.ac and Makefile.am.
# AUTOGEN_QUIET=1 hides autoreconf's chatter (errors still show).
set -e
cd "$(dirname "$0")"
mkdir -p config/m4 config/aux
if [ -n "${AUTOGEN_QUIET:-}" ]; then
    autoreconf --install --force -Wall >/dev/null
else
    autoreconf --install --force -Wall
fi
