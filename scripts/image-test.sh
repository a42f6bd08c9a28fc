#!/usr/bin/env bash
# Builds the real Dockerfile with podman and tries the image, on a machine
# with no Docker engine and no container registry (docs/DEPLOY.md, "Building
# and trying the image without Docker"). `npm run image:test`; not part of
# `npm test`: it takes minutes and a few GiB under $DESKBATCH_IMAGE_CACHE and
# podman's storage.
#
#   1. installs podman and debootstrap when they are missing (as root);
#   2. makes the base: a Debian 13 root file system from Debian's archive
#      (`debootstrap --variant=minbase trixie`), slimmed like the registry's
#      debian:trixie-slim, tarred once into the cache and `podman import`ed;
#   3. builds the Dockerfile with `podman build --isolation=chroot` (the only
#      isolation that works without cgroup controllers) and the base as BASE;
#   4. prints the image's size and the build's wall time, and checks the size
#      against its budget (DESKBATCH_IMAGE_BUDGET_MIB) and what the image
#      must not hold: no TypeScript loader or compiler in node_modules, no
#      .deb files left by apt, not the `novnc` package (only noVNC's files);
#   5. smoke-tests the image's file system without `podman run` (which needs
#      cgroups): it mounts the image, and runs the image's ENTRYPOINT + CMD in
#      a chroot of it, as the image's USER, with the image's ENV and
#      WORKDIR, as `docker run --read-only --tmpfs /tmp --shm-size=1g
#      --cap-drop ALL --security-opt no-new-privileges` would: a read-only
#      root, fresh tmpfs on /tmp and /dev/shm, a minimal /dev, the data volume
#      seeded from the image, no capabilities, no_new_privs, tini as PID 1 of
#      its own PID namespace. Only --host and --port change (127.0.0.1 and a
#      free port: it binds loopback only), plus --allow-private for the one
#      local test page, --sandbox off (a chroot may not create the user
#      namespaces a desktop's sandbox is made of: unshare(2) fails with EPERM
#      there, so that sandbox is not tried here), and --allow-takeover (so the
#      viewer loads noVNC's files at start). It then checks /readyz, a batch (browser navigate +
#      computer screenshot, by scripts/image-smoke.ts with the image's own
#      node and client), the processes' uid, that none runs a loader or
#      esbuild, noVNC served, the image's HEALTHCHECK command, and a clean
#      exit within 15 s of SIGTERM.
#
# Environment (all optional):
#   DESKBATCH_IMAGE_CACHE   folder for the base's tarball, logs and the data
#                           volume (default /var/tmp/deskbatch-image)
#   DESKBATCH_IMAGE_BASE    the base image; a localhost/ name is made here,
#                           any other name is pulled by podman where a registry
#                           is reachable (default localhost/debian-trixie-minbase:local)
#   DESKBATCH_IMAGE         the tag built (default localhost/deskbatch:test)
#   DESKBATCH_IMAGE_REFRESH=1   make the base again (a newer Debian 13)
#   DESKBATCH_IMAGE_NO_CACHE=1  build without podman's layer cache
#   DESKBATCH_IMAGE_KEEP_DATA=1 keep the smoke test's data volume (its screenshot)
#   DESKBATCH_IMAGE_BUDGET_MIB  the most the image may take (default 1300, docs/DEPLOY.md)
#   DESKBATCH_IMAGE_NPM_CA  a PEM bundle npm ci should trust in the build, for a
#                           proxy that re-signs TLS (default: NODE_EXTRA_CA_CERTS)
#   DESKBATCH_DEBIAN_MIRROR, DESKBATCH_DEBIAN_SECURITY_MIRROR
#                           (default http://deb.debian.org/debian and …/debian-security)
#
# Every process it starts is ended by its PID; the chroot's mounts live in a
# private mount namespace, so they go when its last process does, whatever
# happens to this script, and the image's own mount is undone by a trap.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo"

cache="${DESKBATCH_IMAGE_CACHE:-/var/tmp/deskbatch-image}"
base="${DESKBATCH_IMAGE_BASE:-localhost/debian-trixie-minbase:local}"
image="${DESKBATCH_IMAGE:-localhost/deskbatch:test}"
mirror="${DESKBATCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${DESKBATCH_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
suite=trixie
ready_deadline_ms=120000
stop_deadline_s=15

