"""The checks every vispe backbone shares, of its arguments (sizes, rates, whole patches) and its inputs (shape,
channels, dtype), and a patch-embedding conv that works around a oneDNN fault."""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Sequence
from typing import Any

import torch
from timm.models import VisionTransformer
from torch import nn
from torch.fx._symbolic_trace import is_fx_symbolic_tracing

from vispe.encodings.base import check_heads
from vispe.positions import is_symbolic


def check_rates(owner: str, **rates: float) -> None:
    """ValueError naming ``owner`` and the argument unless each rate is a probability in [0, 1]."""
    for name, rate in rates.items():
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f'{owner}: {name} is a probability in [0, 1], got {name}={rate!r}')


def check_num_classes(owner: str, num_classes: Any) -> None:
    """ValueError naming ``owner`` unless ``num_classes`` is an int >= 0 (0: no head)."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral) or num_classes < 0:
        raise ValueError(
            f'{owner}: num_classes must be an int >= 0 (0: no head, the model returns its features), got '
            f'num_classes={num_classes!r}'
        )


def check_size(owner: str, name: str, value: Any, pair: bool = True) -> tuple[int, int]:
    """(H, W) from ``value``, a positive int or (with ``pair``) an (H, W) pair of them; ValueError otherwise."""
    given = tuple(value) if pair and isinstance(value, (tuple, list)) else (value, value)
    if len(given) == 2 and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 1 for v in given
    ):
        return int(given[0]), int(given[1])
    expected = 'an int or (H, W) of positive ints' if pair else 'a positive int'
    raise ValueError(f'{owner}: {name} must be {expected}, got {name}={value!r}')


def check_img_size(
    owner: str,
    img_size: int | Sequence[int],
    patch_size: int | Sequence[int],
    alternative: str = '',
    patch_pair: bool = True,
) -> None:
    """ValueError unless ``img_size`` and ``patch_size`` are sizes and the image divides into whole patches."""
    size, patch = check_size(owner, 'img_size', img_size), check_size(owner, 'patch_size', patch_size, patch_pair)
    check_patch_multiple(owner, size, patch, alternative, argument=True)


def check_patch_multiple(
    owner: str, size: tuple[int, int], patch: tuple[int, int], alternative: str = '', argument: bool = False
) -> None:
    """ValueError, suggesting the nearest multiple, unless ``size`` divides into whole patches."""
    (h, w), (ph, pw) = size, patch
    if min(h, w) < 1:
        raise ValueError(
            f'{owner}: image size {h}x{w} has a side of no pixels (an empty image or crop); pass images of at least '
            f'one patch, {ph}x{pw}'
        )
    if not (h % ph or w % pw):
        return
    near = f'{max(ph, round(h / ph) * ph)}x{max(pw, round(w / pw) * pw)}'
    if argument:
        problem = f'img_size {h}x{w} is not divisible by patch_size {ph}x{pw}: the border would never be seen'
        fix = f'use a multiple of the patch, e.g. img_size {near}'
    else:
        problem = f'image size {h}x{w} is not divisible by the patch size {ph}x{pw}'
        fix = f'resize or crop it to a multiple of the patch, e.g. {near}'
    raise ValueError(f'{owner}: {problem}; {fix}{alternative}')


def check_channels(owner: str, what: str, shape: Sequence[int], in_chans: int, one: bool = False) -> None:
    """ValueError with the fix when the channels (dim 0 with ``one``, else 1) are not ``in_chans``; traced ones pass."""
    if is_symbolic(shape):
        return
    c = shape[0] if one else shape[1]
    if is_symbolic(c) or c == in_chans:
        return
    if shape[-1] == in_chans:
        fix = 'it looks channels-last (H, W, C): permute it to channels-first (' + (
            'x.permute(2, 0, 1))' if one else 'x.permute(0, 3, 1, 2))'
        )
    elif c == 1 and in_chans == 3:
        fix = (
            'repeat the gray channel ('
            + ('x.expand(3, -1, -1)' if one else 'x.expand(-1, 3, -1, -1)')
            + (") or load it as RGB (PIL: img.convert('RGB'))")
        )
    elif c == 4 and in_chans == 3:
        fix = 'drop the alpha channel (' + ('x[:3]' if one else 'x[:, :3]') + ") or load it as RGB (img.convert('RGB'))"
    else:
        fix = f'give it {in_chans} channels, or build the model with in_chans={c}'
    raise ValueError(f'{owner}: {what} has shape {tuple(shape)}: {c} channel(s), but the model takes {in_chans}; {fix}')


def check_image_dims(owner: str, shape: Sequence[int]) -> None:
    """ValueError with a hint unless an input is a (B, C, H, W) batch; traced shapes pass."""
    if is_symbolic(shape) or len(shape) == 4:
        return
    hints = {
        1: 'a 1-D tensor is not an image (a flattened one reshapes to (1, C, H, W))',
        2: 'one single-channel image (H, W) is x[None, None]',
        3: 'one image (C, H, W) is x[None]; images of several sizes go as a list of (C, H, W) tensors',
        5: 'views (B, V, C, H, W) go into the batch (x.flatten(0, 1)), or to MultiViewTransformer with cameras',
    }
    hint = hints.get(len(shape), 'give a (B, C, H, W) batch')
    raise ValueError(f'{owner}: the input has shape {tuple(shape)}, not a batch of images (B, C, H, W); {hint}')


def check_input_dtype(owner: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    """ValueError with the fix when ``x``'s dtype is not ``weight``'s, unless autocast casts it (not float64)."""
    if x.dtype == weight.dtype:
        return
    if x.dtype in (torch.float32, torch.float16, torch.bfloat16) and torch.is_autocast_enabled(x.device.type):
        return
    if not x.is_floating_point():
        raise ValueError(
            f'{owner}: the input is {x.dtype} but the model is {weight.dtype}: convert it to floating point as in '
            f'training (e.g. x.float() / 255 for 8-bit images, then normalise), then cast as for any other dtype'
        )
    raise ValueError(
        f'{owner}: the input is {x.dtype} but the model is {weight.dtype}: cast the input (x.float(), or '
        f'x.to({weight.dtype})), cast the model (model.to({x.dtype})), or run mixed precision under autocast '
        f"(--amp in vispe's tools, torch.autocast in code)"
    )


def one_column_fault(conv: nn.Conv2d | nn.Conv3d, x: torch.Tensor) -> bool:
    """Whether ``conv`` on ``x`` is the strided bfloat16 CPU convolution one column wide that oneDNN gets wrong."""
    if is_fx_symbolic_tracing() or torch.compiler.is_exporting():  # FX and export: shapes are symbolic
        return False
    if x.device.type != 'cpu' or x.dim() != conv.weight.dim() or conv.padding_mode != 'zeros':
        return False
    if isinstance(conv.padding, str):
        return False
    if not (
        x.dtype == torch.bfloat16
        or (torch.is_autocast_enabled('cpu') and torch.get_autocast_dtype('cpu') == torch.bfloat16)
    ):
        return False
    span = x.shape[-1] + 2 * conv.padding[-1] - conv.dilation[-1] * (conv.kernel_size[-1] - 1) - 1
    return conv.stride[-1] > 1 and span // conv.stride[-1] + 1 == 1


class PatchConv2d(nn.Conv2d):
    """``nn.Conv2d`` for patch embeddings, working around a oneDNN fault of torch 2.14 on CPU.

    A strided bfloat16 convolution whose output is one column wide returns wrong values, sometimes NaN; such inputs get
    one stride of zero columns on the right, dropped from the output. TorchScript, FX and torch.export record the plain
    convolution, so a traced bf16 CPU model keeps the fault.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if self._hits_onednn_fault(x):
                padded = nn.functional.pad(x, (0, self.stride[1]))
                return self._conv_forward(padded, self.weight, self.bias)[..., :1]
        return self._conv_forward(x, self.weight, self.bias)

    @torch.jit.unused
    def _hits_onednn_fault(self, x: torch.Tensor) -> bool:
        return one_column_fault(self, x)


