"""The shared-state gate of docs/architecture.md: finds in cuda-stream/src every `static` and
`static mut` (at file level, inside functions, inside `thread_local!` blocks) and every struct
field or static whose type is a `Mutex<`, `RwLock<` or `Condvar`, and fails when one is not
named in the table of the section "Shared state and the lock order" (a name there is
`path: NAME`, the path under cuda-stream/src; a field is `Type.field`). It also fails when the
table names something the source no longer has (a static, or a field of that struct).
Items inside `#[cfg(test)]` modules (inline, or a module file and its children) are left out,
as the table says. `--print` lists what it found."""
import re, os, sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.normpath(os.path.join(here, '..', 'cuda-stream', 'src'))
doc_path = os.path.normpath(os.path.join(here, '..', 'docs', 'architecture.md'))
SECTION = '## Shared state and the lock order'
PRINT = '--print' in sys.argv


def blank(src):
    """`src` with comments and the insides of string and char literals replaced by spaces
    (newlines kept, so offsets and line numbers stay)."""
    out = list(src)
    i, n = 0, len(src)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != '\n':
                out[k] = ' '

    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif src.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith('/*', j):
                    depth, j = depth + 1, j + 2
                elif src.startswith('*/', j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c in 'rb' and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == '_')) and \
                re.match(r'b?r#*"', src[i:]):
            m = re.match(r'b?r(#*)"', src[i:])
            end = src.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            wipe(i + m.end(), end - 1 - len(m.group(1)))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            wipe(i + 1, min(j, n))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}'), or a lifetime ('a, 'static).
            if i + 1 < n and src[i + 1] == '\\':
                j = src.find("'", i + 2)
                j = n if j < 0 else j
                wipe(i + 1, j)
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                wipe(i + 1, i + 2)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return ''.join(out)


