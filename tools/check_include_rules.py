#!/usr/bin/env python3
"""The include rules of docs/architecture.md as code (ctest `rules.includes`).

Dependencies point downwards only:
  app/, ui/      include only engine/runtime, engine/mesh and engine/core of the engine (plus ui/,
                 app/ and third-party headers); never kernels/.
  bench/         the benchmark commands: may include models' and kernels' public headers, never a
                 `*_internal.h`.
  kernels/       include nothing of engine/ but engine/core.
  engine/core    includes nothing of kernels/ and no model or other engine layer.
  everyone       a `*_internal.h` is included only from its own directory (tests aside).
Reach: the headers an app/ or ui/ source reaches through the repository's includes, transitively,
                 are runtime, mesh and core headers only (plus ui/, app/ and third-party ones): a
                 runtime header that includes a model or kernel header is a door left open.
Docs and headers name no path outside the repository (/work/..., ../shared/...).
Every document a source file or a document cites (a path ending in .md, e.g. `docs/cube3d.md`)
exists in the repository, relative to the root or to the citing file.
Links: app/ and ui/ link (CMake target_link_libraries) only the runtime, mesh, core, the renderer
and third-party libraries: never a kernel library, a model layer or the whole engine.

Usage: check_include_rules.py [ROOT]   (default: the repository root). Prints every violation as
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
    if src_layer in ('app', 'ui'):
        if inc_layer == 'kernels':
            return f'{src_layer}/ must not include kernels/ (ask engine/runtime)'
        if inc_layer.startswith('engine/') and inc_layer not in (
                'engine/runtime', 'engine/mesh', 'engine/core'):
            return f'{src_layer}/ includes only engine/runtime, engine/mesh and engine/core'
        if inc_layer == 'bench' and src_layer == 'ui':
            return 'ui/ must not include bench/'
    if src_layer == 'kernels' and inc_layer.startswith('engine/') and inc_layer != 'engine/core':
        return 'kernels/ include nothing of engine/ but engine/core'
    if src_layer == 'engine/core':
        if inc_layer == 'kernels':
            return 'engine/core must not include kernels/'
        if inc_layer.startswith('engine/') and inc_layer != 'engine/core':
            return 'engine/core must not include another engine layer'
        if inc_layer in ('ui', 'app', 'bench'):
            return 'engine/core must not include front ends'
    if src_layer.startswith('engine/') and inc_layer in ('ui', 'app', 'bench'):
        return 'engine/ must not include front ends or benchmarks'
    if src_layer == 'kernels' and inc_layer in ('ui', 'app', 'bench'):
        return 'kernels/ must not include front ends or benchmarks'
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


FRONT_END_REACH = ('engine/runtime', 'engine/mesh', 'engine/core', 'ui', 'app')


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


def scan(root):
    violations = []
    includes = {}
    names = document_names(root)
    for top in ('app', 'ui', 'bench', 'kernels', 'engine', 'tools', 'tests', 'installer', 'scripts',
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
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    violations = scan(root)
    for v in violations:
        print(v)
    if violations:
        print(f'{len(violations)} include-rule violation(s)', file=sys.stderr)
        return 1
    print('include rules: ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
