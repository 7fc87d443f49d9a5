#!/usr/bin/env python3
"""vitrine_dump.py: one call of a PyTorch ViT written as a vitrine parity file.

The file (docs/parity-format.md) holds the inputs, the parameters under the model's own
state_dict keys, the outputs and gradients computed in float64 (a double copy of the model)
rounded to float32 -- the truth that `vitrine parity` compares the engine with -- and PyTorch's
own float32 results beside them (torch32/), with the metadata the parity command needs.

As a script (a model built from a timm name or constructor kwargs, or a lightly setup):

    python3 vitrine_dump.py OUT.safetensors --kind lightly --name vit_tiny_patch16_224 \\
        --kwargs '{"img_size": 64}' --call encode --idx-mask --batch 2 --seed 0

As a module (an existing model object: a fine-tuned one keeps its weights):

    import vitrine_dump
    vitrine_dump.dump(model, images, 'model.safetensors', call='encode', idx_mask=idx_mask)

Models: timm VisionTransformer (module timm.VisionTransformer: forward, forward_features,
forward_intermediates with its options; every option vitrine computes, vit_config; DeiT's
VisionTransformerDistilled as timm.VisionTransformerDistilled, forward with distilled_training),
lightly MaskedVisionTransformerTIMM (encode, forward, forward_intermediates; idx_mask, idx_keep,
mask, norm), lightly MaskedCausalVisionTransformer (forward_features; mask, is_causal), and
lightly's MAE / AIM examples as the classes MAE and AIM below (loss). Needs torch; timm and
lightly only for the models that are theirs. Supported versions: SUPPORTED below (written into
every file as the `reference` metadata).
"""
import argparse
import copy
import json
import math
import os
import re
import struct
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as _e:  # as a script: one line and exit 2, never a traceback
    if __name__ == '__main__':
        print(f'vitrine_dump.py: PyTorch is not importable by {sys.executable} ({_e}): install it '
              '(Debian: python3-torch) or run this with a Python that has it', file=sys.stderr)
        sys.exit(2)
    raise

FORMAT = 'vitrine-parity/1'
TOOL = 'vitrine_dump.py 1'
# (minimum, the version it was tested with): below the minimum the tool refuses; between the two,
# or above the tested one, it runs and says so on stderr.
SUPPORTED = {
    'torch': ('1.13', '1.13.0'),
    'timm': ('0.9.9', '1.0.29.dev0'),
    'lightly': ('1.5.0', '1.5.26'),
}
KINDS = {  # --kind -> the module name the parity file records
    'timm': 'timm.VisionTransformer',
    'lightly': 'lightly.MaskedVisionTransformerTIMM',
    'causal': 'lightly.MaskedCausalVisionTransformer',
    'mae': 'lightly.examples.MAE',
    'aim': 'lightly.examples.AIM',
}
DISTILLED = 'timm.VisionTransformerDistilled'  # DeiT's (deit_*_distilled_*): --kind timm
# each module's calls and the optional inputs each call takes (MAE/AIM: required)
# timm's VisionTransformer.forward_intermediates: its keyword arguments vitrine computes (attn_mask and
# is_causal are not among them)
TIMM_INTERMEDIATES = ('indices', 'return_prefix_tokens', 'norm', 'stop_early', 'output_fmt', 'intermediates_only',
                      'output_dict')
CALLS = {
    'timm.VisionTransformer': {'forward_features': (), 'forward': (), 'forward_intermediates': TIMM_INTERMEDIATES},
    DISTILLED: {'forward_features': (), 'forward': ('distilled_training',), 'forward_intermediates': TIMM_INTERMEDIATES},
    'lightly.MaskedVisionTransformerTIMM': {'encode': ('idx_mask', 'idx_keep', 'mask'),
                                            'forward': ('idx_mask', 'idx_keep', 'mask'),
                                            'forward_intermediates': ('idx_mask', 'idx_keep', 'mask', 'norm')},
    'lightly.MaskedCausalVisionTransformer': {'forward_features': ('mask', 'is_causal')},
    'lightly.examples.MAE': {'loss': ('idx_keep', 'idx_mask')},
    'lightly.examples.AIM': {'loss': ('mask',)},
}
REQUIRED = {'lightly.examples.MAE': ('idx_keep', 'idx_mask'), 'lightly.examples.AIM': ('mask',)}


class DumpError(Exception):
    """A model, call or input the parity format cannot describe (the message says which)."""


# ---- safetensors ---------------------------------------------------------------------------------

DTYPES = {torch.float32: ('F32', '<f4', 4), torch.int64: ('I64', '<i8', 8), torch.bool: ('BOOL', '|b1', 1)}


def _le_bytes(t):
    """The tensor's elements as little-endian bytes."""
    t = t.detach().cpu().contiguous()
    try:
        import numpy as np
        return np.ascontiguousarray(t.numpy()).astype(DTYPES[t.dtype][1], copy=False).tobytes()
    except ImportError:  # torch without numpy: element by element
        fmt = {torch.float32: 'f', torch.int64: 'q', torch.bool: '?'}[t.dtype]
        return struct.pack('<%d%s' % (t.numel(), fmt), *t.reshape(-1).tolist())


def write_safetensors(path, tensors, metadata):
    """tensors: {name: float32 / int64 / bool tensor} in file order; metadata: {str: str}.
    The header is compact JSON (tensors in order, then __metadata__), padded with spaces so that
    the data starts at a multiple of 8; the data are the tensors back to back, little-endian."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        if t.dtype not in DTYPES:
            raise DumpError(f'{name}: dtype {t.dtype} is not one the parity format uses (float32, int64, bool)')
        data = _le_bytes(t)
        header[name] = {'dtype': DTYPES[t.dtype][0], 'shape': list(t.shape), 'data_offsets': [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header['__metadata__'] = {k: str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-(8 + len(text)) % 8)
    tmp = f'{path}.tmp-{os.getpid()}'
    with open(tmp, 'wb') as f:
        f.write(struct.pack('<Q', len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def read_safetensors(path):
    """(tensors, metadata) of a safetensors file (F32, F16, BF16, F64, I64, I32, BOOL)."""
    with open(path, 'rb') as f:
        raw = f.read()
    if len(raw) < 8:
        raise DumpError(f'{path}: shorter than the 8-byte header length')
    n = struct.unpack('<Q', raw[:8])[0]
    if n > len(raw) - 8:
        raise DumpError(f'{path}: header of {n} bytes in a file of {len(raw)}')
    header = json.loads(raw[8:8 + n])
    meta = header.pop('__metadata__', {}) or {}
    dt = {'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16, 'F64': torch.float64,
          'I64': torch.int64, 'I32': torch.int32, 'BOOL': torch.bool}
    out = {}
    for name, e in header.items():
        if e['dtype'] not in dt:
            raise DumpError(f'{path}: tensor {name} has dtype {e["dtype"]}, which this reader does not take')
        a, b = e['data_offsets']
        buf = bytearray(raw[8 + n + a:8 + n + b])
        t = torch.frombuffer(buf, dtype=dt[e['dtype']]) if buf else torch.empty(0, dtype=dt[e['dtype']])
        if sys.byteorder == 'big' and t.element_size() > 1:
            raise DumpError('read_safetensors: big-endian hosts are not supported')
        out[name] = t.reshape(e['shape'])
    return out, meta


# ---- versions ------------------------------------------------------------------------------------

def _version_tuple(v):
    return tuple(int(x) for x in re.findall(r'\d+', v.split('+')[0])[:3])


def _check_version(name, version, warn):
    low, tested = SUPPORTED[name]
    if _version_tuple(version) < _version_tuple(low):
        raise DumpError(f'{name} {version} is older than this tool supports ({name} >= {low}; tested with {tested})')
    if _version_tuple(version) != _version_tuple(tested):
        warn(f'{name} {version}: this tool was tested with {name} {tested}')


def _library(model):
    """The libraries the model's classes come from: {'timm', 'lightly'} subset."""
    libs = set()
    for m in model.modules():
        root = type(m).__module__.split('.')[0]
        if root in ('timm', 'lightly'):
            libs.add(root)
    return libs


def reference_versions(model, warn=lambda s: None):
    """The `reference` metadata: the versions of torch and of timm / lightly if the model uses them."""
    _check_version('torch', torch.__version__, warn)
    parts = []
    for lib in ('timm', 'lightly'):
        if lib in _library(model):
            v = sys.modules[lib].__version__
            _check_version(lib, v, warn)
            parts.append(f'{lib} {v}')
    parts.append(f'torch {torch.__version__}')
    return ', '.join(parts)


# ---- attention on torch < 2.0 --------------------------------------------------------------------

