#!/usr/bin/env bash
# Finds references to documents that are not in the repository, and fails listing each one.
#
#   bash docs/tools/check-doc-refs.sh              # check the repository (CI: .ci/run)
#   bash docs/tools/check-doc-refs.sh --self-test  # prove the checker catches planted dead refs
#
# What it reads: every tracked (or new, not ignored) file ending in .rs .md .sh .toml .yaml .yml
# .py .html .js, plus .ci/run — comments, README and docs alike. docs/tools/ is skipped (its
# scripts name the old documents on purpose).
#
# What it checks:
# - `NAME.md` / `some/path/NAME.md`: the file must exist, relative to the repository root or to
#   the referring file's directory (markdown links). URLs are ignored.
# - `docs/some/path`: the path must exist.
# - `§N`, `§N.M`, lists and ranges of them (`§1–§5`, `§5.2, §5.5`) and `Appendix A` right after a
#   reference to an existing .md file: that file must have a heading (outside code fences) whose
#   text starts with the number, e.g. `## 6.` or `### 6.4 …`, or with `Appendix A`.
# - Inside docs/*.md, a bare `§N` (not after a document name) refers to the file itself and is
#   checked the same way.
#
# Only python3's standard library is used.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python3 - "$@" <<'PY'
import os
import re
import subprocess
import sys
import tempfile

EXTENSIONS = (".rs", ".md", ".sh", ".toml", ".yaml", ".yml", ".py", ".html", ".js")
EXTRA_FILES = (".ci/run",)
SKIP_PREFIXES = ("docs/tools/", "target/")

MD_REF = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.md)(?![\w-])")
DOCS_PATH = re.compile(r"(?<![\w/.-])(docs/[\w./-]*[\w-])")
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.I)
SECTION = r"§\s?(\d+(?:\.\d+)*)"
# What may follow a document name before its section: closing quotes/brackets, spaces.
SECTIONS_AFTER = re.compile(
    r"[`'\"\])*_]*[ \t]*(?:\(\s*)?"
    r"((?:" + SECTION + r"|Appendix\s+[A-Z])"
    r"(?:\s*(?:,|and|or|to|–|—|-|&)\s*(?:" + SECTION + r"|Appendix\s+[A-Z]))*)"
)
ONE_SECTION = re.compile(SECTION + r"|Appendix\s+([A-Z])")
BARE_SECTION = re.compile(r"(?<![\w§])" + SECTION)
HEADING = re.compile(r"^#{1,6}\s+(.*)$")
HEADING_ID = re.compile(r"^(?:(\d+(?:\.\d+)*)\.?(?=\s|$)|Appendix\s+([A-Z])\b)")
FENCE = re.compile(r"^\s*(```|~~~)")


def files_to_scan(root, use_git):
    out = None
    if use_git:
        try:
            out = subprocess.run(
                ["git", "-C", root, "ls-files", "-co", "--exclude-standard"],
                check=True, capture_output=True, text=True,
            ).stdout.splitlines()
        except (OSError, subprocess.CalledProcessError):
            out = None
    if out is None:
        out = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", "target")]
            for f in filenames:
                out.append(os.path.relpath(os.path.join(dirpath, f), root))
    picked = []
    for rel in sorted(set(out)):
        rel = rel.replace(os.sep, "/")
        if rel.startswith(SKIP_PREFIXES):
            continue
        if rel.endswith(EXTENSIONS) or rel in EXTRA_FILES:
            if os.path.isfile(os.path.join(root, rel)):
                picked.append(rel)
    return picked


_headings = {}


def section_ids(path):
    """Section ids ("6", "6.4", "Appendix A") of the headings of a markdown file."""
    if path not in _headings:
        ids = set()
        fenced = False
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                if fenced:
                    continue
                m = HEADING.match(line)
                if not m:
                    continue
                h = HEADING_ID.match(m.group(1).strip())
                if h:
                    ids.add(h.group(1) if h.group(1) else "Appendix " + h.group(2))
        _headings[path] = ids
    return _headings[path]


def sections_in(text):
    for m in ONE_SECTION.finditer(text):
        yield m.group(1) if m.group(1) else "Appendix " + m.group(2)


