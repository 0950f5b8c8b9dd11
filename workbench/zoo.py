"""The model zoo (``models/``): one folder per trained model, so that evaluation can be tried without training.

Each ``models/<name>/`` holds

- ``<name>.pth``: a slim checkpoint, the weights, the run's provenance (epoch, seed, dataset meta) and its config as
  data (``vispe.engine.config_record``), without the optimizer and scheduler state; it loads with
  ``torch.load(weights_only=True)``;
- ``config.py``: the config that trained it (as its checkpoint records it, minus the work_dir), for a user to name;
- ``metrics.json``: its accuracy per resolution and strategy (tools/eval_resolution.py's schema) and the
  checkpoint's sha256;
- ``README.md``: the card: what it is, how it was trained, its numbers, how to evaluate and retrain it.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
from collections.abc import Sequence
from typing import Any

import torch

from vispe.engine.checkpoint import load_checkpoint, state_dict_of
from vispe.engine.config_files import configs_dir
from vispe.engine.config_record import RECORD_KEY, recorded_config
from vispe.engine.run_meta import META_KEYS
from vispe.evaluation.outputs import write_json, write_text
from vispe.evaluation.trained_model import resolution_label
from vispe.experiments.compare import Run, final_checkpoint, markdown_table
from vispe.files import sha256
from workbench.leaderboard_report import Stats, best_strategy, card_note

#: provenance kept from mmengine's checkpoint meta (the rest is training state), the config as data (never its
#: Python text), and what the model was trained on (RunMetaHook's train_resolution / train_points, which the sweeps
#: read)
KEPT_META = ('epoch', 'iter', 'seed', 'experiment_name', 'mmengine_version', 'dataset_meta', RECORD_KEY, *META_KEYS)


def checkout_path(config: str) -> str:
    """How a checkout names a config (tools/train.py's argument): 'vit/x.py' (a shipped config's name) ->
    'configs/vit/x.py'; a file path stays as it is."""
    if os.path.isfile(config) or os.path.isabs(config) or config.startswith('configs/'):
        return config
    return f'configs/{config}' if os.path.isfile(os.path.join(configs_dir(), config)) else config


def model_name(task: str, encoding: str) -> str:
    """'rope_mixed+peg' on 'position' -> 'vit_tiny_rope_mixed-peg_shapes2d_position' (the configs/vit/ naming); a
    one-line spec's options join with '-': 'rope_dinov3:rescale=none' -> 'vit_tiny_rope_dinov3-rescale-none_...'."""
    for sep in '+:=,':
        encoding = encoding.replace(sep, '-')
    return f'vit_tiny_{encoding}_shapes2d_{task}'


def slim_checkpoint(src: str, dst: str) -> dict[str, Any]:
    """Write ``src``'s weights and provenance to ``dst`` (no optimizer / scheduler / message-hub state)."""
    ckpt = load_checkpoint(src)
    meta = {k: v for k, v in ckpt.get('meta', {}).items() if k in KEPT_META}
    slim = {'meta': meta, 'state_dict': state_dict_of(ckpt, src)}
    os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
    torch.save(slim, dst)
    return slim


def trained_config(checkpoint: str):
    """The config that trained ``checkpoint``, as the checkpoint records it (read as data, never run), without its
    machine-specific work_dir."""
    cfg = recorded_config(
        load_checkpoint(checkpoint),
        checkpoint,
        'export runs trained by this version of vispe, which records it as data',
    )
    cfg.pop('work_dir', None)
    return cfg


def describe_backbone(backbone: dict[str, Any], params: int) -> str:
    """'vit_tiny_patch16_224 (depth 4, embed_dim 64, ...; 139k parameters)' from a backbone config."""
    keys = ('img_size', 'patch_size', 'embed_dim', 'depth', 'num_heads')
    overrides = ', '.join(f'{k} {backbone[k]}' for k in keys if k in backbone)
    size = f'{params / 1e3:.0f}k parameters'
    return f'`{backbone.get("model_name", "ViT")}` ({overrides + "; " if overrides else ""}{size})'


