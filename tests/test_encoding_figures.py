"""The encoding pages' pictures (workbench/encoding_figures.py): every encoding that can be drawn is in a family's
picture, every picture is on its page and in the repository, and the script draws one as the command does."""

from pathlib import Path

import pytest

import vispe
from vispe.encodings.build import normalize_spec
from vispe.evaluation.encoding_maps import why_not_drawn
from workbench import encoding_figures

DOCS = Path(encoding_figures.ROOT) / 'docs'


def test_every_drawable_encoding_is_in_a_family_picture():
    drawn = {item['type'] for f in encoding_figures.FIGURES.values() for spec in f.encodings
             for item in normalize_spec(spec)}  # fmt: skip
    drawable = {name for name in vispe.list_encodings() if why_not_drawn(name) is None}
    assert drawable - drawn == set(), f'add {sorted(drawable - drawn)} to a figure in workbench/encoding_figures.py'


@pytest.mark.parametrize('name', list(encoding_figures.FIGURES))
def test_each_picture_is_committed_and_shown_on_its_page(name):
    figure = encoding_figures.FIGURES[name]
    assert (DOCS / figure.path).is_file(), f'{figure.path} is missing: run make docs-figures'
    page = (DOCS / figure.page).read_text()
    link = Path(figure.path).relative_to(Path(figure.page).parent) if figure.path.startswith(
        str(Path(figure.page).parent)) else Path(figure.path)  # fmt: skip
    assert f']({link.as_posix()})' in page, f'{figure.page} does not show {figure.path}'


def test_the_script_draws_a_picture_from_the_commands_functions(tmp_path):
    path = encoding_figures.draw('bias', out=tmp_path)
    assert Path(path) == tmp_path / 'encodings' / 'maps_bias.png'
    assert Path(path).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
