"""Optimizer parameter groups from the model's own declaration, for mmengine.

``ParamGroupsOptimWrapperConstructor`` keeps out of weight decay the parameters ``no_weight_decay()`` declares (the same
set timm's ``create_optimizer_v2`` reads) plus, by timm's rule, 1-D parameters and biases. With ``layer_decay_rate=r``
it scales each layer's learning rate as BEiT does: r ** (depth + 1 - layer_id), layer ids from the backbone's
``layer_id``. paramwise_cfg options that would set decay another way are refused.
"""

from __future__ import annotations

import inspect
from fnmatch import fnmatchcase
from typing import Any, Protocol, cast

from mmengine.logging import print_log
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS, OPTIMIZERS
from torch import nn

from vispe.registry import OPTIM_WRAPPER_CONSTRUCTORS

#: mmengine paramwise options that set decay by parameter kind; here they may only restate the rule (0.0)
_RESTATED = ('bias_decay_mult', 'norm_decay_mult', 'flat_decay_mult')
#: mmengine paramwise options this constructor does not implement, with what to do instead
_REFUSED = {
    'dwconv_decay_mult': 'depthwise convs (peg, lepe) are decayed by their declaration',
    'bias_lr_mult': "use custom_keys={'.bias': dict(lr_mult=...)}",
    'dcn_offset_lr_mult': 'vispe has no deformable convs',
    'bypass_duplicate': 'parameters are taken once each (named_parameters), shared ones included',
}
_ACCEPTED = ('layer_decay_rate', 'custom_keys', *_RESTATED)


class _Declarer(Protocol):
    """A module declaring its no-decay parameters (timm's contract: names relative to it)."""

    def no_weight_decay(self) -> set[str]: ...


class _LayerNumbering(Protocol):
    """A module numbering its parameters' layers (BEiT's ``layer_id``; vispe's EncodingHost)."""

    @property
    def num_layers(self) -> int: ...

    def layer_id(self, name: str) -> int: ...


def _under(name: str, prefix: str) -> bool:
    return not prefix or name == prefix or name.startswith(prefix + '.')


def _declarers(model: nn.Module) -> list[tuple[str, _Declarer]]:
    """(prefix, module) of the outermost modules with a ``no_weight_decay()``, each speaking for its subtree."""
    found: list[tuple[str, _Declarer]] = []
    for prefix, module in model.named_modules():
        if callable(getattr(module, 'no_weight_decay', None)) and not any(_under(prefix, p) for p, _ in found):
            found.append((prefix, cast(_Declarer, module)))
    return found


