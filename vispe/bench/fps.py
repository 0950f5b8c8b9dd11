"""vispe's batched farthest-point sampling against open3d's ``farthest_point_down_sample``: time and coverage.

Both are timed side by side (interleaved rounds, median) on the same primitives3d clouds, vispe's on the whole batch,
open3d's cloud by cloud. Coverage, for both and a random subset of the same size: the covering radius (the largest
distance from a point to its nearest pick; smaller is better) and the spread (the smallest distance between two
picks; larger is better). Both start from point 0 and take the first farthest point on ties: their picks should agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from vispe.backbones.point import farthest_point_sample, gather_points
from vispe.bench.timing import interleaved_times
from vispe.datasets.primitives3d import Primitives3D
from vispe.evaluation.report import console as report_console
from vispe.optional import require_open3d

#: (batch, points, picks) settings of the default run
DEFAULT_SETTINGS: tuple[tuple[int, int, int], ...] = ((1, 1024, 64), (32, 1024, 64), (32, 4096, 256), (8, 8192, 512))


@dataclass
class Timed:
    """What ``interleaved_times`` times: a name and a step."""

    name: str
    step: Callable[[], Any]


def clouds(batch: int, points: int, seed: int = 0) -> torch.Tensor:
    """(batch, points, 3) primitives3d clouds (every class in turn)."""
    data = Primitives3D('test', num_samples=batch, num_points=points, seed=seed)
    return torch.stack([data[i]['inputs'] for i in range(batch)])


def open3d_fps(xyz: torch.Tensor, num: int) -> list[np.ndarray]:
    """open3d's picks, cloud by cloud, as (num, 3) arrays."""
    require_open3d('the farthest-point-sampling benchmark')
    import open3d as o3d

    out = []
    for cloud in xyz.cpu().double().numpy():
        pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(cloud))
        out.append(np.asarray(pcd.farthest_point_down_sample(num).points))
    return out


def coverage(xyz: torch.Tensor, picks: torch.Tensor) -> dict[str, float]:
    """Mean over the batch of the covering radius and of the spread (see the module doc)."""
    xyz, picks = xyz.double().cpu(), picks.double().cpu()
    radius = torch.cdist(xyz, picks).amin(-1).amax(-1)
    pair = torch.cdist(picks, picks) + torch.eye(picks.shape[1], dtype=picks.dtype) * 1e9
    return {'covering_radius': float(radius.mean()), 'spread': float(pair.amin(dim=(-2, -1)).mean())}


def run(
    settings: Sequence[tuple[int, int, int]] = DEFAULT_SETTINGS,
    device: str = 'cpu',
    warmup: int = 2,
    repeats: int = 7,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """One row per (setting, method): median ms, ratio to open3d, coverage, and whether vispe's picks equal open3d's."""
    require_open3d('the farthest-point-sampling benchmark')
    rows = []
    for batch, points, num in settings:
        xyz = clouds(batch, points, seed).to(device)
        subjects = [
            Timed('vispe', partial(farthest_point_sample, xyz, num)),
            Timed('open3d', partial(open3d_fps, xyz, num)),
        ]
        times = interleaved_times(subjects, warmup, repeats, device)
        ours = gather_points(xyz, farthest_point_sample(xyz, num))
        theirs = torch.from_numpy(np.stack(open3d_fps(xyz, num)))
        same = [
            {tuple(p) for p in a.tolist()} == {tuple(p) for p in b.tolist()}
            for a, b in zip(ours.double().cpu().numpy().round(5), theirs.numpy().round(5))
        ]
        generator = torch.Generator().manual_seed(seed)
        random = gather_points(xyz.cpu(), torch.stack([torch.randperm(points, generator=generator)[:num] for _ in xyz]))
        o3d_ms = float(np.median(times['open3d']))
        for method, picks in (('vispe', ours), ('open3d', theirs), ('random', random)):
            ms = float(np.median(times[method])) if method in times else None
            rows.append(
                {
                    'batch': batch,
                    'points': points,
                    'picks': num,
                    'method': method,
                    'device': device if method == 'vispe' else 'cpu',
                    'median_ms': ms,
                    'ratio_to_open3d': ms / o3d_ms if ms is not None else None,
                    **coverage(xyz, picks),
                    'same_picks_as_open3d': float(np.mean(same)) if method == 'vispe' else None,
                }
            )
    return rows


def print_rows(rows: Sequence[dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table(
        title='farthest-point sampling of G of N points in B clouds: vispe (batched torch), open3d (per cloud), random',
        caption='ms: median time; cover r: covering radius (smaller covers better); spread: closest two picks '
        "(larger is better); same: clouds where vispe's picks are open3d's",
    )
    for col in ('BxNxG', 'method', 'device', 'ms', 'x open3d', 'cover r', 'spread', 'same'):
        table.add_column(col, justify='left' if col in ('method', 'device') else 'right')
    fmt = lambda v, spec: '-' if v is None else format(v, spec)  # noqa: E731
    for r in rows:
        table.add_row(
            f'{r["batch"]}x{r["points"]}x{r["picks"]}',
            r['method'],
            r['device'],
            fmt(r['median_ms'], '.2f'),
            fmt(r['ratio_to_open3d'], '.2f'),
            f'{r["covering_radius"]:.4f}',
            f'{r["spread"]:.4f}',
            fmt(r['same_picks_as_open3d'], '.0%'),
        )
    report_console().print(table)


__all__ = ['DEFAULT_SETTINGS', 'clouds', 'coverage', 'open3d_fps', 'print_rows', 'run']
