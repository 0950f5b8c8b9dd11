"""The ``vispe`` command (``python -m vispe``): one subcommand per tool, the same flags and outputs as tools/*.py in a
checkout, working from an installed vispe (configs are files or shipped configs' names; ``vispe configs`` lists
them). The console script enters through vispe_launcher, which answers ``-h`` and ``--version`` without importing
vispe and lists the commands as ``commands()`` does here."""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Sequence

from vispe.optional import MissingExtra

#: subcommand -> (module in vispe.cli, what it does); the sweeps' commands (eval-resolution, eval-points, ...) are
#: not listed here but registered with their sweeps (vispe.sweeps.registry.SWEEPS), and listed after SWEEPS_AFTER
COMMANDS = {
    'train': ('train', 'train from a config (tools/train.py)'),
    'test': ('test', 'test a checkpoint and print its metrics (tools/test.py)'),
    'infer': ('infer', 'classify image files with a trained image classifier, top-k class names (tools/infer.py)'),
    'compare': ('compare_encodings', 'train and compare encodings on shapes2d (tools/compare_encodings.py)'),
    'demo': ('demo', "the README's demo: three encodings on shapes2d position (tools/demo.py)"),
    'demo-points': ('demo_points', 'the point-cloud demo (tools/demo_points.py)'),
    'demo-cameras': ('demo_cameras', 'the camera-encoding demo (tools/demo_cameras.py)'),
    'demo-dit': ('demo_dit', 'the DiT demo (tools/demo_dit.py)'),
    'infer-points': ('infer_points', 'classify point clouds or meshes with a trained point model'),
    'compare-results': ('compare_results', "merge several runs' sweep results into one table and figure"),
    'show-encoding': (
        'show_encoding',
        'draw what encodings do: similarity maps, relative kernels (tools/show_encoding.py)',
    ),
    'benchmark': ('benchmark', 'time a training step per encoding; mixed sizes, scaling, Runner throughput'),
    'benchmark-fps': ('benchmark_fps', "time vispe's farthest-point sampling against open3d's"),
    'configs': ('', 'list the shipped configs (names any command takes as CONFIG)'),
}


SWEEPS_AFTER = 'test'


def commands() -> dict[str, tuple[str, str]]:
    """Every subcommand -> (its module: a name in vispe.cli, another module's dotted path, or '' when it has none,
    what it does): COMMANDS with each registered sweep's command after SWEEPS_AFTER, in registration order."""
    from vispe.sweeps.registry import SWEEPS

    def module(main) -> str:
        return '' if callable(main) else main.removeprefix('vispe.cli.')

    sweeps = {command: (module(kind.main), kind.about) for command, kind in SWEEPS.by_command().items()}
    listed: dict[str, tuple[str, str]] = {}
    for name, entry in COMMANDS.items():
        listed[name] = entry
        if name == SWEEPS_AFTER:
            listed.update(sweeps)
    return listed


def usage() -> str:
    listed = commands()
    width = max(map(len, listed))
    lines = [f'  {name:<{width}}  {about}' for name, (_, about) in listed.items()]
    return (
        'usage: vispe COMMAND [ARGS ...]   (vispe COMMAND -h for its flags; vispe --version)\n\ncommands:\n'
        + '\n'.join(lines)
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ('-h', '--help'):
        print(usage())
        sys.exit(0 if args else 2)
    if args[0] == '--version':
        from vispe import __version__

        print(f'vispe {__version__}')
        return
    name, rest = args[0], args[1:]
    listed = commands()
    if name not in listed:
        close = difflib.get_close_matches(name, listed, n=3, cutoff=0.5)
        hint = f'; did you mean {" or ".join(close)}?' if close else ''
        sys.exit(f'{usage()}\n\nerror: unknown command {name!r}{hint}')
    if name == 'configs':
        from vispe.engine.config_files import configs_dir, shipped_configs

        print(f'# in {configs_dir()}')
        print('\n'.join(c for c in shipped_configs() if not c.startswith('_base_/')))
        return
    from vispe.sweeps.registry import SWEEPS

    sweep = SWEEPS.by_command().get(name)
    run = sweep.command_main() if sweep else importlib.import_module(f'vispe.cli.{COMMANDS[name][0]}').main
    try:
        code = run(rest, prog=f'vispe {name}')
    except MissingExtra as err:  # a 3D feature without open3d: the one line that names the extra
        sys.exit(f'error: {err}')
    if isinstance(code, int) and not isinstance(code, bool) and code:  # a command that returns its exit status
        sys.exit(code)


__all__ = ['COMMANDS', 'commands', 'main', 'usage']