def export_model(
    checkpoint: str,
    results: dict[str, Any],
    task: str,
    encoding: str,
    seed: int,
    train_command: str,
    out_root: str,
    note: str | None = None,
    role: str | None = None,
) -> str:
    """Write ``out_root/<name>/`` for one finished run (its final checkpoint and its eval_resolution results).

    ``note`` is card text placed under the accuracy table. ``role`` says what a model outside the leaderboard is
    for (it goes into metrics.json and the zoo index); without one the model is a leaderboard run."""
    name = model_name(task, encoding)
    folder = os.path.join(out_root, name)
    os.makedirs(folder, exist_ok=True)
    ckpt_path = os.path.join(folder, f'{name}.pth')
    slim = slim_checkpoint(checkpoint, ckpt_path)
    cfg = trained_config(checkpoint)
    header = f'# The config that trained {name} (seed {seed}), as its checkpoint records it.\n'
    write_text(os.path.join(folder, 'config.py'), header + cfg.pretty_text, None)  # the zoo's own folder
    resolutions = list(dict.fromkeys(resolution_label(r['resolution']) for r in results['results']))
    params = sum(v.numel() for v in slim['state_dict'].values())  # vispe keeps derived tables out of state dicts
    metrics = {
        'name': name,
        'task': task,
        'encoding': encoding,
        'seed': seed,
        'epochs': slim['meta'].get('epoch'),
        'params': params,
        'train_resolution': results['train_resolution'],
        'metric': results['metric'],
        'checkpoint': os.path.basename(ckpt_path),
        'sha256': sha256(ckpt_path),
        'results': results['results'],
    }
    if role:
        metrics['role'] = role
    write_json(os.path.join(folder, 'metrics.json'), metrics, None)
    rel = os.path.join(os.path.basename(os.path.normpath(out_root)), name)  # as run from the repo root
    val_size = cfg.get('val_dataloader', {}).get('dataset', {}).get('num_samples')
    val_set = f'the {val_size:,} validation images' if val_size else 'the validation set'
    card = [
        f'# {name}',
        '',
        f'{describe_backbone(cfg.model.backbone, params)} with the `{encoding}` positional encoding, trained on '
        f'procedural shapes2d `{task}` at {results["train_resolution"]} px for {metrics["epochs"]} epochs, '
        f'seed {seed}.',
        '',
        f'## Top-1 accuracy (%) of this checkpoint on {val_set}, per test resolution',
        '',
        markdown_table(results['results'], resolutions),
        '',
    ]
    if note:
        card += [note, '']
    card += [
        '## Use',
        '',
        '```bash',
        f'python tools/eval_resolution.py {rel}/config.py {rel}/{name}.pth --resolutions {" ".join(resolutions)} '
        f'--out outputs/eval/{name}',
        '```',
        '',
        'Retrain:' if role else 'Retrain (the same run; tools/leaderboard.py trains all of them):',
        '',
        '```bash',
        train_command,
        '```',
        '',
        f'`{name}.pth`: weights and training provenance only (no optimizer state), sha256 `{metrics["sha256"]}`; '
        'it loads with `torch.load(weights_only=True)`.',
    ]
    write_text(os.path.join(folder, 'README.md'), '\n'.join(card) + '\n', None)
    return folder


def shipped_models(root: str) -> dict[str, dict[str, Any]]:
    """name -> metrics.json content of every model folder under ``root``."""
    found = {}
    for path in sorted(glob.glob(os.path.join(root, '*', 'metrics.json'))):
        with open(path) as f:
            found[os.path.basename(os.path.dirname(path))] = json.load(f)
    return found


def write_model_zoo(
    runs: Sequence[Run],
    seed: int,
    stats: Stats,
    resolutions: Sequence[str],
    report: str,
    plot_path: str,
    out_root: str,
) -> list[str]:
    """A model folder (``export_model``) for each run of ``seed``, plus ``out_root/README.md``: the
    leaderboard's table and plot and an index of the models."""
    folders, index = [], []
    for run in runs:
        if run.seed != seed:
            continue
        encoding = run.encoding
        ckpt = final_checkpoint(run)
        if ckpt is None:
            raise FileNotFoundError(f'{run.work_dir} has no final checkpoint: train it first (collect() does)')
        with open(os.path.join(run.work_dir, 'eval', 'results.json')) as f:
            results = json.load(f)
        options = shlex.join(run.cfg_options)  # a literal value (a spec with several options) stays one word
        folders.append(
            export_model(
                ckpt,
                results,
                run.task,
                encoding,
                seed,
                f'python tools/train.py {checkout_path(run.config)} --cfg-options {options}',
                out_root,
                card_note(stats, run.task, encoding, resolutions),
            )
        )
        best = best_strategy(stats, run.task, encoding, resolutions[0])
        values = {resolution_label(r['resolution']): r['value'] for r in results['results'] if r['strategy'] == best}
        name = model_name(run.task, encoding)
        index.append(
            f'| [{name}]({name}/README.md) | {run.task} | {encoding} | {best} | '
            + ' | '.join(f'{values.get(res, float("nan")):.1f}' for res in resolutions)
            + ' |'
        )
    shutil.copyfile(plot_path, os.path.join(out_root, 'leaderboard.png'))
    listed = {model_name(run.task, run.encoding) for run in runs}
    others = [
        f'| [{name}]({name}/README.md) | {m["task"]} | {m["encoding"]} | {m.get("role", "")} |'
        for name, m in shipped_models(out_root).items()
        if name not in listed
    ]
    page = [
        '# vispe model zoo',
        '',
        'Tiny ViTs trained by `make leaderboard` (tools/leaderboard.py): every 2D encoding on the procedural shapes2d '
        f'tasks with one schedule. The leaderboard is mean ± std over seeds; the folders hold the seed-{seed} '
        'checkpoints, each with its config, its metrics and a card saying how to evaluate it '
        '(`tools/eval_resolution.py`) without training.',
        '',
        '![leaderboard](leaderboard.png)',
        '',
        report,
        '',
        f"## Models (seed {seed}; accuracy of that checkpoint with its encoding's best strategy)",
        '',
        '| model | task | encoding | strategy | ' + ' | '.join(f'{r} px' for r in resolutions) + ' |',
        '|---|---|---|---|' + '---|' * len(resolutions),
        *index,
    ]
    if others:
        page += ['', '## Other models', '', '| model | task | encoding | role |', '|---|---|---|---|', *others]
    write_text(os.path.join(out_root, 'README.md'), '\n'.join(page) + '\n', None)  # the zoo's index
    return folders
