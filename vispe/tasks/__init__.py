"""mmengine BaseModel wrappers that own losses and predictions."""

from vispe.tasks.classification import ImageClassifier
from vispe.tasks.diffusion import DiffusionModel

__all__ = ['DiffusionModel', 'ImageClassifier']
