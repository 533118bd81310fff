#!/usr/bin/env bash
# Checks the links of every markdown file of the checkout (the book, docs/*.md,
# README.md, the crates' READMEs; tracked or not yet added): every relative link
# names a file that exists, every `#anchor` names a heading of the file it points
# to (GitHub's and mdbook's slugs: lower case, punctuation dropped, spaces to
# hyphens, `-1`, `-2` … for repeated headings), and docs/SUMMARY.md lists every
# chapter. Prints each broken link as FILE:LINE and exits 1 if there is one.
#
#   ci/doclinks.sh            # from anywhere in the checkout
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files --cached --others --exclude-standard "*.md" 2>/dev/null || find . -name "*.md" -not -path "./target/*")
# shellcheck disable=SC2086 # one path per word
exec python3 - $files <<'EOF'
import os, re, sys

def slugs(path):
    seen, out, fence = {}, set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fence = not fence
            if fence:
                continue
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2))
            slug = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
            slug = slug.replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out

cache, bad = {}, []
link = re.compile(r"\]\(([^)\s]+)\)")
for src in sys.argv[1:]:
    fence = False
    with open(src, encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                fence = not fence
            if fence:
                continue
            for target in link.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(src), path)) if path else src
                if not os.path.exists(dest):
                    bad.append(f"{src}:{no}: {target}: no such file")
                    continue
                if anchor and dest.endswith(".md"):
                    if dest not in cache:
                        cache[dest] = slugs(dest)
                    if anchor not in cache[dest]:
                        bad.append(f"{src}:{no}: {target}: no heading #{anchor} in {dest}")

with open("docs/SUMMARY.md", encoding="utf-8") as f:
    listed = set(re.findall(r"\]\(([^)#]+)\)", f.read()))
for chapter in sorted(os.listdir("docs")):
    if chapter.endswith(".md") and chapter != "SUMMARY.md" and chapter not in listed:
        bad.append(f"docs/SUMMARY.md: {chapter} is not listed")

for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF
