#!/usr/bin/env bash
# Stands in for the UCX layer's ABI and API tests when configure found no UCX headers.
echo "not ok 1 - UCX ABI test: UCX 1.13 headers not found at configure time (Debian package: libucx-dev)"
echo "1..1"
exit 1
