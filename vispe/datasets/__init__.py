"""vispe's data sets (``DATASETS``) and transforms (``TRANSFORMS``), with the size policies, batch sampler and collate
of mixed-resolution training."""

from vispe.datasets.batching import SharedSizeBatchSampler, mixed_size_collate
from vispe.datasets.folder import CIFAR10Dataset, ImageFolderDataset
from vispe.datasets.modelnet import ModelNet40
from vispe.datasets.multiview import MultiViewScenes
from vispe.datasets.primitives3d import Primitives3D
from vispe.datasets.shapes2d import Shapes2D
from vispe.datasets.shapes_video import ShapesVideo
from vispe.datasets.sizes import FixedSize, NativeAspect, SquareSizes
from vispe.datasets.transforms import RandomResizedCropBox, TransformedDataset

__all__ = [
    'CIFAR10Dataset',
    'FixedSize',
    'ImageFolderDataset',
    'ModelNet40',
    'MultiViewScenes',
    'NativeAspect',
    'Primitives3D',
    'RandomResizedCropBox',
    'Shapes2D',
    'ShapesVideo',
    'SharedSizeBatchSampler',
    'SquareSizes',
    'TransformedDataset',
    'mixed_size_collate',
]
