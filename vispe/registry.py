"""vispe's registries: children of mmengine's root registries, in scope ``vispe``.

Each child names the package that fills it (``locations=``), so a config that says
``type='ImageClassifier'`` works even when nothing imported ``vispe.tasks`` beforehand.
"""

from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import Registry

ENCODINGS = Registry('encoding', scope='vispe', locations=['vispe.encodings'])
MODELS = Registry('model', parent=MMENGINE_MODELS, scope='vispe', locations=['vispe.backbones', 'vispe.tasks'])
DATASETS = Registry('dataset', parent=MMENGINE_DATASETS, scope='vispe', locations=['vispe.datasets'])
TRANSFORMS = Registry('transform', parent=MMENGINE_TRANSFORMS, scope='vispe', locations=['vispe.datasets'])
METRICS = Registry('metric', parent=MMENGINE_METRICS, scope='vispe', locations=['vispe.engine'])
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope='vispe', locations=['vispe.engine'])
