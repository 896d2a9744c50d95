#!/bin/bash
# An arm64 Debian root under qemu-user emulation, for running ert on aarch64 on an x86 machine.
#
#   sudo bash jobs/arm64-rig.sh up            # build once (about 10 min on 2 cores), then quick
#   sudo bash jobs/arm64-rig.sh run ert-run configs/tiny.yaml     # any command, inside the root
#   sudo bash jobs/arm64-rig.sh status        # built? python, numba, mounts left over
#   sudo bash jobs/arm64-rig.sh down          # unmounts anything left mounted under the root
#   sudo bash jobs/arm64-rig.sh down --purge  # ... and deletes the cached root
#
# `up` registers qemu-aarch64 with binfmt_misc (mounting binfmt_misc first when it is not), debootstraps a
# minimal Debian bookworm arm64 root with python3, makes a venv in it (/opt/ert-venv) with ert's
# dependencies from PyPI's aarch64 wheels (numpy, numba, llvmlite, ...), and installs ert editable from this
# checkout, so `run` always runs the checkout's current code.  The root is cached outside the checkout
# (ERT_ARM64_RIG, default /var/cache/ert-arm64-rig), so a fresh clone on the same machine reuses it; a
# second `up` from another checkout only re-points the editable install.
#
# `run CMD...` executes CMD inside the root with the venv first on PATH and the working directory kept.
# The checkout and /tmp are bind-mounted at the same paths (what CMD writes there appears here), with
# /proc, /sys and /dev.  Every mount is made in a private mount namespace (unshare -m) that ends with the
# command, so nothing stays mounted on the host; `down` only cleans up after a killed older version.
# Environment passed in: ERT_*, NUMBA_* (not NUMBA_CPU_NAME or NUMBA_CPU_FEATURES: the host's CPU), COLUMNS,
# TERM, NO_COLOR, and pip's proxy and index settings; the host's CA bundle is copied in for pip.
#
# Needs root (debootstrap, chroot, mounts), util-linux's unshare, apt-get for qemu-user-static and
# debootstrap when they are missing, and the network (Debian's mirror, PyPI) for the first build.
set -euo pipefail

ME=jobs/arm64-rig.sh
CACHE=${ERT_ARM64_RIG:-/var/cache/ert-arm64-rig}
ROOT=$CACHE/root
VENV=/opt/ert-venv
SUITE=${ERT_ARM64_SUITE:-bookworm}
MIRROR=${ERT_ARM64_MIRROR:-http://deb.debian.org/debian}
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd -P)
# The rig's recipe: a change here rebuilds the venv (not the Debian root).
RECIPE="venv-1 setuptools>=68 wheel"
BINFMT=/proc/sys/fs/binfmt_misc
HOST_CA=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}

die() { echo "$ME: cannot: $*" >&2; exit 3; }
say() { echo "$ME: $*" >&2; }

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and bind mounts); run it with sudo"
    command -v unshare >/dev/null || die "needs util-linux's unshare"
}

# binfmt_misc mounted, and qemu-aarch64 registered with the F flag (the interpreter opened at registration,
# so it runs inside the chroot without a copy of qemu there).
need_binfmt() {
    if ! [ -e "$BINFMT/register" ]; then
        mount -t binfmt_misc binfmt_misc "$BINFMT" 2>/dev/null \
            || die "binfmt_misc is not mounted and cannot be mounted at $BINFMT (a container without it?)"
    fi
    if ! [ -x /usr/bin/qemu-aarch64-static ] || ! command -v debootstrap >/dev/null; then
        command -v apt-get >/dev/null || die "needs qemu-user-static and debootstrap, and has no apt-get"
        say "installing qemu-user-static and debootstrap with apt-get"
        { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
              qemu-user-static debootstrap >/dev/null 2>&1 \
          || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
               --no-install-recommends qemu-user-static debootstrap >/dev/null 2>&1; }; } \
            || die "apt-get could not install qemu-user-static and debootstrap"
    fi
    if [ -e "$BINFMT/qemu-aarch64" ] && ! grep -q '^enabled' "$BINFMT/qemu-aarch64"; then
        echo 1 > "$BINFMT/qemu-aarch64"
    fi
    if ! [ -e "$BINFMT/qemu-aarch64" ]; then
        if command -v update-binfmts >/dev/null; then update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true; fi
    fi
    if ! [ -e "$BINFMT/qemu-aarch64" ]; then
        # The ELF header of an aarch64 executable (e_machine 0xb7), as Debian's qemu-user-static registers it.
        printf '%s' ':qemu-aarch64:M::\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
            > "$BINFMT/register" 2>/dev/null || die "could not register qemu-aarch64 with binfmt_misc"
    fi
    grep -q '^enabled' "$BINFMT/qemu-aarch64" || die "qemu-aarch64's binfmt_misc handler is disabled"
    grep -q '^flags:.*F' "$BINFMT/qemu-aarch64" \
        || die "qemu-aarch64 is registered without the F flag (it would need qemu inside the root)"
}

