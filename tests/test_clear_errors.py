"""Bad training input ends in one line naming the problem and the fix, before anything is set up or written: bad
numbers in the config, a work dir that is a file or cannot be written, a config that does not parse, Ctrl-C, a full
disk while saving, and dict values in --cfg-options."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import ROOT, run_main
from test_tools import run_tool, tiny_config

from vispe.cli.train import main as train_main
from vispe.engine.atomic import PARTIAL
from vispe.engine.checkpoint import latest_checkpoint, read_checkpoint
from vispe.engine.config import CfgOptionsAction, load_config
from vispe.registry import MODELS


def last_line(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def assert_one_clean_error(proc, *needles: str) -> str:
    line = last_line(proc)
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    assert line.startswith('error: ') and all(n in line for n in needles), line
    return line


@pytest.mark.parametrize(
    'option, needles',
    [
        ('train_dataloader.batch_size=0', ['train_dataloader.batch_size = 0', 'positive integer']),
        ('optim_wrapper.optimizer.lr=-0.001', ['optim_wrapper.optimizer.lr = -0.001', 'positive number']),
        ('train_cfg.max_epochs=0', ['train_cfg.max_epochs = 0', 'positive integer', 'train nothing']),
    ],
)
def test_bad_numbers_are_refused_before_the_runner_starts(option, needles, tmp_path) -> None:
    """Before: torch's 'batch_size should be a positive integer value' or 'Invalid learning rate' after a 150-line
    environment dump, and for max_epochs=0 a run that trained nothing and exited 0."""
    work = tmp_path / 'work'
    proc = run_tool('tools/train.py', tiny_config(tmp_path), '--work-dir', str(work), '--cfg-options', option,
                    check=False)  # fmt: skip
    assert_one_clean_error(proc, *needles)
    assert 'System environment' not in proc.stdout + proc.stderr and not work.exists()


@pytest.mark.parametrize(
    'option, needles',
    [
        ('model.backbone.img_size=abc', ['model: VisionTransformerPE: img_size must be an int or (H, W)', "'abc'"]),
        ('model.backbone.encoding=[rope_axial,rope_mixed]', ['model: VisionTransformerPE: rope_axial cannot be']),
    ],
)
def test_a_model_the_config_cannot_build_is_one_line(option, needles, tmp_path, capsys) -> None:
    """Before: timm's "unsupported operand type(s) for //: 'str' and 'int'" traceback; two rotary encodings
    trained. (The command in process: the tests above and below run it as a process, on the same exit path.)"""
    proc = run_main(train_main, tiny_config(tmp_path), '--work-dir', str(tmp_path / 'w'), '--cfg-options', option,
                    capsys=capsys)  # fmt: skip
    assert_one_clean_error(proc, *needles)
    assert not (tmp_path / 'w' / 'epoch_1.pth').exists()


def test_a_work_dir_that_is_a_file_is_refused_and_left_alone(tmp_path) -> None:
    work = tmp_path / 'notes.txt'
    work.write_text('my notes')
    proc = run_tool('tools/train.py', tiny_config(tmp_path), '--work-dir', str(work), check=False)
    assert_one_clean_error(proc, f"work dir '{work}' is a file", 'another --work-dir')
    assert work.read_text() == 'my notes'


def test_a_work_dir_that_cannot_be_written_is_refused(tmp_path) -> None:
    probe = '/sys/vispe_probe'
    try:
        os.makedirs(probe)
        os.rmdir(probe)
        pytest.skip('/sys is writable here: no read-only folder to test with')
    except OSError:
        pass
    proc = run_tool('tools/train.py', tiny_config(tmp_path), '--work-dir', '/sys/vispe/work', check=False)
    assert_one_clean_error(proc, "work dir '/sys/vispe/work' is not writable", "'/sys'", 'another --work-dir')


def test_a_config_with_a_syntax_error_names_the_file_and_line(tmp_path, capsys) -> None:
    """(The command in process, as above.)"""
    base = tiny_config(tmp_path)
    broken = tmp_path / 'broken.py'
    broken.write_text(f"_base_ = ['{base}']\nmodel = dict(backbone=dict(depth=2,)\n")
    proc = run_main(train_main, str(broken), '--work-dir', str(tmp_path / 'w'), capsys=capsys)
    assert_one_clean_error(proc, f'config {broken}, line 2: syntax error', 'never closed', 'model = dict(')
    leaf = tmp_path / 'leaf.py'
    leaf.write_text(f"_base_ = ['{broken.name}']\n")  # the error is in a base file: that one is named
    proc = run_main(train_main, str(leaf), '--work-dir', str(tmp_path / 'w'), capsys=capsys)
    assert_one_clean_error(proc, f'config {broken}, line 2: syntax error')
    code = tmp_path / 'code.py'
    code.write_text(f"_base_ = ['{base}']\nsteps = 1 / 0\n")
    proc = run_main(train_main, str(code), '--work-dir', str(tmp_path / 'w'), capsys=capsys)
    assert_one_clean_error(proc, f'config {code}, line 2: ZeroDivisionError: division by zero')


def test_ctrl_c_ends_with_where_the_last_checkpoint_is(tmp_path) -> None:
    """Before: a KeyboardInterrupt traceback through mmengine's loops."""
    config = tiny_config(tmp_path, samples=256, epochs=20)
    work = tmp_path / 'work'
    cmd = [sys.executable, 'tools/train.py', config, '--work-dir', str(work)]
    # as a terminal would: SIGINT not ignored (a test runner started in the background passes on SIG_IGN)
    default = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if re.search(r'Epoch\(train\) +\[2\]\[', line):  # epoch 1's checkpoint is saved by now
            proc.send_signal(signal.SIGINT)
            break
    lines += proc.stdout.read().splitlines(keepends=True)
    assert proc.wait() == 130, ''.join(lines[-30:])
    last = latest_checkpoint(str(work))
    assert last and read_checkpoint(last)['meta']['epoch'] >= 1
    output = ''.join(lines)
    assert 'Traceback' not in output and 'KeyboardInterrupt' not in output
    assert lines[-1].strip() == (
        f'interrupted: the last complete checkpoint is {last}; continue with: python tools/train.py {config} '
        f'--work-dir {work} --resume'
    )


