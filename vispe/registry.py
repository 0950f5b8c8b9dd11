"""vispe's registries: children of mmengine's root registries, in scope ``vispe``.

Each child names the package that fills it (``locations=``), so a config that says
``type='ImageClassifier'`` works even when nothing imported ``vispe.tasks`` beforehand.
"""

from mmengine import registry as mm
from mmengine.registry import Registry

ENCODINGS = Registry('encoding', scope='vispe', locations=['vispe.encodings'])
MODELS = Registry('model', parent=mm.MODELS, scope='vispe', locations=['vispe.backbones', 'vispe.tasks'])
DATASETS = Registry('dataset', parent=mm.DATASETS, scope='vispe', locations=['vispe.datasets'])
TRANSFORMS = Registry('transform', parent=mm.TRANSFORMS, scope='vispe', locations=['vispe.datasets'])
METRICS = Registry('metric', parent=mm.METRICS, scope='vispe', locations=['vispe.engine'])
HOOKS = Registry('hook', parent=mm.HOOKS, scope='vispe', locations=['vispe.engine'])
POSITION_SAMPLERS = Registry('position sampler', scope='vispe', locations=['vispe.positions'])

# Children with nothing of vispe's own yet: with them, configs in scope 'vispe' find mmengine's optimizers,
# schedulers, loops, samplers and collate functions without mmengine's "failed to search registry" fallback.
RUNNERS = Registry('runner', parent=mm.RUNNERS, scope='vispe')
LOOPS = Registry('loop', parent=mm.LOOPS, scope='vispe')
OPTIMIZERS = Registry('optimizer', parent=mm.OPTIMIZERS, scope='vispe')
OPTIM_WRAPPERS = Registry('optim_wrapper', parent=mm.OPTIM_WRAPPERS, scope='vispe', locations=['vispe.engine'])
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor', parent=mm.OPTIM_WRAPPER_CONSTRUCTORS, scope='vispe'
)
PARAM_SCHEDULERS = Registry('parameter scheduler', parent=mm.PARAM_SCHEDULERS, scope='vispe')
DATA_SAMPLERS = Registry('data sampler', parent=mm.DATA_SAMPLERS, scope='vispe')
FUNCTIONS = Registry('function', parent=mm.FUNCTIONS, scope='vispe')
EVALUATOR = Registry('evaluator', parent=mm.EVALUATOR, scope='vispe')
MODEL_WRAPPERS = Registry('model_wrapper', parent=mm.MODEL_WRAPPERS, scope='vispe', locations=['vispe.engine'])
WEIGHT_INITIALIZERS = Registry('weight initializer', parent=mm.WEIGHT_INITIALIZERS, scope='vispe')
VISUALIZERS = Registry('visualizer', parent=mm.VISUALIZERS, scope='vispe')
VISBACKENDS = Registry('vis_backend', parent=mm.VISBACKENDS, scope='vispe')
LOG_PROCESSORS = Registry('log_processor', parent=mm.LOG_PROCESSORS, scope='vispe')
