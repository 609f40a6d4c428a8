#!/usr/bin/env python3
"""The layers of the herdless lib, checked: which module's code names which other module
(`crate::x`, `super::x`, `use crate::{..}` groups; comments and doc lines left out). Prints the
edges and every cycle (a strongly connected group of more than one module), and fails if a file
of the contract layer or a backend names the handles (group.rs, waiter.rs) or a cycle runs
through a handle, if the system-call wrappers (src/sys/unix.rs, src/sys/linux/epoll.rs) name
another module of the crate or anything under src/sys/ names the emulation, names re-exported by lib.rs (`crate::Group`) counted as their module's (unit-test
modules at the end of a file left out); and
fails if a file other than src/emulated/protocol/source.rs touches a source's shared fields. Usage: python3 .ci/layers.py [repo root]"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else '.'
files = {}
for base in ['src']:
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
def strip_comments(text):
    return '\n'.join(l.split('//')[0] for l in text.splitlines())
# The names lib.rs re-exports (`pub use group::{Group, GroupBuilder}`, `pub use x::Y as Z`):
# `crate::Group` in any file reaches back to group.rs as surely as `crate::group::Group`.
reexports = {}
lib = strip_comments(open(os.path.join(root, 'src', 'lib.rs')).read())
for m, names in re.findall(r'pub\s+use\s+([a-z_]+)::\{([^}]*)\}\s*;', lib, re.S):
    for n in names.split(','):
        n = n.strip().split(' as ')[-1].strip()
        if n: reexports[n] = m
for m, n, alias in re.findall(r'pub\s+use\s+([a-z_]+)::(\w+)(?:\s+as\s+(\w+))?\s*;', lib):
    reexports[alias or n] = m
edges = {}
for m, p in mods.items():
    text = open(p).read()
    # A unit-test module at the end of a file (`#[cfg(..test..)] mod tests`) is left out: a
    # test may build a whole group to reach the code it tests; the layers are production code's.
    t = re.search(r'^#\[cfg\([^\n]*\btest\b[^\n]*\)\]\s*\nmod tests \{', text, re.M)
    if t: text = text[:t.start()]
    code = '\n'.join(l.split('//')[0] for l in text.splitlines())
    out = set()
    # expand `use crate::{a::.., b}` groups
    for g in re.finditer(r'crate::\{([^;]*?)\}\s*;', code, re.S):
        for item in re.findall(r'(?:^|[,{]\s*)([a-z_]+)(?=::|\s*[,}]|$)', g.group(1)):
            out.add(item)
    for t in re.findall(r'crate::([a-z_]+)', code):
        out.add(t)
    # Re-exported names, alone or in a `use crate::{..}` group.
    for t in re.findall(r'crate::([A-Z]\w*)', code):
        if t in reexports: out.add(reexports[t])
    for g in re.finditer(r'crate::\{([^;]*?)\}\s*;', code, re.S):
        for t in re.findall(r'(?:^|[,{]\s*)([A-Z]\w*)(?=\s*[,}]|$)', g.group(1)):
            if t in reexports: out.add(reexports[t])
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
       and (m in lower or m.startswith('emulated') or m.startswith('sys'))]
bad_cycles = [c for c in cycles if handles & set(c)]
# The operating system's calls (src/sys/: one place per OS) are a leaf that every layer uses:
# the wrappers of the calls themselves name no other module of the crate, and nothing under
# sys/ (the native backend included) names the emulation.
leaves = {'sys/unix', 'sys/linux/epoll'}
bad += [(m, t) for m, ts in edges.items() for t in ts
        if (m in leaves and not t.startswith('sys')) or (m.startswith('sys') and t.startswith('emulated'))]
for m, t in bad:
    print(f'LAYERS: {m} imports {t}')
for c in bad_cycles:
    print(f'LAYERS: a cycle through the handles: {c}')
# A source's shared words are the token protocol's: only its own module touches them (their
# fields are private there; this catches an atomic op on one of those names anywhere else).
SOURCE_OWNER = os.path.join('src', 'emulated', 'protocol', 'source.rs')
source_fields = r'\.(holder|leader|watcher|line_head|deputy|stuck|quiet_claim|claimed_at|hold_ns|ready_on_arm|claims)(\[[^]]*\])?\.(load|store|swap|compare_exchange\w*|fetch_\w+)\('
touches = []
for p in files:
    if os.path.relpath(p, root) == SOURCE_OWNER: continue
    code = strip_comments(open(p).read())
    for n, line in enumerate(code.splitlines(), 1):
        if re.search(source_fields, line):
            touches.append(f'{os.path.relpath(p, root)}:{n}: {line.strip()}')
for t in touches:
    print(f'LAYERS: a source\'s shared field touched outside {SOURCE_OWNER}: {t}')
sys.exit(1 if bad or bad_cycles or touches else 0)
