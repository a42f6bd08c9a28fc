#!/usr/bin/env bash
# npm run check: the static checks (types of the daemon, the page script and the viewer; import
# cycles; lint; formatting), all at once. Each is one process, mostly on one core: on a 2-core machine
# the six together take about half as long as one after another. A failing check's output is shown,
# the others' is not; the exit status is 1 if any failed.
set -u
cd "$(dirname "$0")/.."
bin=node_modules/.bin
checks=(
  "$bin/tsc --noEmit -p tsconfig.json"
  "$bin/tsc -p src/browser/page-script/tsconfig.json"
  "$bin/tsc -p src/viewer/tsconfig.json"
  "node --import tsx scripts/check-cycles.ts"
  "$bin/eslint ."
  "$bin/prettier --check ."
)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pids=()
for i in "${!checks[@]}"; do
  ${checks[$i]} >"$out/$i" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!checks[@]}"; do
  if wait "${pids[$i]}"; then
    echo "check: ok   ${checks[$i]#"$bin/"}"
  else
    failed=1
    echo "check: FAIL ${checks[$i]#"$bin/"}"
    sed 's/^/  /' "$out/$i"
  fi
done
exit $failed
