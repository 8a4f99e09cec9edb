#!/usr/bin/env bash
# The public C headers (include/loom/*.h: the umbrella loom/ucp.h and the family headers
# it includes). Each one compiles alone, included twice (its include guard), as C99 and
# as C++20 with -pedantic-errors -Werror; in C++ its functions have C linkage (an object
# taking their addresses refers to the plain names); the umbrella includes every family
# header; and after make install each is installed, identical.
# The compilers come from make check (loom_cc, loom_cxx: configure's CC and CXX).
. "${top_srcdir:-$(dirname "$0")/../..}/test/tools/tap.sh"
src="${top_srcdir:-$(dirname "$0")/../..}"
if [ -n "${top_builddir:-}" ] && sanitizer_build "$top_builddir"; then
    skip "public headers" "checked by the regular build: this one compiles them with the same compilers and flags (no sanitizer flag reaches a header check), so a second run checks nothing more"
    finish
    exit 0
fi
cc=${loom_cc:-cc}
cxx=${loom_cxx:-c++}
prefix="${loom_prefix:-}"
flags="-pedantic-errors -Wall -Wextra -Werror -I$src/include"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

headers=$(cd "$src/include" && ls loom/*.h)

# c_linkage HEADER: the functions HEADER declares (the umbrella: all of them, as GCC's
# -aux-info lists them from a C compile) are referred to by their plain names from C++.
c_linkage() {
    local h=$1 decl_from names missing n
    decl_from="/include/$h:"
    [ "$h" = loom/ucp.h ] && decl_from=/include/loom/
    printf '#include <%s>\n' "$h" > "$work/names.c"
    $cc -std=c99 -fsyntax-only -aux-info "$work/aux" $flags "$work/names.c" || return 1
    names=$(grep -F -- "$decl_from" "$work/aux" |
            sed -E 's,^/\*[^*]*\*/ *,,; s/^[^(]*[^A-Za-z0-9_(]([A-Za-z_][A-Za-z0-9_]*) \(.*/\1/')
    [ "$h" = loom/ucp.h ] && [ -z "$names" ] && { echo "no function found in $h"; return 1; }
    { printf '#include <%s>\n' "$h"
      n=0
      for f in $names; do n=$((n + 1)); printf 'decltype(&%s) loom_test_fn%d = &%s;\n' "$f" $n "$f"; done
    } > "$work/linkage.cc"
    $cxx -std=c++20 $flags -c "$work/linkage.cc" -o "$work/linkage.o" || return 1
    missing=
    for f in $names; do
        nm -u "$work/linkage.o" | awk '{print $NF}' | grep -qx -- "$f" || missing="$missing $f"
    done
    [ -z "$missing" ] || { echo "without C linkage in C++:$missing"; return 1; }
}

if ! printf 'int x;\n' | $cc -fsyntax-only -aux-info /dev/null -x c - >/dev/null 2>&1; then
    no_aux_info="the C compiler ($cc) has no -aux-info (GCC's) to list the declarations"
fi

for h in $headers; do
    printf '#include <%s>\n#include <%s>\n' "$h" "$h" > "$work/alone.c"
    cp "$work/alone.c" "$work/alone.cc"
    check_run "$h compiles alone as C99" $cc -std=c99 $flags -fsyntax-only "$work/alone.c"
    check_run "$h compiles alone as C++20" $cxx -std=c++20 $flags -fsyntax-only "$work/alone.cc"
    if [ -n "${no_aux_info:-}" ]; then
        skip "$h declares its functions with C linkage in C++" "$no_aux_info"
    else
        check_run "$h declares its functions with C linkage in C++" c_linkage "$h"
    fi
    if [ "$h" != loom/ucp.h ]; then
        check "loom/ucp.h includes $h" grep -qx "#include \"${h#loom/}\"" "$src/include/loom/ucp.h"
    fi
    if [ -n "$prefix" ] && [ -f "$prefix/include/loom/ucp.h" ]; then
        check "$h is installed in $prefix/include" cmp -s "$src/include/$h" "$prefix/include/$h"
    else
        skip "$h is installed" "Loom is not installed in '$prefix' (make install first)"
    fi
done
finish
