"""mmengine BaseModel wrappers that own losses and predictions."""

from vispe.tasks.classification import Classifier, ImageClassifier, PointClassifier, VideoClassifier
from vispe.tasks.diffusion import DiffusionModel
from vispe.tasks.localization import MultiViewLocalizer
from vispe.tasks.preprocess import MultiScaleDataPreprocessor

__all__ = [
    'Classifier',
    'DiffusionModel',
    'ImageClassifier',
    'MultiScaleDataPreprocessor',
    'MultiViewLocalizer',
    'PointClassifier',
    'VideoClassifier',
]
