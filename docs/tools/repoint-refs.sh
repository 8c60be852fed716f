#!/usr/bin/env bash
# Repoints references to the design documents that used to live outside the repository
# (HEALTH.md, PROTOCOL.md, ARCHITECTURE.md, STYLE.md, LIFECYCLE.md, VERSIONS.md and the
# reference/ notes) at their counterparts in docs/. Idempotent: a second run changes nothing.
# Run it after merging a branch that still cites the old names, then run
# docs/tools/check-doc-refs.sh, which lists whatever still points nowhere.
#
#   bash docs/tools/repoint-refs.sh          # rewrite in place, print the files changed
#   bash docs/tools/repoint-refs.sh --check  # change nothing; exit 1 if something would change
#
# Mapping (section numbers are kept: docs/health.md and docs/protocol.md number their sections
# like the old documents did):
#   HEALTH.md §N                    → docs/health.md §N
#   PROTOCOL.md §N, Appendix A      → docs/protocol.md §N, Appendix A
#   ARCHITECTURE.md restart contract→ docs/architecture.md §3; any other → docs/architecture.md
#   Headers follow STYLE.md §3      → docs/architecture.md §6 (streaming answers)
#   UPSTREAM-SURFACE.md §3.1–§3.3   → docs/protocol.md §9.1–§9.3 (the chain's APIs, as read)
#   UPSTREAM-HEALTH.md, ANCHORS.md  → docs/health.md (with a § they map to docs/upstream-health.md
#                                     / docs/anchors.md, which do not exist: the checker flags them)
#   other STYLE.md / UPSTREAM-SURFACE.md sections, LIFECYCLE.md, VERSIONS.md
#                                   → docs/style.md, docs/upstream-surface.md, docs/lifecycle.md,
#                                     docs/versions.md: flagged until someone writes those documents
#
# Only reference text changes; files without an old name are not touched (no mtime change).
set -euo pipefail
cd "$(dirname "$0")/../.."

mode=write
case "${1:-}" in
"") ;;
--check) mode=check ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# A name counts only when it is not the tail of a longer name or path (UPSTREAM-HEALTH.md must
# not become UPSTREAM-docs/health.md; docs/health.md must not be rewritten again).
B='(^|[^-[:alnum:]_/.])'
R='(reference/)?'
SED_RULES=(
  -e "s#${B}${R}UPSTREAM-SURFACE\\.md §3\\.([1-3])–§3\\.([1-3])#\\1docs/protocol.md §9.\\3–§9.\\4#g"
  -e "s#${B}${R}UPSTREAM-SURFACE\\.md §3\\.([1-3])#\\1docs/protocol.md §9.\\3#g"
  -e "s#${B}${R}UPSTREAM-SURFACE\\.md#\\1docs/upstream-surface.md#g"
  -e "s#${B}${R}UPSTREAM-HEALTH\\.md( ?§)#\\1docs/upstream-health.md\\3#g"
  -e "s#${B}${R}UPSTREAM-HEALTH\\.md#\\1docs/health.md#g"
  -e "s#${B}${R}ANCHORS\\.md( ?§)#\\1docs/anchors.md\\3#g"
  -e "s#${B}${R}ANCHORS\\.md#\\1docs/health.md#g"
  -e "s#${B}ARCHITECTURE\\.md restart contract#\\1docs/architecture.md §3#g"
  -e "s#${B}ARCHITECTURE\\.md#\\1docs/architecture.md#g"
  -e "s#Headers follow STYLE\\.md §3#Headers follow docs/architecture.md §6#g"
  -e "s#${B}STYLE\\.md#\\1docs/style.md#g"
  -e "s#${B}PROTOCOL\\.md#\\1docs/protocol.md#g"
  -e "s#${B}HEALTH\\.md#\\1docs/health.md#g"
  -e "s#${B}LIFECYCLE\\.md#\\1docs/lifecycle.md#g"
  -e "s#${B}VERSIONS\\.md#\\1docs/versions.md#g"
)
OLD_NAMES='(^|[^-[:alnum:]_/.])(reference/)?(HEALTH|PROTOCOL|ARCHITECTURE|STYLE|LIFECYCLE|VERSIONS|UPSTREAM-SURFACE|UPSTREAM-HEALTH|ANCHORS)\.md'

changed=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
while IFS= read -r -d '' f; do
  case "$f" in
  docs/tools/* | target/*) continue ;;
  *.rs | *.md | *.sh | *.toml | *.yaml | *.yml | *.py | *.html | *.js | .ci/run) ;;
  *) continue ;;
  esac
  [ -f "$f" ] || continue
  grep -Eq "$OLD_NAMES" "$f" || continue
  sed -E "${SED_RULES[@]}" "$f" >"$tmp"
  if ! cmp -s "$f" "$tmp"; then
    changed=$((changed + 1))
    echo "$f"
    if [ "$mode" = write ]; then
      cat "$tmp" >"$f" # keeps the file's mode
    fi
  fi
done < <(git ls-files -z -co --exclude-standard)
rm -f "$tmp"

if [ "$mode" = check ] && [ "$changed" -gt 0 ]; then
  echo "$changed file(s) still cite the old document names; run docs/tools/repoint-refs.sh" >&2
  exit 1
fi
echo "repointed $changed file(s)" >&2