def sdpa_math(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    """F.scaled_dot_product_attention as PyTorch 2's math backend computes it (q and k each scaled
    by sqrt(scale); a bool mask allows where True). lightly's MaskedCausalAttention calls only
    SDPA, which torch 1.13 lacks: the dump installs this while it runs such a model there."""
    s = q.size(-1) ** -0.5 if scale is None else scale
    r = math.sqrt(s)
    attn = (q * r) @ (k * r).transpose(-2, -1)
    if is_causal:
        allowed = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        attn = attn.masked_fill(~allowed, float('-inf'))
    if attn_mask is not None:
        attn = attn.masked_fill(~attn_mask, float('-inf')) if attn_mask.dtype == torch.bool else attn + attn_mask
    attn = attn.softmax(dim=-1)
    if dropout_p > 0:
        attn = F.dropout(attn, dropout_p)
    return attn @ v


class _SdpaFallback:
    """With torch < 2.0: F.scaled_dot_product_attention = sdpa_math, and every MaskedCausalAttention
    of the given models set to call it, for the duration of a `with`."""

    def __init__(self, models):
        self.active = not hasattr(F, 'scaled_dot_product_attention') and any(
            _is(m, 'MaskedCausalAttention') for model in models for m in model.modules())
        self.models = models

    def __enter__(self):
        if self.active:
            F.scaled_dot_product_attention = sdpa_math
            for model in self.models:
                for m in model.modules():
                    if _is(m, 'MaskedCausalAttention'):
                        m.fused_attn = True
        return self

    def __exit__(self, *exc):
        if self.active:
            del F.scaled_dot_product_attention


# ---- what a model is -----------------------------------------------------------------------------

def _is(obj, *names):
    return any(c.__name__ in names for c in type(obj).__mro__)


def _norm_of(m, where):
    """(kind, eps) of a norm layer vitrine computes: ('layernorm', eps) for torch's / timm's
    LayerNorm with weight and bias, ('rmsnorm', eps) for timm's RmsNorm with weight."""
    if isinstance(m, nn.LayerNorm):
        if not m.elementwise_affine or getattr(m, 'bias', True) is None:
            raise DumpError(f'{where}: LayerNorm without weight and bias; vitrine computes it with both')
        return 'layernorm', float(m.eps)
    if _is(m, 'RmsNorm'):
        if getattr(m, 'weight', None) is None:
            raise DumpError(f'{where}: RmsNorm without a weight; vitrine computes it with one')
        return 'rmsnorm', float(m.eps)
    raise DumpError(f'{where}: {type(m).__name__} where vitrine computes a LayerNorm or RmsNorm')


def _layernorm(m, where, eps=1e-6):
    kind, e = _norm_of(m, where)
    if kind != 'layernorm' or e != eps:
        raise DumpError(f'{where}: {type(m).__name__}(eps={e}); vitrine computes LayerNorm eps {eps} with weight and bias here')


def _same_norm(m, where, norm):
    if _norm_of(m, where) != norm:
        raise DumpError(f'{where}: {type(m).__name__}(eps={_norm_of(m, where)[1]}) where block 0\'s norm1 is {norm[0]} '
                        f'eps {norm[1]}: vitrine computes one norm_layer')


def _ratio(hidden, dim):
    """The mlp_ratio whose int(dim * ratio) is `hidden` (as timm computes the hidden size)."""
    r = hidden / dim
    while int(dim * r) < hidden:
        r = math.nextafter(r, math.inf)
    return r


def _act_of(act, where):
    """timm's act_layer name of an MLP's activation vitrine computes."""
    if isinstance(act, nn.GELU):
        a = getattr(act, 'approximate', 'none')
        if a in ('none', 'tanh'):
            return 'gelu' if a == 'none' else 'gelu_tanh'
    elif _is(act, 'GELU'):
        return 'gelu'
    elif _is(act, 'GELUTanh'):
        return 'gelu_tanh'
    elif _is(act, 'QuickGELU'):
        return 'quick_gelu'
    raise DumpError(f'{where}: {act!r}; vitrine computes exact GELU, gelu_tanh and quick_gelu (timm act_layer)')


def _check_mlp(mlp, where, bias=True, act='gelu', norm=None):
    if not _is(mlp, 'Mlp') or not isinstance(getattr(mlp, 'fc1', None), nn.Linear):
        raise DumpError(f'{where}: {type(mlp).__name__} where vitrine computes timm\'s Mlp (fc1, act, norm, fc2)')
    if _act_of(mlp.act, f'{where}.act') != act:
        raise DumpError(f'{where}.act: {mlp.act!r} where block 0\'s is {act}: vitrine computes one act_layer')
    has_norm = not isinstance(getattr(mlp, 'norm', nn.Identity()), nn.Identity)
    if has_norm != (norm is not None):
        raise DumpError(f'{where}.norm: {"a" if has_norm else "no"} MLP norm where vitrine computes {"none" if norm is None else "one"} '
                        '(scale_mlp_norm)')
    if has_norm:
        _same_norm(mlp.norm, f'{where}.norm', norm)
    for fc in ('fc1', 'fc2'):
        if (getattr(mlp, fc).bias is not None) != bias:
            raise DumpError(f'{where}.{fc}: {"no " if bias else ""}bias where {"fc1" if fc == "fc2" else "the block"} has '
                            f'{"" if bias else "none"}: vitrine computes timm\'s (proj_bias: both or neither)')


def _check_block(blk, where, dim, heads, hidden, qk_norm, ls, norm=('layernorm', 1e-6), act='gelu', proj_bias=True,
                 attn_norm=False, mlp_norm=False):
    if not _is(blk, 'Block', 'MaskedCausalBlock'):
        raise DumpError(f'{where}: {type(blk).__name__} where vitrine computes timm\'s Block (block_fn)')
    _same_norm(blk.norm1, f'{where}.norm1', norm)
    _same_norm(blk.norm2, f'{where}.norm2', norm)
    a = blk.attn
    if not _is(a, 'Attention', 'MaskedCausalAttention') or _is(a, 'DiffAttention', 'AttentionRope'):
        raise DumpError(f'{where}.attn: {type(a).__name__} where vitrine computes timm\'s Attention (attn_layer)')
    if a.num_heads != heads or a.num_heads * a.head_dim != dim or a.qkv.out_features != 3 * dim:
        raise DumpError(f'{where}.attn: {a.num_heads} heads of {a.head_dim} for dim {dim}; every block needs {heads} heads of dim / heads')
    if getattr(a, 'gate', None) is not None:
        raise DumpError(f'{where}.attn: gated attention is not computed by vitrine')
    has_an = not isinstance(getattr(a, 'norm', nn.Identity()), nn.Identity)
    if has_an != attn_norm:
        raise DumpError(f'{where}.attn.norm: scale_attn_norm differs from block 0')
    if has_an:
        _same_norm(a.norm, f'{where}.attn.norm', norm)
    if (a.proj.bias is not None) != proj_bias:
        raise DumpError(f'{where}.attn.proj: its bias differs from block 0 (proj_bias)')
    if isinstance(a.q_norm, nn.Identity) == qk_norm:
        raise DumpError(f'{where}.attn: qk_norm differs from block 0')
    if qk_norm:
        _same_norm(a.q_norm, f'{where}.attn.q_norm', norm)
        _same_norm(a.k_norm, f'{where}.attn.k_norm', norm)
    if (not isinstance(blk.ls1, nn.Identity)) != ls or (not isinstance(blk.ls2, nn.Identity)) != ls:
        raise DumpError(f'{where}: LayerScale (init_values) differs from block 0')
    _check_mlp(blk.mlp, f'{where}.mlp', bias=proj_bias, act=act, norm=norm if mlp_norm else None)
    if blk.mlp.fc1.out_features != hidden:
        raise DumpError(f'{where}.mlp: {blk.mlp.fc1.out_features} hidden units, block 0 has {hidden}')


def _pair(v):
    return tuple(int(x) for x in v) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _square(v, what):
    v = _pair(v)
    if v[0] != v[1]:
        raise DumpError(f'{what} {v}: vitrine computes square images and patches here')
    return int(v[0])


def _img_size(v):
    """timm's img_size as the config writes it: an integer, or [height, width]."""
    h, w = _pair(v)
    return h if h == w else [h, w]


def _check_attn_pool(ap, where, dim, heads, hidden, norm, act):
    """timm's AttentionPoolLatent as VisionTransformer makes it for global_pool 'map'."""
    if not _is(ap, 'AttentionPoolLatent'):
        raise DumpError(f'{where}: {type(ap).__name__} where vitrine computes timm\'s AttentionPoolLatent')
    if ap.latent.shape != (1, 1, dim) or getattr(ap, 'pos_embed', None) is not None or ap.pool != 'token':
        raise DumpError(f'{where}: a latent of {tuple(ap.latent.shape)}, pos_embed or pool {ap.pool!r}: vitrine computes '
                        'one latent query of embed_dim, no pos_embed, pool \'token\' (what VisionTransformer makes)')
    if ap.num_heads != heads or not isinstance(ap.q, nn.Linear) or ap.q.bias is None or ap.kv.bias is None:
        raise DumpError(f'{where}: {ap.num_heads} heads, q / kv with bias expected ({heads} heads, q_proj, qkv_bias)')
    if not isinstance(ap.q_norm, nn.Identity) or ap.mlp is None or ap.proj.bias is None:
        raise DumpError(f'{where}: qk_norm, no MLP or no proj bias: not what VisionTransformer makes')
    _same_norm(ap.norm, f'{where}.norm', norm)
    _check_mlp(ap.mlp, f'{where}.mlp', bias=True, act=act)
    if ap.mlp.fc1.out_features != hidden:
        raise DumpError(f'{where}.mlp: {ap.mlp.fc1.out_features} hidden units where the blocks have {hidden}')


def vit_config(vit, where='vit'):
    """The timm VisionTransformer constructor kwargs that describe `vit`, as vitrine reads them;
    a structure vitrine does not compute is a DumpError naming the module. Keys vitrine needs that
    are not timm kwargs: norm_eps / embed_norm_eps (timm passes partial(LayerNorm, eps=...)) and
    distilled (DeiT's VisionTransformerDistilled); each option is written only when it is not timm's
    default."""
    pe = vit.patch_embed
    if _is(pe, 'HybridEmbed'):
        raise DumpError(f'{where}.patch_embed: a hybrid backbone (timm HybridEmbed: a CNN before the transformer, '
                        f'{type(pe.backbone).__name__}); vitrine computes the Conv2d patch embedding of a plain ViT')
    proj = getattr(pe, 'proj', None)
    if not _is(pe, 'PatchEmbed') or not isinstance(proj, nn.Conv2d):
        raise DumpError(f'{where}.patch_embed: {type(pe).__name__}; vitrine computes timm\'s PatchEmbed (a Conv2d)')
    patch = _square(pe.patch_size, f'{where}.patch_embed.patch_size')
    if _pair(proj.kernel_size) != (patch, patch) or _pair(proj.stride) != (patch, patch) or proj.padding not in (0, (0, 0)):
        raise DumpError(f'{where}.patch_embed.proj: not a Conv2d with kernel = stride = patch_size')
    if pe.img_size is None:
        raise DumpError(f'{where}.patch_embed: img_size None (NaFlex style); vitrine needs the model\'s image size')
    blocks = list(vit.blocks)
    if not blocks:
        raise DumpError(f'{where}.blocks: a ViT without blocks')
    D = vit.embed_dim
    b0 = blocks[0]
    if not _is(b0, 'Block', 'MaskedCausalBlock'):
        raise DumpError(f'{where}.blocks.0: {type(b0).__name__} where vitrine computes timm\'s Block (block_fn)')
    if not _is(b0.mlp, 'Mlp') or not isinstance(getattr(b0.mlp, 'fc1', None), nn.Linear):
        raise DumpError(f'{where}.blocks.0.mlp: {type(b0.mlp).__name__} where vitrine computes timm\'s Mlp (mlp_layer)')
    if not _is(b0.attn, 'Attention', 'MaskedCausalAttention') or _is(b0.attn, 'DiffAttention', 'AttentionRope'):
        raise DumpError(f'{where}.blocks.0.attn: {type(b0.attn).__name__} where vitrine computes timm\'s Attention '
                        '(attn_layer)')
    norm = _norm_of(b0.norm1, f'{where}.blocks.0.norm1')
    act = _act_of(b0.mlp.act, f'{where}.blocks.0.mlp.act')
    heads, hidden = b0.attn.num_heads, b0.mlp.fc1.out_features
    qk_norm, ls = not isinstance(b0.attn.q_norm, nn.Identity), not isinstance(b0.ls1, nn.Identity)
    proj_bias = b0.attn.proj.bias is not None
    attn_norm = not isinstance(getattr(b0.attn, 'norm', nn.Identity()), nn.Identity)
    mlp_norm = not isinstance(getattr(b0.mlp, 'norm', nn.Identity()), nn.Identity)
    for i, blk in enumerate(blocks):
        _check_block(blk, f'{where}.blocks.{i}', D, heads, hidden, qk_norm, ls, norm, act, proj_bias, attn_norm, mlp_norm)
    pre_norm = not isinstance(getattr(vit, 'norm_pre', nn.Identity()), nn.Identity)
    if pre_norm:
        _same_norm(vit.norm_pre, f'{where}.norm_pre', norm)
    if (proj.bias is None) != pre_norm:
        raise DumpError(f'{where}.patch_embed.proj: {"no " if proj.bias is None else ""}bias with'
                        f'{"" if pre_norm else "out"} norm_pre; timm makes the bias exactly when pre_norm is off')
    embed_norm = None
    if not isinstance(getattr(pe, 'norm', nn.Identity()), nn.Identity):
        embed_norm = _norm_of(pe.norm, f'{where}.patch_embed.norm')
    distilled = _is(vit, 'VisionTransformerDistilled')
    gp = vit.global_pool or ''
    if gp not in ('', 'token', 'avg', 'max', 'avgmax', 'map', 'prr'):
        raise DumpError(f'{where}: global_pool {gp!r} is not one of timm\'s')
    ap = getattr(vit, 'attn_pool', None)
    if gp == 'map':
        _check_attn_pool(ap, f'{where}.attn_pool', D, heads, hidden, norm, act)
    elif gp == 'prr':
        if not _is(ap, 'AttentionPoolPrr') or not isinstance(ap.pre_norm, nn.Identity) or \
                not isinstance(ap.post_norm, nn.Identity) or ap.num_heads != heads or \
                ap.pool != ('token' if vit.cls_token is not None else 'avg'):
            raise DumpError(f'{where}.attn_pool: {type(ap).__name__} is not the AttentionPoolPrr VisionTransformer makes')
    elif ap is not None:
        raise DumpError(f'{where}.attn_pool: {type(ap).__name__} with global_pool {gp!r}')
    # timm: use_fc_norm = (global_pool in avg / avgmax / max) if fc_norm is None else fc_norm;
    # norm = final_norm and not use_fc_norm; fc_norm = final_norm and use_fc_norm
    norm_ln, fc_ln = not isinstance(vit.norm, nn.Identity), not isinstance(vit.fc_norm, nn.Identity)
    if norm_ln and fc_ln:
        raise DumpError(f'{where}: both norm and fc_norm are norm layers, which timm never makes')
    for on, name in ((norm_ln, 'norm'), (fc_ln, 'fc_norm')):
        if on:
            _same_norm(getattr(vit, name), f'{where}.{name}', norm)
    default_fc = gp in ('avg', 'max', 'avgmax')
    head = vit.head
    num_classes = 0 if isinstance(head, nn.Identity) else head.out_features
    if num_classes and (not isinstance(head, nn.Linear) or head.in_features != D or head.bias is None):
        raise DumpError(f'{where}.head: {type(head).__name__}; vitrine computes a Linear(embed_dim, num_classes) head')
    img = _img_size(pe.img_size)
    cfg = {
        'img_size': img, 'patch_size': patch, 'in_chans': proj.in_channels, 'embed_dim': D, 'depth': len(blocks),
        'num_heads': heads, 'mlp_ratio': _ratio(hidden, D), 'qkv_bias': b0.attn.qkv.bias is not None,
        'qk_norm': qk_norm, 'class_token': vit.cls_token is not None, 'reg_tokens': int(getattr(vit, 'num_reg_tokens', 0)),
        'no_embed_class': bool(vit.no_embed_class), 'global_pool': gp, 'num_classes': num_classes,
        # LayerScale's presence; its value only initialises gamma, which the file holds
        'init_values': getattr(vit, '_vitrine_init_values', 1e-5) if ls else None,
    }
    if vit.pos_embed is None:
        cfg['pos_embed'] = 'none'
    # the rest of timm's options, written only when not timm's default
    extra = {
        'pre_norm': (pre_norm, False),
        'final_norm': (norm_ln or fc_ln, True),
        'fc_norm': (None if (norm_ln or fc_ln) and fc_ln == default_fc else fc_ln if (norm_ln or fc_ln) else None, None),
        'proj_bias': (proj_bias, True),
        'scale_attn_norm': (attn_norm, False),
        'scale_mlp_norm': (mlp_norm, False),
        'pool_include_prefix': (bool(getattr(vit, 'pool_include_prefix', False)) and gp != 'prr', False),
        'dynamic_img_size': (bool(getattr(vit, 'dynamic_img_size', False)), False),
        'dynamic_img_pad': (bool(getattr(pe, 'dynamic_img_pad', False)), False),
        'act_layer': (act, 'gelu'),
        'norm_layer': (norm[0], 'layernorm'),
        'norm_eps': (norm[1], 1e-6),
        'embed_norm_layer': (embed_norm[0] if embed_norm else None, None),
        'embed_norm_eps': (embed_norm[1] if embed_norm else 1e-6, 1e-6),
        'distilled': (distilled, False),
    }
    for k, (v, dflt) in extra.items():
        if v != dflt:
            cfg[k] = v
    if distilled:
        if vit.cls_token is None or getattr(vit, 'reg_token', None) is not None or vit.no_embed_class or gp != 'token' or fc_ln:
            raise DumpError(f'{where}: a VisionTransformerDistilled with registers, no_embed_class, no class token or '
                            'fc_norm: timm\'s own forward does not compute it as a DeiT')
        hd = vit.head_dist
        if (0 if isinstance(hd, nn.Identity) else hd.out_features) != num_classes:
            raise DumpError(f'{where}.head_dist: not the size of head')
    return cfg


def describe(model):
    """(module, config) of a timm / lightly model or of this file's MAE / AIM."""
    if _is(model, 'MAE') and hasattr(model, 'decoder'):
        return KINDS['mae'], model.config()
    if _is(model, 'AIM') and hasattr(model, 'projection_head'):
        return KINDS['aim'], model.config()
    if _is(model, 'MaskedVisionTransformerTIMM'):
        return KINDS['lightly'], dict(vit_config(model.vit), mask_token=True)
    if _is(model, 'MaskedCausalVisionTransformer'):
        cfg = vit_config(model, 'model')
        if cfg.get('scale_attn_norm'):
            raise DumpError('model.blocks.0.attn.norm: lightly\'s MaskedCausalAttention builds it (scale_attn_norm) '
                            'and never applies it; vitrine does not compute that')
        return KINDS['causal'], cfg
    if _is(model, 'VisionTransformer'):
        cfg = vit_config(model, 'model')
        return DISTILLED if cfg.get('distilled') else KINDS['timm'], cfg
    raise DumpError(f'{type(model).__name__}: not a model this tool knows (timm VisionTransformer, '
                    'VisionTransformerDistilled, lightly MaskedVisionTransformerTIMM / MaskedCausalVisionTransformer, '
                    'vitrine_dump.MAE / AIM); for another module that computes one of these, pass module= and config=')


# ---- lightly's MAE and AIM examples as modules ---------------------------------------------------

def _lightly_utils():
    from lightly.models import utils
    return utils


class MAE(nn.Module):
    """lightly's MAE (examples/pytorch/mae.py, benchmarks/imagenet/vitb16/mae.py) as one module:
    backbone (MaskedVisionTransformerTIMM) -> decoder_embed (Linear) -> decoder
    (MaskedVisionTransformerDecoderTIMM) -> prediction_head (Linear); loss = MSE against the
    patchified images at idx_mask, per-patch normalised when norm_pix_loss. Built from the
    trained parts of a user's own MAE, or by MAE.build."""

    def __init__(self, backbone, decoder_embed, decoder, prediction_head, norm_pix_loss=False):
        super().__init__()
        self.backbone, self.decoder_embed, self.decoder, self.prediction_head = backbone, decoder_embed, decoder, prediction_head
        self.norm_pix_loss = norm_pix_loss
        self.patch_size = _square(backbone.vit.patch_embed.patch_size, 'patch_size')

    @classmethod
    def build(cls, vit, decoder_dim=512, decoder_depth=8, decoder_heads=16, decoder_mlp_ratio=4.0, norm_pix_loss=False):
        from lightly.models.modules import MaskedVisionTransformerDecoderTIMM, MaskedVisionTransformerTIMM
        from lightly.models.modules.masked_vision_transformer_timm import init_weights
        backbone = MaskedVisionTransformerTIMM(vit=vit)
        decoder_embed = nn.Linear(vit.embed_dim, decoder_dim)
        decoder = MaskedVisionTransformerDecoderTIMM(
            num_patches=vit.patch_embed.num_patches, embed_dim=decoder_dim, depth=decoder_depth,
            num_heads=decoder_heads, num_prefix_tokens=vit.num_prefix_tokens, mlp_ratio=decoder_mlp_ratio)
        patch = _square(vit.patch_embed.patch_size, 'patch_size')
        prediction_head = nn.Linear(decoder_dim, patch * patch * vit.patch_embed.proj.in_channels)
        decoder_embed.apply(init_weights)
        prediction_head.apply(init_weights)
        return cls(backbone, decoder_embed, decoder, prediction_head, norm_pix_loss)

    def loss(self, images, idx_keep, idx_mask):
        u = _lightly_utils()
        x = self.backbone.encode(images=images, idx_keep=idx_keep)
        x = self.decoder_embed(x)
        full = x.new_zeros(x.shape[0], self.backbone.sequence_length, x.shape[-1])
        full = u.set_at_index(full, idx_keep, x)
        x = self.decoder(full, idx_mask=idx_mask)
        pred = self.prediction_head(u.get_at_index(x, idx_mask))
        target = u.get_at_index(u.patchify(images, self.patch_size), idx_mask - self.backbone.vit.num_prefix_tokens)
        if self.norm_pix_loss:
            target = u.normalize_mean_var(target, dim=-1)
        return F.mse_loss(pred, target)

    def config(self):
        enc = vit_config(self.backbone.vit, 'backbone.vit')
        d, D = self.decoder, enc['embed_dim']
        blocks = list(d.blocks)
        if not blocks:
            raise DumpError('decoder.blocks: a decoder without blocks')
        dd, heads, hidden = d.norm.normalized_shape[0], blocks[0].attn.num_heads, blocks[0].mlp.fc1.out_features
        for i, blk in enumerate(blocks):
            _check_block(blk, f'decoder.blocks.{i}', dd, heads, hidden, False, False)
            if blk.attn.qkv.bias is None:
                raise DumpError(f'decoder.blocks.{i}.attn: vitrine computes lightly\'s decoder with qkv_bias=True')
        _layernorm(d.norm, 'decoder.norm')
        C, p = enc['in_chans'], enc['patch_size']
        for name, lin, shape in (('decoder_embed', self.decoder_embed, (D, dd)), ('prediction_head', self.prediction_head, (dd, p * p * C))):
            if not isinstance(lin, nn.Linear) or (lin.in_features, lin.out_features) != shape or lin.bias is None:
                raise DumpError(f'{name}: vitrine computes Linear({shape[0]}, {shape[1]}) with bias')
        cfg = {'encoder': enc, 'decoder_dim': dd, 'decoder_depth': len(blocks), 'decoder_heads': heads,
               'norm_pix_loss': bool(self.norm_pix_loss)}
        if hidden != int(dd * 4.0):
            cfg['decoder_mlp_ratio'] = _ratio(hidden, dd)
        return cfg


class AIM(nn.Module):
    """lightly's AIM (examples/pytorch/aim.py, benchmarks/imagenet/vitb16/aim.py) as one module:
    backbone (MaskedCausalVisionTransformer) forward_features(images, mask), its pos_embed added
    again, projection_head (AIMPredictionHead); loss = MSE against the per-patch normalised
    patchified images, every position. Built from a user's trained parts, or by AIM.build."""

    def __init__(self, backbone, projection_head):
        super().__init__()
        self.backbone, self.projection_head = backbone, projection_head
        self.patch_size = _square(backbone.patch_embed.patch_size, 'patch_size')

    @classmethod
    def build(cls, vit, head_hidden_dim=2048, head_blocks=12, head_mlp_ratio=4.0):
        from lightly.models import utils
        from lightly.models.modules import AIMPredictionHead
        utils.initialize_2d_sine_cosine_positional_embedding(pos_embedding=vit.pos_embed, has_class_token=vit.has_class_token)
        patch = _square(vit.patch_embed.patch_size, 'patch_size')
        head = AIMPredictionHead(input_dim=vit.embed_dim, output_dim=vit.patch_embed.proj.in_channels * patch * patch,
                                 hidden_dim=head_hidden_dim, num_blocks=head_blocks, mlp_ratio=head_mlp_ratio)
        return cls(vit, head)

    def loss(self, images, mask):
        u = _lightly_utils()
        x = self.backbone.forward_features(images, mask=mask)
        x = self.backbone._pos_embed(x)
        pred = self.projection_head(x)
        target = u.normalize_mean_var(u.patchify(images, self.patch_size), dim=-1)
        return F.mse_loss(pred, target)

    def config(self):
        enc = vit_config(self.backbone, 'backbone')
        blocks = list(self.projection_head.blocks)
        if len(blocks) < 3 or not isinstance(blocks[0], nn.Linear) or not isinstance(blocks[-1], nn.Linear):
            raise DumpError('projection_head: not lightly\'s AIMPredictionHead (Linear, blocks, LayerNorm, Linear)')
        hd = blocks[0].out_features
        C, p = enc['in_chans'], enc['patch_size']
        if blocks[0].bias is not None or blocks[-1].bias is not None or blocks[0].in_features != enc['embed_dim'] or \
                (blocks[-1].in_features, blocks[-1].out_features) != (hd, C * p * p):
            raise DumpError(f'projection_head: vitrine computes bias-free Linear({enc["embed_dim"]}, {hd}) in and Linear({hd}, {C * p * p}) out')
        _layernorm(blocks[-2], f'projection_head.blocks.{len(blocks) - 2}', eps=1e-5)
        hidden = None
        for i, b in enumerate(blocks[1:-2], 1):
            _layernorm(b.norm, f'projection_head.blocks.{i}.norm', eps=1e-5)
            _check_mlp(b.mlp, f'projection_head.blocks.{i}.mlp', bias=False)
            if hidden is None:
                hidden = b.mlp.fc1.out_features
            if b.mlp.fc1.out_features != hidden or b.mlp.fc2.out_features != hd:
                raise DumpError(f'projection_head.blocks.{i}.mlp: sizes differ from block 1')
        cfg = {'encoder': enc, 'head_hidden_dim': hd, 'head_blocks': len(blocks) - 3}
        if hidden is not None and hidden != int(hd * 4.0):
            cfg['head_mlp_ratio'] = _ratio(hidden, hd)
        return cfg


# ---- building a model from a name or kwargs -----------------------------------------------------

AIM_DEFAULTS = {'class_token': False, 'no_embed_class': True, 'global_pool': 'avg'}  # lightly's AIM examples


def _timm_vit(name, kwargs):
    import timm
    if name:
        if not timm.is_model(name):
            raise DumpError(f'--name {name}: timm {timm.__version__} has no model of that name')
        try:
            return timm.create_model(name, pretrained=False, **kwargs)
        except TypeError as e:  # a kwarg the model's class does not take
            raise DumpError(f'--kwargs: timm\'s {name} does not take them ({e})') from e
    from timm.models.vision_transformer import VisionTransformer
    try:
        return VisionTransformer(**kwargs)
    except TypeError as e:
        raise DumpError(f'--kwargs: timm\'s VisionTransformer does not take them ({e})') from e


def build(kind, name=None, kwargs=None, seed=0, init='perturbed', decoder=None, head=None):
    """A model of `kind` (timm | lightly | causal | mae | aim): the ViT from timm.create_model(name,
    **kwargs) or VisionTransformer(**kwargs) (causal / aim: MaskedCausalVisionTransformer(**kwargs)),
    wrapped as lightly does; initialised by the libraries after torch.manual_seed(seed), then
    perturbed (init='perturbed', see perturb) unless init='library'. decoder: MAE.build kwargs;
    head: AIM.build kwargs."""
    if kind not in KINDS:
        raise DumpError(f'--kind {kind!r}: one of {", ".join(KINDS)}')
    if init not in ('perturbed', 'library'):
        raise DumpError(f'init {init!r}: perturbed or library')
    kwargs = dict(kwargs or {})
    if (decoder and kind != 'mae') or (head and kind != 'aim'):
        raise DumpError('decoder settings go with --kind mae, head settings with --kind aim')
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if kind in ('causal', 'aim'):
            if name:
                raise DumpError(f'--name with --kind {kind}: MaskedCausalVisionTransformer is built from --kwargs (timm names build a plain VisionTransformer)')
            from lightly.models.modules import MaskedCausalVisionTransformer
            try:
                vit = MaskedCausalVisionTransformer(**({**AIM_DEFAULTS, **kwargs} if kind == 'aim' else kwargs))
            except TypeError as e:
                raise DumpError(f'--kwargs: lightly\'s MaskedCausalVisionTransformer does not take them ({e})') from e
        else:
            vit = _timm_vit(name, kwargs)
        if kwargs.get('init_values') is not None:
            vit._vitrine_init_values = float(kwargs['init_values'])
        if kind in ('lightly', 'mae', 'aim', 'causal') and _is(vit, 'VisionTransformerDistilled'):
            raise DumpError(f'--kind {kind} with a distilled DeiT: lightly\'s wrappers know no dist_token (--kind timm)')
        try:
            if kind == 'timm' or kind == 'causal':
                model = vit
            elif kind == 'lightly':
                from lightly.models.modules import MaskedVisionTransformerTIMM
                model = MaskedVisionTransformerTIMM(vit=vit)
            elif kind == 'mae':
                model = MAE.build(vit, **(decoder or {}))
            else:
                model = AIM.build(vit, **(head or {}))
        except (RuntimeError, ValueError, AssertionError) as e:
            why = ''
            gh, gw = vit.patch_embed.grid_size
            if gh != gw and kind in ('lightly', 'mae', 'aim'):
                why = f' (lightly\'s sin-cos pos_embed is made for a square grid; this one is {gh}x{gw})'
            elif vit.no_embed_class and vit.num_prefix_tokens and kind in ('lightly', 'mae'):
                why = (' (lightly <= 1.5.26 makes its sin-cos pos_embed with rows for the prefix tokens, which '
                       'no_embed_class leaves out: see docs/testing.md)')
            raise DumpError(f'--kind {kind}: lightly could not wrap this ViT: {type(e).__name__}: {e}{why}') from e
    if init == 'perturbed':
        perturb(model, seed)
    return model


def perturb(model, seed=0):
    """Noise on what the libraries initialise to constants or near zero, so that a freshly built
    model's gradients test every parameter: LayerNorm weights and biases, LayerScale gammas, class /
    register / mask tokens and positional embeddings get N(0, 0.1^2), the biases of Linear and
    Conv2d layers N(0, 0.02^2); other weights keep the library's init. Frozen ones included."""
    g = torch.Generator().manual_seed(int(seed) + 7)
    small = set()
    for mod in model.modules():
        if isinstance(mod, (nn.Linear, nn.Conv2d)) and mod.bias is not None:
            small.add(id(mod.bias))
    with torch.no_grad():
        for name, p in model.state_dict(keep_vars=True).items():
            if not isinstance(p, nn.Parameter) or not p.is_floating_point():
                continue
            std = 0.02 if id(p) in small else 0.1 if (p.dim() <= 1 or name.endswith(('token', 'pos_embed', 'gamma'))) else 0
            if std:
                p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * std)
    return model


