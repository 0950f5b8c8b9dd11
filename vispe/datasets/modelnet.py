"""ModelNet40 (Wu et al., CVPR 2015) from the user's disk, in the ``text`` (``modelnet40_normal_resampled``) or ``mesh``
(``.off``) layout; clouds reduced to ``num_points``, centred, scaled into the unit sphere, times ``scale``."""

from __future__ import annotations

import glob
import os

import torch
from torch.utils.data import Dataset

from vispe.datasets.pointfiles import MESH_SAMPLES, read_points, read_text_cloud, resample, unit_sphere
from vispe.datasets.samples import (
    SkipsBadSamples,
    WarnsOnce,
    check_on_error,
    few_points_message,
)
from vispe.registry import DATASETS

#: ModelNet40's classes in their usual (alphabetical) order; used when the files on disk do not list them
MODELNET40_CLASSES: tuple[str, ...] = (
    'airplane', 'bathtub', 'bed', 'bench', 'bookshelf', 'bottle', 'bowl', 'car', 'chair', 'cone', 'cup', 'curtain',
    'desk', 'door', 'dresser', 'flower_pot', 'glass_box', 'guitar', 'keyboard', 'lamp', 'laptop', 'mantel',
    'monitor', 'night_stand', 'person', 'piano', 'plant', 'radio', 'range_hood', 'sink', 'sofa', 'stairs', 'stool',
    'table', 'tent', 'toilet', 'tv_stand', 'vase', 'wardrobe', 'xbox',
)  # fmt: skip


@DATASETS.register_module()
class ModelNet40(SkipsBadSamples, Dataset):
    """ModelNet40 point clouds from disk, labelled by class; items ``{'inputs': FloatTensor (N, 3), 'labels': int}``.

    A file of fewer than ``num_points`` points is padded with repeats (with a ``SampleWarning`` under half).

    Args:
        data_root: the data folder (either layout).
        split: 'train' or 'test' ('val' reads 'test').
        num_points: N points per cloud.
        sample: 'fps', 'random' or 'first'.
        scale: multiplies every normalised cloud.
        seed: for mesh sampling and 'random'.
        variant: the text layout's file prefix ('modelnet10' for ModelNet10).
        on_error: 'raise' or 'skip' (``vispe.datasets.samples``).
    """

    classes: tuple[str, ...] = MODELNET40_CLASSES
    #: how ``tools/infer_points.py`` brings a user's cloud into this data set's frame
    frame = 'unit_sphere'

    def __init__(
        self,
        data_root: str = 'data/modelnet40_normal_resampled',
        split: str = 'train',
        num_points: int = 1024,
        sample: str = 'fps',
        scale: float = 1.0,
        seed: int = 0,
        variant: str = 'modelnet40',
        on_error: str = 'raise',
    ) -> None:
        check_on_error(on_error)  # before the data root is read, so a typo is reported first
        if split not in ('train', 'val', 'test'):
            raise ValueError(f"split must be 'train', 'val' or 'test', got {split!r}")
        if sample not in ('fps', 'random', 'first'):
            raise ValueError(f"sample must be 'fps', 'random' or 'first', got {sample!r}")
        if num_points < 1 or scale <= 0:
            raise ValueError('num_points >= 1 and scale > 0 are needed')
        self.data_root, self.split = data_root, 'test' if split == 'val' else split
        self.num_points, self.sample, self.scale, self.seed = int(num_points), sample, float(scale), int(seed)
        self.layout, self.classes, self.items = self._index(variant)
        self.metainfo = {'classes': self.classes, 'num_classes': len(self.classes)}
        self.track_skips(on_error)
        self.warn_once = WarnsOnce(len(self))

    def _index(self, variant: str) -> tuple[str, tuple[str, ...], list[tuple[str, int]]]:
        names_file = os.path.join(self.data_root, f'{variant}_shape_names.txt')
        if os.path.isfile(names_file):
            with open(names_file) as f:
                classes = tuple(line.strip() for line in f if line.strip())
            split_file = os.path.join(self.data_root, f'{variant}_{self.split}.txt')
            if not os.path.isfile(split_file):
                raise FileNotFoundError(f'{split_file} is missing: the text layout lists each split in it')
            with open(split_file) as f:
                ids = [line.strip() for line in f if line.strip()]
            index = {c: i for i, c in enumerate(classes)}
            items = []
            for item in ids:
                cls = item.rsplit('_', 1)[0]
                if cls not in index:
                    raise ValueError(f'{split_file}: item {item!r} names class {cls!r}, not in {names_file}')
                items.append((os.path.join(self.data_root, cls, f'{item}.txt'), index[cls]))
            return 'text', classes, items
        meshes = sorted(glob.glob(os.path.join(self.data_root, '*', self.split, '*.off')))
        if meshes:
            classes = tuple(sorted({os.path.basename(os.path.dirname(os.path.dirname(p))) for p in meshes}))
            index = {c: i for i, c in enumerate(classes)}
            return 'mesh', classes, [(p, index[os.path.basename(os.path.dirname(os.path.dirname(p)))]) for p in meshes]
        raise FileNotFoundError(
            f'ModelNet40 not found under {os.path.abspath(self.data_root)}: expected either '
            f'{variant}_shape_names.txt, {variant}_{{train,test}}.txt and <class>/<item>.txt '
            f'(modelnet40_normal_resampled) or <class>/{{train,test}}/*.off (ModelNet40 meshes). Place the data '
            'there or set the dataset root in the config (see data/README.md)'
        )

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.items)

    def load(self, index: int) -> dict:
        path, label = self.items[index]
        seed = self.seed * 1_000_003 + index
        if self.layout == 'text':
            points = read_text_cloud(path)
        else:
            points = read_points(path, mesh_samples=max(MESH_SAMPLES, self.num_points), seed=seed)
        self.warn_once(index, few_points_message(path, len(points), self.num_points))
        points = unit_sphere(resample(points, self.num_points, self.sample, seed=seed)) * self.scale
        return {'inputs': torch.from_numpy(points), 'labels': label}


__all__ = ['MODELNET40_CLASSES', 'ModelNet40']