#: tools/train.py with the writes of epoch_2.pth failing as on a full disk (the temporary file gets some bytes first)
DISK_FULL = """
import builtins, errno, runpy, sys
real_open = builtins.open
class Full:
    def __init__(self, f): self.f = f
    def write(self, data):
        self.f.write(data[:100])
        raise OSError(errno.ENOSPC, 'No space left on device')
    def __getattr__(self, name): return getattr(self.f, name)
    def __enter__(self): return self
    def __exit__(self, *exc): return self.f.__exit__(*exc)
def full_open(path, mode='r', *args, **kwargs):
    f = real_open(path, mode, *args, **kwargs)
    return Full(f) if 'epoch_2.pth' in str(path) and 'w' in mode else f
import vispe.engine.atomic as ck
ck.open = full_open
sys.argv = sys.argv[1:]
runpy.run_path('tools/train.py', run_name='__main__')
"""


def test_a_full_disk_while_saving_keeps_the_previous_checkpoint(tmp_path) -> None:
    work = tmp_path / 'work'
    cmd = [sys.executable, '-c', DISK_FULL, 'tools/train.py', tiny_config(tmp_path, epochs=3), '--work-dir', str(work)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, 'PYTHONPATH': ROOT})
    line = assert_one_clean_error(proc, f'no space left on the device while writing {work}/epoch_2.pth', 'it needs')
    assert f'the last complete checkpoint, {work}/epoch_1.pth, is intact' in line and '--resume' in line
    assert (work / 'last_checkpoint').read_text().strip() == f'{work}/epoch_1.pth'
    assert read_checkpoint(str(work / 'epoch_1.pth'))['meta']['epoch'] == 1
    assert not (work / 'epoch_2.pth').exists() and not [n for n in os.listdir(work) if PARTIAL in n]
    resumed = run_tool('tools/train.py', tiny_config(tmp_path, epochs=3), '--work-dir', str(work), '--resume')
    assert 'resumed epoch: 1' in resumed.stdout + resumed.stderr
    assert read_checkpoint(str(work / 'epoch_3.pth'))['meta']['epoch'] == 3


def parse(*options: str) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction)
    return parser.parse_args(['--cfg-options', *options]).cfg_options


