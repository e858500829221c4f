"""Prints the crate's module dependency graph (top-level modules, and the
submodules of agent/, fleet/, observe/, report/) from `use crate::…` paths,
ignoring #[cfg(test)] code, and reports any cycle.

Usage: modgraph.py [--markdown] [SRC]. With --markdown the graph is a
Markdown table (the copy in docs/developer/architecture.md, which
tests/unit/docs.rs holds to this output). Exit 1 on a cycle."""
import re, os, sys, collections

def top_idents(block):
    out, depth, cur = [], 0, ''
    for ch in block:
        if ch == '{': depth += 1
        elif ch == '}': depth -= 1
        if depth == 0 and ch not in '{}':
            cur += ch
        if depth == 0 and ch == ',':
            out.append(cur); cur = ''
        if depth == 1 and ch == '{' and not cur.strip():
            pass
    out.append(cur)
    return [re.match(r'\s*(\w+)', x).group(1) for x in out if re.match(r'\s*(\w+)', x)]

def uses(txt):
    res = set()
    for m in re.finditer(r'crate::(\{)?', txt):
        if m.group(1):
            depth, i = 1, m.end()
            while depth and i < len(txt):
                depth += {'{': 1, '}': -1}.get(txt[i], 0); i += 1
            res.update(top_idents(txt[m.end():i-1]))
        else:
            w = re.match(r'(\w+)', txt[m.end():])
            if w: res.add(w.group(1))
    return res

nested = {'agent', 'fleet', 'observe', 'report'}
deps = collections.defaultdict(set)
args = [a for a in sys.argv[1:] if a != '--markdown']
markdown = '--markdown' in sys.argv[1:]
src = args[0] if args else 'src'
for root, _, files in os.walk(src):
    for f in files:
        if not f.endswith('.rs') or 'tests' in f: continue
        p = os.path.join(root, f)
        parts = os.path.relpath(p, src)[:-3].split('/')
        if parts[0] in ('main', 'cli', 'lib'): continue
        if parts[-1] == 'mod': parts = parts[:-1]
        txt = re.split(r'#\[cfg\(test\)\]', open(p).read())[0]
        txt = re.sub(r'//[^\n]*', '', txt)
        me = parts[0]
        for u in uses(txt):
            if u != me: deps[me].add(u)
        if me in nested and len(parts) > 1:
            # crate::{me::{…}} inside a grouped import
            for m in re.finditer(r'\b' + me + r'::\{', txt):
                depth, i = 1, m.end()
                while depth and i < len(txt):
                    depth += {'{': 1, '}': -1}.get(txt[i], 0); i += 1
                for n in top_idents(txt[m.end():i-1]):
                    if n != parts[1] and n != 'self':
                        deps[me + '::' + parts[1]].add(me + '::' + n)
            # sibling uses: super::x and crate::me::x
            for m in re.finditer(r'(?:super|crate::' + me + r')::(\{)?', txt):
                if m.group(1):
                    depth, i = 1, m.end()
                    while depth and i < len(txt):
                        depth += {'{': 1, '}': -1}.get(txt[i], 0); i += 1
                    names = top_idents(txt[m.end():i-1])
                else:
                    w = re.match(r'(\w+)', txt[m.end():])
                    names = [w.group(1)] if w else []
                for n in names:
                    if n != parts[1] and n != 'self':
                        deps[me + '::' + parts[1]].add(me + '::' + n)
if markdown:
    print('| module | uses |')
    print('|---|---|')
    for k in sorted(deps): print(f'| `{k}` | {", ".join("`" + d + "`" for d in sorted(deps[k]))} |')
else:
    for k in sorted(deps): print(f'{k:22} -> {", ".join(sorted(deps[k]))}')
# cycle check
def cyc():
    state = {}
    def dfs(n, path):
        state[n] = 1
        for d in deps.get(n, ()):
            if state.get(d) == 1: return path + [d]
            if not state.get(d):
                r = dfs(d, path + [d])
                if r: return r
        state[n] = 2
    for n in list(deps):
        if not state.get(n):
            r = dfs(n, [n])
            if r: return r
c = cyc()
print(('\n' if markdown else '') + ('cycle: ' + ' -> '.join(c) if c else 'no cycle'))
sys.exit(1 if c else 0)
