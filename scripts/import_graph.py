#!/usr/bin/env python3
"""The crate's import graph, file by file, and the rules the model house keeps.

Reads every `.rs` file under `src/`, collects the paths it names (`use` trees, expanded, and
`crate::` / `super::` paths written inline in code; comments and doc comments are skipped),
resolves each to the file of the deepest module it reaches, and checks:

1. no import cycle between files, where a module naming one of its own descendants does not
   count (a `mod.rs` re-exporting its children is a table of contents, not a dependency);
2. no module under `src/models/` imports `src/embed/` or `src/rerankers/`;
3. no architecture folder (`src/models/<arch>/`, the folders listed in ARCHES) imports a
   sibling architecture folder; each imports the shared layer (`models/layers/`) and the
   crate's other shared modules only.

Prints each broken rule with the files and the paths that break it, and exits 1 if any is
broken. With `--edges`, prints every edge (`from -> to`) first.

Usage: python3 scripts/import_graph.py [--edges] [--src src]
"""
import re
import sys
from pathlib import Path

ARCH_ROOT = ("models",)
NOT_ARCHES = {"layers", "panels", "quant", "engine"}


def strip_comments(text):
    """`text` without `//` comments (doc comments included), block comments and strings."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif text.startswith("r#\"", i) or text.startswith('r"', i):
            hashes = 1 if text[i + 1] == "#" else 0
            end = '"' + "#" * hashes
            j = text.find(end, i + 2 + hashes)
            out.append('""')
            i = n if j < 0 else j + len(end)
        elif c == "'" and i + 2 < n and (text[i + 2] == "'" or text[i + 1] == "\\"):
            # a char literal ('x' or '\n'); lifetimes ('a) fall through
            j = text.find("'", i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree):
    """The paths of one `use` tree: `a::{b, c::{d, e}}` -> a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*", "", tree)
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [tree]
    head, rest = tree.split("{", 1)
    inner = rest[: rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    if cur:
        parts.append(cur)
    paths = []
    for p in parts:
        for sub in expand_use(p):
            paths.append(head + sub if sub != "self" else head.rstrip(":"))
    return paths


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = sorted(src.rglob("*.rs"))
        self.module_of = {f: self.module_path(f) for f in self.files}
        self.file_of = {m: f for f, m in self.module_of.items()}

    def module_path(self, f):
        rel = f.relative_to(self.src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts.pop()
        return tuple(parts)

    def resolve(self, module, path):
        """The deepest module file `path` (as written in `module`) reaches, or None."""
        segs = [s for s in path.replace("r#", "").split("::") if s]
        if not segs:
            return None
        if segs[0] == "crate":
            base, segs = (), segs[1:]
        elif segs[0] in ("super", "self"):
            base = module if self.is_dir_module(module) else module
            base = list(module)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            base = tuple(base)
        else:
            # a child module named without a prefix (`use bert::X` in a mod.rs)
            if module + (segs[0],) in self.file_of:
                base = module
            else:
                return None
        best = base if base in self.file_of else None
        cur = base
        for s in segs:
            cur = cur + (s,)
            if cur in self.file_of:
                best = cur
            else:
                break
        return best

    def is_dir_module(self, module):
        f = self.file_of.get(module)
        return f is not None and f.name == "mod.rs"

    def edges(self):
        out = {}
        for f in self.files:
            module = self.module_of[f]
            text = strip_comments(f.read_text())
            # a #[cfg(test)] mod tests { ... } block is not part of the module's dependencies
            text = re.split(r"#\[cfg\(test\)\]\s*mod\s+tests", text)[0]
            paths = []
            for m in re.finditer(r"\buse\s+([^;]+);", text):
                paths += expand_use(m.group(1))
            text_no_use = re.sub(r"\buse\s+[^;]+;", "", text)
            paths += re.findall(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text_no_use)
            for p in paths:
                target = self.resolve(module, p)
                if target is None or target == module:
                    continue
                if target[: len(module)] == module:
                    continue  # a module naming its own descendant
                out.setdefault(module, {}).setdefault(target, set()).add(p)
        return out


def cycles(edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    for v in list(edges):
        if v not in index:
            visit(v)
    return sccs


def name(module):
    return "/".join(module) or "lib"


def main():
    args = sys.argv[1:]
    src = Path(args[args.index("--src") + 1]) if "--src" in args else Path("src")
    crate = Crate(src)
    edges = crate.edges()
    if "--edges" in args:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f"{name(a)} -> {name(b)}")
    broken = 0
    for scc in cycles(edges):
        broken += 1
        print(f"cycle: {', '.join(name(m) for m in scc)}")
        members = set(scc)
        for a in scc:
            for b, paths in sorted(edges.get(a, {}).items()):
                if b in members:
                    print(f"    {name(a)} -> {name(b)}: {', '.join(sorted(paths))}")
    for a, targets in sorted(edges.items()):
        if a[:1] != ARCH_ROOT:
            continue
        for b, paths in sorted(targets.items()):
            if b[:1] in (("embed",), ("rerankers",)):
                broken += 1
                print(f"models imports {b[0]}: {name(a)} -> {name(b)}: {', '.join(sorted(paths))}")
    arches = {
        m[1]
        for m in crate.file_of
        if len(m) >= 2 and m[0] == "models" and m[1] not in NOT_ARCHES and crate.is_dir_module(m[:2])
    }
    for a, targets in sorted(edges.items()):
        if len(a) < 2 or a[0] != "models" or a[1] not in arches:
            continue
        for b, paths in sorted(targets.items()):
            if len(b) >= 2 and b[0] == "models" and b[1] in arches and b[1] != a[1]:
                broken += 1
                print(
                    f"architecture imports a sibling: {name(a)} -> {name(b)}: "
                    f"{', '.join(sorted(paths))}"
                )
    print(
        f"{len(crate.files)} files, {sum(len(t) for t in edges.values())} edges, "
        f"architecture folders: {', '.join(sorted(arches))}; {broken} broken rule(s)"
    )
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
