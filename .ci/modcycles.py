#!/usr/bin/env python3
"""Import cycles among a crate's modules.

Reads every .rs file under SRC (default crates/roce-ibverbs/src), takes
each path that names a module of the crate (`crate::a::b`, `super::x`,
`self::x`, `$crate::a`) outside comments, builds the graph of module
imports with modules cut to DEPTH path components (default 1: `cm`,
`context`, `cq` ...; 2 also splits `cm::rsocket`, `debug::trace`), and
prints each strongly connected component of more than one module.
Exits 1 when there is one. A parent's own `mod x;` and relative `x::`
paths are not edges (a child always sees its parent), nor is the crate
root a node.

    .ci/modcycles.py [--depth N] [--edges] [SRC]
"""
import os
import re
import sys

PATH = re.compile(r"(\$?crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def module_of(src, file):
    rel = os.path.relpath(file, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def code(text):
    # Line comments and doc comments: paths in prose are not imports.
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(l.split("//", 1)[0] for l in text.splitlines())


def main():
    args = sys.argv[1:]
    depth, edges_too, src = 1, False, "crates/roce-ibverbs/src"
    while args:
        a = args.pop(0)
        if a == "--depth":
            depth = int(args.pop(0))
        elif a == "--edges":
            edges_too = True
        else:
            src = a
    files = [
        os.path.join(d, f)
        for d, _, fs in os.walk(src)
        for f in fs
        if f.endswith(".rs")
    ]
    mods = {tuple(module_of(src, f)) for f in files}
    graph = {}
    for f in files:
        me = module_of(src, f)
        here = tuple(me[:depth])
        for m in PATH.finditer(code(open(f).read())):
            head, parts = m.group(1), m.group(2).split("::")[1:]
            if head in ("crate", "$crate"):
                base = []
            elif head == "self":
                base = list(me)
            else:
                base = list(me[:-1])
                while parts and parts[0] == "super":
                    base, parts = base[:-1], parts[1:]
            full = base + parts
            # The longest prefix that is a module of the crate.
            target = next(
                (tuple(full[:i]) for i in range(len(full), 0, -1) if tuple(full[:i]) in mods),
                None,
            )
            if target is None or not target:
                continue
            there = target[:depth]
            if there != here:
                graph.setdefault(here, set()).add(there)
            graph.setdefault(there, set())
    sccs = tarjan(graph)
    def name(m):
        return "::".join(m) or "(root)"

    if edges_too:
        for a in sorted(graph):
            print(f"{name(a)} -> {', '.join(sorted(map(name, graph[a])))}")
    cyclic = [sorted(map(name, c)) for c in sccs if len(c) > 1]
    for c in sorted(cyclic):
        print(f"cycle of {len(c)}: {' '.join(c)}")
    if not cyclic:
        print(f"no cycles among {len(graph)} modules (depth {depth})")
    return 1 if cyclic else 0


def tarjan(graph):
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            c = []
            while True:
                w = stack.pop()
                on.discard(w)
                c.append(w)
                if w == v:
                    break
            out.append(c)

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
