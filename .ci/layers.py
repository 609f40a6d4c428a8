#!/usr/bin/env python3
"""The layers of the herdless lib, checked: which module's code names which other module
(`crate::x`, `super::x`, `use crate::{..}` groups; comments and doc lines left out). Prints the
edges and every cycle (a strongly connected group of more than one module), and fails if a file
of the contract layer or a backend names the handles (group.rs, waiter.rs) or a cycle runs
through a handle. Usage: python3 .ci/layers.py [repo root]"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else '.'
files = {}
for base in ['src', 'platform']:
    for d, _, fs in os.walk(os.path.join(root, base)):
        for f in fs:
            if f.endswith('.rs'):
                files[os.path.join(d, f)] = None
def modname(path):
    rel = os.path.relpath(path, root)
    rel = rel[:-3]
    if rel.startswith('src/'): rel = rel[4:]
    parts = rel.split('/')
    if parts[-1] == 'mod': parts = parts[:-1]
    if parts == ['lib']: return 'lib'
    return '/'.join(parts)
mods = {modname(p): p for p in files}
edges = {}
for m, p in mods.items():
    text = open(p).read()
    # drop #[cfg(test)] mod tests blocks? keep: tests are part of the file. Strip comments.
    code = '\n'.join(l.split('//')[0] for l in text.splitlines())
    out = set()
    # expand `use crate::{a::.., b}` groups
    for g in re.finditer(r'crate::\{([^;]*?)\}\s*;', code, re.S):
        for item in re.findall(r'(?:^|[,{]\s*)([a-z_]+)(?=::|\s*[,}]|$)', g.group(1)):
            out.add(item)
    for t in re.findall(r'crate::([a-z_]+)', code):
        out.add(t)
    parent = m.rsplit('/', 1)[0] if '/' in m else None
    for t in re.findall(r'super::([a-z_]+)', code):
        if parent: out.add(parent + '/' + t if parent + '/' + t in mods else parent)
    resolved = set()
    for t in out:
        if t in mods: resolved.add(t)
        elif (m.split('/')[0] + '/' + t) in mods and '/' in m: resolved.add(m.split('/')[0] + '/' + t)
    resolved.discard(m)
    edges[m] = sorted(resolved)
for m in sorted(edges):
    print(f'{m:22} -> {", ".join(edges[m])}')
# Tarjan
idx, low, st, on, sccs, c = {}, {}, [], set(), [], [0]
def sc(v):
    idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
    for w in edges.get(v, []):
        if w not in idx: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        sccs.append(comp)
sys.setrecursionlimit(10000)
for v in edges:
    if v not in idx: sc(v)
cycles = [sorted(s) for s in sccs if len(s) > 1]
print('cycles:', cycles or 'none')
handles = {'group', 'waiter'}
lower = ['contract', 'error', 'interest', 'registry', 'shared', 'members']
bad = [(m, t) for m, ts in edges.items() for t in ts if t in handles
       and (m in lower or m.startswith('emulated') or m.startswith('platform'))]
bad_cycles = [c for c in cycles if handles & set(c)]
for m, t in bad:
    print(f'LAYERS: {m} imports the handle {t}')
for c in bad_cycles:
    print(f'LAYERS: a cycle through the handles: {c}')
sys.exit(1 if bad or bad_cycles else 0)
