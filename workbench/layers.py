"""The layers of the house and the imports each may make: the one table that docs/design.md renders (through
workbench/generated_docs.py) and tests/test_layers.py enforces over every module's imports.

A layer holds modules by dotted prefix (``'vispe.encodings'`` holds every module under vispe/encodings/;
``'vispe'`` alone is the package's ``__init__``, its public API). A module may import its own layer and the layers in
its ``may_import``; ``BELOW`` stands for every layer on a lower floor. Floors only rise: a layer may import nothing on
its own floor or above but itself, so no import runs back up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: in ``may_import``: every layer on a lower floor
BELOW = 'below'


@dataclass(frozen=True)
class Layer:
    floor: int
    modules: tuple[str, ...]
    may_import: tuple[str, ...]
    role: str


#: layer name -> its floor, modules, the layers it may import and what it is for; from the top floor down
LAYERS: dict[str, Layer] = {
    'workbench': Layer(
        10,
        ('workbench', 'tools'),
        (BELOW,),
        "the project's own apparatus and scripts, run from a checkout (GPU check, leaderboards, fingerprint, "
        'generated docs, parity recorders, tools/*.py); nothing in vispe imports them',
    ),
    'commands': Layer(9, ('vispe.cli', 'vispe.__main__'), (BELOW,), 'the `vispe` command: one subcommand per tool'),
    'experiments': Layer(8, ('vispe.experiments',), (BELOW,), 'experiments over many runs (compare)'),
    'sweeps': Layer(7, ('vispe.sweeps',), (BELOW,), 'evaluation sweeps, one kind per file in the SWEEPS registry'),
    'bench': Layer(7, ('vispe.bench',), (BELOW,), 'the speed and memory benchmark'),
    'api': Layer(
        6,
        ('vispe',),
        ('backbones', 'attention', 'encodings', 'engine', 'positions'),
        'the public API: `import vispe` (create_model, apply_encoding, build_encoding, ...)',
    ),
    'tasks': Layer(
        6,
        ('vispe.tasks',),
        ('backbones', 'attention', 'engine', 'encodings', 'positions', 'datasets', 'foundation'),
        'mmengine models that own losses and predictions (classification, diffusion, localization)',
    ),
    'backbones': Layer(
        5,
        ('vispe.backbones',),
        ('attention', 'engine', 'encodings', 'positions', 'foundation'),
        'ViT (timm), DiT, point, multi-view and video transformers; they never import data',
    ),
    'evaluation': Layer(
        5,
        ('vispe.evaluation',),
        ('engine', 'encodings', 'positions', 'datasets', 'foundation'),
        'trained models from their run folders, inference, reports, generation metrics; models come through the '
        'registry, never from backbones',
    ),
    'attention': Layer(
        4,
        ('vispe.attention',),
        ('encodings', 'positions', 'foundation'),
        'the one attention module every backbone uses, calling the encodings through their hooks',
    ),
    'engine': Layer(
        4,
        ('vispe.engine',),
        ('encodings', 'positions', 'datasets', 'foundation'),
        'training on mmengine: configs, runner, checkpoints, optimizer, hooks, metrics',
    ),
    'encodings': Layer(
        3,
        ('vispe.encodings',),
        ('positions', 'kernels', 'foundation'),
        'the positional encodings, one family per file, in the ENCODINGS registry',
    ),
    'positions': Layer(
        2,
        ('vispe.positions', 'vispe.flex'),
        ('foundation',),
        'token positions built once per forward pass; FlexAttention helpers',
    ),
    'datasets': Layer(
        2,
        ('vispe.datasets',),
        ('foundation',),
        'data sets and transforms, in the DATASETS and TRANSFORMS registries',
    ),
    'foundation': Layer(
        1,
        (
            'vispe.registry',
            'vispe.layout',
            'vispe.geometry',
            'vispe.checks',
            'vispe.files',
            'vispe.optional',
        ),
        (),
        'registries, mixed-size layouts, camera geometry, file and optional-dependency helpers',
    ),
    'kernels': Layer(
        1,
        ('vispe.kernels',),
        (),
        'fused kernels (Triton) behind the encodings, each with its PyTorch reference; kernels/select.py chooses',
    ),
}

ROOT = Path(__file__).resolve().parents[1]

#: where the modules of the house live, relative to the repository root
ROOTS = ('vispe', 'workbench', 'tools')


def allowed(layer: str) -> set[str]:
    """The layers that a module of ``layer`` may import, itself included."""
    own = LAYERS[layer]
    names = {layer}
    for name in own.may_import:
        names |= {n for n, other in LAYERS.items() if other.floor < own.floor} if name == BELOW else {name}
    return names


def layer_of(module: str) -> str | None:
    """The layer holding ``module`` (a dotted name), by its longest matching prefix; None when none holds it."""
    best, length = None, -1
    for name, layer in LAYERS.items():
        for prefix in layer.modules:
            hit = module == prefix or (module.startswith(prefix + '.') and prefix != 'vispe')
            if hit and len(prefix) > length:
                best, length = name, len(prefix)
    return best


def paths(layer: Layer) -> str:
    """The layer's modules as paths: ``vispe/encodings/``, ``vispe/flex.py``, ``vispe/__init__.py``."""
    out = []
    for prefix in layer.modules:
        path = prefix.replace('.', '/')
        if prefix == 'vispe':
            out.append('`vispe/__init__.py`')
        else:
            out.append(f'`{path}/`' if (ROOT / path).is_dir() else f'`{path}.py`')
    return ', '.join(out)


def floors() -> list[tuple[int, list[str]]]:
    """(floor, its layers in table order), from the top floor down."""
    by_floor: dict[int, list[str]] = {}
    for name, layer in LAYERS.items():
        by_floor.setdefault(layer.floor, []).append(name)
    return sorted(by_floor.items(), reverse=True)


def diagram() -> str:
    """The floors as a plain-text picture (a code block): layers side by side on a floor, the package's edge drawn."""
    lines = ['', '```text']
    for floor, names in floors():
        outside = all(not m.startswith('vispe') for n in names for m in LAYERS[n].modules)
        row = f'{floor:>2}  ' + ''.join(f'[ {n} ]'.ljust(18) for n in names)
        lines.append(row.rstrip() + ('   outside the package' if outside else ''))
        if outside:
            lines.append('    ' + '-' * 20 + ' vispe/: nothing below imports what is above ' + '-' * 6)
    return '\n'.join([*lines, '```', ''])


def table() -> str:
    """The layers as a Markdown table: floor, layer, its modules, the layers it may import, what it holds."""
    rows = ['', '| floor | layer | modules | may import | what it holds |', '|---|---|---|---|---|']
    for floor, names in floors():
        for name in names:
            layer = LAYERS[name]
            may = [f'`{m}`' for m in layer.may_import if m != BELOW]
            if BELOW in layer.may_import:
                may.insert(0, 'every layer below')
            rows.append(
                f'| {floor} | `{name}` | {paths(layer)} | {", ".join(may) or "nothing of vispe"} | {layer.role} |'
            )
    return '\n'.join([*rows, ''])