def test_an_encoding_dict_in_cfg_options_is_read_whole(tmp_path) -> None:
    """Before: mmengine split the dict on its commas: unknown encoding "{'type':'rope_axial"."""
    options = parse("model.backbone.encoding={'type':'rope_axial','theta':10}", 'train_cfg.max_epochs=2')
    assert options == {'model.backbone.encoding': {'type': 'rope_axial', 'theta': 10}, 'train_cfg.max_epochs': 2}
    mixed = parse("model.backbone.encoding=[{'type': 'irpe', 'mode': 'bias'}, 'ape_learned']")
    assert mixed['model.backbone.encoding'] == [{'type': 'irpe', 'mode': 'bias'}, 'ape_learned']
    assert parse('model.backbone.encoding=[rope_mixed,peg]')['model.backbone.encoding'] == ['rope_mixed', 'peg']
    cfg = load_config(tiny_config(tmp_path), options)
    assert cfg.model.backbone.encoding == {'type': 'rope_axial', 'theta': 10}
    over_a_dict = {'model.backbone.encoding': {'type': 'rope_mixed'}}  # replaces the dict, keeps none of its keys
    cfg = load_config(tiny_config(tmp_path), {'model.backbone.encoding': {'type': 'irpe', 'mode': 'bias'}})
    cfg.dump(str(tmp_path / 'irpe.py'))
    assert load_config(str(tmp_path / 'irpe.py'), over_a_dict).model.backbone.encoding == {'type': 'rope_mixed'}


def test_a_list_in_cfg_options_is_taken_as_given(tmp_path) -> None:
    """Before: every dict inside a list got mmengine's ``_delete_`` key, which then reached the constructors
    (``ConstantLR.__init__() got an unexpected keyword argument '_delete_'``)."""
    options = parse(
        "model.backbone.encoding=[{'type': 'irpe', 'mode': 'bias'}, 'ape_learned']",
        "param_scheduler=[{'type': 'ConstantLR', 'factor': 1.0}]",
    )
    cfg = load_config(tiny_config(tmp_path), options)
    assert cfg.model.backbone.encoding == [{'type': 'irpe', 'mode': 'bias'}, 'ape_learned']
    assert [dict(s) for s in cfg.param_scheduler] == [{'type': 'ConstantLR', 'factor': 1.0}]
    model = MODELS.build(cfg.model)
    assert sorted(model.backbone.encoding_names) == ['ape_learned', 'irpe']


def test_a_dict_on_a_key_the_config_lacks_reaches_its_constructor_clean(tmp_path) -> None:
    """Before: mmengine kept the ``_delete_`` marker on a dict set where the config had no key, so
    ``model.backbone.position_sampler={'type': 'fuzzy'}`` failed with ``FuzzyPositions.__init__() got an unexpected
    keyword argument '_delete_'``; over an existing dict the value still replaces it whole."""
    options = parse("model.backbone.position_sampler={'type': 'fuzzy', 'radius': 0.25}")
    cfg = load_config(tiny_config(tmp_path), options)
    assert cfg.model.backbone.position_sampler == {'type': 'fuzzy', 'radius': 0.25}
    model = MODELS.build(cfg.model)
    assert type(model.backbone.position_sampler).__name__ == 'FuzzyPositions'
    cfg.dump(str(tmp_path / 'fuzzy.py'))
    again = load_config(str(tmp_path / 'fuzzy.py'), parse("model.backbone.position_sampler={'type': 'fuzzy'}"))
    assert again.model.backbone.position_sampler == {'type': 'fuzzy'}


def test_a_dict_that_is_not_a_literal_says_how_to_quote_it(capsys) -> None:
    with pytest.raises(SystemExit):
        parse('model.backbone.encoding={type:rope_axial,theta:10}')
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--cfg-options model.backbone.encoding: cannot read '{type:rope_axial,theta:10}'" in err
    assert "\"model.backbone.encoding={'type': 'rope_axial', 'theta': 10}\"" in err


def test_atomic_write_on_a_full_disk_names_the_file_and_leaves_it(tmp_path, monkeypatch) -> None:
    import errno

    import vispe.engine.atomic as ck

    target = tmp_path / 'results.json'
    target.write_text('{"old": true}')

    class Full:
        def __init__(self, *args, **kwargs) -> None:
            self.f = open(*args, **kwargs)  # noqa: SIM115

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

        def write(self, data):
            raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(ck, 'open', Full, raising=False)
    with pytest.raises(ck.DiskFullError) as caught:
        ck.atomic_write(str(target), b'x' * 3 * 2**20)
    message = str(caught.value)
    assert message.startswith(f'no space left on the device while writing {target}: it needs 3.0 MiB and ')
    assert message.endswith('free some space, then run again') and caught.value.errno == errno.ENOSPC
    assert target.read_text() == '{"old": true}' and os.listdir(tmp_path) == ['results.json']
