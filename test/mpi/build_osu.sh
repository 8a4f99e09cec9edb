#!/usr/bin/env bash
#
# Build the OSU Micro-Benchmarks out of tree, once per MPI (the MPI benchmarks) and for
# OpenSHMEM (oshmem: Open MPI's, the OpenSHMEM benchmarks).
#
#   test/mpi/build_osu.sh BUILD_DIR [openmpi|mpich|oshmem]...     (default: openmpi)
#
# For each, extracts ../shared/osu/osu-micro-benchmarks-7.4.tar.gz (OSU_TARBALL
# overrides) into BUILD_DIR/osu/<name>/, configures it with Debian's compiler wrappers
# (mpicc.<mpi> and mpicxx.<mpi>; oshcc and oshc++ with --enable-openshmem) and builds it
# with make -j$JOBS (default nproc). Every binary is then linked into
# BUILD_DIR/osu/<name>/bin/ (osu_latency, osu_bw, ...; osu_oshm_put, ...), and that
# directory is printed, one line per build: "<name> <dir>".
#
# Quiet on success: configure and make write BUILD_DIR/osu/<mpi>/{configure,make}.log,
# and only a failure prints the end of its log. Incremental: a stamp records the
# tarball (size, time) and the configure command; when both are unchanged and the bin/
# directory is there, nothing runs. Delete BUILD_DIR/osu/<mpi> to force a rebuild.
#
set -euo pipefail

usage() { sed -n '3,16p' "$0" | sed 's/^# \{0,1\}//'; }

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
    usage
    [[ $# -ge 1 ]] && exit 0 || exit 2
fi

top=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=$1
shift
mpis=("$@")
[[ ${#mpis[@]} -gt 0 ]] || mpis=(openmpi)
tarball=${OSU_TARBALL:-$top/../shared/osu/osu-micro-benchmarks-7.4.tar.gz}
jobs=${JOBS:-$(nproc)}

die() { echo "build_osu.sh: $*" >&2; exit 1; }

[[ -f $tarball ]] ||
    die "OSU tarball not found: $tarball (see ../shared/osu/README.md; OSU_TARBALL=PATH overrides)"
build_dir=$(realpath -m "$build_dir")
case "$build_dir/" in
    "$top/build/"* | "$top/build-"*) ;;
    "$top/"*) die "$build_dir: in the source tree but not under build/ or build-*/" ;;
esac
mkdir -p "$build_dir" || die "cannot create $build_dir"

# The tarball's identity for the stamp: size and modification time (stat is instant; a
# checksum of 3 MB would cost more than the whole incremental call should).
tar_id=$(stat -c '%s %Y' "$tarball")

# Run one step quietly; on failure print the tail of its log and stop.
run_logged() {
    local log=$1 what=$2
    shift 2
    if ! "$@" >"$log" 2>&1; then
        echo "build_osu.sh: $what failed; last lines of $log:" >&2
        tail -n 40 "$log" >&2
        exit 1
    fi
}

# configure in the source tree (a subshell: the cd stays inside); $4...: extra options.
configure_in() ( cd "$1" && ./configure CC="$2" CXX="$3" "${@:4}" )

build_one() {
    local mpi=$1 cc cxx extra=() subdir=c/mpi first=osu_latency
    case "$mpi" in
        openmpi|mpich) cc=mpicc.$mpi cxx=mpicxx.$mpi ;;
        oshmem) cc=oshcc cxx=oshc++ extra=(--enable-openshmem) subdir=c/openshmem first=osu_oshm_put ;;
        *) die "unknown build '$mpi' (use openmpi, mpich or oshmem)" ;;
    esac
    command -v "$cc" >/dev/null || die "$cc not found (apt-get install libopenmpi-dev / libmpich-dev)"
    command -v "$cxx" >/dev/null || die "$cxx not found (apt-get install libopenmpi-dev / libmpich-dev)"

    local dir=$build_dir/osu/$mpi
    local bin=$dir/bin stamp=$dir/.stamp
    local key="tarball=$tarball $tar_id; configure CC=$cc CXX=$cxx ${extra[*]}"

    if [[ -f $stamp && -d $bin && $(<"$stamp") == "$key" ]]; then
        echo "$mpi $bin"
        return
    fi

    rm -rf "$dir"
    mkdir -p "$dir"
    run_logged "$dir/extract.log" "extracting $tarball" tar -xzf "$tarball" -C "$dir"
    local src
    src=$(find "$dir" -mindepth 1 -maxdepth 1 -type d -name 'osu-micro-benchmarks-*' | head -n 1)
    [[ -n $src && -x $src/configure ]] || die "$tarball holds no osu-micro-benchmarks-*/configure"
    # Every file keeps the tarball's time stamp: make must not try to re-run automake.
    run_logged "$dir/configure.log" "configure ($mpi)" configure_in "$src" "$cc" "$cxx" "${extra[@]}"
    run_logged "$dir/make.log" "make ($mpi)" make -C "$src" -j"$jobs"

    mkdir -p "$bin"
    local n=0 f
    while IFS= read -r f; do
        ln -sf "$f" "$bin/$(basename "$f")"
        n=$((n + 1))
    done < <(find "$src/$subdir" -type f -name 'osu_*' -perm -u+x | sort)
    [[ $n -gt 0 ]] || die "make ($mpi) succeeded but built no osu_* binary (see $dir/make.log)"
    [[ -x $bin/$first ]] || die "make ($mpi) built no $first (see $dir/make.log)"
    printf '%s\n' "$key" >"$stamp"
    echo "$mpi $bin"
}

for mpi in "${mpis[@]}"; do
    build_one "$mpi"
done
