"""vispe: positional encodings for vision and 3D transformers (timm, PyTorch, mmengine).

``pip install vispe`` is the 2D toolkit (ViTs, DiT, the camera encodings, their data sets, sweeps and benchmarks);
``pip install 'vispe[3d]'`` (or ``[points]``, ``[cameras]``) adds open3d for point-cloud files and the Primitives3D,
ModelNet40 and MultiViewScenes data sets. ``install_requires`` states the ranges vispe supports, never exact pins,
so that installing vispe keeps the torch already installed (a cluster's CUDA build); requirements.txt holds the
exact pins of the development venv (``make venv``). Each floor below is the release that ``make test-floor`` ran
(install-floor.json records it; tests/test_install.py checks that each floor equals that record and that every pin
of requirements.txt lies in its range); the comment above it says why it is no lower.
"""

from setuptools import find_packages, setup

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

setup(
    name='vispe',
    version='0.1.0',
    description='Positional encodings for vision and 3D transformers, on timm, PyTorch and mmengine',
    # configs/ (at the checkout's root, where the tools and docs name it) ships as vispe/configs: an installed vispe
    # finds its configs by name (vispe.engine.config_files.resolve_config)
    packages=[*find_packages(include=['vispe', 'vispe.*']), 'vispe.configs'],
    package_dir={'vispe.configs': 'configs'},
    package_data={'vispe.configs': ['**/*.py']},
    entry_points={'console_scripts': ['vispe = vispe.cli:main']},
    python_requires='>=3.10',
    install_requires=INSTALL_REQUIRES,
    extras_require={'3d': THREE_D, 'points': THREE_D, 'cameras': THREE_D},
)