# ---- inputs --------------------------------------------------------------------------------------

def sequence_length(model):
    """Tokens the (encoder) ViT computes on: patches + prefix tokens."""
    vit = _encoder(model)
    return vit.patch_embed.num_patches + vit.num_prefix_tokens


def _encoder(model):
    if _is(model, 'MAE') and hasattr(model, 'decoder'):
        return model.backbone.vit
    if _is(model, 'AIM') and hasattr(model, 'projection_head'):
        return model.backbone
    if _is(model, 'MaskedVisionTransformerTIMM'):
        return model.vit
    return model


def make_inputs(model, batch=2, seed=0, idx_mask=False, idx_keep=False, mask=False, mask_ratio=None, image_size=None):
    """Random inputs for a call: images ~ N(0, 1) (generator seed+1) of the model's size, or of
    image_size (H, W) (dynamic_img_size); idx_keep / idx_mask from lightly's random_token_mask (torch
    seed seed+2; mask_ratio default 0.75 for MAE, else 0.5) -- for MAE over the patch tokens only
    (its target is the patches at idx_mask - prefix tokens; lightly's draw keeps only index 0, so with
    registers it could mask one): the prefix tokens are all kept; mask: a prefix-causal mask from
    random_prefix_mask for causal / AIM models, the idx_mask positions as a bool token mask for
    lightly's encoder. Returns {name: tensor}."""
    vit = _encoder(model)
    C = vit.patch_embed.proj.in_channels
    H, W = _pair(image_size) if image_size else _pair(vit.patch_embed.img_size)
    g = torch.Generator().manual_seed(int(seed) + 1)
    out = {'images': torch.randn(batch, C, H, W, generator=g)}
    L = sequence_length(model)
    causal = _is(vit, 'MaskedCausalVisionTransformer')
    if idx_mask or idx_keep or (mask and not causal):
        u = _lightly_utils()
        ratio = mask_ratio if mask_ratio is not None else 0.75 if _is(model, 'MAE') else 0.5
        P = vit.num_prefix_tokens
        with torch.random.fork_rng():
            torch.manual_seed(int(seed) + 2)
            if _is(model, 'MAE') and P != 1:  # patches only: P = 1 is lightly's own draw
                N = L - P
                if P == 0:
                    keep, masked = u.random_token_mask(size=(batch, N), mask_ratio=ratio, mask_class_token=True, device='cpu')
                else:  # index 0 stands for the prefix tokens, j >= 1 for patch j - 1
                    keep, masked = u.random_token_mask(size=(batch, N + 1), mask_ratio=ratio, device='cpu')
                    keep = torch.cat([torch.arange(P).expand(batch, P), keep[:, 1:] + P - 1], 1)
                    masked = masked + P - 1
            else:
                keep, masked = u.random_token_mask(size=(batch, L), mask_ratio=ratio, device='cpu')
        if idx_keep:
            out['idx_keep'] = keep
        if idx_mask:
            out['idx_mask'] = masked
        if mask and not causal:
            out['mask'] = torch.zeros(batch, L, dtype=torch.bool).scatter(1, masked, True)
    elif mask:
        u = _lightly_utils()
        with torch.random.fork_rng():
            torch.manual_seed(int(seed) + 2)
            out['mask'] = u.random_prefix_mask(size=(batch, L), max_prefix_length=L - 1, device='cpu')
    return out


