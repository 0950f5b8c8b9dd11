"""Nothing read from a checkpoint runs as code: crafted checkpoints through every command and API that reads one.

Each crafted checkpoint carries live payloads (the first test shows that each one writes its marker file when the
text is run, as ``Config.fromstring`` did before), in mmengine's Python text of the config, in vispe's JSON record of
it, or in a config file beside the checkpoint; every path must leave all markers absent."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from conftest import train_in_process
from mmengine.config import Config
from mmengine.registry import FUNCTIONS
from PIL import Image
from test_tools import tiny_config

import vispe
from vispe.cli import main as cli
from vispe.cli.infer import main as infer
from vispe.cli.test import main as run_test_command
from vispe.engine.checkpoint import CheckpointError, load_checkpoint
from vispe.engine.config import load_config
from vispe.engine.config_files import ConfigError
from vispe.engine.config_record import RECORD_KEY, config_from_record, recorded_config
from vispe.engine.train import train
from workbench.zoo import export_model

#: a payload of each form, as Python text: an import (inside a function: mmengine refuses top-level imports in a
#: text config), ``__import__``, an attribute chain from a literal to ``open``, and ``eval``
PAYLOADS = {
    'import': "def _f():\n    import os\n    return os.system('touch {m}')\n_x = _f()",
    'dunder_import': "_x = __import__('builtins').open('{m}', 'w').write('ran')",
    'attribute_chain': (
        "_x = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'catch_warnings'][0]()"
        "._module.__builtins__['open']('{m}', 'w').close()"
    ),
    'eval': "_x = eval(\"__import__('pathlib').Path('{m}').touch()\")",
}

#: payloads in the JSON record: class names that mmengine's registry would import, and keys that import or rescope
RECORD_PAYLOADS = {
    'dotted_type': lambda c, m: c['model'].update(type='os.system', command=f'touch {m}'),
    'nested_type': lambda c, m: c['model']['backbone'].update(type='subprocess.getoutput', cmd=f'touch {m}'),
    'scoped_type': lambda c, m: c['model'].update(type='vispe.os.system', command=f'touch {m}'),
    'bare_module': lambda c, m: c['model'].update(type='antigravity'),
    'constructor': lambda c, m: c['optim_wrapper'].update(constructor='os.system'),
    'runner_type': lambda c, m: c.update(runner_type='os.system'),
    'custom_imports': lambda c, m: c.update(custom_imports={'imports': ['antigravity']}),
    'default_scope': lambda c, m: c.update(default_scope='os'),
    'not_a_string': lambda c, m: c['model'].update(type=['os.system']),
}


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """One tiny run (2 iterations): (config, its epoch_1.pth)."""
    tmp = tmp_path_factory.mktemp('run')
    config, ckpt, _, _ = train_in_process(tiny_config(tmp), str(tmp / 'work'))
    return tiny_config(tmp), ckpt


def markers(folder) -> dict[str, str]:
    return {form: str(folder / f'ran_{form}') for form in PAYLOADS}


def payload_text(folder) -> str:
    return '\n' + '\n'.join(p.format(m=markers(folder)[form]) for form, p in PAYLOADS.items()) + '\n'


def assert_nothing_ran(folder) -> None:
    ran = [form for form, path in markers(folder).items() if os.path.exists(path)]
    ran += [p.name for p in folder.glob('ran_*') if p.name.removeprefix('ran_') not in PAYLOADS]
    assert not ran, f'payloads ran: {ran}'


def crafted(trained, folder, record: str | None = None, text: bool = True, beside: bool = False) -> str:
    """A copy of the trained checkpoint in ``folder``: its Python config text with every payload appended (``text``),
    its JSON record altered by ``RECORD_PAYLOADS[record]`` (or removed: an old checkpoint), and a config.py beside it
    that holds the payloads too (``beside``)."""
    folder.mkdir(exist_ok=True)
    ckpt = load_checkpoint(trained[1])
    meta = ckpt['meta']
    if text:  # mmengine writes 'cfg'; its resume runs 'config' (an older key) when it is there
        meta['cfg'] += payload_text(folder)
        meta['config'] = meta['cfg']
    else:
        meta.pop('cfg')
    if record is None:
        meta.pop(RECORD_KEY)
    else:
        data = json.loads(meta[RECORD_KEY])
        RECORD_PAYLOADS[record](data['config'], str(folder / f'ran_{record}'))
        meta[RECORD_KEY] = json.dumps(data)
    path = folder / 'epoch_1.pth'
    torch.save(ckpt, path)
    if beside:
        (folder / 'config.py').write_text(f"_base_ = ['{os.path.abspath(trained[0])}']" + payload_text(folder))
    return str(path)


def image(folder) -> str:
    path = folder / 'photo.png'
    Image.new('RGB', (32, 32), (200, 30, 30)).save(path)
    return str(path)


# --- the payloads are live ---------------------------------------------------------------------------------------
def test_every_payload_runs_when_its_text_is_run(tmp_path) -> None:
    """What the tests below guard against: each payload writes its marker once its text runs as a config."""
    Config.fromstring('a = 1' + payload_text(tmp_path), file_format='.py')
    assert all(os.path.exists(path) for path in markers(tmp_path).values())


def test_mmengine_imports_a_dotted_type_it_does_not_know(tmp_path) -> None:
    """Why a recorded config's class names are checked: a registry builds ``os.system`` from ``type='os.system'``."""
    FUNCTIONS.build(dict(type='os.system', command=f'touch {tmp_path / "ran"}'))
    assert (tmp_path / 'ran').exists()


