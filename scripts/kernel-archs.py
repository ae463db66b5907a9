"""Reads a Cargo build's JSON messages (--message-format=json...) on stdin and says what each
package's kernels were built for: the CUDA_STREAM_KERNEL_ARCHS that cuda-stream-build set.

  cargo build --message-format=json-render-diagnostics | scripts/kernel-archs.py [--expect LIST] [--pass]

--expect LIST   fail unless every package that built kernels built exactly LIST (e.g. sm_80,compute_80),
                and at least one did
--pass          copy stdin to stdout, to sit in front of another reader of the messages"""
import json, sys

expect = sys.argv[sys.argv.index('--expect') + 1] if '--expect' in sys.argv else None
passing = '--pass' in sys.argv
built = {}
for line in sys.stdin:
    if passing:
        sys.stdout.write(line)
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if message.get('reason') != 'build-script-executed':
        continue
    archs = dict(message.get('env', [])).get('CUDA_STREAM_KERNEL_ARCHS')
    if archs is not None:
        built[message['package_id']] = archs
for package, archs in built.items():
    print(f'kernels of {package}: {archs}', file=sys.stderr)
if expect is not None:
    wrong = {package: archs for package, archs in built.items() if archs != expect}
    if not built or wrong:
        sys.exit(f'error: expected kernels built for {expect}; got {wrong or "no kernels"}')
