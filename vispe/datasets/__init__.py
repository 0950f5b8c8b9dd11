"""vispe's data sets, registered in ``vispe.registry.DATASETS``."""

from vispe.datasets.folder import CIFAR10Dataset, ImageFolderDataset
from vispe.datasets.shapes2d import Shapes2D

__all__ = ['CIFAR10Dataset', 'ImageFolderDataset', 'Shapes2D']
