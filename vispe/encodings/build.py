"""Building encodings from names, config dicts and lists of them, with errors that say what to fix."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any, TypeGuard

from vispe.encodings.base import Encoding, check_heads
from vispe.registry import ENCODINGS, closest

#: constructor arguments a backbone supplies (the user does not set them in a config)
BACKBONE_CONTEXT = frozenset({'dim', 'num_heads', 'ndim', 'grid_size', 'depth', 'layer_index', 'patch_size'})
#: where each of them comes from, for the error when a config sets one to something else
_CONTEXT_SOURCE = {
    'dim': "the backbone's embed_dim",
    'ndim': 'the kind of backbone (2 for images, 3 for points and video)',
    'layer_index': 'the block the encoding sits in',
}

EncodingSpec = None | str | dict[str, Any] | Sequence[str | dict[str, Any]]


def list_encodings(ndim: int | None = None, cameras: bool = False, grid: bool = True) -> list[str]:
    """Registered names, sorted; with ``ndim`` those for that many position axes, cameras' only with ``cameras``, and
    grid-only ones (``needs_grid``) only with ``grid``."""
    import vispe.encodings  # noqa: F401  (make sure every family file has registered itself)

    return sorted(
        name
        for name, cls in ENCODINGS.module_dict.items()
        if ndim is None or (ndim in cls.ndims and (cameras or not cls.needs_cameras) and (grid or not cls.needs_grid))
    )


def encoding_class(name: str) -> type[Encoding]:
    """The registered class for ``name``; an unknown name raises ValueError listing the closest names."""
    names = list_encodings()
    if name not in names:
        raise ValueError(f'unknown encoding {name!r}{closest(name, names)} Registered encodings: {", ".join(names)}')
    return ENCODINGS.get(name)


def encodings_declaring(capability: str) -> list[str]:
    """Registered names whose class sets the boolean capability ``capability`` (``learned_pos_embed``, ...)."""
    if not isinstance(getattr(Encoding, capability, None), bool):
        raise ValueError(f'{capability!r} is not a capability of Encoding (a class-level flag)')
    return [name for name in list_encodings() if getattr(encoding_class(name), capability)]


def normalize_spec(spec: EncodingSpec) -> list[dict[str, Any]]:
    """A name, a config dict, a one-line spec ('rope_dinov3:rescale=none', 'rope_mixed+peg') or a list of them ->
    a list of config dicts (copies)."""
    if spec is None or spec == 'none':
        return []
    if isinstance(spec, Encoding):
        raise TypeError(
            f'an encoding spec is a name, a config dict or a list of them; got a built {type(spec).__name__}: pass its '
            'registry name or config dict'
        )
    if isinstance(spec, (str, dict)):
        spec = [spec]
    spec = [part for item in spec for part in (parse_encoding_spec(item) if _one_line(item) else [item])]
    cfgs = []
    for item in spec:
        if isinstance(item, str):
            item = {'type': item}
        elif not isinstance(item, dict) or 'type' not in item:
            raise TypeError(f"an encoding is a name or a dict with a 'type' key, got {item!r}")
        cfgs.append(copy.deepcopy(dict(item)))
    names = [c['type'] for c in cfgs]
    for name in names:
        encoding_class(name)
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f'encoding(s) {dupes} listed twice; give each encoding once')
    return cfgs


def _one_line(item: Any) -> TypeGuard[str]:
    return isinstance(item, str) and (':' in item or '+' in item)


def _parse_value(text: str) -> Any:
    """'3' -> 3, '0.5' -> 0.5, 'true' -> True, 'none' -> None, else the string."""
    lowered = text.lower()
    if lowered in ('true', 'false'):
        return lowered == 'true'
    if lowered == 'none':
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_encoding_spec(spec: str) -> list[str | dict[str, Any]]:
    """A one-line spec -> encoding specs: 'irpe:mode=contextual,on=qkv+ape_learned' ->
    [{'type': 'irpe', 'mode': 'contextual', 'on': 'qkv'}, 'ape_learned']."""
    parts: list[str | dict[str, Any]] = []
    for part in spec.split('+'):
        name, sep, args = part.partition(':')
        if not sep:
            parts.append(name)
            continue
        cfg: dict[str, Any] = {'type': name}
        for item in args.split(','):
            key, eq, value = item.partition('=')
            if not eq or not key.strip():
                raise ValueError(f'encoding spec {spec!r}: expected name:key=value,key=value, got {item!r}')
            cfg[key.strip()] = _parse_value(value.strip())
        parts.append(cfg)
    return parts


def spec_items(spec: Any) -> list[str | dict[str, Any]]:
    """The encodings of a spec as written, names and dicts in order, 'none' and None left out (names not looked up)."""
    items = spec if isinstance(spec, (list, tuple)) else [spec]
    items = [part for item in items for part in (parse_encoding_spec(item) if _one_line(item) else [item])]
    for item in items:
        if not (isinstance(item, str) or item is None or (isinstance(item, dict) and 'type' in item)):
            raise TypeError(f"an encoding is a name or a dict with a 'type' key, got {item!r}")
    return [item for item in items if item is not None and item != 'none']


def spec_text(spec: Any, skip: Sequence[str] = ()) -> str:
    """The one-line spec of ``spec_items(spec)`` without the options in ``skip`` ('none' for none)."""
    parts = []
    for item in spec_items(spec):
        if isinstance(item, dict):
            options = ','.join(f'{k}={v}' for k, v in sorted(item.items()) if k != 'type' and k not in skip)
            parts.append(f'{item["type"]}:{options}' if options else str(item['type']))
        else:
            parts.append(item)
    return '+'.join(parts) or 'none'


#: named variants: an encoding spec that trains with further backbone arguments, for the rows an encoding spec alone
#: cannot name (the leaderboard's entries, the benchmark's rows). ViTAR's fuzzy PE is ape_learned trained on token
#: positions jittered within their cells and read at them (``grid_sample``).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    'ape_learned@fuzzy': ('ape_learned:strategy=grid_sample', {'position_sampler': {'type': 'fuzzy'}}),
}


def split_variant(name: str) -> tuple[str, dict[str, Any]]:
    """A row name -> (its encoding spec, further backbone arguments), from ``VARIANTS`` or the name itself."""
    spec, kwargs = VARIANTS.get(name, (name, {}))
    return spec, dict(kwargs)


def _same(a: Any, b: Any) -> bool:
    return (tuple(a) == tuple(b)) if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) else a == b


def _accepted(cls: type[Encoding]) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(cls).parameters)  # the constructor's, without self


def build_encoding(spec: str | dict[str, Any], **context: Any) -> Encoding:
    """Build one encoding from its name or config dict; ``context`` is what a backbone supplies (dim, num_heads, ...),
    of which the class takes what its constructor names. Unknown keys raise TypeError naming the closest argument;
    ``strategy`` is set after construction."""
    (cfg,) = normalize_spec(spec)
    name = cfg.pop('type')
    cls = encoding_class(name)
    params = _accepted(cls)
    strategy = cfg.pop('strategy', None) if 'strategy' not in params else None
    if strategy is not None and not cls.strategies:
        raise ValueError(f'{name} has no resolution strategies; remove strategy={strategy!r} from its config')
    unknown = [k for k in cfg if k not in params]
    if unknown:
        valid = [p for p in params if p not in BACKBONE_CONTEXT]
        hints = '; '.join(f'{k!r}{closest(k, valid)}' for k in unknown)
        listing = f'valid arguments: {valid}' if valid else 'it takes none besides what the backbone supplies'
        raise TypeError(f'{name} got unknown argument(s) {hints} ({listing})')
    # grid_size may differ on purpose (the grid of a pretrained table or of the original training resolution)
    fixed = BACKBONE_CONTEXT - {'grid_size'}
    clashes = [k for k in cfg if k in fixed and k in context and not _same(cfg[k], context[k])]
    if clashes:
        k = clashes[0]
        raise ValueError(
            f'{name}: {k}={cfg[k]!r} in the encoding config, but the backbone supplies {k}={context[k]!r} (from '
            f'{_CONTEXT_SOURCE.get(k, f"its {k}")}); remove {k} from the encoding config'
        )
    kwargs = {k: v for k, v in context.items() if k in params}
    kwargs.update(cfg)
    missing = [
        p.name
        for p in params.values()
        if p.default is inspect.Parameter.empty
        and p.name not in kwargs
        and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]
    if missing:
        raise TypeError(f'{name} needs {missing}: pass them, e.g. build_encoding({name!r}, dim=384, num_heads=6)')
    if 'dim' in kwargs and 'num_heads' in kwargs:
        check_heads(kwargs['dim'], kwargs['num_heads'], name)
    if strategy is not None and strategy not in cls.strategies:  # before building: the error names the config key
        raise ValueError(f'{name}: unknown strategy {strategy!r} in its config; choose one of {list(cls.strategies)}')
    encoding = cls(**kwargs)
    if strategy is not None:
        encoding.strategy = strategy  # the class's own checks (a rotary strategy needs the training grid)
    return encoding
