#!/usr/bin/env python3
"""The include rules of docs/architecture.md as code (ctest `rules.includes`).

Dependencies point downwards only. The folders, top to bottom: app/; ui/ and bench/; engine/;
kernels/; core/. A folder includes only folders below it (and itself):
  app/, ui/      include only engine/runtime, engine/mesh and core/ (plus ui/, app/ and third-party
                 headers); never kernels/.
  bench/         the benchmark commands: may include models' and kernels' public headers, never a
                 `*_internal.h`.
  kernels/       include core/ and nothing of engine/.
  core/          includes nothing of kernels/, engine/ or a front end.
  everyone       a `*_internal.h` is included only from its own directory (tests aside).
Reach: the headers an app/ or ui/ source reaches through the repository's includes, transitively,
                 are runtime, mesh and core headers only (plus ui/, app/ and third-party ones): a
                 runtime header that includes a model or kernel header is a door left open.
Docs and headers name no path outside the repository (/work/..., ../shared/...).
Every document a source file or a document cites (a path ending in .md, e.g. `docs/cube3d.md`)
exists in the repository, relative to the root or to the citing file.
Links: app/ and ui/ link (CMake target_link_libraries) only the runtime, mesh, core, the renderer
and third-party libraries: never a kernel library, a model layer or the whole engine.

Usage: check_include_rules.py [--graph] [ROOT]   (default: the repository root); --graph first
prints the folders' dependency drawing (one arrow a line with its number of includes). Prints every violation as
FILE:LINE: rule: the include, and exits 1 when there is any.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_EXT = ('.h', '.hpp', '.cpp', '.cc', '.cu', '.cuh', '.inc')
OUTSIDE_PATH = re.compile(r'(?<![\w.])(/work/[\w./-]+|\.\./shared/[\w./-]*)')
CITED_DOC = re.compile(r'(?<![\w./-])((?:[\w-]+/)*[\w-]+\.md)(?![\w/-])')
LINK = re.compile(r'target_link_libraries\s*\(([^)]*)\)', re.S)
# What a front end (app/, ui/) may not link: the kernels, the model layers, the whole engine.
FRONT_END_FORBIDDEN_LINKS = {
    'tessera_kernels', 'tessera_kernels_ref', 'tessera_kernels_cuda', 'tessera_shape',
    'tessera_diffusion', 'tessera_text', 'tessera_weights', 'tessera_engine', 'tessera_bench'}


# The folders' heights: an include from a folder to a higher one is an arrow pointing up.
FOLDER_RANK = {'core': 0, 'kernels': 1, 'engine': 2, 'ui': 3, 'bench': 3, 'app': 4}


def top_of(path):
    return path.split('/')[0]


def layer_of(path):
    parts = path.split('/')
    if parts[0] == 'engine' and len(parts) > 2:
        return 'engine/' + parts[1]
    return parts[0]


def check_include(src, inc):
    """The rule `src` breaks by including `inc` (repository-relative paths), or None."""
    src_layer = layer_of(src)
    inc_layer = layer_of(inc)
    if inc.endswith('_internal.h') and os.path.dirname(inc) != os.path.dirname(src) \
            and src_layer != 'tests':
        return 'a *_internal.h is included only from its own directory'
    src_top, inc_top = top_of(src), top_of(inc)
    if src_top in FOLDER_RANK and inc_top in FOLDER_RANK and src_top != inc_top \
            and FOLDER_RANK[inc_top] >= FOLDER_RANK[src_top]:
        return f'{src_top}/ sits below {inc_top}/: an include may only point down'
    if src_layer in ('app', 'ui'):
        if inc_layer == 'kernels':
            return f'{src_layer}/ must not include kernels/ (ask engine/runtime)'
        if inc_layer.startswith('engine/') and inc_layer not in ('engine/runtime', 'engine/mesh'):
            return f'{src_layer}/ includes only engine/runtime, engine/mesh and core/'
    return None


def check_links(rel, text):
    """Violations of the link rule in CMake file `rel` (repository-relative) holding `text`."""
    if rel.split('/')[0] not in ('app', 'ui'):
        return []
    out = []
    for m in LINK.finditer(text):
        line = text.count('\n', 0, m.start()) + 1
        body = re.sub(r'#[^\n]*', ' ', m.group(1))
        for token in body.split():
            if token in FRONT_END_FORBIDDEN_LINKS:
                out.append(f'{rel}:{line}: a front end links only the runtime, mesh and core '
                           f'(not {token})')
    return out


def cited_documents(rel, line, root, names):
    """The documents `line` of `rel` cites that are not in the repository. A path is looked up
    from the root and from the citing file's folder; a bare name (`RESULTS.md`) anywhere in
    `names`, the names of the repository's documents."""
    missing = []
    here = os.path.dirname(rel)
    for m in CITED_DOC.finditer(line):
        doc = m.group(1)
        if os.path.exists(os.path.join(root, doc)) or os.path.exists(os.path.join(root, here, doc)):
            continue
        if '/' not in doc and doc in names:
            continue
        missing.append(doc)
    return missing


