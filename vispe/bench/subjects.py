"""What the benchmark times: one ``timing.Subject`` per row, every row built from the same seed.

``model`` level: a training step of the whole model (a timm ViT, a DiT, ``multiview`` or ``video``) on random inputs;
``attention`` level: one vispe ``Attention`` layer on random tokens of the image's grid, a model-level encoding as its
hook followed by that layer. The models and the row specs are described in the speed guide ("What is timed")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from vispe import geometry
from vispe.attention import Attention, set_attention_kernel
from vispe.backbones import VisionTransformerPE, create_model
from vispe.backbones.dit import DiT, dit
from vispe.backbones.multiview import MultiViewTransformer, multiview_encodings
from vispe.backbones.video import VideoTransformer
from vispe.bench.config import BenchmarkConfig
from vispe.bench.rows import (
    SDPA_BIAS,
    LearnedBiasAttention,
    build_model_row,
    check_model_row,
    is_model_row,
)
from vispe.bench.timing import Subject, compile_subjects
from vispe.encodings import Encoding, EncodingStack, encoding_class, list_encodings, parse_encoding_spec
from vispe.encodings.build import VARIANTS, split_variant
from vispe.positions import Positions, grid_positions

LEVELS = ('model', 'attention')
#: name of the attention-level row without any encoding
SDPA = 'sdpa'
#: the ratio denominator when none is given: each backbone family's default encoding
DEFAULT_BASELINE = {'vit': 'ape_learned', 'dit': 'ape_sincos', 'multiview': 'plucker', 'video': 'ape_learned'}
#: the multi-view model's name, and the views each sample of its benchmark has (the camera configs' training setting)
MULTIVIEW = 'multiview'
MULTIVIEW_VIEWS = 2
#: the video model's name, and the rows it times by default: the absolute baselines and the rotary encodings on
#: (t, h, w) grids (every video encoding is a valid row: ``list_encodings(ndim=3)``)
VIDEO = 'video'
VIDEO_DEFAULT = ('ape_learned', 'ape_sincos', 'rope_axial', 'rope_mixed', 'mrope', 'videorope', 'vrope')
#: the video model's default arguments: the tiny video configs' (configs/_base_/models/video_tiny.py)
VIDEO_ARGS = dict(num_frames=8, patch_size=4, tubelet_size=2, embed_dim=128, depth=4, num_heads=4, mlp_ratio=2.0)
#: ViT-S on clips (``--model-kwargs``): its width, depth, heads (head dim 64) and MLP in 16 px patches; at 8 frames
#: of 112 px a 4 x 7 x 7 grid, the 196 tokens of ViT-S/16 at 224 px
VIDEO_SMALL = dict(patch_size=16, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4.0)


def is_dit(model: str) -> bool:
    """'DiT-S/2' style names are vispe DiTs; anything else is a timm ViT name."""
    return model.startswith('DiT-')


def family(model: str) -> str:
    """'dit', 'multiview', 'video' or 'vit' (a timm ViT name)."""
    return 'dit' if is_dit(model) else model if model in (MULTIVIEW, VIDEO) else 'vit'


def default_rows(model: str) -> list[str]:
    """Every encoding the family's backbone takes (the camera ones for multiview, ``VIDEO_DEFAULT`` for video)."""
    if family(model) == 'multiview':
        return multiview_camera_encodings()
    if family(model) == 'video':
        return [name for name in VIDEO_DEFAULT if name in list_encodings(ndim=3)]
    return list_encodings(ndim=2)


def baseline_of(cfg: BenchmarkConfig) -> str:
    """The row every ratio is taken against: the config's, else the backbone family's default encoding."""
    return cfg.baseline or DEFAULT_BASELINE[family(cfg.model)]


# --- the rows --------------------------------------------------------------------------------------------------
def _classes(name: str) -> list[type[Encoding]]:
    """The encoding classes of a row spec; an unknown name raises vispe's ValueError (it lists the closest)."""
    spec = split_variant(name)[0]
    return [encoding_class(part if isinstance(part, str) else part['type']) for part in parse_encoding_spec(spec)]


