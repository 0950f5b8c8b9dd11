"""Evaluation sweeps: one checkpoint evaluated over many settings, cell by cell into a resumable results.json
(``engine``), one module per kind of sweep, each registered in ``registry.SWEEPS`` (what compare-results, the
``evaluate`` functions and the ``vispe eval-*`` commands read). Importing this package registers every kind below, in
this order (the order ``vispe -h`` lists their commands); a new kind is one module and its name here."""

import importlib

#: the modules of vispe.sweeps that register a kind of sweep
KINDS = ('resolution', 'points', 'video', 'cameras', 'generation', 'patch_shift')

for _module in KINDS:
    importlib.import_module(f'vispe.sweeps.{_module}')