class PatchConv3d(nn.Conv3d):
    """``nn.Conv3d`` with ``PatchConv2d``'s workaround, for tubelet embeddings."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if self._hits_onednn_fault(x):
                padded = nn.functional.pad(x, (0, self.stride[2]))
                return self._conv_forward(padded, self.weight, self.bias)[..., :1]
        return self._conv_forward(x, self.weight, self.bias)

    @torch.jit.unused
    def _hits_onednn_fault(self, x: torch.Tensor) -> bool:
        return one_column_fault(self, x)


def use_patch_conv(patch_embed: nn.Module) -> None:
    """Give a timm ``PatchEmbed``'s projection the ``PatchConv2d`` workaround, in place."""
    if type(patch_embed.proj) is nn.Conv2d:
        patch_embed.proj.__class__ = PatchConv2d


#: timm's VisionTransformer defaults, for the checks of a VisionTransformerPE's arguments
TIMM_VIT_DEFAULTS = {
    k: p.default for k, p in inspect.signature(VisionTransformer.__init__).parameters.items() if k != 'self'
}


def check_vit_kwargs(kwargs: dict[str, Any], defaults: bool) -> None:
    """Check a ViT's img_size, patch_size, drop rates and heads before timm builds it (``defaults``: timm's fill in)."""
    for name in ('img_size', 'patch_size'):
        if name in kwargs:
            check_size('VisionTransformerPE', name, kwargs[name])
    check_rates('VisionTransformerPE', **{k: v for k, v in kwargs.items() if k.endswith('_rate')})
    if 'num_classes' in kwargs:
        check_num_classes('VisionTransformerPE', kwargs['num_classes'])
    args = {**TIMM_VIT_DEFAULTS, **kwargs} if defaults else kwargs
    if 'embed_dim' in args and 'num_heads' in args:
        check_heads(args['embed_dim'], args['num_heads'], 'VisionTransformerPE')


__all__ = [
    'PatchConv2d',
    'PatchConv3d',
    'one_column_fault',
    'check_channels',
    'check_image_dims',
    'check_img_size',
    'check_input_dtype',
    'check_patch_multiple',
    'check_num_classes',
    'check_rates',
    'check_size',
    'check_vit_kwargs',
    'use_patch_conv',
    'TIMM_VIT_DEFAULTS',
]
