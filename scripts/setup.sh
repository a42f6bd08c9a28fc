#!/usr/bin/env bash
# Makes this checkout runnable: the Debian packages listed in
# scripts/system-packages.txt, Node.js >= 20.10, and node_modules. The
# installed package runs it too (`deskbatch setup`, from
# node_modules/deskbatch/scripts/): there it does all but node_modules, which
# npm installed.
#
# Runs before every `npm start` and `npm test`, so it is idempotent, quiet
# (one line at most, and only when it changed something) and fast when there
# is nothing to do: one dpkg-query, one `node --version`, two stat calls.
# It never runs `npx playwright install`: Playwright drives Debian's chromium.
#
# Usage: bash scripts/setup.sh [EXTRA_PACKAGE_LIST...]
#   e.g. bash scripts/setup.sh scripts/bench-packages.txt
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
min_node_major=20
min_node_minor=10 # package.json "engines"

die() {
  printf 'setup: %s\n' "$*" >&2
  exit 1
}

done_steps=()

# ---- Debian packages -------------------------------------------------------
packages=()
for list in "$here/system-packages.txt" "$@"; do
  [[ -r $list ]] || die "cannot read package list: $list"
  while IFS= read -r line || [[ -n $line ]]; do
    read -ra words <<<"${line%%#*}"
    packages+=("${words[@]}")
  done <"$list"
done

if ((${#packages[@]})); then
  command -v dpkg-query >/dev/null ||
    die "dpkg-query not found: this script supports Debian 12; install by hand: ${packages[*]}"
  # Names dpkg has never heard of make dpkg-query exit 1; they count as missing.
  status_lines="$(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null || true)"
  declare -A installed=()
  while read -r name status; do
    if [[ $status == 'install ok installed' ]]; then installed[$name]=1; fi
  done <<<"$status_lines"
  missing=()
  for p in "${packages[@]}"; do
    if [[ -z ${installed[$p]:-} ]]; then missing+=("$p"); fi
  done

  if ((${#missing[@]})); then
    command -v apt-get >/dev/null || die "missing packages and no apt-get; install by hand: ${missing[*]}"
    as_root=()
    if ((EUID != 0)); then
      command -v sudo >/dev/null ||
        die "missing Debian packages: ${missing[*]}. Not root and no sudo; as root run: apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
      as_root=(sudo)
    fi
    log="$(mktemp)"
    if ! {
      "${as_root[@]}" apt-get update &&
        "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
          apt-get install -y --no-install-recommends "${missing[@]}"
    } >"$log" 2>&1; then
      cat "$log" >&2
      rm -f "$log"
      die "apt-get failed to install: ${missing[*]}"
    fi
    rm -f "$log"
    done_steps+=("installed ${missing[*]}")
  fi
fi

# ---- Chromium's managed policy ---------------------------------------------------
# It closes the browser's own interface to the model (file://, chrome://,
# DevTools, native file dialogs: src/browser/policy.ts). Only root can install
# it; without it the daemon still runs, and says so at start and in /readyz.
policy_src="$root/scripts/chromium-policy.json"
policy_dst=/etc/chromium/policies/managed/deskbatch.json
if [[ -r $policy_src ]] && ! cmp -s "$policy_src" "$policy_dst" 2>/dev/null; then
  as_root=()
  if ((EUID != 0)) && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then as_root=(sudo); fi
  if ((EUID == 0)) || ((${#as_root[@]})); then
    "${as_root[@]}" install -D -m 0644 "$policy_src" "$policy_dst"
    done_steps+=("installed Chromium's policy in $policy_dst")
  else
    printf 'setup: not root and no sudo: Chromium'"'"'s policy is not installed; as root run: install -D -m 0644 %s %s\n' \
      "$policy_src" "$policy_dst" >&2
  fi
fi

# ---- Node.js ----------------------------------------------------------------
command -v node >/dev/null || die "node not found: install Node.js ${min_node_major}.${min_node_minor} or later"
version="$(node --version)" # v20.20.2
version="${version#v}"
IFS=. read -r major minor _ <<<"$version"
if ((major < min_node_major || (major == min_node_major && minor < min_node_minor))); then
  die "Node.js $version is too old: deskbatch needs ${min_node_major}.${min_node_minor} or later"
fi

# ---- node_modules (a checkout only) ---------------------------------------------
# A checkout has package-lock.json. The installed package has none (npm never
# packs it): npm installed its dependencies, maybe in a node_modules further up.
cd "$root"
npm_cmd=()
if [[ -f package-lock.json ]]; then
  # npm writes node_modules/.package-lock.json at the end of every install, so
  # a lockfile newer than it means the tree is stale (or half installed).
  if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
    npm_cmd=(npm ci)
  fi
fi
if ((${#npm_cmd[@]})); then
  log="$(mktemp)"
  if ! PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "${npm_cmd[@]}" --no-audit --no-fund >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "${npm_cmd[*]} failed"
  fi
  rm -f "$log"
  done_steps+=("ran ${npm_cmd[*]}")
fi

if ((${#done_steps[@]})); then
  summary="${done_steps[0]}"
  for step in "${done_steps[@]:1}"; do summary+="; $step"; done
  printf 'setup: %s\n' "$summary" >&2
fi