def document_names(root):
    names = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith('.') and not d.startswith('build')]
        names.update(n for n in filenames if n.endswith('.md'))
    return names


FRONT_END_REACH = ('engine/runtime', 'engine/mesh', 'core', 'ui', 'app')


def reach_violations(includes):
    """Violations of the reach rule, given `includes`: repository-relative source path -> the
    repository headers it includes directly. One line per front-end file and forbidden header,
    with the chain of includes that gets there."""
    out = []
    for src in sorted(includes):
        if layer_of(src) not in ('app', 'ui'):
            continue
        parent = {src: None}
        queue = [src]
        while queue:
            cur = queue.pop(0)
            for inc in includes.get(cur, ()):
                if inc in parent:
                    continue
                parent[inc] = cur
                if layer_of(inc) not in FRONT_END_REACH:
                    chain = [inc]
                    while parent[chain[-1]] is not None:
                        chain.append(parent[chain[-1]])
                    # A direct include is the include rule's to report.
                    if len(chain) > 2:
                        out.append(f'{src}:0: reaches {inc} (not a runtime, mesh or core header) '
                                   f'through ' + ' -> '.join(reversed(chain)))
                    continue
                queue.append(inc)
    return out


def folder_graph(includes):
    """The folders' dependency drawing: (from, to) -> how many includes, for the folders of
    FOLDER_RANK, each folder's own includes left out."""
    edges = {}
    for src, incs in includes.items():
        for inc in incs:
            a, b = top_of(src), top_of(inc)
            if a in FOLDER_RANK and b in FOLDER_RANK and a != b:
                edges[(a, b)] = edges.get((a, b), 0) + 1
    return edges


def draw(edges):
    """The drawing as text, one arrow a line, highest folder first; an arrow that points up says so."""
    lines = []
    for (a, b), n in sorted(edges.items(), key=lambda e: (-FOLDER_RANK[e[0][0]], e[0][0],
                                                             -FOLDER_RANK[e[0][1]], e[0][1])):
        up = '   <- POINTS UP' if FOLDER_RANK[b] >= FOLDER_RANK[a] else ''
        lines.append(f'{a + "/":9s} -> {b + "/":9s} {n:5d} includes{up}')
    return '\n'.join(lines)


def includes_of(root):
    includes = {}
    scan(root, includes)
    return includes


def scan(root, includes=None):
    violations = []
    if includes is None:
        includes = {}
    names = document_names(root)
    for top in ('app', 'ui', 'bench', 'kernels', 'engine', 'core', 'tools', 'tests', 'installer', 'scripts',
                'docs', 'assets', '.'):
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        walker = os.walk(base) if top != '.' else [(root, [], os.listdir(root))]
        for dirpath, dirnames, filenames in walker:
            dirnames[:] = [d for d in dirnames if not d.startswith('.') and not d.startswith('build')]
            for name in filenames:
                full = os.path.join(dirpath, name)
                if not os.path.isfile(full):
                    continue
                rel = os.path.relpath(full, root).replace(os.sep, '/')
                if name == 'CMakeLists.txt':
                    with open(full, encoding='utf-8', errors='replace') as f:
                        violations.extend(check_links(rel, f.read()))
                    continue
                is_source = name.endswith(SOURCE_EXT)
                is_doc = name.endswith('.md') or (is_source and name.endswith(('.h', '.hpp', '.cuh')))
                if not (is_source or name.endswith('.md')):
                    continue
                if top == 'tests' and 'fixtures' in rel:
                    continue
                cites = top not in ('tools', '.') or rel == 'README.md'
                try:
                    with open(full, encoding='utf-8', errors='replace') as f:
                        lines = f.readlines()
                except OSError as e:
                    violations.append(f'{rel}:0: unreadable: {e}')
                    continue
                for number, line in enumerate(lines, 1):
                    if is_source and top != '.':
                        m = INCLUDE.match(line)
                        if m and os.path.isfile(os.path.join(root, m.group(1))):
                            includes.setdefault(rel, []).append(m.group(1))
                        if m:
                            rule = check_include(rel, m.group(1))
                            if rule:
                                violations.append(f'{rel}:{number}: {rule}: "{m.group(1)}"')
                    if cites:
                        for doc in cited_documents(rel, line, root, names):
                            violations.append(f'{rel}:{number}: cites a document that is not in '
                                              f'the repository: {doc}')
                    if is_doc and rel != 'tools/check_include_rules.py':
                        m = OUTSIDE_PATH.search(line)
                        if m:
                            violations.append(
                                f'{rel}:{number}: names a path outside the repository: {m.group(1)}')
    violations.extend(reach_violations(includes))
    return violations


def main():
    args = [a for a in sys.argv[1:] if a != '--graph']
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    includes = {}
    violations = scan(root, includes)
    if '--graph' in sys.argv[1:]:
        print(draw(folder_graph(includes)))
    for v in violations:
        print(v)
    if violations:
        print(f'{len(violations)} include-rule violation(s)', file=sys.stderr)
        return 1
    print('include rules: ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