# ---- the dump ------------------------------------------------------------------------------------

def _intermediates(result):
    """timm's forward_intermediates return value -- (out, intermediates), intermediates alone
    (intermediates_only), each a tensor or (spatial, prefix) (return_prefix_tokens), or
    output_dict's dict -- as {out, intermediates.<k>, intermediates_prefix.<k>}."""
    if isinstance(result, dict):
        out = {} if 'image_features' not in result else {'out': result['image_features']}
        out.update({f'intermediates.{k}': t for k, t in enumerate(result['image_intermediates'])})
        out.update({f'intermediates_prefix.{k}': t for k, t in enumerate(result.get('image_intermediates_prefix', ()))})
        return out
    out, inter = (result[0], result[1]) if isinstance(result, tuple) else (None, result)
    res = {} if out is None else {'out': out}
    for k, t in enumerate(inter):
        res[f'intermediates.{k}'] = t[0] if isinstance(t, tuple) else t
    for k, t in enumerate(inter):
        if isinstance(t, tuple):
            res[f'intermediates_prefix.{k}'] = t[1]
    return res


def _outputs(fn, result, module=None):
    """The call's return value as {output name: tensor} (parity-format.md's output names; DeiT's
    (head, head_dist) of timm's distilled training mode: out, out_dist; timm's forward_intermediates:
    _intermediates)."""
    if fn == 'loss':
        return {'loss': result.reshape(1)}
    if fn == 'forward_intermediates' and module in (KINDS['timm'], DISTILLED):
        return _intermediates(result)
    if isinstance(result, tuple) and len(result) == 2 and all(isinstance(t, torch.Tensor) for t in result):
        return {'out': result[0], 'out_dist': result[1]}
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], (list, tuple)):
        return {'out': result[0], **{f'intermediates.{i}': t for i, t in enumerate(result[1])}}
    if isinstance(result, torch.Tensor):
        return {'out': result}
    raise DumpError(f'{fn} returned {type(result).__name__}; expected a tensor or (out, [intermediates])')