# --- the record -------------------------------------------------------------------------------------------------
def test_a_checkpoint_records_its_config_as_data_that_builds_the_same_run(trained) -> None:
    recorded = recorded_config(load_checkpoint(trained[1]), trained[1], '').to_dict()
    named = load_config(trained[0], work_dir=os.path.dirname(trained[1])).to_dict()
    assert recorded == named and isinstance(recorded['param_scheduler'], list)


@pytest.mark.parametrize('form', sorted(RECORD_PAYLOADS))
def test_a_crafted_record_is_refused_naming_what(trained, tmp_path, form) -> None:
    data = json.loads(load_checkpoint(trained[1])['meta'][RECORD_KEY])
    RECORD_PAYLOADS[form](data['config'], str(tmp_path / 'ran'))
    with pytest.raises(ConfigError, match='registry|imports modules|default scope'):
        config_from_record(json.dumps(data))


def test_a_record_that_is_not_one_is_refused() -> None:
    for text, why in (('{', 'not JSON'), ('[]', 'unknown format'), ('{"format": "x", "config": {}}', 'unknown')):
        with pytest.raises(ConfigError, match=why):
            config_from_record(text)
    with pytest.raises(ConfigError, match='not data'):
        config_from_record(json.dumps({'format': 'vispe-config/1', 'config': {'a': {'__not_data__': 'a: function'}}}))


# --- every reader ------------------------------------------------------------------------------------------------
def test_infer_refuses_an_old_checkpoint_and_names_the_safe_way(trained, tmp_path) -> None:
    path = crafted(trained, tmp_path, beside=True)
    with pytest.raises(SystemExit) as info:
        infer([path, image(tmp_path)])
    message = str(info.value.code)
    assert 'records its config only as Python text' in message and f'vispe infer CONFIG {path}' in message
    assert_nothing_ran(tmp_path)


@pytest.mark.parametrize('form', ['dotted_type', 'constructor', 'custom_imports'])
def test_infer_refuses_a_crafted_record(trained, tmp_path, form) -> None:
    path = crafted(trained, tmp_path, record=form)
    with pytest.raises(SystemExit, match='error: .*(registry|imports modules)'):
        infer([path, image(tmp_path)])
    assert_nothing_ran(tmp_path)


def test_infer_with_the_config_named_runs_only_that_config(trained, tmp_path, capsys) -> None:
    path = crafted(trained, tmp_path, record='dotted_type', beside=True)
    infer([trained[0], path, image(tmp_path), '--topk', '1'])
    assert capsys.readouterr().out.count('%') == 1
    assert_nothing_ran(tmp_path)


