import gc
import importlib
import itertools
import os
import socket
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: the files at the checkout's root that building vispe's wheel reads, beside the folders vispe/ and configs/ (the
#: tests that build a wheel build it from a copy of these)
WHEEL_SOURCES = ('setup.py', 'pyproject.toml', 'README.md', 'LICENSE', 'vispe_launcher.py')

# Small, fast settings shared by the tests: 2 blocks, 32 px images, 8 px patches (a 4x4 grid).
TINY_VIT = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=5)


def pytest_configure(config):
    """Under pytest-xdist (make test), each worker takes its share of the cores: as torch threads, as Inductor's
    compile workers (TORCHINDUCTOR_COMPILE_THREADS), and so do the processes its tests start (OMP_NUM_THREADS).
    Workers that each take every core thrash. Settings the caller made are kept."""
    workers = os.environ.get('PYTEST_XDIST_WORKER_COUNT')
    if not workers:
        return
    threads = str(max(1, len(os.sched_getaffinity(0)) // int(workers)))
    if 'OMP_NUM_THREADS' not in os.environ:
        os.environ['OMP_NUM_THREADS'] = threads
        torch.set_num_threads(int(threads))
    os.environ.setdefault('TORCHINDUCTOR_COMPILE_THREADS', threads)  # read when Inductor's config is first imported


def pytest_collection_finish(session):
    """What collection imported (torch, timm, mmengine, vispe and the test modules: ~400k objects) lives for the
    whole session: frozen, the cyclic garbage collector stops walking it, and a ``gc.collect()`` (vispe's benchmarks
    and trainings call it before each measurement or run) takes microseconds instead of ~0.2 s."""
    gc.freeze()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def tiny_vit_kwargs():
    return dict(TINY_VIT)


#: numbers the runs of ``train_in_process`` (their experiment names)
_RUNS = itertools.count()


def train_in_process(config: str, work_dir: str):
    """Train ``config`` with mmengine's Runner in this process; returns (config path, path of epoch_1.pth, the
    model's initial state dict, the runner). Used by the tools tests' module fixtures. The run has an experiment
    name of its own: mmengine keys its logger and message hub by config name and second, and the runner is kept
    for the tests to read, so another run of a config of that name in the same second (under xdist, of another
    module) would write its losses into this run's message hub."""
    from mmengine.runner import Runner

    from vispe.engine.config import load_config

    cfg = load_config(config, work_dir=work_dir)
    cfg.experiment_name = f'{os.path.splitext(os.path.basename(config))[0]}_run{next(_RUNS)}'
    runner = Runner.from_cfg(cfg)
    runner.cfg.pop('experiment_name')  # the run's record of its config (in its checkpoints) is the file's
    init = {k: v.clone() for k, v in runner.model.state_dict().items()}
    runner.train()
    return cfg.filename, os.path.join(work_dir, 'epoch_1.pth'), init, runner


def changed_keys(init: dict, state: dict) -> list:
    """Names of the state-dict entries that training changed."""
    return [k for k in init if not torch.equal(init[k], state[k].to(init[k].dtype))]


#: why a test that needs open3d is skipped where it is missing (the GPU machine's own Python, for one)
NO_OPEN3D = "open3d is not installed: point-cloud files and the 3D data sets need it (vispe's 2D tests run without it)"


def needs_open3d():
    """open3d, or skip the calling test (or module, at import) with ``NO_OPEN3D`` as the reason."""
    return pytest.importorskip('open3d', reason=NO_OPEN3D)


def tiny_point_config(tmp_path, encoding='rope3d') -> str:
    """The point demo config shrunk: 2 blocks of width 48, 24 clouds of 128 points, batch 8 (3 iterations). Here,
    not in test_point_tools, so that test_amp imports it without open3d; where open3d is missing, the test that
    asks for it (its data set, Primitives3D, needs open3d) is skipped."""
    needs_open3d()
    base = os.path.join(ROOT, f'configs/point/point_tiny_{encoding}_primitives3d.py')
    path = tmp_path / f'tiny_{encoding}.py'
    path.write_text(f"""
_base_ = ['{base}']
train_points = 128
model = dict(backbone=dict(depth=2, embed_dim=48, num_heads=2, num_groups=16, group_size=8, group_hidden=16))
train_dataloader = dict(batch_size=8, dataset=dict(num_samples=24, num_points=train_points))
val_dataloader = dict(batch_size=20, dataset=dict(num_samples=20, num_points=train_points))
test_dataloader = val_dataloader
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True, begin=0, end=1)]
train_cfg = dict(max_epochs=1, val_interval=1)
default_hooks = dict(logger=dict(interval=1))
point_eval = dict(points=[train_points, 2 * train_points], scales=[1.0, 2.0])
""")
    return str(path)


@pytest.fixture(scope='module')
def one_thread():
    """One intra-op thread for a module's timings (``pytestmark = pytest.mark.usefixtures('one_thread')``): on a small
    machine shared with other jobs, two threads can wait ~100x longer."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def torchrun_cmd(config: str, work_dir, *extra: str) -> list:
    """tools/train.py under torchrun, 2 CPU processes (gloo), on a free port (a fixed one collides with another run
    of the tests, or with a worker of this one)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    run = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2', '--master_port', str(port)]
    return [*run, 'tools/train.py', config, '--work-dir', str(work_dir), '--launcher', 'pytorch', *extra]


#: epochs of the DDP run below; 32 images / (2 ranks x batch 8) = 2 iterations an epoch
DDP_EPOCHS = 4


@pytest.fixture(scope='session')
def ddp_run(tmp_path_factory):
    """One uninterrupted DDP run through torchrun (test_tools' check of DDP training, and test_interrupted's
    reference for a killed and resumed DDP run), started once: (config, work dir, its log). Tests that take it are
    marked ``xdist_group('ddp')`` so that one worker runs them all."""
    from test_tools import tiny_config

    tmp = tmp_path_factory.mktemp('ddp')
    config = tiny_config(tmp, epochs=DDP_EPOCHS, samples=32)
    proc = subprocess.run(torchrun_cmd(config, tmp / 'whole'), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return config, tmp / 'whole', proc.stdout + proc.stderr


def mmengine_instances() -> set[str]:
    """The names under which mmengine's ManagerMixin classes (MMLogger, MessageHub, ...) hold instances now."""
    from mmengine.utils import ManagerMixin

    names, classes = set(), [ManagerMixin]
    while classes:
        cls = classes.pop()
        names |= set(cls._instance_dict)
        classes += cls.__subclasses__()
    return names


def run_main(main, *args: str, capsys) -> subprocess.CompletedProcess:
    """A command's ``main`` (or ``'tools/X.py'``: the vispe.cli.X main that script runs, test_orchestration checks
    that each tool is such a shim) run in this process on ``args``, ended as its process would end: its exit status,
    stdout and stderr (``sys.exit('message')`` prints the message to stderr and exits 1; an exception other than
    SystemExit propagates, as the traceback a process would print). It spares a test that already runs the tool as a
    process the few seconds of another interpreter's imports."""
    if isinstance(main, str):
        name = os.path.splitext(os.path.basename(main))[0]
        main = importlib.import_module(f'vispe.cli.{name}').main
    capsys.readouterr()
    before = mmengine_instances()
    try:
        code = main(list(args))
    except SystemExit as done:
        code = done.code
    finally:  # what the process's end would drop: the mmengine instances (logger, ...) of a run it began
        from vispe.engine.train import release_instances

        for name in mmengine_instances() - before:
            release_instances(name)
    out, err = capsys.readouterr()
    if isinstance(code, str):
        err, code = f'{err}{code}\n', 1
    return subprocess.CompletedProcess(list(args), code or 0, out, err)
