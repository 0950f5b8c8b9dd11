"""The ``vispe`` console script: ``vispe``, ``vispe -h``, ``vispe --version`` and an unknown command are answered
from the table below and the text of vispe/__init__.py; a command is handed to ``vispe.cli.main``.

This module sits beside the package, not in it: importing anything under ``vispe`` runs ``vispe/__init__.py``, which
imports torch and timm and registers vispe's timm names, seconds before a help text could be printed. The table is
``vispe.cli.commands()`` written out (tests/test_package.py checks that they agree).
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path

#: (command, what it does), in the order and words of ``vispe.cli.commands()``, the shipped sweeps' commands included
COMMANDS: tuple[tuple[str, str], ...] = (
    ('train', 'train from a config (tools/train.py)'),
    ('test', 'test a checkpoint and print its metrics (tools/test.py)'),
    ('eval-resolution', 'evaluate a checkpoint at unseen resolutions (tools/eval_resolution.py)'),
    ('eval-points', 'evaluate a point-cloud checkpoint at unseen point counts and scales'),
    ('eval-video', 'evaluate a video checkpoint at unseen frame counts and frame sizes'),
    ('eval-cameras', 'evaluate a multi-view checkpoint at unseen camera settings'),
    ('eval-generation', 'sample a diffusion checkpoint at unseen resolutions and score it'),
    ('eval-patch-shift', 'evaluate a classifier checkpoint on inputs shifted by fractions of a patch'),
    ('infer', 'classify image files with a trained image classifier, top-k class names (tools/infer.py)'),
    ('compare', 'train and compare encodings on shapes2d (tools/compare_encodings.py)'),
    ('demo', "the README's demo: three encodings on shapes2d position (tools/demo.py)"),
    ('demo-points', 'the point-cloud demo (tools/demo_points.py)'),
    ('demo-cameras', 'the camera-encoding demo (tools/demo_cameras.py)'),
    ('demo-dit', 'the DiT demo (tools/demo_dit.py)'),
    ('infer-points', 'classify point clouds or meshes with a trained point model'),
    ('compare-results', "merge several runs' sweep results into one table and figure"),
    ('show-encoding', 'draw what encodings do: similarity maps, relative kernels (tools/show_encoding.py)'),
    ('benchmark', 'time a training step per encoding; mixed sizes, scaling, Runner throughput'),
    ('benchmark-fps', "time vispe's farthest-point sampling against open3d's"),
    ('configs', 'list the shipped configs (names any command takes as CONFIG)'),
)

#: ``__version__ = '...'`` as vispe/__init__.py (the one place the version is written) and setup.py read it
VERSION_LINE = re.compile(r"^__version__ = '([^']+)'$", re.M)


def version() -> str:
    """``vispe.__version__``, read from the text of the vispe/__init__.py that ``import vispe`` would run."""
    spec = importlib.util.find_spec('vispe')  # finds the package without running it
    if spec is None or spec.origin is None:
        raise SystemExit('error: the vispe package is not importable here; install it with pip install . in a checkout')
    found = VERSION_LINE.search(Path(spec.origin).read_text(encoding='utf-8'))
    if found is None:
        raise SystemExit(f"error: {spec.origin} has no line __version__ = '...'")
    return found.group(1)


def usage(commands: Sequence[tuple[str, str]] = COMMANDS) -> str:
    width = max(len(name) for name, _ in commands)
    lines = [f'  {name:<{width}}  {about}' for name, about in commands]
    return (
        'usage: vispe COMMAND [ARGS ...]   (vispe COMMAND -h for its flags; vispe --version)\n\ncommands:\n'
        + '\n'.join(lines)
    )


def unknown_command(name: str, commands: Sequence[tuple[str, str]] = COMMANDS) -> str:
    """The error for a command that is not listed: the usage, then the command and the nearest names."""
    close = difflib.get_close_matches(name, [command for command, _ in commands], n=3, cutoff=0.5)
    hint = f'; did you mean {" or ".join(close)}?' if close else ''
    return f'{usage(commands)}\n\nerror: unknown command {name!r}{hint}'


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ('-h', '--help'):
        print(usage())
        sys.exit(0 if args else 2)
    if args[0] == '--version':
        print(f'vispe {version()}')
        return
    if args[0] not in dict(COMMANDS):
        sys.exit(unknown_command(args[0]))
    from vispe.cli import main as run  # torch, timm and the command's own modules load from here on

    run(args)


if __name__ == '__main__':
    main()
