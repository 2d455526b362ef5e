#!/usr/bin/env bash
# Makes room under the 64 MiB that the device machine's `run` carries (the working tree plus
# the staged .gpu bundle): moves the fixture folders that the device checks never read out of
# the working tree, to a sibling folder beside the repository, and prints what the carry then
# weighs. The device checks (scripts/gpu_check.sh) run `it candle::` and device_bench; the
# folders kept are those tests/it/candle.rs names (it reaches the rest of its fixtures through
# them), read from that file at run time, so a new candle test's fixture is kept.
#
# Usage: scripts/gpu_slim.sh            move the unread fixture folders aside
#        scripts/gpu_slim.sh --restore  put them back (before any commit: CI runs on a clean
#                                       clone and fails without them)
#        scripts/gpu_slim.sh --dry-run  only list what would move, and the sizes
set -euo pipefail
cd "$(dirname "$0")/.."
ASIDE="../$(basename "$PWD")-fixtures-aside"
FIXTURES=tests/fixtures

if [ "${1:-}" = "--restore" ]; then
  [ -d "$ASIDE" ] || { echo "nothing to restore: no $ASIDE"; exit 0; }
  for dir in "$ASIDE"/*; do
    [ -e "$dir" ] || continue
    name=$(basename "$dir")
    if [ -e "$FIXTURES/$name" ]; then
      echo "error: $FIXTURES/$name exists; left $dir where it is" >&2
      exit 1
    fi
    mv "$dir" "$FIXTURES/$name"
    echo "restored $FIXTURES/$name"
  done
  rmdir "$ASIDE"
  exit 0
fi

dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
carry() {
  # Tracked and untracked files that git does not ignore, as `run` copies them, plus .gpu.
  { git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null || true
    [ -d .gpu ] && find .gpu -type f -exec stat -c %s {} +
  } | awk '{ s += $1 } END { printf "%.1f MiB", s / 1048576 }'
}
echo "carry now: $(carry) (the limit is 64 MiB)"
moved=0
for dir in "$FIXTURES"/*/; do
  name=$(basename "$dir")
  if grep -q "\"$name[\"/]" tests/it/candle.rs; then
    continue
  fi
  size=$(du -sh "$dir" | cut -f1)
  if [ $dry -eq 1 ]; then
    echo "would move $FIXTURES/$name ($size)"
    continue
  fi
  mkdir -p "$ASIDE"
  mv "$dir" "$ASIDE/$name"
  echo "moved $FIXTURES/$name ($size) to $ASIDE/"
  moved=1
done
if [ $moved -eq 1 ]; then
  echo "carry after: $(carry). Run scripts/gpu_slim.sh --restore when the device run is over."
fi
