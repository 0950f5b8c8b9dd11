"""MkDocs hooks (mkdocs.yml `hooks:`): let the pages link the repository's files by relative paths that work on GitHub.

A page links a file outside docs/ the way GitHub resolves it (``../../results/leaderboard/fixed.png`` from
docs/results/leaderboard.md). MkDocs only knows the files under docs/, so here:

* an image outside docs/ (the leaderboard's plots under results/) is added to the site as ``repo/<its path>`` and the
  link is rewritten to it;
* any other link outside docs/ (a config, a test, models/README.md) becomes the path in code font: the site has no
  copy of the repository's files to link to;
* a link to a file that does not exist is left alone, so that MkDocs reports it (and the strict build fails).
"""

from __future__ import annotations

import os
import posixpath
import re

from mkdocs.structure.files import File

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


def on_files(files, config):
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

    return LINK.sub(replace, markdown)
