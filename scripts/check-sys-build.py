"""Runs cuda-stream-sys's compiled build script directly, as Cargo would, in the situations a
user meets, and checks what it does: no Cargo rebuild of anything is involved, so switching
toolkits, libclang and targets costs nothing.

  scripts/check-sys-build.py                   the situations below (./dev test)
  scripts/check-sys-build.py --bindings        bindgen's bindings of the pinned 13.0 toolkit
                                               against the committed ones (./dev lint)
  scripts/check-sys-build.py --bindings --update   writes the regenerated ones

Needs CUDA_PATH (the pinned CUDA 13.0 toolkit); the CUDA 12 situation needs CUDA12_ROOT (a
toolkit other than 13.0, whose bindings bindgen must generate) and is skipped without it."""
import json, os, subprocess, sys, tempfile

repo = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
manifest_dir = os.path.join(repo, 'cuda-stream-sys')
prebuilt = os.path.join(manifest_dir, 'prebuilt')
CUDA_VARS = ['CUDA_PATH', 'CUDA_HOME', 'CUDA_ROOT', 'CUDA_TOOLKIT_ROOT_DIR', 'DOCS_RS', 'LIBCLANG_PATH',
             'CUDA_STREAM_SYS_BINDGEN', 'PYTHON']


def build_script():
    """The build script binary of cuda-stream-sys, compiled by Cargo if it is not yet."""
    output = subprocess.run(['cargo', 'build', '-p', 'cuda-stream-sys', '--message-format=json', '--quiet'],
                            cwd=repo, check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in output.splitlines():
        message = json.loads(line)
        if (message.get('reason') == 'compiler-artifact' and 'cuda-stream-sys' in message['package_id']
                and message['target']['kind'] == ['custom-build']):
            return message['filenames'][0]
    sys.exit('error: cargo reported no build script of cuda-stream-sys')


def host():
    lines = subprocess.run(['rustc', '-vV'], check=True, stdout=subprocess.PIPE, text=True).stdout
    return next(line.split(': ')[1] for line in lines.splitlines() if line.startswith('host: '))


class Run:
    """One run of the build script in a fresh OUT_DIR."""

    def __init__(self, script, env):
        self.out_dir = tempfile.mkdtemp(prefix='cuda-stream-sys-out-')
        base = {k: v for k, v in os.environ.items() if k not in CUDA_VARS and not k.startswith('CARGO_FEATURE_')}
        triple = host()
        # bindgen reads the rustc (RUSTC, in a build script: CARGO_CFG_TARGET_ARCH) to choose the
        # Rust version and edition it writes for.
        base.update(OUT_DIR=self.out_dir, CARGO_MANIFEST_DIR=manifest_dir, TARGET=triple, HOST=triple,
                    RUSTC=os.environ.get('RUSTC', 'rustc'), CARGO_CFG_TARGET_ARCH=triple.split('-')[0],
                    CARGO_CFG_TARGET_OS='linux', CARGO_CFG_TARGET_POINTER_WIDTH='64')
        base.update(env)
        done = subprocess.run([script], cwd=manifest_dir, env=base, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        self.code, self.stdout, self.stderr = done.returncode, done.stdout, done.stderr

    def bindings(self):
        with open(os.path.join(self.out_dir, 'bindings.rs')) as f:
            return f.read()


failures = []


def check(name, condition, run):
    print(f"{'ok' if condition else 'FAILED'}: {name}")
    if not condition:
        failures.append(name)
        print(f'  exit {run.code}\n  stdout: {run.stdout[-1500:]}\n  stderr: {run.stderr[-1500:]}')


def committed(per_thread):
    name = 'bindings-13000-per-thread.rs' if per_thread else 'bindings-13000.rs'
    return os.path.join(prebuilt, name)


def read(path):
    with open(path) as f:
        return f.read()


def situations(script, cuda13, cuda12):
    no_libclang = {'LIBCLANG_PATH': '/nonexistent/libclang'}
    for per_thread in (False, True):
        feature = {'CARGO_FEATURE_PER_THREAD_DEFAULT_STREAM': '1'} if per_thread else {}
        run = Run(script, {'CUDA_PATH': cuda13, **no_libclang, **feature})
        check(f"CUDA 13.0 {'per-thread ' if per_thread else ''}builds on the committed bindings without libclang",
              run.code == 0 and run.bindings() == read(committed(per_thread)), run)
    check('a successful build prints no cargo:warning', 'cargo:warning' not in run.stdout, run)
    check('PATH is no rebuild trigger', 'rerun-if-env-changed=PATH\n' not in run.stdout, run)

    path = os.pathsep.join([os.path.join(cuda13, 'bin'), '/usr/bin', '/bin'])
    run = Run(script, {'PATH': path})
    nvcc = os.path.join(cuda13, 'bin', 'nvcc')
    check('a toolkit found through PATH is tracked by its nvcc, not by PATH',
          run.code == 0 and f'cargo:rerun-if-changed={nvcc}\n' in run.stdout
          and 'rerun-if-env-changed=PATH\n' not in run.stdout, run)

    run = Run(script, {'CUDA_PATH': cuda13, 'CARGO_FEATURE_DYNAMIC_LINKING': '1'})
    lib = os.path.join(cuda13, 'lib')
    check('dynamic-linking: an rpath for its own tests, RPATH metadata for dependents',
          run.code == 0 and f'cargo:rustc-link-arg=-Wl,-rpath,{lib}\n' in run.stdout
          and f'cargo:rpath={lib}\n' in run.stdout, run)

    run = Run(script, {'CUDA_PATH': cuda13, 'CARGO_CFG_TARGET_OS': 'macos'})
    check('another target is refused: Linux only, and prebuilt-bindings for check and doc',
          run.code != 0 and 'builds for Linux only' in run.stderr and 'prebuilt-bindings' in run.stderr
          and 'panicked' not in run.stderr, run)

    run = Run(script, {'DOCS_RS': '1', 'CARGO_CFG_TARGET_OS': 'macos'})
    check('docs.rs: the committed bindings, nothing linked, no toolkit',
          run.code == 0 and run.bindings() == read(committed(False)) and 'rustc-link-lib' not in run.stdout, run)

    fixed = [root for root in ('/usr/local/cuda', '/opt/cuda')
             if os.path.exists(os.path.join(root, 'include/cuda_runtime_api.h'))]
    if fixed:
        print(f'skipped: no toolkit at all ({fixed[0]} holds one)')
    else:
        run = Run(script, {'PATH': '/usr/bin:/bin', 'PYTHON': '/nonexistent/python3'})
        check('no toolkit: one message with every place tried, the fix, and prebuilt-bindings for check and doc',
              run.code != 0 and 'could not find a CUDA toolkit' in run.stderr and '$CUDA_PATH: not set' in run.stderr
              and 'prebuilt-bindings' in run.stderr and 'panicked' not in run.stderr, run)

    if cuda12:
        run = Run(script, {'CUDA_PATH': cuda12, **no_libclang})
        check('CUDA 12 without libclang: the install hint, no panic',
              run.code != 0 and 'apt-get install libclang-dev' in run.stderr and 'LIBCLANG_PATH' in run.stderr
              and 'panicked' not in run.stderr, run)
    else:
        print('skipped: CUDA 12 without libclang (CUDA12_ROOT not set)')


def bindings(script, cuda13, update):
    for per_thread in (False, True):
        mode = 'per-thread' if per_thread else 'legacy'
        feature = {'CARGO_FEATURE_PER_THREAD_DEFAULT_STREAM': '1'} if per_thread else {}
        run = Run(script, {'CUDA_PATH': cuda13, 'CUDA_STREAM_SYS_BINDGEN': '1', **feature})
        if run.code != 0:
            sys.exit(f'error: the build script failed:\n{run.stderr}')
        generated, path = run.bindings(), committed(per_thread)
        if 'pub const CUDART_VERSION: u32 = 13000;' not in generated:
            sys.exit('error: the toolkit in CUDA_PATH is not CUDA 13.0; the committed bindings are from 13.0')
        name = os.path.relpath(path, repo)
        if update:
            with open(path, 'w') as f:
                f.write(generated)
            print(f'updated {name}')
        elif generated != read(path):
            print(f'error: {name} differs from what bindgen generates now; run scripts/check-bindings.sh --update',
                  file=sys.stderr)
            failures.append(name)
        else:
            print(f'ok: {name} matches the generated bindings ({mode})')


def main():
    cuda13 = os.environ.get('CUDA_PATH')
    if not cuda13:
        sys.exit('error: set CUDA_PATH to the pinned CUDA 13.0 toolkit (./dev env)')
    script = build_script()
    if '--bindings' in sys.argv:
        bindings(script, cuda13, '--update' in sys.argv)
    else:
        situations(script, cuda13, os.environ.get('CUDA12_ROOT'))
    if failures:
        sys.exit(f'{len(failures)} failed')


main()
