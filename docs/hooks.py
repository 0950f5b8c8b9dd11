"""MkDocs hooks (mkdocs.yml `hooks:`): let the pages link the repository's files by relative paths that work on GitHub.

A page links a file outside docs/ the way GitHub resolves it (``../../results/leaderboard/fixed.png`` from
docs/results/leaderboard.md). MkDocs only knows the files under docs/, so here:

* an image outside docs/ (the leaderboard's plots under results/) is added to the site as ``repo/<its path>`` and the
  link is rewritten to it;
* any other link outside docs/ (a config, a test, models/README.md) becomes the path in code font: the site has no
  copy of the repository's files to link to;
* a link to a file that does not exist is left alone, so that MkDocs reports it (and the strict build fails);
* a table's ``mean ± std`` cells keep each number on one line (non-breaking spaces around ``±``).

The header shows the package's version (``site_name`` becomes ``vispe X.Y.Z``), read from vispe/__init__.py's
``__version__`` (or setup.py's ``version=``) as text: building the site imports neither vispe nor torch. When
setup.py names the project's public address (``url='https://...'``), the header links it as the repository.
"""

from __future__ import annotations

import os
import posixpath
import re

IMAGE = ('.png', '.jpg', '.jpeg', '.svg', '.gif')
LINK = re.compile(r'(!?)\[([^\]]*)\]\(([^)\s]+)\)')
REPO_DIR = 'repo'  # where images from outside docs/ go in the site


def _outside(page_src: str, target: str) -> str | None:
    """The repository path ``target`` (relative to the page at docs/``page_src``) names when it leaves docs/."""
    if re.match(r'^[a-z]+:', target) or target.startswith(('#', '/')):
        return None
    path = target.split('#', 1)[0]
    resolved = posixpath.normpath(posixpath.join('docs', posixpath.dirname(page_src), path))
    return None if resolved.startswith('docs/') or resolved.startswith('..') else resolved


def _root(config) -> str:
    return os.path.dirname(config['config_file_path'])


def _read(root: str, name: str) -> str:
    path = os.path.join(root, name)
    if not os.path.exists(path):
        return ''
    with open(path, encoding='utf-8') as fh:
        return fh.read()


def package_version(root: str) -> str:
    """vispe's version under ``root``: ``__version__`` in vispe/__init__.py, else ``version=`` in setup.py, as
    written (a literal string); neither raises ValueError."""
    for name, pattern in (('vispe/__init__.py', r'^__version__\s*=\s*'), ('setup.py', r'^\s*version\s*=\s*')):
        found = re.search(pattern + r"['\"]([^'\"]+)['\"]", _read(root, name), re.M)
        if found:
            return found.group(1)
    raise ValueError(f"no version string in {root}/vispe/__init__.py (__version__ = '...') or setup.py (version='...')")


def repository_url(root: str) -> str | None:
    """The public address setup.py gives (``url='https://...'``), or None when it gives none."""
    found = re.search(r"^\s*url\s*=\s*['\"](https?://[^'\"]+)['\"]", _read(root, 'setup.py'), re.M)
    return found.group(1) if found else None


def on_config(config):
    root = _root(config)
    version = package_version(root)
    if not config['site_name'].endswith(version):
        config['site_name'] = f'{config["site_name"]} {version}'
    url = repository_url(root)
    if url and not config.get('repo_url'):
        config['repo_url'], config['repo_name'] = url, 'vispe'
    return config


def on_files(files, config):
    from mkdocs.structure.files import File  # here: the functions above serve tests without mkdocs installed

    root = _root(config)
    for page in [f for f in files if f.src_uri.endswith('.md')]:
        with open(page.abs_src_path, encoding='utf-8') as fh:
            text = fh.read()
        for image, _, target in LINK.findall(text):
            path = _outside(page.src_uri, target)
            if image and path and path.lower().endswith(IMAGE) and not files.get_file_from_path(f'{REPO_DIR}/{path}'):
                files.append(File.generated(config, f'{REPO_DIR}/{path}', abs_src_path=os.path.join(root, path)))
    return files


def on_page_markdown(markdown, page, config, files):
    def replace(match: re.Match) -> str:
        image, text, target = match.groups()
        path = _outside(page.file.src_uri, target)
        if path is None or not os.path.exists(os.path.join(_root(config), path)):
            return match.group(0)  # inside docs/, or a file that does not exist: MkDocs checks (and strict fails)
        if image and path.lower().endswith(IMAGE):
            rel = posixpath.relpath(f'{REPO_DIR}/{path}', posixpath.dirname(page.file.src_uri) or '.')
            return f'![{text}]({rel})'
        return text if f'`{path}`' in text or text == path else f'{text} (`{path}`)'

    return keep_numbers_whole(LINK.sub(replace, markdown))


#: a mean and its spread in a table row ("51.5 ± 10.5"), which a narrow column would break over two lines
SPREAD = re.compile(r'(\d) ± (\d)')


def keep_numbers_whole(markdown: str) -> str:
    """``markdown`` with the spaces around ``±`` in its table rows made non-breaking: a wide table then scrolls
    instead of wrapping a number."""
    lines = markdown.split('\n')
    for i, line in enumerate(lines):
        if line.lstrip().startswith('|'):
            lines[i] = SPREAD.sub('\\1\u00a0±\u00a0\\2', line)
    return '\n'.join(lines)
