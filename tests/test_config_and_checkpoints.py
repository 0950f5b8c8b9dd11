"""Bad configs and bad checkpoint files get errors that say what to fix."""

import os

import pytest
import torch

from vispe.engine.checkpoint import CheckpointError, load_checkpoint, read_checkpoint
from vispe.engine.config import ConfigError, load_config
from vispe.files import sha256

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, 'configs/vit/vit_tiny_rope_mixed_shapes2d_position.py')


def test_config_key_typo_is_rejected(tmp_path):
    path = tmp_path / 'typo.py'
    path.write_text(f"_base_ = ['{CONFIG}']\noptim_wraper = dict(optimizer=dict(type='SGD', lr=0.1))\n")
    with pytest.raises(ConfigError, match="'optim_wraper'.*did you mean 'optim_wrapper'"):
        load_config(str(path))


def test_config_helper_variables_are_allowed(tmp_path):
    path = tmp_path / 'helpers.py'
    path.write_text(f"_base_ = ['{CONFIG}']\nimg_scale = 32\n")
    cfg = load_config(str(path))
    assert cfg.img_scale == 32 and cfg.work_dir.endswith('helpers')


def test_missing_config_names_the_path():
    with pytest.raises(FileNotFoundError, match='nope.py'):
        load_config('configs/nope.py')


@pytest.mark.parametrize('content', [b'not a checkpoint at all', b'PK\x03\x04 truncated zip', b''])
def test_non_checkpoint_is_refused_and_left_intact(tmp_path, content):
    path = tmp_path / 'model.pth'
    path.write_bytes(content)
    before = sha256(str(path))
    with pytest.raises(CheckpointError, match='is not a PyTorch checkpoint'):
        read_checkpoint(str(path))
    assert sha256(str(path)) == before


def test_pickled_code_is_refused(tmp_path):
    class Boom:
        def __reduce__(self):
            return (os.system, (f'touch {tmp_path}/pwned',))

    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': {}, 'payload': Boom()}, str(path))
    with pytest.raises(CheckpointError, match='allow-list'):
        read_checkpoint(str(path))
    assert not (tmp_path / 'pwned').exists()


def test_weights_that_do_not_fit_name_the_keys(tmp_path):
    path = tmp_path / 'w.pth'
    torch.save({'state_dict': {'weight': torch.zeros(2, 2)}}, str(path))
    target = torch.nn.Linear(2, 3)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(
        CheckpointError,
        match=r"(?s)does not fit this model: 1 missing key \('bias'\), 1 key of another "
        r"shape \('weight': file \(2, 2\) vs model \(3, 2\)\).*--non-strict",
    ):
        load_checkpoint(str(path), target)
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items()), 'a refused load changed the model'
    two_missing = r"2 missing keys \('0.weight', '0.bias'\).*1 unexpected key \('weight'\)"
    with pytest.raises(CheckpointError, match=two_missing):
        load_checkpoint(str(path), torch.nn.Sequential(torch.nn.Linear(2, 2)))
    model = torch.nn.Linear(2, 2, bias=False)
    load_checkpoint(str(path), model)
    assert torch.equal(model.weight, torch.zeros(2, 2))


def test_non_strict_load_takes_what_fits_and_names_what_it_left(tmp_path):
    path = tmp_path / 'w.pth'
    torch.save(
        {'state_dict': {'0.weight': torch.zeros(2, 2), '1.weight': torch.zeros(5, 5), 'extra': torch.ones(1)}},
        str(path),
    )
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 3))
    bias = model[0].bias.detach().clone()
    with pytest.warns(
        UserWarning,
        match=r"(?s)non-strict load.*3 of the model's keys keep their initial values "
        r"\(0.bias, 1.bias, 1.weight; 2 missing from the file, 1 of another shape there\); 2 of the file's keys were "
        r'not used \(extra, 1.weight\)',
    ):
        load_checkpoint(str(path), model, strict=False)
    assert torch.equal(model[0].weight, torch.zeros(2, 2)) and torch.equal(model[0].bias, bias)


def test_missing_checkpoint():
    with pytest.raises(FileNotFoundError, match='ghost.pth'):
        read_checkpoint('ghost.pth')


def test_runner_loads_go_through_vispe_load_checkpoint() -> None:
    """mmengine's loader for local files (Runner load_from / resume) is vispe's, so its allow-list applies."""
    from mmengine.runner.checkpoint import CheckpointLoader

    import vispe
    from vispe.engine import checkpoint

    assert CheckpointLoader._get_checkpoint_loader('work_dirs/x/epoch_1.pth') is checkpoint._mmengine_local_loader
    assert vispe.load_checkpoint is checkpoint.load_checkpoint


def test_resume_from_a_crafted_checkpoint_is_refused_and_runs_no_code(tmp_path) -> None:
    """tools/train.py --resume on a work dir whose newest checkpoint would run a shell command when unpickled: the
    tool exits with the allow-list message, and the command never ran."""
    from test_tools import run_tool, tiny_config

    class Boom:
        def __reduce__(self):
            return (os.system, (f'touch {tmp_path}/pwned',))

    work = tmp_path / 'work'
    work.mkdir()
    torch.save({'state_dict': {}, 'meta': {'epoch': 1}, 'payload': Boom()}, str(work / 'epoch_1.pth'))
    (work / 'last_checkpoint').write_text(str(work / 'epoch_1.pth'))
    proc = run_tool('tools/train.py', tiny_config(tmp_path), '--work-dir', str(work), '--resume', check=False)
    assert proc.returncode == 1 and 'Traceback' not in proc.stderr
    assert 'outside the allow-list' in proc.stderr and 'epoch_1.pth' in proc.stderr
    assert not (tmp_path / 'pwned').exists()