def resolve_encodings(
    encodings: Sequence[str] | None, baseline: str, level: str = 'model', model: str = ''
) -> list[str]:
    """Row names: the baseline first, then the rest in order (default: ``default_rows``), duplicates dropped; an
    unknown name raises vispe's ValueError (it lists the closest registered names)."""
    if family(model) in (MULTIVIEW, VIDEO) and level != 'model':
        raise ValueError(f'the {family(model)} model is benchmarked whole: use --level model')
    names = list(dict.fromkeys([baseline, *(default_rows(model) if encodings is None else encodings)]))
    for name in names:
        if is_model_row(name):
            check_model_row(name, level)
        elif name in VARIANTS and level != 'model':
            raise ValueError(
                f'row {name!r} trains with ViT arguments {split_variant(name)[1]}: it runs at --level model'
            )
        elif name == SDPA_BIAS and level != 'attention':
            raise ValueError(f'row {SDPA_BIAS!r} is an attention core: it runs at --level attention, not {level}')
        elif not (level == 'attention' and name in (SDPA, SDPA_BIAS)):
            _classes(name)
    return names


def encoding_kind(name: str) -> str:
    """'bias' (logit bias or value term over the attention weights: N^2 tables), 'rotary', 'value' (from V alone),
    'embed' (changes the tokens); 'none' for ``sdpa``, 'bias' for ``sdpa_bias``, 'model' for 'timm:' / 'vispe:' rows."""
    if name == SDPA:
        return 'none'
    if name == SDPA_BIAS:
        return 'bias'
    if is_model_row(name):
        return 'model'
    hooks: set[str] = set()
    for cls in _classes(name):
        hooks |= cls.hooks()
    if 'logit_bias' in hooks:
        return 'bias'
    if 'rotate' in hooks:
        return 'rotary'
    return 'value' if 'value_term' in hooks else 'embed'


# --- the subjects ----------------------------------------------------------------------------------------------
def _build(cfg: BenchmarkConfig, name: str | None) -> VisionTransformerPE | DiT:
    """The model with encoding ``name`` (a row spec; None for none), seeded so shared weights agree."""
    return _build_dit(cfg, name) if is_dit(cfg.model) else _build_vit(cfg, name)


def _seeded_spec(cfg: BenchmarkConfig, name: str | None) -> list[str | dict[str, Any]] | None:
    """The row's encoding specs (None for none), torch seeded first so that every row's shared weights agree."""
    torch.manual_seed(cfg.seed)
    return None if name is None else parse_encoding_spec(split_variant(name)[0])


def _build_dit(cfg: BenchmarkConfig, name: str | None) -> DiT:
    if name in VARIANTS:
        raise ValueError(f'row {name!r} sets ViT arguments {split_variant(name)[1]} that a DiT does not take')
    return _ready(dit(cfg.model, encoding=_seeded_spec(cfg, name), img_size=cfg.img_size, **cfg.model_kwargs), cfg)


def vit_kwargs(cfg: BenchmarkConfig, name: str | None) -> dict[str, Any]:
    """The ViT arguments of a row: --model-kwargs, and over them a named variant's own (``split_variant``)."""
    return cfg.model_kwargs | (split_variant(name)[1] if name else {})


def _build_vit(cfg: BenchmarkConfig, name: str | None) -> VisionTransformerPE:
    model = create_model(cfg.model, encoding=_seeded_spec(cfg, name), img_size=cfg.img_size, **vit_kwargs(cfg, name))
    if not isinstance(model, VisionTransformerPE):  # a timm feature wrapper (features_only in model_kwargs)
        raise TypeError(f'the benchmark times a vispe ViT, but {cfg.model} built a {type(model).__name__}')
    return _ready(model, cfg)


Model = TypeVar('Model', VisionTransformerPE, DiT)


def _ready(model: Model, cfg: BenchmarkConfig) -> Model:
    model._check_size(*cfg.img_size)  # a clear ValueError now rather than in the first step
    return model.to(cfg.device).train()


def _patch_embed(model: VisionTransformerPE | DiT) -> Any:
    """The model's patch embedding (timm's PatchEmbed, HybridEmbed, ...): its ``proj`` and ``patch_size`` are read."""
    return model.x_embedder if isinstance(model, DiT) else model.patch_embed


def training_step(loss: Callable[[], torch.Tensor], cfg: BenchmarkConfig) -> Callable[[], None]:
    """forward + backward of ``loss``: the forward under bf16 autocast when ``cfg.amp``, the backward outside it."""
    device_type = torch.device(cfg.device).type

    def forward_backward() -> None:
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=cfg.amp):
            value = loss()
        value.backward()

    return forward_backward


def _model_step(cfg: BenchmarkConfig, name: str, model: nn.Module, loss: Callable[[], torch.Tensor]) -> Subject:
    return Subject(name, model, training_step(loss, cfg), lambda: model.zero_grad(set_to_none=True))