say() { printf 'image-test: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
seconds() { awk -v ms="$1" 'BEGIN { printf "%.1f s", ms / 1000 }'; }

summary=()
failed=0
result() { # result PASS|FAIL TEXT: one line of the closing summary
  local line="$1  $2"
  ((${#line} <= 170)) || line="${line:0:169}…"
  summary+=("$line")
  [[ $1 == PASS ]] || failed=1
  say "$1 $2"
}

# ---- 1. Tools ----------------------------------------------------------------
# Not root: `podman unshare` gives a user namespace where the image can be
# mounted and chrooted into (rootless podman needs uidmap and /etc/subuid).
# The base still needs root (debootstrap), unless it is already in podman's
# storage or DESKBATCH_IMAGE_BASE names a registry image.
if ((EUID != 0)) && [[ -z ${_CONTAINERS_USERNS_CONFIGURED:-} ]]; then
  command -v podman >/dev/null ||
    die "podman is missing; as root run: apt-get update && apt-get install -y podman debootstrap uidmap"
  export DESKBATCH_IMAGE_NOT_ROOT=1
  exec podman unshare bash "${BASH_SOURCE[0]}" "$@"
fi
real_root=1
[[ -z ${DESKBATCH_IMAGE_NOT_ROOT:-} ]] || real_root=0

makes_base=0
if [[ $base == localhost/* ]] && { [[ -n ${DESKBATCH_IMAGE_REFRESH:-} ]] || ! podman image exists "$base" 2>/dev/null; }; then
  makes_base=1
fi
missing=()
command -v podman >/dev/null || missing+=(podman)
if ((makes_base)) && [[ ! -s $cache/debian-$suite-minbase.tar || -n ${DESKBATCH_IMAGE_REFRESH:-} ]]; then
  command -v debootstrap >/dev/null || missing+=(debootstrap)
fi
for tool in unshare:util-linux setpriv:util-linux tar:tar awk:gawk od:coreutils; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if ((${#missing[@]})); then
  ((real_root)) || die "missing: ${missing[*]}; as root run: apt-get update && apt-get install -y ${missing[*]}"
  say "installing ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi
mkdir -p "$cache/logs"

# ---- 2. The base: Debian 13 from Debian's archive ------------------------------------
base_note="$base (pulled by podman if missing)"
if ((makes_base)); then
  tarball="$cache/debian-$suite-minbase.tar"
  if [[ ! -s $tarball || -n ${DESKBATCH_IMAGE_REFRESH:-} ]]; then
    ((real_root)) || die "making the base needs root (debootstrap); or set DESKBATCH_IMAGE_BASE to an image podman can pull"
    rootfs="$cache/rootfs"
    rm -rf "$rootfs"
    say "debootstrap --variant=minbase $suite from $mirror (log: $cache/logs/debootstrap.log)"
    t0=$(now_ms)
    if ! debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >"$cache/logs/debootstrap.log" 2>&1; then
      tail -n 30 "$cache/logs/debootstrap.log" >&2
      die "debootstrap failed"
    fi
    # What debian:trixie-slim has and debootstrap does not write: the updates
    # and security suites (Chromium's fixes reach Debian 13 through
    # trixie-security), the updates themselves, and dpkg's excludes of
    # documentation, manuals and translations, for this root and for every
    # package the Dockerfile installs (the lists scripts/.slimify-excludes and
    # .slimify-includes of github.com/debuerreotype/debuerreotype, which makes
    # Docker's official Debian images).
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# Like debian:trixie-slim: no documentation, manuals or translations
# (the copyright files stay).
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/man/*
EOF
    # Debian 13's fixes since its last point release, as the registry's image has them.
    if ! chroot "$rootfs" sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get -y upgrade && apt-get clean' \
      >>"$cache/logs/debootstrap.log" 2>&1; then
      tail -n 30 "$cache/logs/debootstrap.log" >&2
      die "apt-get upgrade in the new root failed"
    fi
    # The runtime provides these; debootstrap copied this machine's.
    rm -f "$rootfs/etc/resolv.conf" "$rootfs/etc/hostname"
    find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$rootfs"/usr/share/{groff,info,linda,lintian/overrides,man}/*
    find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
    rm -rf "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
    # An image's /dev, /proc and /sys are empty: the runtime mounts them.
    tar --numeric-owner --xattrs --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
      -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
    base_note="$base, made by debootstrap in $(seconds $(($(now_ms) - t0)))"
  else
    base_note="$base, from the cached $tarball"
  fi
  podman image rm -f "$base" >/dev/null 2>&1 || true
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$tarball" "$base" >/dev/null
elif [[ $base == localhost/* ]]; then
  base_note="$base, already in podman's storage"
fi
say "base: $base_note"

# ---- 3. Build ------------------------------------------------------------------------
build_log="$cache/logs/build.log"
build_flags=(--isolation=chroot --format=docker --build-arg "BASE=$base" -t "$image")
[[ -z ${DESKBATCH_IMAGE_NO_CACHE:-} ]] || build_flags+=(--no-cache)
# A proxy that re-signs TLS (npm ci fails with SELF_SIGNED_CERT_IN_CHAIN): its
# CA bundle goes to the build as the secret npm_ca, never into the image.
npm_ca="${DESKBATCH_IMAGE_NPM_CA-${NODE_EXTRA_CA_CERTS:-}}"
if [[ -n $npm_ca && -r $npm_ca ]]; then build_flags+=(--secret "id=npm_ca,src=$npm_ca"); fi
say "podman build ${build_flags[*]} . (log: $build_log)"
t0=$(now_ms)
set +e
# A multi-stage build prefixes each step with its stage: "[1/2] STEP 3/6: RUN …".
step_re='^(\[[0-9]+/[0-9]+\] )?STEP [0-9]+/[0-9]+: '
podman build "${build_flags[@]}" . 2>&1 | tee "$build_log" | grep --line-buffered -E "$step_re" >&2
build_status=${PIPESTATUS[0]}
set -e
build_ms=$(($(now_ms) - t0))
if ((build_status != 0)); then
  tail -n 40 "$build_log" >&2
  result FAIL "podman build exited $build_status after $(seconds "$build_ms")"
  printf '%s\n' "${summary[@]}"
  exit 1
fi
# Every STEP but a FROM either runs or says "Using cache".
cached_steps=$(grep -c -- '--> Using cache' "$build_log" || true)
total_steps=$(grep -E "$step_re" "$build_log" | grep -vc -E "${step_re}FROM " || true)
reuse="$cached_steps of $total_steps steps reused from the layer cache"
result PASS "podman build: $(seconds "$build_ms") ($reuse)"

# ---- 4. Size -------------------------------------------------------------------------
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }
size="$(mib "$(podman image inspect --format '{{.Size}}' "$image")")"
base_size="$(mib "$(podman image inspect --format '{{.Size}}' "$base")")"
say "image size: $size (the base: $base_size)"
budget_mib="${DESKBATCH_IMAGE_BUDGET_MIB:-1300}"
size_mib="${size% MiB}"
if ((size_mib <= budget_mib)); then
  result PASS "image size $size, within its budget of $budget_mib MiB"
else
  result FAIL "image size $size, over its budget of $budget_mib MiB"
fi

# ---- 5. Smoke test -----------------------------------------------------------
# One value a line; the blank line podman ends its output with is dropped.
inspect() { podman image inspect --format "$1" "$image" | sed '/^$/d'; }
mapfile -t entrypoint < <(inspect '{{range .Config.Entrypoint}}{{println .}}{{end}}')
mapfile -t cmd < <(inspect '{{range .Config.Cmd}}{{println .}}{{end}}')
mapfile -t image_env < <(inspect '{{range .Config.Env}}{{println .}}{{end}}')
mapfile -t healthcheck < <(inspect '{{if .Config.Healthcheck}}{{range .Config.Healthcheck.Test}}{{println .}}{{end}}{{end}}')
workdir="$(inspect '{{.Config.WorkingDir}}')"
# shellcheck disable=SC2016 # a Go template's variables, not the shell's
volume="$(inspect '{{range $path, $_ := .Config.Volumes}}{{println $path}}{{end}}' | head -n 1)"
user="$(inspect '{{.Config.User}}')"
uid="${user%%:*}"
gid="${user#*:}"
[[ $user == *:* ]] || gid="$uid"
if [[ ! $uid =~ ^[1-9][0-9]*$ || ! $gid =~ ^[1-9][0-9]*$ || -z $volume ]]; then
  result FAIL "the image's USER is '$user' (a numeric non-root uid:gid is needed), its VOLUME '$volume'"
  printf '%s\n' "${summary[@]}"
  exit 1
fi

mnt=""
daemon_pid=""
helper_pid=""
data="$(mktemp -d "$cache/data.XXXXXX")"
cleanup() {
  local pid
  for pid in $helper_pid $daemon_pid; do
    # The outer unshare: --kill-child takes the PID namespace, and so every process in it, along.
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  [[ -z $mnt ]] || podman image unmount "$image" >/dev/null 2>&1 || say "could not unmount $mnt"
  if [[ -n ${DESKBATCH_IMAGE_KEEP_DATA:-} ]]; then say "the data volume is kept: $data"; else rm -rf "$data"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mnt="$(podman image mount "$image")"

# What the image must not hold: what only the package managers or the build wanted.
leftovers=()
for p in tsx esbuild typescript; do [[ ! -e $mnt/opt/deskbatch/node_modules/$p ]] || leftovers+=("node_modules/$p"); done
debs="$(find "$mnt/var/cache/apt/archives" -name '*.deb' 2>/dev/null | wc -l)"
((debs == 0)) || leftovers+=("$debs .deb files in /var/cache/apt/archives")
for p in novnc websockify python3-numpy; do
  if dpkg-query --admindir="$mnt/var/lib/dpkg" -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    leftovers+=("the Debian package $p")
  fi
done
[[ -f $mnt/usr/share/novnc/core/rfb.js ]] || leftovers+=("no noVNC (/usr/share/novnc/core/rfb.js is missing)")
if ((${#leftovers[@]} == 0)); then
  result PASS "no loader, compiler, .deb file or novnc package in the image; noVNC's files are there"
else
  result FAIL "the image holds what it should not, or lacks noVNC: ${leftovers[*]}"
fi
# A fresh named volume starts as a copy of the image's folder, owners included.
cp -a "$mnt$volume/." "$data/"
home="$(awk -F: -v u="$uid" '$3 == u { print $6 }' "$mnt/etc/passwd")"
[[ -n $home ]] || home=/
# The token is made here for this run and reaches the processes through the
# environment only (never a command line or a file).
DESKBATCH_TOKEN="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
export DESKBATCH_TOKEN

# Runs "$@" as a container would run it (see the top of this file). It is PID 1
# of the new PID namespace until it execs; a bash on the host's side sets up
# the mounts and then execs into the chroot, so the process it ends as
# (tini, for the daemon) keeps that PID.
# shellcheck disable=SC2016 # expanded by the inner bash
in_image_setup='
set -euo pipefail
root=$1 data=$2 volume=$3 wd=$4 uid=$5 gid=$6
shift 6
envs=()
while [[ $1 != -- ]]; do envs+=("$1"); shift; done
shift
# --read-only: the image on its own mount, read-only; what is writable is mounted over it.
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount -t tmpfs -o nosuid,noexec,mode=0755,size=64k tmpfs "$root/dev"
for d in null zero full random urandom tty; do
  : >"$root/dev/$d"
  mount --bind "/dev/$d" "$root/dev/$d"
done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mkdir "$root/dev/shm"
mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size=1g shm "$root/dev/shm"
# --rbind: a user namespace (rootless) may not bind /sys without the mounts under it.
mount --rbind /sys "$root/sys"
mount -o remount,bind,ro,nosuid,nodev,noexec "$root/sys"
mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size=1g tmpfs "$root/tmp"
mount --bind "$data" "$root$volume"
# The environment is the image'"'"'s ENV, HOME from its passwd, and the token.
for name in $(compgen -e); do
  [[ $name == DESKBATCH_TOKEN ]] || unset "$name" 2>/dev/null || true
done
for e in "${envs[@]}"; do export "${e?}"; done
exec /usr/bin/unshare --root="$root" --wd="$wd" /usr/bin/setpriv --reuid="$uid" --regid="$gid" --clear-groups \
  --no-new-privs --inh-caps=-all --bounding-set=-all -- "$@"
'
in_image=(unshare --mount --pid --fork --kill-child --propagation private --
  bash -c "$in_image_setup" in-image "$mnt" "$data" "$volume" "${workdir:-/}" "$uid" "$gid"
  "${image_env[@]}" "HOME=$home" --)

free_port() { # a loopback port nothing listens on now
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  return 1
}
port="$(free_port)"
page_port="$(free_port)"
[[ $page_port != "$port" ]] || page_port="$(free_port)"

# The image's command, with loopback and a free port instead of 0.0.0.0:8765.
daemon=("${entrypoint[@]}")
args=("${cmd[@]}")
for i in "${!args[@]}"; do
  if [[ ${args[i]} == --host ]]; then args[i + 1]=127.0.0.1; fi
done
daemon+=("${args[@]}" --port "$port" --allow-private "127.0.0.1:$page_port")
# Where the daemon has the desktop pool (issue 15), try it with two desktops, one warm.
pool_flags=""
desktop_info="absent"
if "${in_image[@]}" "${cmd[@]:0:2}" serve --help 2>/dev/null | grep -q -- '--desktops'; then
  pool_flags="--desktops 2 --warm 1"
  daemon+=(--desktops 2 --warm 1)
  pool="a pool: $pool_flags"
else
  pool="this daemon has no --desktops flag: shared desktop"
fi
say "$pool"
serve_help="$("${in_image[@]}" "${cmd[@]:0:2}" serve --help 2>/dev/null || true)"
# In a chroot unshare(CLONE_NEWUSER) fails (EPERM): the desktops' sandbox cannot be made here.
if grep -q -- '--sandbox MODE' <<<"$serve_help"; then daemon+=(--sandbox off); fi
takeover=0
if grep -q -- '--allow-takeover' <<<"$serve_help"; then
  takeover=1
  daemon+=(--allow-takeover)
fi

daemon_log="$cache/logs/daemon.log"
say "starting, as $uid:$gid in a chroot of $mnt: ${daemon[*]} (log: $daemon_log)"
"${in_image[@]}" "${daemon[@]}" >"$daemon_log" 2>&1 &
daemon_pid=$!

child_of() { # the first child of PID $1, waiting for it a little
  local kids
  for _ in $(seq 50); do
    kids="$(cat "/proc/$1/task/$1/children" 2>/dev/null || true)"
    if [[ -n $kids ]]; then
      echo "${kids%% *}"
      return
    fi
    sleep 0.1
  done
  return 1
}
wait_comm() { # until PID $1 runs the program named $2 (it forks, then execs), 5 s at most
  for _ in $(seq 50); do
    [[ $(cat "/proc/$1/comm" 2>/dev/null) != "${2:0:15}" ]] || return 0
    sleep 0.1
  done
  return 1
}
# uid, gid, groups, capabilities and no_new_privs of PID $1, from /proc/PID/status.
identity() { awk '/^(Uid|Gid|Groups|CapEff|CapBnd|NoNewPrivs):/ { $1 = $1; printf "%s ", $0 }' "/proc/$1/status"; }
descendants() {
  local kids kid
  read -ra kids < <(cat "/proc/$1/task/"*/children 2>/dev/null | tr '\n' ' ' && echo)
  for kid in "${kids[@]}"; do
    echo "$kid"
    descendants "$kid"
  done
}

smoke_out="$cache/logs/smoke.log"
# The namespace's PID 1 is a bash that mounts, then execs into tini; tini forks, then execs node.
if init_pid="$(child_of "$daemon_pid")" && wait_comm "$init_pid" "$(basename "${daemon[0]}")" &&
  node_pid="$(child_of "$init_pid")" && wait_comm "$node_pid" "$(basename "${cmd[0]}")"; then
  # The client: the image's node and client library, as the image's user, in its own chroot.
  set +e
  "${in_image[@]}" node dist/scripts/image-smoke.js "$port" "$page_port" "$ready_deadline_ms" >"$smoke_out" 2>&1 &
  helper_pid=$!
  wait "$helper_pid"
  smoke_status=$?
  set -e
  helper_pid=""
  while IFS= read -r line; do
    case $line in
      PASS\ * | FAIL\ *) result "${line%% *}" "${line#* }" ;;
      INFO\ welcome.desktop\ *)
        desktop_info="${line#INFO welcome.desktop }"
        say "welcome.desktop: $desktop_info"
        ;;
      INFO\ *) say "${line#INFO }" ;;
    esac
  done <"$smoke_out"
  if [[ -n $pool_flags ]]; then
    if [[ $desktop_info == *'"mode":"pool"'* ]]; then
      result PASS "the session got a desktop of the pool: welcome.desktop $desktop_info"
    else
      result FAIL "started with $pool_flags, but welcome.desktop is $desktop_info"
    fi
  fi
  if ((smoke_status != 0)) && ! grep -q '^FAIL ' "$smoke_out"; then
    tail -n 20 "$smoke_out" >&2
    result FAIL "the smoke client exited $smoke_status"
  fi

  # Who runs: tini (PID 1 of the namespace), node, and every process they started.
  mapfile -t procs < <(descendants "$init_pid")
  procs=("$init_pid" "${procs[@]}")
  wrong=()
  for pid in "${procs[@]}"; do
    status="$(identity "$pid" 2>/dev/null)" || continue
    [[ $status == *"Uid: $uid $uid $uid $uid "*"Gid: $gid $gid $gid $gid "*"CapEff: 0000000000000000 CapBnd: 0000000000000000 NoNewPrivs: 1 "* ]] ||
      wrong+=("$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-60): $status")
  done
  names="$(for pid in "${procs[@]}"; do cat "/proc/$pid/comm" 2>/dev/null; done | sort | uniq -c | awk '{ printf "%s%s×%s", sep, $2, $1; sep = ", " }')"
  loaders=()
  for pid in "${procs[@]}"; do
    line="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == esbuild || $line == *tsx* || $line == *--import* || $line == *--loader* ]]; then
      loaders+=("$pid ${line:0:80}")
    fi
  done
  if ((${#loaders[@]} == 0)); then
    result PASS "no process runs a loader or esbuild (${#procs[@]} processes)"
  else
    result FAIL "processes with a loader or esbuild: ${loaders[*]}"
  fi
  if ((takeover)); then
    novnc_line="$(grep -o '"msg":"viewer: noVNC[^}]*' "$daemon_log" | head -n 1 || true)"
    if [[ $novnc_line == *'noVNC served for takeover'* ]]; then
      result PASS "the viewer serves noVNC for takeover: ${novnc_line#*for takeover\",}"
    else
      result FAIL "the viewer does not serve noVNC: ${novnc_line:-no line about it in the log}"
    fi
  fi
  if ((${#wrong[@]} == 0)); then
    result PASS "all ${#procs[@]} processes run as uid $uid gid $gid, no capabilities, no_new_privs ($names); node: $(identity "$node_pid")"
  else
    result FAIL "processes not as uid $uid without capabilities: ${wrong[*]}"
  fi

  # The image's HEALTHCHECK command, on this port instead of 8765.
  if ((${#healthcheck[@]} > 1)) && [[ ${healthcheck[0]} == CMD ]]; then
    hc=("${healthcheck[@]:1}")
    hc=("${hc[@]//:8765\//:$port/}")
    if "${in_image[@]}" "${hc[@]}" >/dev/null 2>&1; then
      result PASS "the image's HEALTHCHECK command (node asks /healthz) exits 0"
    else
      result FAIL "the image's HEALTHCHECK command exited non-zero"
    fi
  else
    result FAIL "the image has no exec-form HEALTHCHECK (podman build --format=docker keeps it)"
  fi

  # Files the daemon wrote into the data volume: the screenshot is there.
  shots="$(find "$data/screenshots" -type f | wc -l)"
  owners="$(find "$data" -mindepth 1 -printf '%U:%G\n' | sort -u | tr '\n' ' ')"
  if ((shots > 0)); then
    result PASS "the data volume holds $shots screenshot file(s), owned by ${owners% }"
  else
    result FAIL "no screenshot file in the data volume"
  fi

  # SIGTERM to PID 1, as `docker stop` sends it; tini passes it to node.
  kill -TERM "$init_pid"
  t0=$(now_ms)
  while kill -0 "$daemon_pid" 2>/dev/null && (($(now_ms) - t0 < stop_deadline_s * 1000)); do sleep 0.1; done
  if kill -0 "$daemon_pid" 2>/dev/null; then
    result FAIL "the daemon was still running ${stop_deadline_s} s after SIGTERM"
  else
    set +e
    wait "$daemon_pid"
    code=$?
    set -e
    daemon_pid=""
    if ((code == 0)); then
      result PASS "SIGTERM: exited 0 after $(seconds $(($(now_ms) - t0)))"
    else
      result FAIL "SIGTERM: exited $code after $(seconds $(($(now_ms) - t0)))"
    fi
  fi
else
  result FAIL "the daemon's processes did not start (tini, then node); log tail follows"
fi
sandbox="$(grep -o '"reason":"[^"]*sandbox[^"]*"' "$daemon_log" | head -n 1 || true)"
[[ -z $sandbox ]] || say "Chromium's renderer sandbox is off here: $sandbox"
if ((failed)); then
  say "the daemon's log ($daemon_log) ends:"
  tail -n 25 "$daemon_log" >&2
fi

printf '\n== deskbatch image test ==\n'
printf 'base        %s\n' "$base_note"
printf 'image       %s, %s (base %s)\n' "$image" "$size" "$base_size"
printf 'build time  %s (%s)\n' "$(seconds "$build_ms")" "$reuse"
printf 'desktops    %s; welcome.desktop %s\n' "$pool" "$desktop_info"
printf '%s\n' "${summary[@]}"
if ((failed)); then
  printf 'result: FAIL\n'
  exit 1
fi
printf 'result: PASS\n'