def resolve(root, rel_file, ref):
    for base in (root, os.path.dirname(os.path.join(root, rel_file))):
        cand = os.path.normpath(os.path.join(base, ref))
        if os.path.exists(cand):
            return cand
    return None


def check(root, use_git=True):
    dead = []
    for rel in files_to_scan(root, use_git):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        own_doc = rel.startswith("docs/") and rel.endswith(".md")
        fenced = False
        for lineno, line in enumerate(lines, 1):
            if own_doc and FENCE.match(line):
                fenced = not fenced
            urls = [m.span() for m in URL.finditer(line)]
            in_url = lambda pos: any(a <= pos < b for a, b in urls)
            consumed = []
            for m in MD_REF.finditer(line):
                if in_url(m.start()):
                    continue
                ref = m.group(1)
                target = resolve(root, rel, ref)
                s = SECTIONS_AFTER.match(line, m.end())
                if s:
                    consumed.append(s.span(1))
                if target is None:
                    dead.append((rel, lineno, ref, "no such file"))
                    continue
                if not s or not target.endswith(".md"):
                    continue
                ids = section_ids(target)
                for sec in sections_in(s.group(1)):
                    if sec not in ids:
                        where = "§" + sec if sec[0].isdigit() else sec
                        dead.append((rel, lineno, f"{ref} {where}", "no such section"))
            for m in DOCS_PATH.finditer(line):
                if in_url(m.start()) or m.group(1).endswith(".md"):
                    continue
                if resolve(root, rel, m.group(1)) is None:
                    dead.append((rel, lineno, m.group(1), "no such path"))
            if own_doc and not fenced:
                ids = section_ids(os.path.join(root, rel))
                for m in BARE_SECTION.finditer(line):
                    if any(a <= m.start() < b for a, b in consumed) or in_url(m.start()):
                        continue
                    if m.group(1) not in ids:
                        dead.append((rel, lineno, "§" + m.group(1), "no such section in this file"))
    return dead


def report(dead):
    for rel, lineno, ref, why in dead:
        print(f"{rel}:{lineno}: dead reference `{ref}` ({why})")


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)

        write("docs/guide.md", "# Guide\n\n## 1. One\n\n### 1.2 Sub\n\n## Appendix A. Table\n\n"
              "```\n## 9. in a fence, not a heading\n```\n\nSee §1 and §7.\n")
        write("docs/tools/ignored.sh", "# HEALTH.md is named here on purpose\n")
        write("README.md", "Read [the guide](docs/guide.md) and docs/guide.md §1.2.\n"
              "Also `docs/guide.md` §1–§3, docs/guide.md Appendix A, docs/guide.md Appendix B.\n"
              "Links: https://example.com/x/NOTES.md and [rel](docs/guide.md#one).\n")
        write("src/lib.rs", "//! As in HEALTH.md §2 (old name), docs/guide.md §9, docs/gone.md,\n"
              "//! docs/guide.md §1.2, §1 and the script docs/tools/missing.sh.\n"
              "fn main() {}\n")
        got = sorted((r, n, ref) for r, n, ref, _ in check(root, use_git=False))
        want = sorted([
            ("README.md", 2, "docs/guide.md §3"),
            ("README.md", 2, "docs/guide.md Appendix B"),
            ("docs/guide.md", 13, "§7"),
            ("src/lib.rs", 1, "HEALTH.md"),
            ("src/lib.rs", 1, "docs/guide.md §9"),
            ("src/lib.rs", 1, "docs/gone.md"),
            ("src/lib.rs", 2, "docs/tools/missing.sh"),
        ])
        if got != want:
            print("self-test FAILED")
            print("  expected:", want)
            print("  got:     ", got)
            return 1
        print(f"self-test ok: {len(want)} planted dead references found, no false positives")
        return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if argv[1:]:
        print(__doc__ or "usage: check-doc-refs.sh [--self-test]")
        return 2
    root = os.getcwd()
    dead = check(root)
    if dead:
        report(dead)
        print(f"{len(dead)} dead document reference(s); point them at a file and section that exist "
              "(docs/tools/repoint-refs.sh maps the old shared document names).")
        return 1
    print("document references: all resolve")
    return 0


sys.exit(main(sys.argv))
PY