def _dit_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    """A DiT training step: MSE of the prediction on noisy random images at random times and labels."""
    model = _build_dit(cfg, name)
    gen = torch.Generator().manual_seed(cfg.seed)
    B = cfg.batch_size
    x = torch.randn(B, model.in_chans, *cfg.img_size, generator=gen).to(cfg.device)
    t = (torch.rand(B, generator=gen) * 1000).to(cfg.device)
    y = torch.randint(model.num_classes, (B,), generator=gen).to(cfg.device)
    target = torch.randn(B, model.out_chans, *cfg.img_size, generator=gen).to(cfg.device)

    def loss() -> torch.Tensor:
        return F.mse_loss(model(x, t, y).float(), target)

    return _model_step(cfg, name, model, loss)


def multiview_camera_encodings() -> list[str]:
    """The camera encodings the multi-view transformer takes (the image ones are benchmarked on the ViT)."""
    cameras = set(list_encodings(ndim=2, cameras=True)) - set(list_encodings(ndim=2))
    return [name for name in multiview_encodings() if name in cameras]


def _multiview_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    """A multi-view training step: the squared output plus the auxiliary losses, on random posed views with depths."""
    if name in VARIANTS or is_model_row(name):
        raise ValueError(f'row {name!r} is a ViT row; the multi-view model takes encodings only')
    args = dict(patch_size=4, embed_dim=128, depth=4, num_heads=4) | dict(cfg.model_kwargs)
    model = MultiViewTransformer(encoding=_seeded_spec(cfg, name), img_size=cfg.img_size, **args)
    model = model.to(cfg.device).train()
    gen = torch.Generator().manual_seed(cfg.seed)
    B, V, (H, W) = cfg.batch_size, MULTIVIEW_VIEWS, cfg.img_size
    images = torch.rand(B, V, 3, H, W, generator=gen)
    eye = F.normalize(torch.randn(B, V, 3, generator=gen), dim=-1) * (3.0 + 1.5 * torch.rand(B, V, 1, generator=gen))
    poses = geometry.look_at(eye, 0.2 * torch.randn(B, V, 3, generator=gen))
    focal = (W / 2) / torch.tan(torch.deg2rad(40.0 + 30.0 * torch.rand(B, V, generator=gen)) / 2)
    K = geometry.intrinsics(focal, H, W)
    depth = 2.0 + 3.0 * torch.rand(B, V, 1, H, W, generator=gen)
    inputs = [t.to(cfg.device) for t in (images, K, poses, depth)]

    def loss() -> torch.Tensor:
        out, aux = model.forward_with_losses(*inputs)
        return out.float().square().mean() + sum(aux.values(), torch.zeros((), device=out.device))

    return _model_step(cfg, name, model, loss)


def _video_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    """A video training step: cross-entropy on random labels of random clips of the image size."""
    if name in VARIANTS or is_model_row(name):
        raise ValueError(f'row {name!r} is a ViT row; the video model takes encodings only')
    args = VIDEO_ARGS | dict(cfg.model_kwargs)
    model = VideoTransformer(encoding=_seeded_spec(cfg, name), img_size=cfg.img_size, **args)
    model = model.to(cfg.device).train()
    gen = torch.Generator().manual_seed(cfg.seed)
    clips = torch.randn(cfg.batch_size, model.in_chans, model.num_frames, *cfg.img_size, generator=gen)
    clips = clips.to(cfg.device)
    labels = torch.randint(model.num_classes, (cfg.batch_size,), generator=gen).to(cfg.device)

    def loss() -> torch.Tensor:
        return F.cross_entropy(model(clips).float(), labels)

    return _model_step(cfg, name, model, loss)


def _model_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    if family(cfg.model) == 'multiview':
        return _multiview_subject(cfg, name)
    if family(cfg.model) == 'video':
        return _video_subject(cfg, name)
    if is_dit(cfg.model) and not is_model_row(name):
        return _dit_subject(cfg, name)
    # a vispe ViT, or the timm model a 'timm:' row names (timm's ViT or Eva: patch_embed and num_classes alike)
    model: Any = build_model_row(name, cfg).to(cfg.device).train() if is_model_row(name) else _build_vit(cfg, name)
    gen = torch.Generator().manual_seed(cfg.seed)
    classes = int(model.num_classes)
    images = torch.randn(cfg.batch_size, model.patch_embed.proj.in_channels, *cfg.img_size, generator=gen)
    images = images.to(cfg.device)
    labels = torch.randint(max(classes, 1), (cfg.batch_size,), generator=gen).to(cfg.device)

    def loss() -> torch.Tensor:
        out = model(images).float()
        # a headless model (num_classes=0) has no logits to classify: any scalar of its output will do
        return F.cross_entropy(out, labels) if classes else out.square().mean()

    return _model_step(cfg, name, model, loss)