def _rel_err(ours, ref):
    d = (ours.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
    m = ref.double().abs().max().item() if ref.numel() else 0.0
    return d / m if m > 0 else d


def _params(model):
    """(key, parameter) in state_dict order; a buffer in the state dict is a DumpError."""
    out = []
    for k, v in model.state_dict(keep_vars=True).items():
        if not isinstance(v, nn.Parameter):
            raise DumpError(f'{k}: a buffer (not a parameter); the parity format holds parameters only')
        if v.dtype != torch.float32:
            raise DumpError(f'{k}: dtype {v.dtype}; dump a float32 model (model.float())')
        out.append((k, v))
    return out


def _mode(m, kwargs):
    """eval mode, or DeiT's distilled training mode (distilled_training: both heads; dropout off)."""
    kwargs = dict(kwargs)
    if kwargs.pop('distilled_training', False):
        m.set_distilled_training(True)
        m.train()
    else:
        m.eval()
    return kwargs


def _run(model, fn, images, kwargs, douts, dtype, sdpa, module=None):
    """One call of a copy of the model in `dtype`: (outputs, {key: grad or None}, image grad)."""
    m = copy.deepcopy(model).to(dtype)
    kwargs = _mode(m, kwargs)
    x = images.detach().to(dtype).clone().requires_grad_(True)
    with _SdpaFallback([m]) if sdpa else _NoContext():
        outs = _outputs(fn, getattr(m, fn)(x, **kwargs), module)
    if fn == 'loss':
        scalar = outs['loss'].sum()
    else:
        scalar = sum((o * douts[k].to(dtype)).sum() for k, o in outs.items())
    params = [(k, p) for k, p in m.state_dict(keep_vars=True).items() if p.requires_grad]
    grads = torch.autograd.grad(scalar, [p for _, p in params] + [x], allow_unused=True)
    return outs, dict(zip([k for k, _ in params], grads[:-1])), grads[-1]


NOISE = 1e-10


def _zero_noise(expect):
    """Gradients that are zero in exact arithmetic come out of the float64 run as rounding noise
    (k_norm.bias with qk_norm: softmax ignores a vector added to every key). Relative to its own
    noise such a tensor cannot be matched, so a gradient whose float64 values are all below NOISE
    times the call's largest gradient value is written as exact zeros (its err is then absolute,
    max|ours|). Returns the keys zeroed."""
    grads = {k: t for k, t in expect.items() if k.startswith('grad/')}
    scale = max((t.abs().max().item() for t in grads.values() if t.numel()), default=0.0)
    zeroed = []
    for k, t in grads.items():
        m = t.abs().max().item() if t.numel() else 0.0
        if 0 < m <= NOISE * scale:
            expect[k] = torch.zeros_like(t)
            zeroed.append(k)
    return zeroed


class _NoContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _check_inputs(cfg, images, given):
    enc = cfg.get('encoder', cfg)
    C, (H0, W0), p = enc['in_chans'], _pair(enc['img_size']), enc['patch_size']
    dyn, pad = enc.get('dynamic_img_size', False), enc.get('dynamic_img_pad', False)
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[1] != C or \
            (not dyn and tuple(images.shape[2:]) != (H0, W0)):
        raise DumpError(f'images: {tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__}; '
                        f'the model takes [B, {C}, {H0}, {W0}]{" (any height and width: dynamic_img_size)" if dyn else ""}')
    if not images.is_floating_point() or not torch.isfinite(images).all():
        raise DumpError('images: must be finite floating-point values')
    B, H, W = images.shape[0], images.shape[2], images.shape[3]
    gh, gw = (-(-H // p), -(-W // p)) if pad else (H // p, W // p)
    L = gh * gw + int(enc.get('class_token', True)) + int(enc.get('reg_tokens', 0)) + int(enc.get('distilled', False))
    for k in ('idx_mask', 'idx_keep'):
        t = given.get(k)
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.dim() != 2 or t.shape[0] != B:
            raise DumpError(f'{k}: must be an int64 tensor [B={B}, K]')
        if t.numel() and (t.min() < 0 or t.max() >= L):
            raise DumpError(f'{k}: indices must be in [0, {L}) (the sequence, prefix tokens included)')
    t = given.get('mask')
    if t is not None and (not isinstance(t, torch.Tensor) or t.dtype != torch.bool or tuple(t.shape) != (B, L)):
        raise DumpError(f'mask: must be a bool tensor [B={B}, {L}] (the whole sequence, prefix tokens included)')


def _check_intermediates(given, config):
    """timm's forward_intermediates options: of their types, the indices in the model's range (as
    timm's feature_take_indices checks them, here in one line)."""
    enc = config.get('encoder', config) if isinstance(config, dict) else {}
    depth = enc.get('depth')
    ix = given.get('indices')
    if ix is not None:
        items = [ix] if isinstance(ix, int) and not isinstance(ix, bool) else ix
        if not isinstance(items, (list, tuple)) or not items or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
            raise DumpError(f'indices {ix!r}: an int (the last n blocks) or a non-empty list of block indices')
        if depth:
            if isinstance(ix, int) and not 0 < ix <= depth:
                raise DumpError(f'indices {ix}: last-n is out of range (1 to {depth})')
            for i in items if not isinstance(ix, int) else ():
                if not -depth <= i < depth:
                    raise DumpError(f'indices: feature index {i} is out of range (-{depth} to {depth - 1})')
    if given.get('output_fmt') not in (None, 'NCHW', 'NLC'):
        raise DumpError(f'output_fmt {given["output_fmt"]!r}: NCHW or NLC (timm\'s)')
    for k in ('return_prefix_tokens', 'stop_early', 'intermediates_only', 'output_dict'):
        if given.get(k) is not None and not isinstance(given[k], bool):
            raise DumpError(f'{k} {given[k]!r}: True or False')
    if isinstance(ix, tuple):
        given['indices'] = list(ix)


def dump(model, images, path, call=None, *, idx_mask=None, idx_keep=None, mask=None, is_causal=None, norm=None,
         distilled_training=None, intermediates=None, douts=None, seed=0, module=None, config=None, reference=None,
         warn=None):
    """Writes `path`: one call of `model` on `images` (float [B, C, H, W]) as a parity file.

    call: encode | forward | forward_intermediates | forward_features | loss (default: the
    module's first, CALLS); idx_mask / idx_keep (int64 [B, K], indices into the sequence with its
    prefix tokens), mask (bool [B, L]), is_causal, norm: the call's optional inputs; intermediates:
    timm's forward_intermediates keywords ({'indices': 2, 'output_fmt': 'NLC', ...}). douts:
    {output name: upstream gradient} (default N(0, 1) from seed+3). module / config: for a model
    of another class that computes one of the known modules (else derived from the model).
    Parameters with requires_grad=False are written as frozen/. The model is not changed (a
    float32 and a float64 copy run, in eval mode). Returns a summary dict with torch32_err per
    expect/ tensor. Raises DumpError when something cannot be described."""
    warn = warn or (lambda s: print(f'vitrine_dump: {s}', file=sys.stderr))
    if (module is None) != (config is None):
        raise DumpError('module= and config= go together')
    if module is None:
        module, config = describe(model)
    if module not in CALLS:
        raise DumpError(f'module {module!r}: one of {", ".join(CALLS)}')
    calls = CALLS[module]
    call = call or next(iter(calls))
    if call not in calls:
        raise DumpError(f'{module} has no call {call!r} here ({", ".join(calls)})')
    if intermediates and norm is None:
        norm = intermediates.get('norm')
    given = {k: v for k, v in (('idx_mask', idx_mask), ('idx_keep', idx_keep), ('mask', mask), ('is_causal', is_causal),
                               ('norm', norm), ('distilled_training', distilled_training),
                               *((k, v) for k, v in (intermediates or {}).items() if k != 'norm')) if v is not None}
    if intermediates and set(intermediates) - set(TIMM_INTERMEDIATES):
        raise DumpError(f'intermediates: {", ".join(sorted(set(intermediates) - set(TIMM_INTERMEDIATES)))} is not an option '
                        f'of timm\'s forward_intermediates that vitrine computes ({", ".join(TIMM_INTERMEDIATES)})')
    _check_intermediates(given, config)
    for k in given:
        if k not in calls[call]:
            raise DumpError(f'{module}.{call} takes no {k} ({", ".join(calls[call]) or "no optional inputs"})')
    for k in REQUIRED.get(module, ()):
        if k not in given:
            raise DumpError(f'{module}.{call} needs {k}')
    if module == KINDS['causal'] and 'mask' in given and 'is_causal' not in given:
        given['is_causal'] = True  # lightly's default, written down
    _check_inputs(config, images, given)
    if not any(p.requires_grad for _, p in _params(model)):
        warn('no parameter requires grad: only the image gradient is checked')
    kwargs = dict(given)
    if reference is None:
        reference = reference_versions(model, warn)
    sdpa = _SdpaFallback([model]).active
    if sdpa:
        reference += ' (scaled_dot_product_attention: vitrine_dump.sdpa_math, as torch 2\'s math backend)'
    if module == KINDS['causal'] and given.get('mask') is not None and given.get('is_causal') is False:
        _check_is_causal_honoured(model, images, given['mask'], sdpa)

    images = images.detach().float()
    # the upstream gradients need the outputs' shapes: one float32 forward without grad first
    with torch.no_grad(), (_SdpaFallback([model]) if sdpa else _NoContext()):
        m = copy.deepcopy(model)
        try:
            result = getattr(m, call)(images, **_mode(m, kwargs))
        except Exception as e:  # noqa: BLE001 -- the model's own complaint, passed on
            raise DumpError(f'{module}.{call} failed in PyTorch: {type(e).__name__}: {e}') from e
        shapes = {k: v.shape for k, v in _outputs(call, result, module).items()}
    if call == 'loss':
        douts = {}
    else:
        gen = torch.Generator().manual_seed(int(seed) + 3)
        douts = {k: (douts or {}).get(k, None) for k in shapes}
        for k, s in shapes.items():
            d = douts[k]
            if d is None:
                douts[k] = torch.randn(s, generator=gen)
            elif tuple(d.shape) != tuple(s):
                raise DumpError(f'douts[{k!r}]: shape {tuple(d.shape)}, the output is {tuple(s)}')
            else:
                douts[k] = d.detach().float()
    out64, g64, x64 = _run(model, call, images, kwargs, douts, torch.float64, sdpa, module)
    out32, g32, x32 = _run(model, call, images, kwargs, douts, torch.float32, sdpa, module)

    tensors = {}
    for k, p in _params(model):
        tensors[('param/' if p.requires_grad else 'frozen/') + k] = p.detach()
    tensors['input/images'] = images
    for k in ('idx_mask', 'idx_keep', 'mask'):
        if k in given:
            tensors[f'input/{k}'] = given[k]
    for k, d in douts.items():
        tensors[f'input/dout/{k}'] = d
    expect, torch32 = {}, {}
    for k in out64:
        expect[k], torch32[k] = out64[k], out32[k]
    for k, g in g64.items():
        zero = torch.zeros_like(dict(_params(model))[k], dtype=torch.float64)
        expect[f'grad/{k}'] = zero if g is None else g
        torch32[f'grad/{k}'] = zero.float() if g32[k] is None else g32[k]
    expect['grad/input/images'], torch32['grad/input/images'] = x64, x32
    zeroed = _zero_noise(expect)
    for k, t in expect.items():
        bad = ~torch.isfinite(t)
        if bad.any():
            raise DumpError(f'expect/{k}: the float64 run computed {"NaN" if torch.isnan(t).any() else "Inf"} '
                            f'(first at flat index {int(bad.reshape(-1).nonzero()[0])}); such a file would check nothing')
    summary = {'path': path, 'module': module, 'call': call, 'tensors': {}, 'zeroed': zeroed}
    for k in expect:
        e32 = expect[k].float()
        tensors[f'expect/{k}'] = e32
        summary['tensors'][k] = _rel_err(torch32[k], e32)
    for k in expect:
        tensors[f'torch32/{k}'] = torch32[k].detach().float()
    call_meta = {'fn': call, **{k: (True if k in ('idx_mask', 'idx_keep', 'mask') else v) for k, v in given.items()}}
    meta = {'format': FORMAT, 'module': module, 'config': json.dumps(config, sort_keys=True),
            'call': json.dumps(call_meta, sort_keys=True), 'reference': reference, 'tool': TOOL}
    write_safetensors(path, tensors, meta)
    worst = max(summary['tensors'], key=summary['tensors'].get)
    summary.update(config=config, call_meta=call_meta, reference=reference, worst=worst,
                   max_torch32_err=summary['tensors'][worst])
    return summary


def _check_is_causal_honoured(model, images, mask, sdpa):
    """A file with is_causal false and a mask means bidirectional attention; lightly <= 1.5.26
    ignores is_causal (its blocks pass only the mask on; lightly PR #2051 forwards it)."""
    with torch.no_grad(), (_SdpaFallback([model]) if sdpa else _NoContext()):
        m = copy.deepcopy(model).eval()
        a = m.forward_features(images.float(), mask=mask, is_causal=False)
        b = m.forward_features(images.float(), mask=None)
    if _rel_err(a, b) > 1e-4:
        raise DumpError('this MaskedCausalVisionTransformer ignores is_causal=False when given a mask (lightly <= 1.5.26 '
                        'passes only the mask to attention; lightly PR #2051 forwards is_causal): its output is '
                        'prefix-causal, which a file saying is_causal false would misdescribe. Dump with is_causal=True, '
                        'or without a mask for bidirectional attention')


# ---- command line --------------------------------------------------------------------------------

def _json_arg(s, what):
    try:
        v = json.loads(s)
    except ValueError as e:
        raise DumpError(f'{what}: not JSON ({e})')
    if not isinstance(v, dict):
        raise DumpError(f'{what}: a JSON object of keyword arguments')
    return v


def load_weights(model, path, strict=True):
    """A state_dict from .safetensors (read here) or a torch.save file, loaded into the model."""
    if path.endswith('.safetensors'):
        sd, _ = read_safetensors(path)
    else:
        sd = torch.load(path, map_location='cpu')
        sd = sd.get('state_dict', sd) if isinstance(sd, dict) else sd
    res = model.load_state_dict(sd, strict=strict)
    return res


def versions_text():
    have = []
    for lib in ('torch', 'timm', 'lightly'):
        try:
            mod = __import__(lib)
            have.append(f'{lib} {mod.__version__}')
        except Exception as e:  # noqa: BLE001 -- any import failure is "not usable"
            have.append(f'{lib}: not importable ({type(e).__name__}: {e})')
    sup = '; '.join(f'{k} >= {lo} (tested {t})' for k, (lo, t) in SUPPORTED.items())
    return f'{TOOL} writes {FORMAT}\nsupported: {sup}\nhere: {", ".join(have)}'


def _indices(s):
    try:
        v = [int(x) for x in s.split(',') if x.strip()]
    except ValueError:
        v = []
    if not v:
        raise argparse.ArgumentTypeError(f'{s!r}: N (the last N blocks) or I,J,... (block indices)')
    return v[0] if ',' not in s else v


def _image_size(s):
    try:
        v = [int(x) for x in s.replace('x', ',').split(',')]
    except ValueError:
        v = []
    if len(v) not in (1, 2) or min(v) < 1:
        raise argparse.ArgumentTypeError(f'{s!r}: H or H,W in pixels')
    return (v[0], v[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog='vitrine_dump.py', description='Dump one call of a PyTorch ViT (timm / lightly) as a vitrine parity file '
        '(docs/parity-format.md). Exit status: 0 written; 2 not written: a usage error, or a model, call or '
        'library this tool cannot use (one line on stderr says which).')
    ap.add_argument('out', nargs='?', help='the parity file to write (.safetensors)')
    ap.add_argument('--kind', choices=list(KINDS), help='timm VisionTransformer (and DeiT\'s VisionTransformerDistilled) | '
                    'lightly MaskedVisionTransformerTIMM | lightly MaskedCausalVisionTransformer | lightly MAE | lightly AIM')
    ap.add_argument('--name', help='a timm model name (timm.create_model(name, pretrained=False, **kwargs))')
    ap.add_argument('--kwargs', default='{}', help='constructor kwargs (JSON) of the ViT, e.g. \'{"img_size": 64}\'')
    ap.add_argument('--decoder', default=None, help='MAE: JSON {"decoder_dim", "decoder_depth", "decoder_heads", "decoder_mlp_ratio", "norm_pix_loss"}')
    ap.add_argument('--head', default=None, help='AIM: JSON {"head_hidden_dim", "head_blocks", "head_mlp_ratio"}')
    ap.add_argument('--weights', help='load this state_dict (.safetensors or torch.save) into the model first')
    ap.add_argument('--init', choices=['perturbed', 'library'], default='perturbed',
                    help='without --weights: the libraries\' init, perturbed so every gradient is tested (default), or as is')
    ap.add_argument('--freeze', action='append', default=[], metavar='PREFIX',
                    help='parameters whose key starts with PREFIX get requires_grad=False (written as frozen/)')
    ap.add_argument('--call', help='encode | forward | forward_intermediates | forward_features | loss (default: the model\'s first)')
    ap.add_argument('--idx-mask', action='store_true', help='pass idx_mask (lightly random_token_mask; MAE: patches only)')
    ap.add_argument('--idx-keep', action='store_true', help='pass idx_keep (the same draw)')
    ap.add_argument('--mask-ratio', type=float, default=None, help='for the draw of idx_mask / idx_keep (default MAE 0.75, else 0.5)')
    ap.add_argument('--mask', action='store_true', help='pass mask: causal / AIM a random prefix mask; lightly encoder the idx_mask positions')
    ap.add_argument('--no-causal', action='store_true', help='causal: is_causal=False (bidirectional attention with the mask)')
    ap.add_argument('--norm', action='store_true', help='forward_intermediates: norm=True')
    ap.add_argument('--indices', type=_indices, default=None, metavar='N|I,J,...',
                    help='timm forward_intermediates: the last N blocks, or these block indices (negative from the end; one index: I,)')
    ap.add_argument('--return-prefix-tokens', action='store_true', help='timm forward_intermediates: return_prefix_tokens=True')
    ap.add_argument('--stop-early', action='store_true', help='timm forward_intermediates: stop_early=True')
    ap.add_argument('--output-fmt', choices=['NCHW', 'NLC'], default=None, help='timm forward_intermediates: output_fmt')
    ap.add_argument('--intermediates-only', action='store_true', help='timm forward_intermediates: intermediates_only=True')
    ap.add_argument('--output-dict', action='store_true', help='timm forward_intermediates: output_dict=True')
    ap.add_argument('--distilled-training', action='store_true',
                    help='DeiT distilled, forward: timm\'s distilled training mode (head and head_dist both returned)')
    ap.add_argument('--image-size', type=_image_size, default=None, metavar='H[,W]',
                    help='images of this size instead of the model\'s (timm dynamic_img_size)')
    ap.add_argument('--batch', type=int, default=2)
    ap.add_argument('--seed', type=int, default=0, help='init S, images S+1, masks S+2, upstream gradients S+3')
    ap.add_argument('--threads', type=int, default=None, help='torch.set_num_threads')
    ap.add_argument('--versions', action='store_true', help='print the supported and installed versions and exit')
    a = ap.parse_args(argv)
    if a.versions:
        print(versions_text())
        return 0
    if not a.out or not a.kind:
        ap.print_usage(sys.stderr)
        print('vitrine_dump.py: OUT and --kind are required', file=sys.stderr)
        return 2
    if a.batch < 1 or a.batch > 4096:
        print('vitrine_dump.py: --batch must be in 1..4096', file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        model = build(a.kind, a.name, _json_arg(a.kwargs, '--kwargs'), a.seed,
                      'library' if a.weights else a.init,
                      decoder=_json_arg(a.decoder, '--decoder') if a.decoder else None,
                      head=_json_arg(a.head, '--head') if a.head else None)
        if a.weights:
            load_weights(model, a.weights)
        keys = [k for k, _ in model.named_parameters()]
        for prefix in a.freeze:
            hit = [k for k in keys if k.startswith(prefix)]
            if not hit:
                raise DumpError(f'--freeze {prefix}: no parameter key starts with it')
            for k, p in model.named_parameters():
                if k.startswith(prefix):
                    p.requires_grad_(False)
        describe(model)  # a class or structure this tool cannot write, refused before anything runs
        module = KINDS[a.kind]
        call = a.call or next(iter(CALLS[module]))
        need = set(REQUIRED.get(module, ()))
        inputs = make_inputs(model, a.batch, a.seed, idx_mask=a.idx_mask or 'idx_mask' in need,
                             idx_keep=a.idx_keep or 'idx_keep' in need, mask=a.mask or 'mask' in need,
                             mask_ratio=a.mask_ratio, image_size=a.image_size)
        images = inputs.pop('images')
        timm_inter = {k: v for k, v in (('indices', a.indices), ('return_prefix_tokens', a.return_prefix_tokens or None),
                                        ('stop_early', a.stop_early or None), ('output_fmt', a.output_fmt),
                                        ('intermediates_only', a.intermediates_only or None),
                                        ('output_dict', a.output_dict or None)) if v is not None}
        s = dump(model, images, a.out, call, is_causal=False if a.no_causal else None,
                 norm=True if a.norm else None, distilled_training=True if a.distilled_training else None,
                 intermediates=timm_inter or None, seed=a.seed, **inputs)
    except DumpError as e:
        print(f'vitrine_dump.py: {e}', file=sys.stderr)
        return 2
    except ImportError as e:
        name = e.name or str(e)
        if name in ('timm', 'lightly'):
            why = f'{name} is not importable by {sys.executable}: put a checkout of it on PYTHONPATH'
        else:
            why = f'{name} is not importable by {sys.executable} ({e}), and timm / lightly import it'
        print(f'vitrine_dump.py: {why}; --kind {a.kind} needs it ({versions_text().splitlines()[1]})', file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 -- the libraries' own failure, in one line (never a traceback)
        print(f'vitrine_dump.py: {type(e).__name__} while building or running the model: {e}', file=sys.stderr)
        return 2
    for k in s['zeroed']:
        print(f'vitrine_dump.py: expect/{k}: float64 rounding noise around an exact zero (all below {NOISE:g} of the '
              f'largest gradient), written as zeros', file=sys.stderr)
    print(f'wrote {a.out}: {s["module"]} {json.dumps(s["call_meta"], sort_keys=True)}, {images.shape[0]} images, '
          f'{len(s["tensors"])} expect/ tensors; torch32_err max {s["max_torch32_err"]:.3e} ({s["worst"]}); {s["reference"]}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
