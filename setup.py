"""vispe: positional encodings for vision and 3D transformers (timm, PyTorch, mmengine).

``pip install .`` in a checkout is the 2D toolkit (ViTs, DiT, the camera encodings, their data sets, sweeps and
benchmarks); ``pip install '.[3d]'`` (or ``[points]``, ``[cameras]``) adds open3d for point-cloud files and the
Primitives3D, ModelNet40 and MultiViewScenes data sets. ``install_requires`` states the ranges vispe supports, never
exact pins; requirements.txt holds the exact pins of the development venv (``make venv``). Each floor below is the
release that ``make test-floor`` ran (install-floor.json records it; tests/test_install.py checks that each floor
equals that record and that every pin of requirements.txt lies in its range); the comment above it says why it is no
lower. Keeping a user's torch takes ``pip install . "torch==<installed>"`` (README): timm needs torchvision, and pip
takes the newest torchvision, with its torch, where none is installed.
"""

import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))

INSTALL_REQUIRES = [
    # 2.9: FX symbolic_trace of vispe's ViTs (timm's features_only feature_cls='fx', TorchScript through FX) calls
    # torch.arange on a traced size, which 2.7 and 2.8 refuse (TypeError), and 2.7's torch.export with dynamic H, W
    # specialises the sizes; make test-floor ran 2.9.0 (its smoke suite traces and exports a rotary ViT). Known to
    # fail on 2.9, passing at the pin: an exported ape_learned or loope model refuses the training grid's
    # own token count (a guard), and FlexAttention (attention_kernel='flex') with alibi2d's or irpe's score term
    # stops dynamo at a data-dependent index (tests/test_flex.py: 12 of 80 fail on CPU, as on 2.8).
    # Older APIs vispe needs: torch.fx's is_fx_symbolic_tracing 2.9 (vispe.backbones.common), torch.compiler.
    # is_exporting and dynamo's recompile_limit 2.7, FlexAttention 2.5, torch.serialization.add_safe_globals 2.4
    'torch>=2.9',
    # tv_tensors and transforms.v2's ToImage / ToDtype(scale=True) (vispe.datasets) are 0.16; 0.24 is the release
    # built for torch 2.9 (each torchvision pins its torch)
    'torchvision>=0.24',
    # 1.0.21: timm 1.0.20 imports huggingface_hub names that huggingface_hub 2.4 (what pip picks today) lacks, so
    # its save_for_hf and 'local-dir:' loading report the hub as missing. RotaryEmbeddingDinoV3 and Eva's rope
    # rescale_coords (vispe.backbones.timm_interop.eva) are 1.0.20; imported by `import vispe`: init_random_2d_freqs
    # 1.0.17, naflex_transforms 1.0.16. save_for_hf records a model's arguments by itself from 1.0.31 (the pin);
    # before, pass them: save_for_hf(model, path, model_args=model._model_args)
    'timm>=1.0.21',
    # 0.10.6 registers torch's own Adafactor (torch >= 2.5) as torch_Adafactor; older releases fail on
    # `import mmengine.optim` under torch >= 2.5 with transformers installed (Adafactor registered twice)
    'mmengine>=0.10.6',
    # kornia: camera geometry (vispe.geometry, imported by vispe.positions) and the DiT's shape metrics, both on the
    # 2D paths (small: pure Python and kornia-rs); connected_components_union_find (vispe.evaluation.
    # generation_metrics, imported by the sweeps registry) is in 0.9.0, not in 0.8.x
    'kornia>=0.9',
    # FID / KID of the DiT's samples with a custom feature module (vispe.evaluation.generation_metrics)
    'torchmetrics>=1.0',
    # np.dtypes (vispe.engine.checkpoint's allow-list) is 1.25
    'numpy>=1.25',
    'pillow',
    'matplotlib',
    'rich',
]

#: open3d (~400 MB, no wheels on several platforms) only serves the 3D side; the 2D paths never import it
#: (vispe.optional). farthest_point_down_sample (vispe.datasets.pointfiles) is 0.17.
THREE_D = ['open3d>=0.17']


def read_version() -> str:
    """vispe.__version__, read from vispe/__init__.py's text (importing vispe would need torch): the one source."""
    with open(os.path.join(HERE, 'vispe', '__init__.py'), encoding='utf-8') as f:
        found = re.search(r"^__version__ = '([^']+)'$", f.read(), re.M)
    if found is None:
        raise SystemExit("error: vispe/__init__.py has no line __version__ = '...' for setup.py to read")
    return found.group(1)


with open(os.path.join(HERE, 'README.md'), encoding='utf-8') as f:
    README = f.read()

setup(
    name='vispe',
    version=read_version(),
    description='Positional encodings for vision and 3D transformers, on timm, PyTorch and mmengine',
    long_description=README,
    long_description_content_type='text/markdown',
    author='the vispe developers',
    license_expression='Apache-2.0',
    license_files=['LICENSE'],
    classifiers=[
        'Development Status :: 3 - Alpha',
        'Intended Audience :: Science/Research',
        'Intended Audience :: Developers',
        'Programming Language :: Python :: 3',
        'Programming Language :: Python :: 3 :: Only',
        'Programming Language :: Python :: 3.11',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
        'Topic :: Scientific/Engineering :: Image Recognition',
        'Typing :: Typed',
    ],
    keywords=['positional encoding', 'vision transformer', 'rotary', 'RoPE', 'timm', 'pytorch', 'mmengine'],
    # configs/ (at the checkout's root, where the tools and docs name it) ships as vispe/configs: an installed vispe
    # finds its configs by name (vispe.engine.config_files.resolve_config)
    packages=[*find_packages(include=['vispe', 'vispe.*']), 'vispe.configs'],
    package_dir={'vispe.configs': 'configs'},
    # py.typed: type checkers read vispe's annotations (PEP 561)
    package_data={'vispe': ['py.typed'], 'vispe.configs': ['**/*.py']},
    # the console script enters through vispe_launcher, a module beside the package: `vispe -h` and `vispe --version`
    # answer without importing vispe (whose __init__ imports torch); a command then runs vispe.cli.main
    py_modules=['vispe_launcher'],
    entry_points={'console_scripts': ['vispe = vispe_launcher:main']},
    python_requires='>=3.10',
    install_requires=INSTALL_REQUIRES,
    extras_require={'3d': THREE_D, 'points': THREE_D, 'cameras': THREE_D},
)
