#!/bin/sh
# Installs a build tree into a scratch prefix and builds examples/mamba2_example.c against it,
# the way a user would. Registered by tests/example.cmake.
#
#   install_check.sh MODE BUILD_DIR SOURCE_DIR WORK_DIR CMAKE CC [FLAGS]
#     MODE find_package  configure + build + run examples/consumer (shared and static)
#     MODE pkg_config    compile + run the example with `pkg-config --cflags --libs ssmops`;
#                        exits 77 (CTest: skipped) when pkg-config is not installed
#     FLAGS              extra compile/link flags (the sanitizer flags of a sanitized build)
set -eu

if [ $# -lt 6 ]; then
    echo "usage: $0 find_package|pkg_config BUILD_DIR SOURCE_DIR WORK_DIR CMAKE CC [FLAGS]" >&2
    exit 2
fi
mode=$1 build=$2 src=$3 work=$4 cmake=$5 cc=$6 flags=${7:-}
prefix=$work/prefix

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

if [ "$mode" = pkg_config ] && ! command -v pkg-config >/dev/null 2>&1; then
    echo "SKIPPED: pkg-config is not installed, so the pkg-config build of the example was not checked"
    exit 77
fi

rm -rf "$work"
mkdir -p "$work"
echo "== cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || {
    cat "$work/install.log"
    fail "cmake --install failed"
}

# ---- what must be installed ----------------------------------------------------------------
# The library directory depends on GNUInstallDirs (lib, lib64, lib/<multiarch>): find it.
so=$(find "$prefix" -name 'libssmops.so.*.*.*' | head -n 1)
[ -n "$so" ] || fail "no libssmops.so.X.Y.Z under $prefix"
libdir=$(dirname "$so")
full=$(basename "$so")           # libssmops.so.0.1.0
major=${full#libssmops.so.}
major=${major%%.*}               # 0
[ -f "$prefix/include/ssmops.h" ] || fail "include/ssmops.h not installed"
[ -L "$libdir/libssmops.so.$major" ] || fail "symlink libssmops.so.$major missing"
[ -L "$libdir/libssmops.so" ] || fail "symlink libssmops.so missing"
[ -f "$libdir/libssmops.a" ] || fail "libssmops.a not installed"
[ -f "$libdir/pkgconfig/ssmops.pc" ] || fail "pkgconfig/ssmops.pc not installed"
for f in ssmopsConfig.cmake ssmopsConfigVersion.cmake ssmopsTargets.cmake; do
    [ -f "$libdir/cmake/ssmops/$f" ] || fail "cmake/ssmops/$f not installed"
done
if [ -x "$build/ssmops" ]; then
    [ -x "$prefix/bin/ssmops" ] || fail "the ssmops CLI was built but not installed"
fi
echo "installed: $(cd "$prefix" && find . \( -type f -o -type l \) | sort | tr '\n' ' ')"

# The shared library exports the public API (ssm_*) and nothing else.
if command -v nm >/dev/null 2>&1; then
    leaked=$(nm -D --defined-only "$so" | awk '{ print $NF }' | grep -v '^ssm_' || true)
    [ -z "$leaked" ] || fail "$full exports symbols outside ssm_*: $(echo "$leaked" | tr '\n' ' ')"
    echo "exported: $(nm -D --defined-only "$so" | grep -c ' ssm_') ssm_* functions, nothing else"
fi

run() {
    echo "== $*"
    "$@"
}

case $mode in
find_package)
    run "$cmake" -S "$src/examples/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$flags" \
        -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
    run "$cmake" --build "$work/consumer"
    # The shared example must load the installed library, not the one in the build tree.
    if command -v ldd >/dev/null 2>&1; then
        ldd "$work/consumer/mamba2_example_shared" | grep -F "$libdir/libssmops.so.$major" ||
            fail "mamba2_example_shared does not load $libdir/libssmops.so.$major"
    fi
    run "$work/consumer/mamba2_example_shared"
    run "$work/consumer/mamba2_example_static"
    ;;
pkg_config)
    PKG_CONFIG_PATH=$libdir/pkgconfig
    export PKG_CONFIG_PATH
    pc_libdir=$(pkg-config --variable=libdir ssmops)
    [ "$pc_libdir" = "$libdir" ] || fail "ssmops.pc has libdir=$pc_libdir, expected $libdir"
    cflags=$(pkg-config --cflags ssmops)
    libs=$(pkg-config --libs ssmops)
    static_libs=$(pkg-config --static --libs ssmops)
    echo "pkg-config: cflags '$cflags'  libs '$libs'  static libs '$static_libs'"
    for lib in -lpthread -lm; do
        case " $static_libs " in *" $lib "*) ;; *) fail "pkg-config --static --libs lacks $lib (Libs.private)" ;; esac
    done
    # $flags, $cflags and $libs are word lists on purpose.
    # shellcheck disable=SC2086
    run "$cc" -std=c11 $flags $cflags "$src/examples/mamba2_example.c" -o "$work/example_shared" $libs -lm
    run env LD_LIBRARY_PATH="$libdir" "$work/example_shared"
    # Static: the archive by path, then what Libs.private says it needs.
    # shellcheck disable=SC2086
    private_libs=$(echo " $static_libs " | sed 's/ -lssmops / /; s/ -L[^ ]*//g')
    run "$cc" -std=c11 $flags $cflags "$src/examples/mamba2_example.c" -o "$work/example_static" \
        "$libdir/libssmops.a" $private_libs
    run "$work/example_static"
    ;;
*)
    fail "unknown mode '$mode'"
    ;;
esac
echo "install check ($mode) passed"
