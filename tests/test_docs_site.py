"""The documentation site's frame: "Choosing an encoding" second in the navigation with a row for every registered
encoding, the package's version in the header (docs/hooks.py), tables whose numbers do not wrap. None of it needs
mkdocs installed (the strict build, `make docs`, checks links and rendering)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

import vispe

ROOT = Path(__file__).resolve().parents[1]


def _hooks():
    spec = importlib.util.spec_from_file_location('docs_hooks', ROOT / 'docs' / 'hooks.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_choosing_an_encoding_is_second_in_the_navigation() -> None:
    nav = yaml.safe_load((ROOT / 'mkdocs.yml').read_text(encoding='utf-8'))['nav']
    assert nav[0] == {'Home': 'index.md'}
    assert nav[1] == {'Choosing an encoding': 'results/choosing.md'}


def test_choosing_has_a_family_row_for_every_registered_encoding() -> None:
    text = (ROOT / 'docs' / 'results' / 'choosing.md').read_text(encoding='utf-8')
    section = text.split('## Every family', 1)[1].split('\n## ', 1)[0]
    listed = {name for row in section.splitlines() if row.startswith('|') for name in re.findall(r'`(\w+)`', row)}
    missing = sorted(set(vispe.list_encodings()) - listed)
    assert not missing, f'docs/results/choosing.md, "Every family": no row names {missing}; add them to a family'


def test_the_readme_tables_name_every_registered_encoding() -> None:
    text = (ROOT / 'README.md').read_text(encoding='utf-8')
    section = text.split('## Encodings', 1)[1].split('\n## ', 1)[0]
    listed = {name for row in section.splitlines() if row.startswith('|') for name in re.findall(r'`(\w+)`', row)}
    missing = sorted(set(vispe.list_encodings()) - listed)
    assert not missing, f'README.md, "Encodings": no table row names {missing}'


def test_the_header_shows_the_package_version() -> None:
    config = {'site_name': 'vispe', 'config_file_path': str(ROOT / 'mkdocs.yml'), 'repo_url': None}
    _hooks().on_config(config)
    assert config['site_name'] == f'vispe {vispe.__version__}'
    _hooks().on_config(config)  # a second build (mkdocs serve) does not add it twice
    assert config['site_name'] == f'vispe {vispe.__version__}'


def test_the_version_and_the_repository_are_read_as_text(tmp_path: Path) -> None:
    hooks = _hooks()
    (tmp_path / 'setup.py').write_text(
        "setup(\n    name='vispe',\n    version='1.2.3',\n    url='https://example.org/vispe',\n)\n"
    )
    assert hooks.package_version(str(tmp_path)) == '1.2.3'  # no vispe/__init__.py: setup.py's version=
    assert hooks.repository_url(str(tmp_path)) == 'https://example.org/vispe'
    (tmp_path / 'vispe').mkdir()
    (tmp_path / 'vispe' / '__init__.py').write_text("__version__ = '2.0.0'\n")
    assert hooks.package_version(str(tmp_path)) == '2.0.0'
    config = {'site_name': 'vispe', 'config_file_path': str(tmp_path / 'mkdocs.yml'), 'repo_url': None}
    hooks.on_config(config)
    assert (config['site_name'], config['repo_url']) == ('vispe 2.0.0', 'https://example.org/vispe')
    (tmp_path / 'setup.py').write_text("setup(name='vispe')\n")
    (tmp_path / 'vispe' / '__init__.py').write_text('"""no version"""\n')
    assert hooks.repository_url(str(tmp_path)) is None
    with pytest.raises(ValueError, match='__version__'):
        hooks.package_version(str(tmp_path))


def test_table_numbers_keep_their_spread_on_one_line() -> None:
    text = '| rope_axial | 51.5 ± 10.5 | 2.6 ± 0.4 |\nprose 1.0 ± 0.5 stays as written'
    rows = _hooks().keep_numbers_whole(text).split('\n')
    assert rows[0] == '| rope_axial | 51.5\u00a0±\u00a010.5 | 2.6\u00a0±\u00a00.4 |'
    assert rows[1] == 'prose 1.0 ± 0.5 stays as written'
