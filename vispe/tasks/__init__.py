"""mmengine BaseModel wrappers that own losses and predictions."""

from vispe.tasks.classification import ImageClassifier

__all__ = ['ImageClassifier']