def no_decay(name: str, param: nn.Parameter, declared: set[str]) -> bool:
    """timm's rule: no decay for 1-D parameters, biases and the declared names (``fnmatch`` patterns)."""
    return param.ndim <= 1 or name.endswith('.bias') or any(fnmatchcase(name, p) for p in declared)


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class ParamGroupsOptimWrapperConstructor:
    """Builds the optimizer wrapper with parameter groups from the model's declaration.

    paramwise_cfg may hold:

    - ``layer_decay_rate`` (in (0, 1]): layer-wise lr decay; the model needs exactly one vispe backbone.
    - ``custom_keys`` ({substring: dict(lr_mult=m)}): lr multipliers, the longest key wins; no ``decay_mult``.
    - ``bias_decay_mult``, ``norm_decay_mult``, ``flat_decay_mult``: only 0.0, what the rule does anyway.

    Each group holds the parameters of one (layer, decay, lr_mult), with ``lr`` scaled by both and ``weight_decay`` the
    optimizer's or 0; the groups are logged at INFO.

    Args:
        optim_wrapper_cfg: the config's ``optim_wrapper``, with ``optimizer=dict(type=..., lr=...)``.
        paramwise_cfg: the keys listed above; None: none.
    """

    def __init__(self, optim_wrapper_cfg: dict, paramwise_cfg: dict | None = None) -> None:
        if not isinstance(optim_wrapper_cfg, dict) or 'optimizer' not in optim_wrapper_cfg:
            raise TypeError(f'optim_wrapper needs an optimizer=dict(type=..., lr=...), got {optim_wrapper_cfg!r}')
        self.optim_wrapper_cfg = dict(optim_wrapper_cfg)
        self.optimizer_cfg = dict(self.optim_wrapper_cfg.pop('optimizer'))
        self.paramwise_cfg = dict(paramwise_cfg or {})
        self.base_lr = self.optimizer_cfg.get('lr')
        self.base_wd = self.optimizer_cfg.get('weight_decay')
        self._check_paramwise()
        self.layer_decay_rate: float | None = self.paramwise_cfg.get('layer_decay_rate')
        self.lr_mults = {key: float(value.get('lr_mult', 1.0)) for key, value in self.custom_keys.items()}

    @property
    def custom_keys(self) -> dict[str, dict]:
        return dict(self.paramwise_cfg.get('custom_keys') or {})

    def _check_paramwise(self) -> None:
        cfg, owner = self.paramwise_cfg, 'ParamGroupsOptimWrapperConstructor'
        for key, value in cfg.items():
            if key in _REFUSED:
                raise ValueError(f'{owner} does not take paramwise_cfg.{key}: {_REFUSED[key]}')
            if key in _RESTATED and value != 0.0:
                raise ValueError(
                    f'{owner}: paramwise_cfg.{key}={value!r} contradicts the decay rule (1-D parameters and biases '
                    f"take no weight decay); drop it, or use mmengine's DefaultOptimWrapperConstructor for that policy"
                )
            if key not in _ACCEPTED:
                raise ValueError(f'{owner} got unknown paramwise_cfg.{key}; it takes {list(_ACCEPTED)}')
        rate = cfg.get('layer_decay_rate')
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1):
            raise ValueError(f'{owner}: layer_decay_rate is a number in (0, 1] (BEiT: 0.65), got {rate!r}')
        if rate is not None and self.base_lr is None:
            raise ValueError(f'{owner}: layer_decay_rate scales the optimizer lr, so optimizer.lr must be set')
        if not isinstance(cfg.get('custom_keys') or {}, dict):
            raise TypeError(f'{owner}: custom_keys is a dict {{name substring: dict(lr_mult=...)}}')
        for key, value in self.custom_keys.items():
            extra = set(value) - {'lr_mult'}
            if 'decay_mult' in extra:
                raise ValueError(
                    f'{owner}: custom_keys[{key!r}] sets decay_mult, but weight decay is declared by the model (each '
                    "encoding's no_weight_decay_params, the backbone's tokens and tables, 1-D parameters and biases); "
                    'declare it there instead of matching names in a config'
                )
            if extra:
                raise ValueError(f'{owner}: custom_keys[{key!r}] takes lr_mult only, got {sorted(extra)}')
            if self.base_lr is None:
                raise ValueError(f'{owner}: custom_keys lr_mult scales the optimizer lr, so optimizer.lr must be set')

    # --- the groups ---------------------------------------------------------------------------------------------------
    def _lr_mult(self, name: str) -> float:
        for key in sorted(sorted(self.lr_mults), key=len, reverse=True):
            if key in name:
                return self.lr_mults[key]
        return 1.0

    def _layers(self, model: nn.Module) -> tuple[dict[str, int], int] | None:
        if self.layer_decay_rate is None:
            return None
        hosts: list[tuple[str, _LayerNumbering]] = []
        for prefix, module in model.named_modules():  # the outermost modules that number their layers
            if callable(getattr(module, 'layer_id', None)) and not any(_under(prefix, p) for p, _ in hosts):
                hosts.append((prefix, cast(_LayerNumbering, module)))
        if len(hosts) != 1:
            raise ValueError(
                'ParamGroupsOptimWrapperConstructor: layer_decay_rate needs exactly one vispe backbone (an '
                f'EncodingHost: VisionTransformerPE, DiT, PointTransformer, MultiViewTransformer) in the model, found '
                f'{len(hosts)}' + (f' at {[p or "<root>" for p, _ in hosts]}' if hosts else '')
            )
        prefix, host = hosts[0]
        num_layers = host.num_layers
        strip = len(prefix) + 1 if prefix else 0
        ids = {
            name: host.layer_id(name[strip:]) if _under(name, prefix) else num_layers + 1
            for name, _ in model.named_parameters()
        }
        return ids, num_layers

    def param_groups(self, model: nn.Module) -> list[dict[str, Any]]:
        """The optimizer's parameter groups for ``model``, in layer order, decayed group first."""
        declarers = _declarers(model)
        declared: dict[str, set[str]] = {}
        for prefix, module in declarers:
            declared[prefix] = {f'{prefix}.{n}' if prefix else n for n in module.no_weight_decay()}
        layers = self._layers(model)
        rate = 1.0 if self.layer_decay_rate is None else self.layer_decay_rate  # layers is None without a rate
        groups: dict[tuple[int, bool, float], dict[str, Any]] = {}
        for name, param in model.named_parameters():
            owner = next((p for p, _ in declarers if _under(name, p)), None)
            decay = not no_decay(name, param, declared[owner] if owner is not None else set())
            layer = layers[0][name] if layers else 0
            mult = self._lr_mult(name)
            group = groups.get((layer, not decay, mult))
            if group is None:
                group = groups[(layer, not decay, mult)] = {'params': [], 'names': []}
                scale = rate ** (layers[1] + 1 - layer) if layers else 1.0
                if self.base_lr is not None:
                    group['lr'] = self.base_lr * scale * mult
                if not decay:
                    group['weight_decay'] = 0.0
                elif self.base_wd is not None:
                    group['weight_decay'] = self.base_wd
            group['params'].append(param)
            group['names'].append(name)
        ordered = [groups[key] for key in sorted(groups)]
        for (layer, _, _), group in sorted(groups.items()):
            where = f' (layer {layer})' if layers else ''
            lr, wd = group.get('lr', '(optimizer)'), group.get('weight_decay', '(optimizer)')
            names = group['names']
            print_log(
                f'param group{where}: lr {lr}, weight_decay {wd}, {len(names)} tensors: {", ".join(names)}',
                logger='current',
            )
        for group in ordered:
            del group['names']  # for the log only: strings in every checkpoint's optimizer state are no use
        return ordered

    def __call__(self, model: nn.Module) -> OptimWrapper:
        wrapped = getattr(model, 'module', None)
        if isinstance(wrapped, nn.Module):  # a model wrapper (DDP and mmengine's): its names carry 'module.'
            model = wrapped
        optimizer_cfg = dict(self.optimizer_cfg)
        optimizer_cls = optimizer_cfg['type']
        if isinstance(optimizer_cls, str):
            with OPTIMIZERS.switch_scope_and_registry(None) as registry:
                optimizer_cls = registry.get(optimizer_cls)
        # the first argument takes the parameters, whatever it is called (mmengine's convention)
        first = next(iter(inspect.signature(optimizer_cls).parameters))
        optimizer_cfg[first] = self.param_groups(model)
        optimizer = OPTIMIZERS.build(optimizer_cfg)
        wrapper_cfg = dict(self.optim_wrapper_cfg)
        wrapper_cfg.setdefault('type', 'OptimWrapper')
        return OPTIM_WRAPPERS.build(wrapper_cfg, default_args=dict(optimizer=optimizer))


__all__ = ['ParamGroupsOptimWrapperConstructor', 'no_decay']