class EncodedAttention(nn.Module):
    """One attention layer plus the model-level encodings' hooks around it (attention-level rows). In the model the
    hook runs once per forward, not once per layer, so such a row reads as "sdpa + the hook"."""

    def __init__(self, attn: Attention, model_level: nn.ModuleDict, num_prefix: int) -> None:
        super().__init__()
        self.attn, self.pe, self.num_prefix = attn, model_level, num_prefix

    def forward(self, x: torch.Tensor, pos: Positions) -> torch.Tensor:
        # the backbones' dispatch: active hooks, and after_block where blocks say
        stack = EncodingStack(self.pe)
        if stack.with_hook('embed'):
            prefix, patches = x[:, : self.num_prefix], x[:, self.num_prefix :]
            x = torch.cat([prefix, stack.embed(patches, pos)], dim=1)
        return stack.after_block(0, self.attn(x, pos), pos)  # the layer is block 0


def _attention_subject(cfg: BenchmarkConfig, name: str) -> Subject:
    model = _build(cfg, None if name in (SDPA, SDPA_BIAS) else name)
    num_prefix = getattr(model, 'num_prefix_tokens', 0)  # a DiT has none
    attn, model_level = model.blocks[0].attn, model.pe
    if not isinstance(attn, Attention) or not isinstance(model_level, nn.ModuleDict):  # what vispe backbones hold
        raise TypeError(f'{cfg.model}: expected a vispe Attention as blocks[0].attn and a ModuleDict as pe')
    (ph, pw), (h, w) = _patch_embed(model).patch_size, cfg.img_size
    pos = grid_positions(h // ph, w // pw, num_prefix, torch.device(cfg.device))
    n_tokens = num_prefix + pos.num_tokens
    layer: nn.Module = EncodedAttention(attn, model_level, num_prefix)
    if name == SDPA_BIAS:
        layer = LearnedBiasAttention(attn, n_tokens).to(cfg.device)
    gen = torch.Generator().manual_seed(cfg.seed)
    # requires_grad: inside a model the layer's input needs a gradient too, so backward computes it
    x = torch.randn(cfg.batch_size, n_tokens, model.embed_dim, generator=gen).to(cfg.device).requires_grad_()
    del model  # keep only the layer: the other blocks would just hold memory

    def loss() -> torch.Tensor:
        return layer(x, pos).float().square().mean()

    def zero_grad() -> None:
        layer.zero_grad(set_to_none=True)
        x.grad = None

    return Subject(name, layer, training_step(loss, cfg), zero_grad)


def build_subjects(cfg: BenchmarkConfig) -> list[Subject]:
    """Every row's module and step, built before anything is timed. Bad names or sizes raise ValueError."""
    if cfg.level not in LEVELS:
        raise ValueError(f'level must be one of {LEVELS}, got {cfg.level!r}')
    if cfg.device.startswith('cuda') and not torch.cuda.is_available():
        raise ValueError('device cuda asked for, but torch sees no CUDA device')
    names = resolve_encodings(cfg.encodings, baseline_of(cfg), cfg.level, cfg.model)
    if cfg.level == 'model':
        subjects = [_model_subject(cfg, name) for name in names]
    else:
        names += [] if SDPA in names else [SDPA]
        subjects = [_attention_subject(cfg, name) for name in names]
    if cfg.attention_kernel != 'auto':
        for subject in subjects:
            set_attention_kernel(subject.module, cfg.attention_kernel)
    if cfg.compile:
        compile_subjects(subjects, cfg.compile_scope)
    return subjects


__all__ = [
    'DEFAULT_BASELINE',
    'LEVELS',
    'MULTIVIEW',
    'VIDEO',
    'SDPA',
    'SDPA_BIAS',
    'EncodedAttention',
    'baseline_of',
    'build_subjects',
    'default_rows',
    'encoding_kind',
    'family',
    'is_dit',
    'multiview_camera_encodings',
    'resolve_encodings',
    'training_step',
    'vit_kwargs',
]
