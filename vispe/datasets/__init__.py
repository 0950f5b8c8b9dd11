"""vispe's data sets, registered in ``vispe.registry.DATASETS``, and transforms, in ``vispe.registry.TRANSFORMS``."""

from vispe.datasets.folder import CIFAR10Dataset, ImageFolderDataset
from vispe.datasets.modelnet import ModelNet40
from vispe.datasets.multiview import MultiViewScenes
from vispe.datasets.primitives3d import Primitives3D
from vispe.datasets.shapes2d import Shapes2D
from vispe.datasets.transforms import RandomResizedCropBox, TransformedDataset

__all__ = [
    'CIFAR10Dataset',
    'ImageFolderDataset',
    'ModelNet40',
    'MultiViewScenes',
    'Primitives3D',
    'RandomResizedCropBox',
    'Shapes2D',
    'TransformedDataset',
]