# Mount points inside the root that a command uses, in mount order.
mount_all() {   # runs inside the private mount namespace
    mount -t proc proc "$ROOT/proc"
    mount --rbind /sys "$ROOT/sys"
    mount --rbind /dev "$ROOT/dev"
    mount --bind /tmp "$ROOT/tmp"
    mkdir -p "$ROOT$CHECKOUT"
    mount --bind "$CHECKOUT" "$ROOT$CHECKOUT"
    cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
    # The host's CA bundle (a TLS-inspecting proxy's CA included), for pip inside the root.
    cp -L "$HOST_CA" "$ROOT/etc/ssl/ert-host-ca.crt" 2>/dev/null || true
}

# Runs "$@" inside the root, in a mount namespace of its own (gone when it ends), cwd $WD.
in_root() {
    local wd=$1; shift
    local envs=(PATH="$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 ERT_ARM64_RIG_ROOT="$ROOT"
                PIP_CERT=/etc/ssl/ert-host-ca.crt SSL_CERT_FILE=/etc/ssl/ert-host-ca.crt PIP_CONFIG_FILE=/dev/null)
    local name
    while IFS= read -r name; do
        case $name in
            NUMBA_CPU_NAME|NUMBA_CPU_FEATURES) ;;  # the host's CPU (x86 features): meaningless to aarch64's LLVM
            ERT_*|NUMBA_*|COLUMNS|TERM|NO_COLOR|PIP_DEFAULT_TIMEOUT|PIP_INDEX_URL|PIP_EXTRA_INDEX_URL|[Hh][Tt][Tt][Pp]*_[Pp][Rr][Oo][Xx][Yy]|[Nn][Oo]_[Pp][Rr][Oo][Xx][Yy])
                envs+=("$name=${!name}");;
        esac
    done < <(compgen -e)
    # shellcheck disable=SC2016  # the inner sh expands "$1" and "$@" itself
    unshare -m --propagation private /bin/bash -c "$(declare -f mount_all)
        set -e; ROOT='$ROOT'; CHECKOUT='$CHECKOUT'; HOST_CA='$HOST_CA'; mount_all
        exec chroot '$ROOT' /usr/bin/env -i \"\$@\"" bash "${envs[@]}" /bin/sh -c 'cd "$1" && shift && exec "$@"' \
        sh "$wd" "$@"
}

build_root() {
    [ -e "$ROOT/.ert-root-done" ] && return 0
    local mounts
    mounts=$(under_root_mounts)
    [ -z "$mounts" ] || die "mounts are left under $ROOT ($mounts); run '$ME down' first"
    rm -rf --one-file-system "$ROOT"
    mkdir -p "$CACHE"
    say "debootstrapping Debian $SUITE arm64 into $ROOT (about 10 min on 2 cores; log $CACHE/debootstrap.log)"
    # debootstrap mounts /proc and /sys in the target itself: its own mount namespace takes them away.
    unshare -m --propagation private debootstrap --arch=arm64 --variant=minbase \
        --include=python3,python3-venv,python3-dev,ca-certificates \
        "$SUITE" "$ROOT" "$MIRROR" > "$CACHE/debootstrap.log" 2>&1 \
        || die "debootstrap failed (last lines of $CACHE/debootstrap.log: $(tail -n 2 "$CACHE/debootstrap.log" | tr '\n' ' '))"
    [ "$(chroot "$ROOT" /usr/bin/python3 -c 'import platform; print(platform.machine())')" = aarch64 ] \
        || die "the root's python3 does not report aarch64"
    touch "$ROOT/.ert-root-done"
}