def test_the_test_tool_reads_no_config_from_the_checkpoint(trained, tmp_path, capsys) -> None:
    path = crafted(trained, tmp_path, record='dotted_type', beside=True)
    run_test_command([trained[0], path, '--work-dir', str(tmp_path / 'logs')])
    assert 'accuracy/top1' in capsys.readouterr().out
    assert_nothing_ran(tmp_path)


def test_eval_resolution_reads_no_config_from_the_checkpoint(trained, tmp_path) -> None:
    path = crafted(trained, tmp_path, record='nested_type', beside=True)
    with pytest.raises(SystemExit) as info:  # the command ends with its exit status: 0 here
        cli(['eval-resolution', trained[0], path, '--out', str(tmp_path / 'out'), '--resolutions', '32',
             '--strategy', 'bicubic', '--no-progress'])  # fmt: skip
    assert not info.value.code
    assert json.loads((tmp_path / 'out' / 'results.json').read_text())['results']
    assert_nothing_ran(tmp_path)


@pytest.mark.parametrize('record', [None, 'dotted_type'])
def test_resume_reads_no_config_from_the_work_dirs_checkpoint(trained, tmp_path, record) -> None:
    work = tmp_path / 'work'
    path = crafted(trained, work, record=record, beside=True)
    (work / 'last_checkpoint').write_text(path)
    cfg = train(trained[0], str(work), {'train_cfg.max_epochs': 2}, resume=True)
    assert cfg.resume and os.path.isfile(work / 'epoch_2.pth')
    assert_nothing_ran(work)


@pytest.mark.parametrize('resume', [False, True])
def test_load_from_reads_no_config_from_its_checkpoint(trained, tmp_path, resume) -> None:
    path = crafted(trained, tmp_path / 'other', record='runner_type', beside=True)
    (tmp_path / 'work').mkdir()  # with --resume: an empty work dir resumes load_from's training state
    train(trained[0], str(tmp_path / 'work'), {'load_from': path, 'train_cfg.max_epochs': 2}, resume=resume)
    assert os.path.isfile(tmp_path / 'work' / 'epoch_2.pth')
    assert_nothing_ran(tmp_path / 'other')


@pytest.mark.parametrize('record', [None, 'dotted_type'])
def test_create_model_reads_no_config_from_or_beside_its_checkpoint(trained, tmp_path, record) -> None:
    """A checkpoint whose keys do not fit: the error's detail once came from the config text, or from the one
    config.py beside it when the checkpoint had none."""
    path = crafted(trained, tmp_path, record=record, text=record is not None, beside=True)
    with pytest.raises(CheckpointError, match='does not fit'):
        vispe.create_model('vit_tiny_patch16_224', encoding='rope_axial', checkpoint_path=path, num_classes=4)
    assert_nothing_ran(tmp_path)


def test_create_model_names_the_recorded_backbone_when_keys_do_not_fit(trained) -> None:
    with pytest.raises(CheckpointError, match='Its training config built the backbone with: .*embed_dim=32'):
        vispe.create_model('vit_tiny_patch16_224', checkpoint_path=trained[1], num_classes=4)


def test_the_zoo_exports_only_a_recorded_config(trained, tmp_path) -> None:
    path = crafted(trained, tmp_path / 'run', beside=True)
    results = {'results': [], 'train_resolution': 32, 'metric': 'accuracy'}
    with pytest.raises(ConfigError, match='only as Python text'):
        export_model(path, results, 'position', 'ape_learned', 0, 'train', str(tmp_path / 'models'))
    assert_nothing_ran(tmp_path / 'run')
    shutil.rmtree(tmp_path / 'models', ignore_errors=True)


def test_compare_reuses_a_finished_run_reading_no_config_from_it(trained, tmp_path) -> None:
    """``vispe compare`` reuses a run whose final checkpoint is in its work dir, then sweeps it."""
    from vispe.experiments.compare import Run, train_and_sweep
    from vispe.sweeps.resolution import evaluate_resolution

    work = tmp_path / 'run'
    path = crafted(trained, work, record='constructor', beside=True)
    (work / 'last_checkpoint').write_text(path)
    said: list[str] = []
    results = train_and_sweep(Run('position', trained[0], str(work)), evaluate_resolution, said.append)
    assert any(line.startswith('reusing ') for line in said) and results['results']
    assert_nothing_ran(work)
