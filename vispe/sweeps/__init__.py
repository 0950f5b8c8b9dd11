"""Evaluation sweeps: one checkpoint evaluated over many settings, cell by cell into a resumable results.json
(``engine``), one module per kind, each registered in ``registry.SWEEPS``. Importing this package registers them in the
order ``vispe -h`` lists them."""

import importlib

#: the modules of vispe.sweeps that register a kind of sweep
KINDS = ('resolution', 'points', 'video', 'cameras', 'generation', 'patch_shift')

for _module in KINDS:
    importlib.import_module(f'vispe.sweeps.{_module}')
