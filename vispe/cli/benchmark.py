r"""Time one training step (forward + backward) of a ViT, or of one attention layer, per positional encoding.

    vispe benchmark --model vit_small_patch16_224 --img-size 224 --batch-size 8 \
        --encodings ape_learned rope_axial irpe irpe:mode=bias --repeats 10 [--level attention] [--device cuda] \
        [--amp] [--compile] [--scaling [224 448 672]]
    vispe benchmark --mixed-sizes --model vit_tiny_patch16_224 --img-size 64 --batch-size 32 \
        --encodings rope_mixed peg --model-kwargs patch_size=8 depth=4
    vispe benchmark --throughput configs/vit/vit_tiny_rope_mixed_shapes2d_position.py [--iters 30] \
        [--rounds 3] [--amp] [--compile] [--device cuda] [--cfg-options train_dataloader.batch_size=32]

Prints the configuration and a table (median ms, min ms, ratio to the baseline's median, peak MB, SDPA kernel)
and writes JSON. ``--mixed-sizes`` times a fixed-size batch against padded and packed batches of mixed sizes at the
same token count, per encoding (vispe/bench/mixed.py). ``--scaling`` runs every size and adds how each encoding's
cost grows against the baseline's. ``--throughput CONFIG`` instead trains the config's model through the mmengine
Runner and through a plain PyTorch loop, side by side, and prints images/s and their ratio
(vispe/bench/throughput.py). Method and caveats: vispe/bench/measure.py (and subjects.py, timing.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from mmengine.config import DictAction

from vispe.backbones.dit import dit_preset_args
from vispe.bench.measure import (
    SCALING_SIZES,
    BenchmarkConfig,
    default_out_path,
    measure,
    measure_scaling,
    normalize_img_size,
    settings_id,
)
from vispe.bench.mixed import mixed_markdown, run_mixed_benchmark
from vispe.bench.reports import Targets, print_report, print_scaling, print_throughput, summary_markdown, write_report
from vispe.bench.subjects import LEVELS, MULTIVIEW, VIDEO, baseline_of, build_subjects, is_dit, resolve_encodings
from vispe.bench.throughput import runner_vs_loop
from vispe.bench.timing import COMPILE_SCOPES
from vispe.evaluation.outputs import OutputConflict, check_target, run_id


def parse_args(argv: Sequence[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        '--model',
        default='vit_small_patch16_224',
        help="any timm ViT name, a DiT: 'DiT-S/2', 'DiT-Ti/4', 'multiview' (the camera encodings' tiny model) or "
        "'video' (the video configs' tiny space-time ViT; --model-kwargs num_frames=16 ...)",
    )
    p.add_argument('--img-size', type=int, nargs='+', default=[224], metavar='N', help='S, or H W')
    p.add_argument('--batch-size', type=int, default=8)
    p.add_argument(
        '--encodings',
        nargs='+',
        default=None,
        help="encoding names ('a+b' combines two; 'name:key=value,key=value' sets arguments, e.g. "
        "'irpe:mode=bias' or 'irpe:on=qkv+ape_learned'); default: every image (2D) one. The baseline is added. "
        "'timm:<name>' / 'vispe:<name>': a whole model by timm name, timm's own or vispe's (model level); "
        "'sdpa_bias': SDPA with a learned (1, H, N, N) bias (attention level)",
    )
    p.add_argument(
        '--baseline',
        default=None,
        help="ratio denominator (default: ape_learned, ape_sincos for DiTs; 'sdpa' at attention level)",
    )
    p.add_argument('--level', choices=LEVELS, default='model')
    p.add_argument('--warmup', type=int, default=3, help='untimed steps per encoding')
    p.add_argument('--repeats', type=int, default=10, help='timed interleaved rounds')
    p.add_argument('--threads', type=int, default=None, help='torch.set_num_threads (default: leave as is)')
    p.add_argument('--device', choices=('cpu', 'cuda'), default='cpu')
    p.add_argument('--amp', action='store_true', help='forward under bf16 autocast (backward outside it)')
    p.add_argument('--compile', action='store_true', help='nn.Module.compile each row before its warm-up')
    p.add_argument(
        '--attention-kernel',
        choices=('auto', 'sdpa', 'flex'),
        default='auto',
        help='where bias encodings (irpe, alibi2d) and mixed batches attend: SDPA with a materialised mask, '
        "FlexAttention, or 'auto' (vispe.flex's rule)",
    )
    p.add_argument(
        '--compile-scope',
        choices=COMPILE_SCOPES,
        default='model',
        help="with --compile: the whole model, or each transformer block ('blocks': one compilation reused by every "
        'block, a fraction of the compile time)',
    )
    p.add_argument(
        '--scaling',
        type=int,
        nargs='*',
        default=None,
        metavar='S',
        help=f'run at each square size (default {" ".join(map(str, SCALING_SIZES))}) and report how each '
        'encoding grows against the baseline; replaces --img-size',
    )
    p.add_argument('--seed', type=int, default=0)
    p.add_argument(
        '--mixed-sizes',
        action='store_true',
        help='time fixed vs padded vs packed batches of mixed image sizes at the same token count, per encoding',
    )
    p.add_argument(
        '--model-kwargs',
        nargs='+',
        default=[],
        metavar='KEY=VALUE',
        help='timm model arguments, e.g. patch_size=8 depth=4 embed_dim=192',
    )
    p.add_argument(
        '--throughput',
        metavar='CONFIG',
        default=None,
        help='compare Runner and plain-loop training throughput of this config instead (uses --warmup, --device, '
        "--amp, --compile, --seed is the config's)",
    )
    p.add_argument('--iters', type=int, default=30, help='--throughput: timed iterations per round')
    p.add_argument('--rounds', type=int, default=3, help='--throughput: rounds, alternating which loop goes first')
    p.add_argument(
        '--cfg-options', nargs='+', action=DictAction, default=None, help='--throughput: override config entries'
    )
    p.add_argument(
        '--summarize',
        nargs='+',
        metavar='JSON',
        default=None,
        help='print one markdown table of these reports (same rows: e.g. 224 and 448 px, eager and compiled)',
    )
    p.add_argument(
        '--out',
        default=None,
        help='JSON path (default outputs/benchmark/<model>_<size>_<level>_<settings hash>.json; a rerun of the same '
        'settings replaces its own report, any other existing file is refused without --force)',
    )
    p.add_argument(
        '--force',
        action='store_true',
        help="replace --out even when it holds another run's report or a JSON file vispe did not write (a file that "
        'is not JSON is never written over)',
    )
    args = p.parse_args(argv)
    if len(args.img_size) not in (1, 2):
        p.error(f'--img-size takes one int or two (H W), got {len(args.img_size)}')
    if args.repeats < 1 or args.warmup < 0 or args.batch_size < 1:
        p.error('--repeats and --batch-size must be >= 1, --warmup >= 0')
    return args


def claim(path: str | Path, run: str, force: bool) -> bool:
    """Whether the report may go to ``path`` (vispe.evaluation.outputs' rule); says why not on stderr. Checked
    before anything is timed, and again when the report is written."""
    try:
        check_target(path, 'benchmark', run, force, form='json')
    except OutputConflict as err:
        print(f'benchmark.py: error: {err}', file=sys.stderr)
        return False
    return True


def write(report: dict, path: str | Path, run: str, force: bool) -> int:
    try:
        written = write_report(report, path, run, force=force)
    except OutputConflict as err:  # a file that appeared while the benchmark ran
        print(f'benchmark.py: error: {err}', file=sys.stderr)
        return 2
    print(f'wrote {written}')
    return 0


def model_problem(args: argparse.Namespace) -> str | None:
    """The one-line error for a model name neither timm nor vispe knows (with the closest names) or a --model-kwargs
    item without '='; None when both are fine. ``args.model_kwargs`` becomes a dict."""
    import difflib

    import timm

    from vispe.backbones.timm_interop import default_cfgs

    bad = [kv for kv in args.model_kwargs if '=' not in kv]
    if bad:
        return f'--model-kwargs takes KEY=VALUE pairs, got {bad[0]!r} (e.g. --model-kwargs patch_size=8 depth=4)'
    pairs = (kv.split('=', 1) for kv in args.model_kwargs)
    args.model_kwargs = {key: DictAction._parse_iterable(value) for key, value in pairs}
    if args.model in (MULTIVIEW, VIDEO):  # the camera encodings' multi-view and the video tiny models
        return None
    if is_dit(args.model):  # vispe's DiT presets ('DiT-S/2')
        try:
            dit_preset_args(args.model)
        except ValueError as error:
            return f'--model: {error}'
        return None
    name = args.model.split('.')[0]
    if args.model.startswith(('hf-hub:', 'local-dir:')) or timm.is_model(name) or name in default_cfgs:
        return None
    close = difflib.get_close_matches(name, sorted({*timm.list_models(), *default_cfgs}), n=3, cutoff=0.6)
    hint = f'did you mean {", ".join(map(repr, close))}?' if close else "timm.list_models('vit_*') lists them"
    return f'--model {args.model!r}: no such timm or vispe model; {hint}'


def throughput(args: argparse.Namespace, targets: Targets) -> int:
    """--throughput: Runner against a plain loop on one config."""
    keys = ('throughput', 'iters', 'warmup', 'rounds', 'cfg_options', 'amp', 'compile', 'device', 'threads')
    run = run_id({k: getattr(args, k) for k in keys})
    name = Path(args.throughput).stem
    path = args.out or Path('outputs') / 'benchmark' / f'throughput_{name}_{args.device}_{run}.json'
    if not claim(path, run, args.force):
        return 2
    try:
        report = runner_vs_loop(
            args.throughput,
            iters=args.iters,
            warmup=args.warmup,
            rounds=args.rounds,
            cfg_options=args.cfg_options,
            amp=args.amp,
            compile=args.compile,
            device=args.device,
            target=targets.throughput,
        )
    except (ValueError, FileNotFoundError) as err:  # a missing config, bad counts or no CUDA
        print(f'benchmark.py: error: {err}', file=sys.stderr)
        return 2
    print_throughput(report)
    return write(report, path, run, args.force)


def mixed_sizes(cfg: BenchmarkConfig, args: argparse.Namespace, targets: Targets) -> int:
    """--mixed-sizes: fixed vs padded vs packed batches per encoding."""
    encodings = cfg.encodings or ['ape_learned', 'rope_mixed']
    run = settings_id(cfg, mode='mixed_sizes', threads=args.threads)
    h, w = cfg.img_size
    path = args.out or Path('outputs') / 'benchmark' / f'mixed_sizes_{cfg.model.replace("/", "-")}_{h}x{w}_{run}.json'
    if not claim(path, run, args.force):
        return 2
    try:
        report = run_mixed_benchmark(cfg, encodings, targets.mixed(cfg.device) if targets.mixed else None)
    except (ValueError, TypeError) as err:
        print(f'benchmark.py: error: {err}', file=sys.stderr)
        return 2
    print(mixed_markdown(report))
    return write(report, path, run, args.force)


def main(argv: Sequence[str] | None = None, prog: str | None = None, targets: Targets | None = None) -> int:
    """Run the command; ``targets``: what to judge the figures against (none: reported, not judged)."""
    args = parse_args(argv, prog)
    targets = targets or Targets()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.throughput:
        return throughput(args, targets)
    if args.summarize:
        reports = []
        for path in args.summarize:  # a --scaling report holds one report per size
            report = json.loads(Path(path).read_text())
            reports.extend(report.get('reports', [report]))
        print(summary_markdown(reports, targets.encoding), end='')
        return 0
    problem = model_problem(args)
    if problem:
        print(f'benchmark.py: error: {problem}', file=sys.stderr)
        return 2
    cfg = BenchmarkConfig(
        model=args.model,
        img_size=normalize_img_size(args.img_size),
        batch_size=args.batch_size,
        encodings=args.encodings,
        baseline=args.baseline,
        level=args.level,
        warmup=args.warmup,
        repeats=args.repeats,
        device=args.device,
        seed=args.seed,
        amp=args.amp,
        compile=args.compile,
        compile_scope=args.compile_scope,
        attention_kernel=args.attention_kernel,
        model_kwargs=dict(args.model_kwargs),
    )
    if args.mixed_sizes:
        return mixed_sizes(cfg, args, targets)
    sizes = None if args.scaling is None else (args.scaling or list(SCALING_SIZES))
    try:  # bad names, sizes or arguments: vispe's message says what to fix, before anything is timed
        if sizes is None:
            subjects = build_subjects(cfg)
        else:
            for size in sizes:
                build_subjects(replace(cfg, img_size=(size, size), encodings=[baseline_of(cfg)], compile=False))
            resolve_encodings(cfg.encodings, baseline_of(cfg), cfg.level, cfg.model)
    except (ValueError, TypeError) as err:
        print(f'benchmark.py: error: {err}', file=sys.stderr)
        return 2
    if sizes is None:
        run = settings_id(cfg, threads=args.threads)
        default = default_out_path(cfg.model, cfg.img_size, cfg.level, run)
    else:
        run = settings_id(cfg, mode='scaling', sizes=sizes, threads=args.threads)
        default = default_out_path(cfg.model, (sizes[0], sizes[0]), cfg.level, run)
        default = default.with_name(default.name.replace(f'_{sizes[0]}_', '_scaling_', 1))
    path = args.out or default
    if not claim(path, run, args.force):
        return 2
    if sizes is None:
        report = measure(cfg, subjects)
        print_report(report, targets.encoding)
    else:
        report = measure_scaling(cfg, sizes)
        print_scaling(report, targets.encoding)
    return write(report, path, run, args.force)
