"""Outputs and gradients of every registered encoding in every backbone that serves it, for a refactor's
before/after check: the same seeds must give the same tensors, bit for bit.

    python workbench/fingerprint.py --out /tmp/before.pt          # on the old code
    python workbench/fingerprint.py --compare /tmp/before.pt      # on the new code: exit 1 naming what differs

Cases: the fuzz tests' backbone cases (tests/test_fuzz.py, derandomized, so the same draws every run) in eval and,
for image encodings, training with rpe2d positions; every resolution strategy of each encoding at larger, smaller
and non-square grids; a DiT per image encoding, DyPE's strategies at several diffusion times.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / 'tests')]

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_fuzz import IMAGE, VIDEO, build_case, fuzz, video_case  # noqa: E402

import vispe  # noqa: E402
from vispe.backbones import VideoTransformer  # noqa: E402
from vispe.backbones.dit import DiT  # noqa: E402
from vispe.encodings.build import encoding_class  # noqa: E402
from vispe.encodings.rotary_scaling import DYPE_STRATEGIES  # noqa: E402
from vispe.positions import RPE2D  # noqa: E402

EXAMPLES = 6


def record(store: dict, key: str, model: torch.nn.Module, out: torch.Tensor) -> None:
    """``out`` and the gradient of every parameter under a fixed loss of it."""
    store[f'{key}/out'] = out.detach().clone()
    model.zero_grad(set_to_none=True)
    out.float().square().sum().backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            store[f'{key}/grad/{name}'] = p.grad.detach().clone()


def fuzz_cases(store: dict, name: str) -> None:
    count = [0]

    @fuzz(EXAMPLES, shrink=False)
    @given(data=st.data())
    def run(data) -> None:
        case = build_case(name, data)
        k = f'{name}/fuzz{count[0]}'
        count[0] += 1
        record(store, k, case.model, case.model(*case.inputs))
        if name in IMAGE:
            h, w = case.grid
            model = case.model.train()
            model.position_sampler = RPE2D((h + 3, w + 2))
            torch.manual_seed(count[0])
            record(store, k + '/train', model, model(*case.inputs))

    run()
    if name in VIDEO:
        vcount = [0]

        @fuzz(EXAMPLES, shrink=False)
        @given(data=st.data())
        def run_video(data) -> None:
            case = video_case(name, data)
            k = f'{name}/video{vcount[0]}'
            vcount[0] += 1
            try:
                out = case.model(*case.inputs)
            except ValueError:  # a strategy the clip refuses (ape_learned's grid_sample): the refusal is recorded
                store[k + '/refused'] = torch.zeros(0)
                return
            record(store, k, case.model, out)

        run_video()


def strategy_cases(store: dict, name: str) -> None:
    cls = encoding_class(name)
    if 2 not in cls.ndims or cls.needs_cameras or not cls.strategies:
        return
    for strategy in cls.strategies:
        if strategy in DYPE_STRATEGIES:
            continue
        torch.manual_seed(0)
        model = vispe.create_model(
            'vit_tiny_patch16_224',
            encoding=name,
            img_size=(8, 12),
            patch_size=2,
            embed_dim=32,
            depth=2,
            num_heads=2,
            num_classes=3,
            reg_tokens=1,
        ).eval()
        for enc in model.modules():
            if isinstance(enc, vispe.Encoding) and type(enc).strategies:
                enc.strategy = strategy
        for size in ((8, 12), (16, 24), (4, 6), (20, 8)):
            x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(sum(size)))
            record(store, f'{name}/strategy/{strategy}/{size}', model, model(x))


def video_strategy_cases(store: dict, name: str) -> None:
    cls = encoding_class(name)
    if name not in VIDEO or not cls.strategies:
        return
    for strategy in cls.strategies:
        torch.manual_seed(0)
        model = VideoTransformer(
            num_classes=3,
            encoding=name,
            img_size=(8, 8),
            num_frames=4,
            patch_size=2,
            tubelet_size=2,
            embed_dim=48,
            depth=2,
            num_heads=2,
        ).eval()
        for enc in model.modules():
            if isinstance(enc, vispe.Encoding) and type(enc).strategies:
                enc.strategy = strategy
        for frames, size in ((4, 8), (8, 8), (4, 16), (12, 12)):
            x = torch.randn(2, 3, frames, size, size, generator=torch.Generator().manual_seed(frames * size))
            try:
                out = model(x)
            except ValueError:
                store[f'{name}/video-strategy/{strategy}/{frames}x{size}/refused'] = torch.zeros(0)
                continue
            record(store, f'{name}/video-strategy/{strategy}/{frames}x{size}', model, out)


def dit_cases(store: dict, name: str) -> None:
    cls = encoding_class(name)
    if name not in IMAGE:
        return
    for strategy in ('none', *[s for s in cls.strategies if s in DYPE_STRATEGIES]):
        torch.manual_seed(0)
        model = DiT(img_size=8, patch_size=2, embed_dim=32, depth=2, num_heads=2, num_classes=4, encoding=name)
        torch.manual_seed(1)
        for p in model.parameters():  # DiT zeroes its output layers: move every weight off its init
            p.data.add_(0.05 * torch.randn_like(p))
        model.eval()
        if strategy != 'none':
            for enc in model.modules():
                if isinstance(enc, vispe.Encoding) and type(enc).strategies:
                    enc.strategy = strategy
        g = torch.Generator().manual_seed(2)
        for size, level in (((8, 8), 0.5), ((16, 12), 0.9), ((16, 16), 0.1)):
            x = torch.randn(2, 3, *size, generator=g)
            t = torch.tensor([10.0, 500.0])
            out = model(x, t, torch.tensor([0, 3]), noise_level=torch.tensor(level))
            record(store, f'{name}/dit/{strategy}/{size}/{level}', model, out)


def fingerprint() -> dict:
    torch.use_deterministic_algorithms(True)
    store: dict = {}
    for name in vispe.list_encodings():
        fuzz_cases(store, name)
        strategy_cases(store, name)
        video_strategy_cases(store, name)
        dit_cases(store, name)
        print(f'{name}: {sum(k.startswith(name + "/") for k in store)} tensors', flush=True)
    return store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument('--out', type=Path, help='write the fingerprint here')
    group.add_argument('--compare', type=Path, help='compare with a fingerprint written before')
    args = parser.parse_args()
    torch.set_num_threads(1)
    store = fingerprint()
    if args.out:
        torch.save(store, args.out)
        print(f'{len(store)} tensors -> {args.out}')
        return 0
    before = torch.load(args.compare, weights_only=True)
    missing = sorted(set(before) ^ set(store))
    differ = [k for k in sorted(set(before) & set(store)) if not torch.equal(before[k], store[k])]
    for k in missing[:20]:
        print(f'only {"before" if k in before else "after"}: {k}')
    for k in differ[:40]:
        print(f'differs: {k} (max {(before[k].float() - store[k].float()).abs().max().item():.3g})')
    print(f'{len(store)} tensors: {len(differ)} differ, {len(missing)} in one run only')
    return 1 if differ or missing else 0


if __name__ == '__main__':
    sys.exit(main())