def closing(text, at, open_ch='{', close_ch='}'):
    """The offset just past the bracket that closes the one at `at`."""
    depth = 0
    for j in range(at, len(text)):
        if text[j] == open_ch:
            depth += 1
        elif text[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def line_of(text, at):
    return text.count('\n', 0, at) + 1


def child_file(rel, name):
    """The file of module `name` declared in the file `rel` (relative to src), if there is one."""
    base = os.path.basename(rel)
    folder = os.path.dirname(rel) if base in ('mod.rs', 'lib.rs') else rel[:-3]
    for candidate in (os.path.join(folder, name + '.rs'), os.path.join(folder, name, 'mod.rs')):
        if os.path.exists(os.path.join(root, candidate)):
            return candidate
    return None


LOCK = re.compile(r'\b(?:Mutex|RwLock)\s*<|\bCondvar\b')
ATTRS = r'(?:\s*#\s*!?\s*\[[^\]]*\])*'
TEST_MOD = re.compile(r'#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]' + ATTRS + r'\s*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*([{;])')
MOD_FILE = re.compile(r'(?:^|[;{}\]\s])(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*;')
STATIC = re.compile(r"(?<![\w'])static\s+(mut\s+)?([A-Za-z_]\w*)\s*:")
STRUCT = re.compile(r'\bstruct\s+([A-Za-z_]\w*)')

sources, code = {}, {}
for dp, dn, fn in os.walk(root):
    for f in fn:
        if f.endswith('.rs'):
            rel = os.path.relpath(os.path.join(dp, f), root)
            sources[rel] = open(os.path.join(dp, f)).read()
            code[rel] = blank(sources[rel])

# Test-only code: inline `#[cfg(test)] mod x { .. }` ranges, and `#[cfg(test)] mod x;` files
# with every module they declare in turn.
test_ranges = {rel: [] for rel in code}
test_files = set()
for rel, text in code.items():
    for m in TEST_MOD.finditer(text):
        if m.group(2) == '{':
            brace = m.end(2) - 1
            test_ranges[rel].append((m.start(), closing(text, brace)))
        else:
            child = child_file(rel, m.group(1))
            if child:
                test_files.add(child)
grown = True
while grown:
    grown = False
    for rel in list(test_files):
        for m in MOD_FILE.finditer(code[rel]):
            child = child_file(rel, m.group(1))
            if child and child not in test_files:
                test_files.add(child)
                grown = True


def test_only(rel, at):
    return rel in test_files or any(a <= at < b for a, b in test_ranges[rel])


def thread_local_ranges(text):
    ranges = []
    for m in re.finditer(r'\bthread_local\s*!\s*\{', text):
        ranges.append((m.end() - 1, closing(text, m.end() - 1)))
    return ranges


def split_top(body):
    """`body` split at the commas outside any bracket, with each part's offset in `body`."""
    parts, depth, start = [], 0, 0
    for j, ch in enumerate(body):
        if ch in '<([{':
            depth += 1
        elif ch in '>)]}':
            # `->` in a fn pointer type is no bracket.
            if ch == '>' and j > 0 and body[j - 1] == '-':
                continue
            depth -= 1
        elif ch == ',' and depth == 0:
            parts.append((start, body[start:j]))
            start = j + 1
    parts.append((start, body[start:]))
    return parts


found = []     # (rel, name, kind, line): the items the table must name
existing = {}  # rel -> every static and every Type.field there (tests included), for stale names
for rel, text in sorted(code.items()):
    names = existing.setdefault(rel, set())
    locals_ = thread_local_ranges(text)
    for m in STATIC.finditer(text):
        name = m.group(2)
        names.add(name)
        if test_only(rel, m.start()):
            continue
        end = text.find('=', m.end())
        semi = text.find(';', m.end())
        stop = min(x for x in (end, semi, len(text)) if x >= 0)
        ty = text[m.end():stop]
        if any(a <= m.start() < b for a, b in locals_):
            kind = 'thread-local'
        elif m.group(1):
            kind = 'static mut'
        else:
            kind = 'static'
        if LOCK.search(ty):
            kind += ' lock'
        found.append((rel, name, kind, line_of(text, m.start())))
    for m in STRUCT.finditer(text):
        # The struct's body: the first `{` before any `;` or `(` (a unit or tuple struct).
        j, depth = m.end(), 0
        while j < len(text):
            ch = text[j]
            if ch == '<':
                depth += 1
            elif ch == '>' and text[j - 1] != '-':
                depth -= 1
            elif depth == 0 and ch in '{;(':
                break
            j += 1
        if j >= len(text) or text[j] != '{':
            continue
        body_end = closing(text, j)
        body = text[j + 1:body_end - 1]
        for offset, part in split_top(body):
            part_clean = re.sub(r'#\s*\[[^\]]*\]', ' ', part)
            fm = re.match(r'\s*(?:pub(?:\s*\([^)]*\))?\s+)?([A-Za-z_]\w*)\s*:(.*)$', part_clean, re.S)
            if not fm:
                continue
            field = m.group(1) + '.' + fm.group(1)
            names.add(field)
            at = j + 1 + offset
            if LOCK.search(fm.group(2)) and not test_only(rel, at):
                found.append((rel, field, 'field lock', line_of(text, at + len(part) - len(part.lstrip()))))

if PRINT:
    for rel, name, kind, line in found:
        print(f'{rel}:{line}: {name} ({kind})')

doc = open(doc_path).read()
start = doc.find('\n' + SECTION + '\n')
if start < 0:
    print(f'check-shared-state: docs/architecture.md has no section "{SECTION[3:]}"')
    sys.exit(1)
section = doc[start + 1:]
following = section.find('\n## ', 1)
section = section[:following] if following >= 0 else section
listed = set()
for row in re.finditer(r'(?m)^\|([^|\n]*)\|', section):
    for m in re.finditer(r'`([\w./-]+\.rs): ([A-Za-z_][\w.]*)`', row.group(1)):
        listed.add((m.group(1), m.group(2)))

failed = False
for rel, name, kind, line in found:
    if (rel, name) not in listed:
        print(f'check-shared-state: cuda-stream/src/{rel}:{line}: {name} ({kind}) is not in the table of '
              f'"{SECTION[3:]}" in docs/architecture.md: add a row `{rel}: {name}` saying what it protects, '
              f'who writes and reads it, and what may be held when taking it')
        failed = True
for rel, name in sorted(listed):
    if name not in existing.get(rel, set()):
        print(f'check-shared-state: docs/architecture.md names `{rel}: {name}`, which cuda-stream/src does not '
              f'have (no such static, and no such field of that struct): rename or remove its row')
        failed = True
if failed:
    sys.exit(1)
print(f'check-shared-state: {len(found)} statics, thread-locals and locks, each in the table '
      f'({len(listed)} names there, none stale)')
