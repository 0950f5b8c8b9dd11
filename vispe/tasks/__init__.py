"""mmengine BaseModel wrappers that own losses and predictions."""

from vispe.tasks.classification import ImageClassifier
from vispe.tasks.diffusion import DiffusionModel
from vispe.tasks.preprocess import MultiScaleDataPreprocessor

__all__ = ['DiffusionModel', 'ImageClassifier', 'MultiScaleDataPreprocessor']
