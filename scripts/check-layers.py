"""The layer gate of docs/architecture.md: draws the module imports of cuda-stream/src
(`crate::`, `super::` and `self::` paths, and paths through the crate root's re-exports; unit
tests at the end of a file are left out) and fails on a circle of modules or an import from a
lower layer to a higher one; and fails when a source file is missing from the layer table
(each file of a layer's folder named in its row, a file of a subfolder by the subfolder;
`mod.rs` is the folder itself). `--print` also prints the drawing."""
import re,os,sys,collections
root=os.path.join(os.path.dirname(os.path.abspath(__file__)),'..','cuda-stream','src')
PRINT='--print' in sys.argv
# Bottom to top, as docs/architecture.md has them.
LAYERS=['ffi','call','device','event','stream','host_fn','graph','completion','cudarc','memory','kernel','profiling','python','testing']
mods={}
for dp,dn,fn in os.walk(root):
    for f in fn:
        if f.endswith('.rs'):
            p=os.path.join(dp,f); rel=os.path.relpath(p,root)[:-3]
            if rel.endswith('/mod') : rel=rel[:-4]
            if rel=='lib': rel=''
            mods[rel.replace('/','::')]=open(p).read()
names=set(mods)
def strip(src):
    src=re.sub(r'//[^\n]*','',src)
    src=re.sub(r'#\[cfg\(test\)\]\s*mod tests \{.*','',src,flags=re.S)  # unit tests at file end
    return src
# root re-exports: name -> module
reexp={}
for m in re.finditer(r'pub use ([a-z_:]+)::\{?([^;]*?)\}?;',strip(mods[''])):
    base=m.group(1)
    for item in re.split(r'[,\s]+',m.group(2)):
        item=item.strip()
        if item and item!='self': reexp[item]=base
        if item=='self': reexp[base.split('::')[-1]]=base
def resolve(path):
    parts=path.split('::')
    if parts[0] in reexp and '::'.join(parts[:1]) not in names:
        parts=reexp[parts[0]].split('::')+parts[1:]
    for i in range(len(parts),0,-1):
        c='::'.join(parts[:i])
        if c in names: return c
    return None
def expand(prefix, body):
    out=[]
    depth=0; cur=''
    for ch in body:
        if ch=='{': depth+=1
        if ch=='}': depth-=1
        if ch==',' and depth==0: out.append(cur); cur=''
        else: cur+=ch
    out.append(cur)
    res=[]
    for o in out:
        o=o.strip()
        if not o: continue
        if '{' in o:
            a=o[:o.index('{')].rstrip(':'); res+=expand(prefix+'::'+a if a else prefix, o[o.index('{')+1:o.rindex('}')])
        else: res.append(prefix+'::'+o.split(' as ')[0] if o!='self' else prefix)
    return res
edges=collections.defaultdict(set)
for m,src in mods.items():
    s=strip(src)
    # A parent's facade (`pub use self::child::Item;`) re-exports, it does not depend.
    s=re.sub(r'(?m)^pub(\(crate\))? use self::[^;]*;','',s)
    parent='::'.join(m.split('::')[:-1])
    paths=[]
    for mm in re.finditer(r'\b(crate|super|self)::(\{[^;]*\}|[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*(?:::\{[^;]*?\})?)',s):
        head,rest=mm.group(1),mm.group(2)
        base={'crate':'','super':parent,'self':m}[head]
        if '{' in rest:
            pre=rest[:rest.index('{')].rstrip(':')
            for p in expand(pre, rest[rest.index('{')+1:rest.rindex('}')]): paths.append((base,p.strip(':')))
        else: paths.append((base,rest))
    for base,p in paths:
        full=(base+'::'+p).strip(':') if base else p
        t=resolve(full)
        if t is not None and t!=m and t!='': edges[m].add(t)
if PRINT:
    for m in sorted(mods):
        if m: print(f"{m:28} -> {' '.join(sorted(edges[m]))}")
def layer(m):
    return LAYERS.index(m.split('::')[0])
unknown=[m for m in mods if m and m.split('::')[0] not in LAYERS]
upward=[(m,t) for m in mods if m and m not in unknown for t in edges[m] if t.split('::')[0] in LAYERS and layer(t)>layer(m)]
index={};low={};st=[];on=set();sccs=[];i=[0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v]=low[v]=i[0];i[0]+=1;st.append(v);on.add(v)
    for w in edges[v]:
        if w not in index: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],index[w])
    if low[v]==index[v]:
        c=[]
        while True:
            w=st.pop();on.discard(w);c.append(w)
            if w==v:break
        if len(c)>1: sccs.append(c)
for v in list(mods):
    if v not in index: sc(v)
failed=False
for m in unknown:
    print(f'check-layers: {m} belongs to no layer (add it to LAYERS and docs/architecture.md)'); failed=True
for m,t in upward:
    print(f'check-layers: upward import {m} -> {t}'); failed=True
for c in sccs:
    print('check-layers: circle of modules: '+' -> '.join(sorted(c))); failed=True
# Every source file in the layer table: a row is `| # | name | `files` | what it is | may use |`.
doc=open(os.path.join(root,'..','..','docs','architecture.md')).read()
rows={m.group(1):m.group(2) for m in re.finditer(r'(?m)^\| (?:\d+|–) \| [^|]+ \| `([^`]+)` \| (.*) \| [^|]* \|$',doc)}
unlisted=[]
for dp,dn,fn in os.walk(root):
    for f in fn:
        rel=os.path.relpath(os.path.join(dp,f),root)
        parts=rel.split('/')
        if not f.endswith('.rs') or rel=='lib.rs':
            continue
        if len(parts)==1:
            if rel not in rows: unlisted.append(rel)
            continue
        row=rows.get(parts[0]+'/')
        named=parts[1] if len(parts)==2 else parts[1]+'/'
        if row is None or (named!='mod.rs' and f'`{named}' not in row):
            unlisted.append(rel)
for rel in sorted(unlisted):
    print(f'check-layers: cuda-stream/src/{rel} is missing from the layer table of docs/architecture.md'); failed=True
if failed: sys.exit(1)
print(f'check-layers: {len(mods)-1} modules, {sum(len(e) for e in edges.values())} imports, no circle, no upward import, every file in the layer table')
