"""Point-cloud tools end to end on tiny settings: a 3-iteration Runner training, the point-count and scale sweep,
and classifying .ply / .off files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import changed_keys, needs_open3d, run_main, tiny_point_config, train_in_process
from test_tools import run_tool

from vispe.cli.benchmark_fps import main as benchmark_fps_main
from vispe.cli.infer_points import main as infer_points_main
from vispe.engine.checkpoint import read_checkpoint
from vispe.engine.config import load_config
from vispe.evaluation.point_inference import dataset_view, predict_files
from vispe.evaluation.trained_model import build_model
from vispe.sweeps import points as point_sweep

o3d = needs_open3d()


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """Three Runner iterations in process; returns (config, checkpoint, initial state, runner)."""
    tmp = tmp_path_factory.mktemp('point_train')
    return train_in_process(tiny_point_config(tmp), str(tmp / 'work'))


def test_runner_trains_three_iterations(trained) -> None:
    _, ckpt, init, runner = trained
    assert runner.iter == 3
    state = read_checkpoint(ckpt)
    changed = changed_keys(init, state['state_dict'])
    assert any('qkv' in k for k in changed) and any('group_embed' in k for k in changed)
    assert state['meta']['dataset_meta']['classes'][0] == 'box'  # what infer_points names classes by
    losses = runner.message_hub.get_scalar('train/loss').data[0]
    assert len(losses) == 3 and all(0 < v < 10 for v in losses)


def test_eval_points_sweeps_counts_and_scales(trained, tmp_path) -> None:
    config, ckpt, _, _ = trained
    out = tmp_path / 'eval'
    proc = run_tool('tools/eval_points.py', config, ckpt, '--out', str(out), '--no-progress')
    results = json.loads((out / 'results.json').read_text())
    assert results['train_points'] == 128 and results['metric'] == 'accuracy'
    rows = results['results']
    assert [(r['sweep'], r['setting'], r['factor']) for r in rows] == [
        ('points', 128, 1.0),
        ('points', 256, 2.0),
        ('scale', 1.0, 1.0),
        ('scale', 2.0, 2.0),
    ]
    assert all(r['encoding'] == 'rope3d' and 0 <= r['value'] <= 100 for r in rows)
    assert rows[0]['value'] == rows[2]['value']  # the training setting, evaluated once, in both sweeps
    assert (out / 'results.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert '2x points' in proc.stdout and '2x scale' in proc.stdout
    table = point_sweep.markdown_table(rows)
    assert table.splitlines()[0] == '| encoding | 1x points | 2x points | 1x scale | 2x scale |'


def test_eval_points_with_explicit_settings_and_bad_ones(trained, tmp_path, capsys) -> None:
    config, ckpt, _, _ = trained
    proc = run_main('tools/eval_points.py', config, ckpt, '--points', '0', '--out', str(tmp_path), capsys=capsys)
    assert proc.returncode != 0 and 'point counts must be >= 1' in proc.stderr


def test_eval_points_reuses_the_cells_it_finished(trained, tmp_path) -> None:
    from vispe.engine.config import load_config

    config, ckpt, _, _ = trained
    assert read_checkpoint(ckpt)['meta']['train_points'] == 128  # RunMetaHook: what the model was trained on
    cfg, out, logged = load_config(config), str(tmp_path / 'eval'), []
    first = point_sweep.sweep(cfg, ckpt, [128], [1.0], 'cpu', show_progress=False, out_dir=out)
    both = point_sweep.sweep(
        cfg, ckpt, [128, 256], [1.0, 2.0], 'cpu', show_progress=False, out_dir=out, log=logged.append
    )
    assert any('reusing 2 of 4 finished cells' in line for line in logged)
    assert both['results'][0] == first['results'][0] and both['results'][2] == first['results'][1]
    assert json.loads((tmp_path / 'eval' / 'results.json').read_text())['results'] == both['results']


def test_infer_points_classifies_ply_and_off_files(trained, tmp_path, capsys) -> None:
    config, ckpt, _, _ = trained
    cloud = o3d.geometry.TriangleMesh.create_torus(0.4, 0.12).sample_points_uniformly(600)
    assert o3d.io.write_point_cloud(str(tmp_path / 'torus.ply'), cloud)
    assert o3d.io.write_triangle_mesh(str(tmp_path / 'cone.off'), o3d.geometry.TriangleMesh.create_cone(0.45, 1.0))
    files = [str(tmp_path / 'torus.ply'), str(tmp_path / 'cone.off')]
    proc = run_tool('tools/infer_points.py', config, ckpt, *files, '--topk', '2')
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(files[0]) and lines[1].startswith(files[1])
    classes = read_checkpoint(ckpt)['meta']['dataset_meta']['classes']
    for line in lines:
        predicted = line.split(': ', 1)[1].split(' (')[0]
        assert predicted in classes and line.count('%') == 2
    missing = run_main(infer_points_main, config, ckpt, str(tmp_path / 'nope.pcd'), capsys=capsys)  # in process
    assert missing.returncode != 0 and 'no such point-cloud file' in missing.stderr


def test_infer_points_reports_bad_files_and_goes_on(trained, tmp_path) -> None:
    """One bad file among several used to stop everything: now each bad file is one line naming it, the others are
    classified, a sparse cloud is warned about, and the exit status says that something failed."""
    config, ckpt, _, _ = trained
    torus = o3d.geometry.TriangleMesh.create_torus(0.4, 0.12)
    assert o3d.io.write_point_cloud(str(tmp_path / 'a.ply'), torus.sample_points_uniformly(600))
    assert o3d.io.write_point_cloud(str(tmp_path / 'sparse.pcd'), torus.sample_points_uniformly(20))
    (tmp_path / 'junk.ply').write_bytes(b'this is not a ply file')
    assert o3d.io.write_triangle_mesh(str(tmp_path / 'b.off'), o3d.geometry.TriangleMesh.create_cone(0.45, 1.0))
    names = ['a.ply', 'junk.ply', 'missing.pcd', 'sparse.pcd', 'b.off']
    files = [str(tmp_path / n) for n in names]
    proc = run_tool('tools/infer_points.py', config, ckpt, *files, check=False)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert [line.split(': ', 1)[0] for line in lines] == [files[0], files[3], files[4]]
    errors = [line for line in proc.stderr.splitlines() if line.startswith('error: ')]
    assert errors == [
        f'error: {files[1]}: not a PLY file (no "ply" magic line); ' + errors[0].split('; ', 1)[1],
        f'error: no such point-cloud file: {files[2]}',
    ]
    assert f'warning: {files[3]}: 20 points, far fewer than the 128 asked for (num_points)' in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == '2 of 5 files failed'


def test_user_clouds_are_put_in_the_data_sets_frame(tmp_path) -> None:
    from vispe.evaluation.point_inference import load_cloud

    torus = o3d.geometry.TriangleMesh.create_torus(0.4, 0.12).sample_points_uniformly(2000)
    path = str(tmp_path / 'far.pcd')
    assert o3d.io.write_point_cloud(path, torus.translate((5.0, -3.0, 2.0)))
    boxed = load_cloud(path, 256, 'bbox')  # primitives3d: centred on the bounding box, size kept
    assert boxed.shape == (256, 3)
    assert torch.allclose(boxed.amin(0), -boxed.amax(0), atol=1e-3)
    assert torch.allclose(boxed.amax(0) - boxed.amin(0), torch.tensor([1.04, 1.04, 0.24]), atol=0.03)
    sphere = load_cloud(path, 256, 'unit_sphere')  # ModelNet40: centred, farthest point at 1
    assert torch.isclose(sphere.norm(dim=1).max(), torch.tensor(1.0)) and sphere.mean(0).abs().max() < 1e-5


def test_fps_benchmark_times_both_and_measures_coverage(tmp_path, capsys) -> None:
    out = tmp_path / 'fps.json'
    proc = run_tool('tools/benchmark_fps.py', '--settings', '2x256x16', '--repeats', '1', '--out', str(out))
    rows = json.loads(out.read_text())['rows']
    assert [r['method'] for r in rows] == ['vispe', 'open3d', 'random'] and 'x open3d' in proc.stdout
    ours, theirs, random = rows
    assert ours['median_ms'] > 0 and theirs['ratio_to_open3d'] == 1.0 and ours['same_picks_as_open3d'] == 1.0
    assert ours['covering_radius'] == pytest.approx(theirs['covering_radius'])
    assert ours['covering_radius'] < random['covering_radius'] and ours['spread'] > random['spread']
    bad = run_main(benchmark_fps_main, '--settings', '2x16x32', capsys=capsys)  # in process
    assert bad.returncode != 0 and 'picks <= points' in bad.stderr


def test_infer_points_reads_modelnet_text_and_warns_of_a_shapeless_cloud(trained, tmp_path) -> None:
    """Before: a ModelNet40 .txt (the format its own data set reads) was an unsupported file type, and 600 copies of
    one point were classified like any cloud, without a word."""
    config, ckpt, _, _ = trained
    cfg = load_config(config)
    points = np.asarray(o3d.geometry.TriangleMesh.create_torus(0.4, 0.12).sample_points_uniformly(600).points)
    np.savetxt(tmp_path / 'torus.txt', np.concatenate([points, np.zeros_like(points)], 1), fmt='%.6f', delimiter=',')
    np.savetxt(tmp_path / 'dot.xyz', np.tile([[0.1, 0.2, 0.3]], (600, 1)), fmt='%.6f')
    files = [str(tmp_path / 'torus.txt'), str(tmp_path / 'dot.xyz')]
    torus, dot = predict_files(build_model(cfg, ckpt, 'cpu'), files, dataset_view(cfg))
    assert 'top' in torus and not torus['warnings'] and 'top' in dot
    assert dot['warnings'] == [f'{files[1]}: its 600 points hold only 1 distinct position, no shape to classify: the '
                               'classes below say nothing about it']  # fmt: skip
