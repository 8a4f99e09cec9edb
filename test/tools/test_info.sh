#!/usr/bin/env bash
# Tests of loom_info as a user runs it: options, errors and output.
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
info="${top_builddir:-.}/tools/info/loom_info"

check_output "-v prints the version"             '^# Loom version [0-9]+\.[0-9]+\.[0-9]+'  "$info" -v
check_output "no option prints the version"      '^# Loom version'                        "$info"
check        "-h exits 0"                                                                  "$info" -h
check_output "-h lists the options"              '-T +topology'                            "$info" -h
check        "unknown option fails"              bash -c "! '$info' -Z"
check_output "unknown option is named"           "unknown option '-Z'"                     "$info" -Z
check_output "stray argument is named"           "unexpected argument 'foo'"               "$info" foo
check_output "-f without -c is explained"        '-f only goes with -c'                    "$info" -f
check_output "-d lists the self transport"        '^#   transport self on device memory'      "$info" -d
check_output "-d shows the performance model"    '^#      model: overhead'                  "$info" -d
check_output "-d lists the modules searched"     '^# Transport modules \(searched in'       "$info" -d
finish
