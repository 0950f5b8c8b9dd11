"""vispe: positional encodings for vision and 3D transformers (timm, PyTorch, mmengine)."""

from setuptools import find_packages, setup


def requirements():
    with open('requirements.txt') as f:
        lines = [line.split('#')[0].strip() for line in f]
    runtime = {'torch', 'torchvision', 'timm', 'mmengine', 'kornia', 'open3d', 'pillow', 'matplotlib', 'rich'}
    return [line for line in lines if line and line.split('==')[0].lower() in runtime]


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
    install_requires=requirements(),
)