build_venv() {
    local have=""
    [ -e "$ROOT$VENV/.ert-recipe" ] && have=$(cat "$ROOT$VENV/.ert-recipe")
    if [ "$have" != "$RECIPE" ]; then
        say "making $VENV in the root with ert's dependencies (aarch64 wheels from PyPI; a few minutes)"
        rm -rf --one-file-system "$ROOT$VENV"
        in_root / python3 -m venv "$VENV"
        in_root / "$VENV/bin/python" -m pip install -q --upgrade pip
        # shellcheck disable=SC2086
        in_root / "$VENV/bin/python" -m pip install -q ${RECIPE#venv-* }
        in_root "$CHECKOUT" "$VENV/bin/python" -m pip install -q --no-build-isolation -e "$CHECKOUT"
        echo "$CHECKOUT" > "$ROOT$VENV/.ert-checkout"
        echo "$RECIPE" > "$ROOT$VENV/.ert-recipe"
    elif [ "$(cat "$ROOT$VENV/.ert-checkout" 2>/dev/null)" != "$CHECKOUT" ]; then
        say "pointing the root's editable ert at $CHECKOUT"
        in_root "$CHECKOUT" "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$CHECKOUT"
        echo "$CHECKOUT" > "$ROOT$VENV/.ert-checkout"
    fi
}

# Mount points at or under $ROOT in this (the host's) mount namespace, deepest first.
under_root_mounts() {
    awk -v r="$ROOT" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r | tr '\n' ' '
}

cmd_up() {
    need_root
    need_binfmt
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9
    local t0=$SECONDS
    build_root
    build_venv
    [ -e "$ROOT$VENV/bin/ert-run" ] || die "the venv has no ert-run (a failed install? '$ME down --purge' rebuilds)"
    say "ready: $ROOT (aarch64, $(cat "$ROOT$VENV/.ert-checkout"); $((SECONDS - t0)) s)"
}

cmd_run() {
    [ $# -gt 0 ] || die "run needs a command (e.g. '$ME run ert-run configs/tiny.yaml')"
    need_root
    need_binfmt
    [ -e "$ROOT$VENV/.ert-recipe" ] || die "the root is not built; run '$ME up' first"
    [ "$(cat "$ROOT$VENV/.ert-checkout" 2>/dev/null)" = "$CHECKOUT" ] \
        || die "the root's ert is another checkout's; run '$ME up' from this one"
    local wd
    wd=$(pwd -P)
    case $wd/ in
        "$CHECKOUT"/*|/tmp/*) ;;
        *) die "the working directory $wd is not inside the checkout ($CHECKOUT) or /tmp, the paths the root sees";;
    esac
    in_root "$wd" "$@"
}

cmd_status() {
    echo "cache: $CACHE"
    if [ -e "$ROOT/.ert-root-done" ]; then echo "root: built ($(du -sh --one-file-system "$ROOT" 2>/dev/null | cut -f1))"
    else echo "root: not built"; fi
    if [ -e "$ROOT$VENV/.ert-recipe" ]; then
        echo "venv: $VENV ($(cat "$ROOT$VENV/.ert-recipe")); ert from $(cat "$ROOT$VENV/.ert-checkout" 2>/dev/null)"
    else echo "venv: not built"; fi
    if [ -e "$BINFMT/qemu-aarch64" ]; then echo "binfmt: qemu-aarch64 $(head -n 1 "$BINFMT/qemu-aarch64")"
    else echo "binfmt: qemu-aarch64 not registered"; fi
    local mounts
    mounts=$(under_root_mounts)
    echo "mounts under the root: ${mounts:-none}"
}

cmd_down() {
    need_root
    local m
    for m in $(under_root_mounts); do
        umount -R "$m" 2>/dev/null || umount -l "$m" || die "could not unmount $m"
        say "unmounted $m"
    done
    [ -z "$(under_root_mounts)" ] || die "mounts remain under $ROOT: $(under_root_mounts)"
    if [ "${1:-}" = --purge ]; then
        # Nothing is mounted under the root (checked just above), so this deletes only the root's own files.
        rm -rf --one-file-system "$CACHE"
        say "deleted $CACHE"
    fi
}

case ${1:-} in
    -h|--help) sed -n '2,/^[^#]/{s/^# \{0,1\}//p;}' "$0";;
    up) shift; cmd_up "$@";;
    run) shift; cmd_run "$@";;
    status) shift; cmd_status "$@";;
    down) shift; cmd_down "$@";;
    *) echo "usage: $ME up | run CMD... | status | down [--purge]" >&2; exit 2;;
esac
