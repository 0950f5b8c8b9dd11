"""The report module (rows -> pivot -> markdown / JSON / figure), vispe.sweeps.merge and tools/compare_results.py on
synthetic results."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from vispe.engine.run_meta import resolution_label
from vispe.evaluation import figures, report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_PATH = pathlib.Path(ROOT)


def row(enc, res, value, strategy='none', **extra):
    return dict(encoding=enc, strategy=strategy, resolution=res, value=value, **extra)


def test_pivot_means_repeats_and_keeps_missing_cells_missing():
    rows = [row('a', 32, 90.0), row('a', 32, 94.0), row('a', 64, 50.0), row('b', 32, 10.0)]
    table = report.pivot(rows, ('encoding', 'strategy'), 'resolution')
    assert table.keys == [('a', 'none'), ('b', 'none')] and table.columns == ['32', '64']
    stat = table.get(('a', 'none'), '32')
    assert (stat.mean, stat.n) == (92.0, 2) and stat.std == pytest.approx(2.8284, abs=1e-3)
    assert table.get(('a', 'none'), '64') == (50.0, 0.0, 1)
    assert table.get(('b', 'none'), '64') is None and table.stat(('b', 'none'), '64').n == 0
    assert report.cell_text(stat, '.1f', spread=True) == '92.0 ± 2.8' and report.cell_text(stat, '.1f') == '92.0'


def test_a_failed_repeat_is_not_averaged_away():
    table = report.pivot([row('a', 32, 1.0), row('a', 32, 'failed')], ('encoding',), 'resolution')
    assert table.get(('a',), '32') == 'failed'


def test_columns_given_or_ordered_by_pixels_then_height():
    rows = [row('a', [48, 32], 1.0), row('a', 64, 2.0), row('a', [32, 48], 3.0), row('a', 32, 4.0)]
    ordered = report.pivot(
        rows,
        ('encoding',),
        lambda r: resolution_label(r['resolution'], collapse_square=True),
        order=report.resolution_order,
    )
    assert ordered.columns == ['32', '32x48', '48x32', '64']
    chosen = report.pivot(
        rows, ('encoding',), lambda r: resolution_label(r['resolution'], collapse_square=True), columns=['64', '32']
    )
    assert chosen.columns == ['64', '32'] and ('a',) in chosen.keys


def test_markdown_and_json():
    rows = [row('a', 32, 90.0), row('a', 32, 94.0), row('b', 64, 5.0, strategy='default')]
    table = report.pivot(rows, ('encoding', 'strategy'), 'resolution')
    lines = report.markdown(table, '.1f', spread=True).splitlines()
    assert lines == [
        '| encoding | strategy | 32 | 64 |',
        '|---|---|---|---|',
        '| a | none | 92.0 ± 2.8 | nan |',
        '| b | default | nan | 5.0 |',
    ]
    assert report.markdown(table, align=':').splitlines()[1] == '|---|---|---:|---:|'
    doc = json.loads(json.dumps(table.to_json()))
    assert doc['columns'] == ['32', '64'] and doc['rows'][0]['encoding'] == 'a'
    assert doc['rows'][0]['cells']['32'] == {'mean': 92.0, 'std': pytest.approx(2.8284, abs=1e-3), 'n': 2}
    assert '64' not in doc['rows'][0]['cells']


def test_describe_names_model_data_and_training_size():
    results = {
        'train_resolution': [32, 48],
        'resolved_config': {
            'model.backbone.type': 'VisionTransformerPE',
            'model.backbone.encoding': ['rope_mixed', 'peg'],
            'train_dataloader.dataset.type': 'RepeatDataset',
            'train_dataloader.dataset.dataset.type': 'Shapes2D',
            'train_dataloader.dataset.dataset.num_samples': 2000,
        },
    }
    assert report.describe(results) == (
        'VisionTransformerPE (rope_mixed+peg) on Shapes2D, trained at 32x48 px, 2000 training samples'
    )
    flat = {'model.backbone.type': 'ViT', 'model.backbone.encoding.0': 'a', 'model.backbone.encoding.1': 'b'}
    assert report.describe({'resolved_config': flat}) == 'ViT (a+b)'  # how flat_config spells a list
    one = {'model.backbone.type': 'ViT', 'model.backbone.encoding.type': 'rope_mixed'}
    assert report.describe({'resolved_config': one}) == 'ViT (rope_mixed)'  # one encoding as a dict
    one['model.backbone.encoding.strategy'] = 'interpolate'
    assert report.describe({'resolved_config': one}) == 'ViT (rope_mixed:strategy=interpolate)'
    options = {'model.backbone.type': 'ViT', 'model.backbone.encoding.0.type': 'ape_learned',
               'model.backbone.encoding.0.lape': True, 'model.backbone.encoding.1': 'peg'}  # fmt: skip
    assert report.describe({'resolved_config': options}) == 'ViT (ape_learned:lape=True+peg)'  # never the bare name
    trained = {'model.backbone.type': 'ViT', 'model.backbone.encoding': 'lff',
               'train_dataloader.dataset.num_samples': 300}  # fmt: skip
    shipped = {**trained, 'model.backbone.encoding': 'ape_learned', 'train_dataloader.dataset.num_samples': 6000}
    assert report.describe({'resolved_config': shipped, 'trained_config': trained}) == 'ViT (lff), 300 training samples'
    assert report.describe({'train_points': 512}) == 'trained on 512 points'
    assert report.describe({}) == ''


def _axes_after(plot, tmp_path, monkeypatch):
    """Run ``plot`` and return the Axes of the figures it saved (save_figure closes them, so catch them first)."""
    saved = []
    monkeypatch.setattr(figures.plt().Figure, 'savefig', lambda fig, path, **kw: saved.append(fig))
    plot()
    return [ax for fig in saved for ax in fig.axes]


def test_resolution_plot_labels_non_square_sizes_apart_and_keeps_equal_lines_visible(tmp_path, monkeypatch):
    from vispe.sweeps.resolution import plot_results

    rows = [row(enc, res, 50.0) for enc in ('a', 'b') for res in (32, [32, 48], [48, 32])]
    results = {'train_resolution': 32, 'resolved_config': {'model.backbone.type': 'ViT'}}
    path = str(tmp_path / 'r.png')
    (ax,) = _axes_after(
        lambda: plot_results(rows, path, train_resolution=32, title=report.describe(results)), tmp_path, monkeypatch
    )
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ['32', '32x48', '48x32']
    assert ax.get_title() == 'ViT, trained at 32 px'
    lines = [ln for ln in ax.get_lines() if ln.get_marker() not in (None, 'None', '')]
    assert len(lines) == 2
    (xa, ya), (xb, yb) = [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in lines]
    assert ya == yb and xa == xb == [0, 1, 2]  # equal values, on the ticks ...
    a, b = lines  # ... yet both visible: another marker, colour and size, the later one nested in the first
    assert a.get_marker() != b.get_marker() and a.get_color() != b.get_color()
    assert a.get_markersize() > b.get_markersize()


def test_leaderboard_plot_puts_non_square_sizes_apart(tmp_path, monkeypatch):
    from workbench.leaderboard_report import plot, summarize

    values = {('t', e, 'none', r): [1.0, 2.0] for e in ('a', 'b') for r in ('32', '32x48', '48x32')}
    axes = _axes_after(
        lambda: plot(summarize(values), ['t'], ['32', '32x48', '48x32'], str(tmp_path / 'l.png')), tmp_path, monkeypatch
    )
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ['32', '32x48', '48x32']


def results_file(folder, encoding, values, sweep='resolution', **extra):
    os.makedirs(folder, exist_ok=True)
    doc = {
        'config': 'c.py',
        'checkpoint': 'x.pth',
        'train_resolution': 32,
        'metric': 'accuracy',
        'results': [row(encoding, res, v) for res, v in values.items()],
        'failed': [],
        'complete': True,
        'sweep': sweep,
        'resolved_config': {'model.backbone.type': 'VisionTransformerPE', 'train_dataloader.dataset.type': 'Shapes2D'},
        **extra,
    }
    path = os.path.join(folder, 'results.json')
    with open(path, 'w') as f:
        json.dump(doc, f)
    return path


def tool(*args):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, 'tools', 'compare_results.py'), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_compare_results_merges_runs_into_one_table_and_figure(tmp_path):
    a = results_file(tmp_path / 'run_a' / 'eval', 'rope', {32: 90.0, '32x48': 80.0})
    b = results_file(tmp_path / 'run_b' / 'eval', 'rope', {32: 90.0, '48x32': 70.0})
    done = tool(a, b, '--out', str(tmp_path / 'cmp'))
    assert done.returncode == 0, done.stderr
    table = (tmp_path / 'cmp' / 'comparison.md').read_text().splitlines()
    assert table[0] == '| run | encoding | strategy | 32 | 32x48 | 48x32 |'
    assert table[2] == '| run_a | rope | none | 90.0 | 80.0 | nan |'
    assert table[3] == '| run_b | rope | none | 90.0 | nan | 70.0 |'
    assert table[0] in done.stdout
    merged = json.loads((tmp_path / 'cmp' / 'comparison.json').read_text())
    assert merged['sweep'] == 'resolution' and set(merged['sources']) == {'run_a', 'run_b'}
    with open(tmp_path / 'cmp' / 'comparison.png', 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'

    compare_results().main([a, b, '--labels', 'A', 'B', '--out', str(tmp_path / 'cmp2')])
    assert (tmp_path / 'cmp2' / 'comparison.md').read_text().splitlines()[2].startswith('| A | rope | none |')


def compare_results():
    """tools/compare_results.py as a module: its refusals are checked in-process (a subprocess costs an import of
    vispe each)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location('compare_results', os.path.join(ROOT, 'tools', 'compare_results.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refusal(capsys, *args):
    with pytest.raises(SystemExit) as exit_:
        compare_results().main(list(args))
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_compare_results_refuses_other_kinds_and_other_files(tmp_path, capsys):
    a = results_file(tmp_path / 'a', 'rope', {32: 90.0})
    p = results_file(tmp_path / 'p', 'pointrope', {}, sweep='points')
    mixed = refusal(capsys, a, p, '--out', str(tmp_path / 'out'))
    assert 'different kinds' in mixed and 'p is a points sweep' in mixed
    other = tmp_path / 'other.json'
    other.write_text(json.dumps({'hello': 1}))
    assert 'not a sweep results.json' in refusal(capsys, a, str(other), '--out', str(tmp_path / 'out'))
    old = results_file(tmp_path / 'old', 'rope', {32: 1.0}, sweep=None)
    assert 'no known sweep kind' in refusal(capsys, a, old, '--out', str(tmp_path / 'out'))
    (tmp_path / 'broken.json').write_text('{')
    assert 'not a readable results.json' in refusal(capsys, str(tmp_path / 'broken.json'), '--out', str(tmp_path))
    assert 'labels for 2 results' in refusal(capsys, a, old, '--labels', 'x', '--out', str(tmp_path / 'out'))
    assert not (tmp_path / 'out').exists()


def test_compare_results_names_incomplete_and_refuses_empty_sweeps(tmp_path, capsys):
    """Before: a sweep whose results.json was empty or incomplete was left out of the table (or shown as if whole),
    exit 0. Now an incomplete one is labelled so in its rows and an empty one is refused by name."""
    a = results_file(tmp_path / 'a', 'rope', {32: 90.0, 48: 80.0})
    cut = results_file(tmp_path / 'cut', 'rope', {32: 91.0}, complete=False)
    bad = results_file(tmp_path / 'bad', 'rope', {32: 89.0}, complete=False, failed=[row('rope', 48, 0.0)])
    compare_results().main([a, cut, bad, '--out', str(tmp_path / 'cmp')])
    table = (tmp_path / 'cmp' / 'comparison.md').read_text()
    assert '| cut (incomplete: interrupted) | rope | none | 91.0 | nan |' in table
    assert '| bad (incomplete: 1 failed cell) | rope | none | 89.0 | nan |' in table
    assert '| a | rope | none | 90.0 | 80.0 |' in table
    empty = results_file(tmp_path / 'empty', 'rope', {}, complete=False)
    said = refusal(capsys, a, empty, '--out', str(tmp_path / 'out'))
    assert 'empty holds no results (an interrupted or failed sweep)' in said and not (tmp_path / 'out').exists()


def test_compare_results_refuses_one_run_twice_and_runs_on_other_data(tmp_path, capsys):
    """Before: the same file twice, two copies of one run, or runs on different data sets made one table, exit 0."""
    a = results_file(tmp_path / 'a', 'rope', {32: 90.0}, checkpoint_sha256='c1', config_sha256='k1')
    assert 'given twice' in refusal(capsys, a, a, '--out', str(tmp_path / 'out'))
    copy = results_file(tmp_path / 'copy', 'rope', {32: 90.0}, checkpoint_sha256='c1', config_sha256='k1')
    assert 'hold the results of one run' in refusal(capsys, a, copy, '--out', str(tmp_path / 'out'))
    config = {'test_dataloader.dataset.type': 'ImageFolderDataset', 'test_dataloader.dataset.data_root': '/d/cats'}
    cats = results_file(tmp_path / 'cats', 'rope', {32: 50.0}, resolved_config=config)
    said = refusal(capsys, a, cats, '--out', str(tmp_path / 'out'))
    assert 'evaluated on different data sets' in said and 'ImageFolderDataset /d/cats' in said
    assert not (tmp_path / 'out').exists()
    loose = results_file(tmp_path / 'loose', 'rope', {32: 10.0}, resolved_config={'load_strict': False})
    compare_results().main([a, loose, '--out', str(tmp_path / 'cmp')])
    assert 'note: loose was evaluated from a non-strict load' in capsys.readouterr().err


def test_tables_printed_to_a_file_or_pipe_are_whole():
    """Before: a tool's table printed to a file or pipe came out at rich's assumed 80 columns, its cells cut
    ('rope_mi…', 'interp…'). Now every tool takes ``report.console``, which is as wide as the table needs there."""
    import io
    import re

    from rich.console import Console

    from vispe.sweeps.resolution import results_table

    sizes = [16, 24, 32, 48, 64, 96, 128, '32x64', '64x32', '48x96', '96x48', '128x256']
    rows = [row(enc, s, 50.0 + i, strategy=st) for enc in ('rope_mixed', 'comrope_ld') for st in ('interpolate', 'yarn')
            for i, s in enumerate(sizes)]  # fmt: skip
    cut = io.StringIO()
    Console(file=cut).print(results_table(rows, title='accuracy'))
    assert '…' in cut.getvalue()  # what the tools printed before
    whole = io.StringIO()
    report.console(file=whole).print(results_table(rows, title='accuracy'))
    text = whole.getvalue()
    assert '…' not in text and 'rope_mixed' in text and 'interpolate' in text and '128x256' in text
    # every tool builds its console this way: no other rich Console in the package or the tools
    sources = [p for folder in ('vispe', 'tools') for p in (ROOT_PATH / folder).rglob('*.py')]
    built = [str(p) for p in sources if re.search(r'\bConsole\(', p.read_text()) and p.name != 'report.py']
    assert built == []


def _figure_after(plot, monkeypatch):
    saved = []
    monkeypatch.setattr(figures.plt().Figure, 'savefig', lambda fig, path, **kw: saved.append(fig))
    plot()
    return saved[0]


def test_every_line_has_its_own_colour_and_marker_up_to_twelve_lines():
    for count in (3, 10, 11, 12):
        styles = figures.line_styles(count)
        assert len({s['color'] for s in styles}) == count, count
        assert len({s['marker'] for s in styles}) == count, count


def test_a_sweep_figure_has_chance_its_legend_outside_the_data_and_names_the_real_model(tmp_path, monkeypatch):
    from vispe.sweeps.resolution import plot

    config = {'model.backbone.model_name': 'vit_tiny_patch16_224', 'model.backbone.encoding': 'rope_mixed',
              'model.backbone.patch_size': 4, 'model.backbone.embed_dim': 64, 'model.backbone.depth': 4,
              'model.backbone.num_heads': 4, 'model.backbone.num_classes': 27}  # fmt: skip
    rows = [row(enc, res, 50.0, strategy=s) for enc in ('ape', 'rope') for s in ('none', 'interpolate')
            for res in (32, 64)]  # fmt: skip
    results = {'train_resolution': 32, 'resolved_config': config, 'results': rows}
    fig = _figure_after(lambda: plot(results, str(tmp_path / 'r.png')), monkeypatch)
    (ax,) = fig.axes
    title = ax.get_title()
    assert title.startswith('ViT (rope_mixed; patch 4, width 64, depth 4, heads 4)'), title
    assert 'patch16' not in title and 'trained at 32 px' in title
    chance = [ln for ln in ax.get_lines() if ln.get_linestyle() == '--']
    assert len(chance) == 1 and list(chance[0].get_ydata()) == [pytest.approx(100 / 27)] * 2
    assert ax.get_ylim()[0] == 0
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == len(set(labels)) and labels[-1] == 'chance (3.7%)'
    fig.canvas.draw()  # the legend's box lies right of the axes: it covers no data
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1


def test_compare_results_labels_say_each_thing_once():
    from vispe.cli.compare_results import line_label
    from vispe.sweeps import merge

    assert merge.run_labels(['runs/rope_mixed/eval/results.json', 'runs/ape/eval/results.json']) == [
        'rope_mixed',
        'ape',
    ]
    assert line_label(('rope_mixed', 'rope_mixed', 'none')) == 'rope_mixed none'
    assert line_label(('seed0/rope', 'rope_mixed', 'default')) == 'seed0/rope rope_mixed'
