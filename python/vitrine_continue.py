#!/usr/bin/env python3
"""vitrine_continue.py: a vitrine training run continued in PyTorch, on one process or many.

A run exported by `vitrine export --torch DIR CHECKPOINT` (docs/scale-out.md) is built again with
timm + lightly -- lightly's MAE / AIM example model, or timm's VisionTransformer for a classifier --
its weights, AdamW moments and step loaded, and trained on with vitrine's objective, learning-rate
schedule, gradient clipping and weight-decay groups, on the same data in the same order:

    python3 python/vitrine_continue.py DIR --out OUT                    # one process
    torchrun --nproc_per_node 8 python/vitrine_continue.py DIR --out OUT # DistributedDataParallel
    vitrine train --resume OUT                                           # back in vitrine

Under torchrun (or any launcher that sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and
LOCAL_RANK: env://) each process takes its share of every batch and DistributedDataParallel
averages the gradients (gloo on CPU, nccl on GPU): the global batch, and so the run, is the one
vitrine would have taken. OUT holds the same three files as DIR (run.json, model.safetensors,
optimizer.safetensors), written by rank 0 every --save-every steps and at the end.

Masks: --masks vitrine (the default) draws them from vitrine's own generator (xoshiro128**, its
state in run.json), so a continuation draws the masks vitrine would have drawn and the stream goes
back to vitrine with the run; --masks torch draws them with lightly's random_token_mask /
random_prefix_mask on the device (faster for large batches; the stream is then not carried).

Needs torch; timm and lightly for the real modules (PYTHONPATH to their sources works; without
torchvision a stub stands in for the transforms timm imports and never calls here). --standin
builds the same modules in plain torch under the same keys, for hosts without timm / lightly
(python/test_vitrine_continue.py checks the two compute the same). Every failure is one line on
stderr (exit 1; usage 2); VITRINE_DEBUG=1 adds the traceback.
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

FORMAT = 'vitrine-torch-run/1'
TOOL = 'vitrine_continue.py 1'
FMNIST_DIR = '/usr/share/datasets/fashion-mnist'
M32 = 0xFFFFFFFF


class RunError(Exception):
    """What cannot be done, in one line (the message names the file, field or option)."""


def _say(msg):
    print(f'vitrine_continue.py: {msg}', file=sys.stderr, flush=True)


# ---- vitrine's generators (web/train/data-order.js, src/init.c), bit for bit --------------------------------

def hash32(*words):
    """web/train/data-order.js hash32: splitmix32-style hash of 32-bit words."""
    h = 0x9E3779B9
    for w in words:
        h = (h + (w & M32)) & M32
        h = ((h ^ (h >> 16)) * 0x85EBCA6B) & M32
        h = ((h ^ (h >> 13)) * 0xC2B2AE35) & M32
        h = (h ^ (h >> 16)) & M32
    return h


def mulberry32(seed):
    """web/train/data-order.js rng32: () -> uint32 (JavaScript's Math.imul is the low 32 bits of the product)."""
    a = seed & M32

    def draw():
        nonlocal a
        a = (a + 0x6D2B79F5) & M32
        t = ((a ^ (a >> 15)) * (a | 1)) & M32
        t ^= (t + ((t ^ (t >> 7)) * (t | 61))) & M32
        return (t ^ (t >> 14)) & M32
    return draw


def seed_words(seed):
    s = int(seed)
    return s & M32, (s >> 32) & M32


def permutation(n, seed):
    """web/train/data-order.js permutation: Fisher-Yates with mulberry32 (the same doubles as JavaScript)."""
    p = list(range(n))
    r = mulberry32(seed)
    for i in range(n - 1, 0, -1):
        j = math.floor((r() / 4294967296) * (i + 1))
        p[i], p[j] = p[j], p[i]
    return p


class DataOrder:
    """web/train/data-order.js DataOrder: epoch e is permutation(n, hash32(seed, e)); position q (step s, slot
    j: q = s * images_per_step + j) is image perm(q // n)[q % n]."""

    def __init__(self, n, seed):
        self.n, self.w = n, seed_words(seed)
        self.epoch, self.perm = -1, None

    def at(self, q):
        e = q // self.n
        if e != self.epoch:
            self.perm, self.epoch = permutation(self.n, hash32(self.w[0], self.w[1], e)), e
        return self.perm[q % self.n]


class Xoshiro:
    """vitrine's mask generator (src/init.c: xoshiro128**), its state the checkpoint's 32 hex digits."""

    def __init__(self, hexstate):
        self.s = [int(hexstate[8 * i:8 * i + 8], 16) for i in range(4)]

    def hex(self):
        return ''.join('%08x' % w for w in self.s)

    def draws(self, n):
        """n outputs of vt_rng_u32 (one loop: this runs per mask of every step)."""
        s0, s1, s2, s3 = self.s
        out = [0] * n
        for i in range(n):
            x = (s1 * 5) & M32
            out[i] = ((((x << 7) | (x >> 25)) & M32) * 9) & M32
            t = (s1 << 9) & M32
            s2 ^= s0
            s3 ^= s1
            s1 ^= s2
            s0 ^= s3
            s2 ^= t
            s3 = ((s3 << 11) | (s3 >> 21)) & M32
        self.s = [s0, s1, s2, s3]
        return out


def keep_count(L, ratio):
    """src/init.c vt_mask_keep_count: int((float)(L - 1) * (1 - ratio)) + 1 in float32, at most L."""
    import numpy as np
    k = int(np.float32(L - 1) * (np.float32(1.0) - np.float32(ratio)))
    return min(max(k + 1, 1), L)


def vitrine_token_masks(gen, B, L, ratio):
    """src/init.c vt_random_token_mask (lightly's random_token_mask, the class token kept first):
    noise uniform in [0, 1) with 24 bits, a stable argsort. Returns (idx_keep, idx_mask) lists."""
    nk = keep_count(L, ratio)
    keep, masked = [], []
    for _ in range(B):
        noise = [u >> 8 for u in gen.draws(L)]  # the uniforms' numerators: the same order
        noise[0] = -1
        order = sorted(range(L), key=noise.__getitem__)
        keep.append(order[:nk])
        masked.append(order[nk:])
    return keep, masked


def vitrine_prefix_masks(gen, B, N, max_prefix):
    """src/init.c vt_random_prefix_mask: mask[b, j] = j >= r_b, r_b = u32 % max_prefix."""
    return [[j >= r % max_prefix for j in range(N)] for r in gen.draws(B)]


def schedule_lr(s, step):
    """src/trainer.c vt_train_lr at `step` (the step about to be taken), float32 operation by
    float32 operation: lightly's cosine warm-up multiplier in double, rounded once; lr * f in the
    warm-up, min_lr + (lr - min_lr) * f after."""
    import numpy as np
    f32 = np.float32
    lr, min_lr, W, T = f32(s['lr']), f32(s.get('min_lr', 0)), s['warmup_steps'], s['total_steps']
    if not T > 0:
        return float(lr)
    end = s.get('end_factor', 0.001)
    if step < W:
        f = f32((step + 1) / W)
    else:
        st, M = step - W, T - W
        f = f32(end) if st >= M - 1 else f32(end - (end - 1.0) * (math.cos(math.pi * st / (M - 1)) + 1.0) / 2.0)
    return float(lr * f) if step < W else float(min_lr + f32(f32(lr - min_lr) * f))


# ---- data: vitrine's pipeline (web/train/datasets.js, augment.js, web/formats/images.js) ---------------

def split_fraction(n, f):
    """web/train/datasets.js splitFraction: image i is held out when floor((i + 1) f) > floor(i f)."""
    return [i for i in range(n) if not math.floor((i + 1) * f) > math.floor(i * f)]


def parse_augment(text):
    """web/train/augment.js parseAugment, for the canonical text a checkpoint keeps."""
    a = {'flip': False, 'shift': 0, 'hflip': 0.0, 'rrc': None}
    if text in (None, 'none'):
        return a
    for part in str(text).split(','):
        w = part.split(':')
        if part == 'flip':
            a['flip'] = True
        elif w[0] == 'shift' and len(w) == 2:
            a['shift'] = int(w[1])
        elif w[0] == 'hflip' and len(w) <= 2:
            a['hflip'] = float(w[1]) if len(w) == 2 else 0.5
        elif w[0] == 'rrc' and len(w) in (1, 2, 3):
            sc = [float(x) for x in w[1].split('-')] if len(w) > 1 else [0.08, 1.0]
            ra = [float(x) for x in w[2].split('-')] if len(w) > 2 else [0.75, 4 / 3]
            a['rrc'] = {'scale': sc, 'ratio': ra}
        else:
            raise RunError(f'run.json: data.augment {text!r}: not vitrine\'s (none, or hflip[:P], rrc[:A-B[:C-D]], flip, shift:N)')
    return a


def _axis_taps(src, dst, scale, offset):
    """web/formats/images.js axisWeights: area average when shrinking, bilinear when growing."""
    out = []
    for o in range(dst):
        taps = []
        if scale >= 1:
            a, b = (o + offset) * scale, (o + offset + 1) * scale
            for s in range(math.floor(a), min(src, math.ceil(b))):
                w = min(b, s + 1) - max(a, s)
                if w > 0:
                    taps.append((s, w / scale))
        else:
            c = (o + offset + 0.5) * scale - 0.5
            s0 = math.floor(c)
            f = c - s0
            taps += [(min(src - 1, max(0, s0)), 1 - f), (min(src - 1, max(0, s0 + 1)), f)]
        out.append(taps)
    return out


def _box_taps(start, length, dst):
    """web/formats/images.js boxWeights: the taps of a crop box resized to dst samples."""
    scale, out = length / dst, []
    for o in range(dst):
        taps = []
        if scale >= 1:
            a, b = start + o * scale, start + (o + 1) * scale
            for s in range(math.floor(a), min(start + length, math.ceil(b))):
                w = min(b, s + 1) - max(a, s)
                if w > 0:
                    taps.append((s, w / scale))
        else:
            c = start + (o + 0.5) * scale - 0.5
            s0 = math.floor(c)
            f = c - s0
            clamp = lambda v: min(start + length - 1, max(start, v))  # noqa: E731
            taps += [(clamp(s0), 1 - f), (clamp(s0 + 1), f)]
        out.append(taps)
    return out


def _resample(img, wx, wy, size, chans):
    """web/formats/images.js resample: rows (float32), then columns, rounded once to bytes (Math.round);
    img: uint8 [h, w, k] (k = 1, 3 or 4). The model's channels: grey (R+G+B)/3, or repeated."""
    import numpy as np
    h, w, k = img.shape
    out = np.zeros((chans, size, size), dtype=np.uint8)
    for c in range(chans):
        if k == 1:
            plane = img[:, :, 0].astype(np.float32)
        elif chans == 1:
            plane = ((img[:, :, 0].astype(np.float64) + img[:, :, 1] + img[:, :, 2]) / 3).astype(np.float32)
        else:
            plane = img[:, :, c % 3].astype(np.float32)
        tmp = np.empty((h, size), dtype=np.float32)
        for x, taps in enumerate(wx):
            v = np.zeros(h)
            for s, wt in taps:
                v = v + wt * plane[:, s].astype(np.float64)
            tmp[:, x] = v
        for y, taps in enumerate(wy):
            v = np.zeros(size)
            for s, wt in taps:
                v = v + wt * tmp[s, :].astype(np.float64)
            out[c, y, :] = np.clip(np.floor(v + 0.5), 0, 255)
    return out


def resize_crop(img, size, chans):
    """web/formats/images.js resizeCrop: the shorter side resized to size, the centre kept."""
    h, w = img.shape[:2]
    scale = min(w, h) / size
    rw, rh = math.floor(w / scale + 0.5), math.floor(h / scale + 0.5)
    return _resample(img, _axis_taps(w, size, scale, (rw - size) // 2), _axis_taps(h, size, scale, (rh - size) // 2), size, chans)


def rrc_box(W, H, rrc, uniform):
    """web/train/augment.js randomResizedCropBox (torchvision's RandomResizedCrop.get_params)."""
    area, (s0, s1), (r0, r1) = W * H, rrc['scale'], rrc['ratio']
    lr = (math.log(r0), math.log(r1))
    for _ in range(10):
        target = area * (s0 + (s1 - s0) * uniform())
        aspect = math.exp(lr[0] + (lr[1] - lr[0]) * uniform())
        w, h = math.floor(math.sqrt(target * aspect) + 0.5), math.floor(math.sqrt(target / aspect) + 0.5)
        if 0 < w <= W and 0 < h <= H:
            y = math.floor(uniform() * (H - h + 1))
            x = math.floor(uniform() * (W - w + 1))
            return x, y, w, h
    r, w, h = W / H, W, H
    if r < r0:
        h = math.floor(W / r0 + 0.5)
    elif r > r1:
        w = math.floor(H * r1 + 0.5)
    return (W - w) // 2, (H - h) // 2, w, h


class FashionMNIST:
    """The train split of Fashion-MNIST from its gzipped IDX files (web/train/node-data.js loadFashionMNIST)."""

    def __init__(self, root):
        import numpy as np

        def idx(name, dims):
            path = os.path.join(root, name)
            try:
                with gzip.open(path, 'rb') as f:
                    raw = f.read()
            except OSError as e:
                raise RunError(f'cannot read {path}: {e.strerror or e}')
            shape = struct.unpack('>' + 'I' * dims, raw[4:4 + 4 * dims])
            if raw[2] != 8 or raw[3] != dims or len(raw) != 4 + 4 * dims + math.prod(shape):
                raise RunError(f'{path}: not an IDX file of {dims} dimensions of bytes')
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
        im, lb = idx('train-images-idx3-ubyte.gz', 3), idx('train-labels-idx1-ubyte.gz', 1)
        if im.shape != (60000, 28, 28) or lb.shape != (60000,):
            raise RunError(f'{root}: not Fashion-MNIST\'s train split (60000 images of 28x28)')
        self.name, self.n, self.pixels, self.labels = 'fashion-mnist', 60000, im.reshape(60000, 1, 28, 28), lb.astype('int64')
        self.classes = ['T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot']

    def native(self, size, chans):
        return self.pixels if size == 28 and chans == 1 else None

    def decode(self, i):
        return self.pixels[i].transpose(1, 2, 0)  # [h, w, 1]


class ImageFolder:
    """A folder of PNG / JPEG images as web/train/node-data.js lists it (names sorted, dot-files skipped, a
    file's class its first sub-folder). Decoded by PIL; PNGs give vitrine's bytes, a JPEG decoder
    may differ from jpeg-js in the last bit of some pixels."""

    def __init__(self, root):
        try:
            from PIL import Image
        except ImportError as e:
            raise RunError(f'a folder of images needs PIL (Pillow): {e}')
        self.Image = Image
        if not os.path.isdir(root):
            raise RunError(f'--data {root}: not a directory')
        found = []

        def walk(d, cls):
            for name in sorted(os.listdir(d)):
                if name.startswith('.'):
                    continue
                p = os.path.join(d, name)
                if os.path.isdir(p):
                    walk(p, cls if cls is not None else name)
                else:
                    found.append((p, cls))
        walk(root, None)
        keep = []
        for p, cls in found:
            with open(p, 'rb') as f:
                head = f.read(8)
            if head.startswith(b'\x89PNG\r\n\x1a\n') or head.startswith(b'\xff\xd8\xff'):
                keep.append((p, cls))
        if not keep:
            raise RunError(f'--data {root}: no PNG or JPEG image')
        names = sorted({c for _, c in keep if c is not None})
        labelled = len(names) >= 2 and all(c is not None for _, c in keep)
        self.name, self.n, self.files = f'folder:{root}', len(keep), [p for p, _ in keep]
        self.labels = [names.index(c) for _, c in keep] if labelled else None
        self.classes = names if labelled else None

    def native(self, size, chans):
        return None

    def decode(self, i):
        import numpy as np
        try:
            with self.Image.open(self.files[i]) as im:
                return np.asarray(im.convert('RGBA'))
        except Exception as e:  # noqa: BLE001 -- a file that does not decode is named
            raise RunError(f'{self.files[i]}: cannot decode ({e})')


class Batches:
    """web/train/datasets.js Batches.batch: the normalised (and augmented) images of a step's slots."""

    def __init__(self, source, size, chans, mean, std, augment, augment_seed):
        import numpy as np
        self.src, self.size, self.chans = source, size, chans
        self.aug = parse_augment(augment)
        self.w = seed_words(augment_seed)
        # (v / 255 - mean) / std in double for every byte, rounded to float32 once (web/formats/images.js)
        self.lut = np.array([[(v / 255 - mean[c]) / std[c] for v in range(256)] for c in range(chans)], dtype=np.float32)
        self.fill = [-mean[c] / std[c] for c in range(chans)]
        self.nat = source.native(size, chans)
        self.cache = {}

    def _centre(self, i):
        if i not in self.cache:
            if len(self.cache) > 4096:
                self.cache.clear()
            self.cache[i] = resize_crop(self.src.decode(i), self.size, self.chans)
        return self.cache[i]

    def images(self, indices, step, slots):
        """uint8 [B, C, S, S] -> float32, for images `indices` at `slots` of step `step`."""
        import numpy as np
        a, S, C = self.aug, self.size, self.chans
        out = np.empty((len(indices), C, S, S), dtype=np.float32)
        for k, (i, j) in enumerate(zip(indices, slots)):
            if a['rrc'] or a['hflip']:
                draw = mulberry32(hash32(self.w[0], self.w[1], step, j, 0x41554731))  # 'AUG1'
                uniform = lambda: draw() / 4294967296  # noqa: E731
            if a['rrc']:
                im = self.src.decode(i)
                x, y, w, h = rrc_box(im.shape[1], im.shape[0], a['rrc'], uniform)
                px = _resample(im, _box_taps(x, w, S), _box_taps(y, h, S), S, C)
            elif self.nat is not None:
                px = self.nat[i]
            else:
                px = self._centre(i)
            if a['hflip'] and uniform() < a['hflip']:
                px = px[:, :, ::-1]
            for c in range(C):
                out[k, c] = self.lut[c][px[c]]
            if a['flip'] or a['shift']:
                self._flip_shift(out[k], step, j)
        return out

    def _flip_shift(self, img, step, j):
        """web/train/augment.js augmentBatch: flip / shift from hash32(seed, step, j)."""
        import numpy as np
        a, S = self.aug, self.size
        h = hash32(self.w[0], self.w[1], step, j)
        n = 2 * a['shift'] + 1
        flip = a['flip'] and (h & 1) == 1
        dx = (h >> 1) % n - a['shift'] if a['shift'] else 0
        dy = (h >> 9) % n - a['shift'] if a['shift'] else 0
        if not (flip or dx or dy):
            return
        ys, xs = np.meshgrid(np.arange(S), np.arange(S), indexing='ij')
        sy, sx = ys - dy, xs - dx
        if flip:
            sx = S - 1 - sx
        inside = (sy >= 0) & (sy < S) & (sx >= 0) & (sx < S)
        for c in range(img.shape[0]):
            src = img[c].copy()
            img[c] = np.where(inside, src[np.clip(sy, 0, S - 1), np.clip(sx, 0, S - 1)], np.float32(self.fill[c]))


# ---- the models: timm + lightly, or the same in plain torch ---------------------------------------

def _stub_torchvision():
    """timm imports torchvision for data transforms this script never calls: without torchvision,
    an empty stand-in module (tools/timm_finetune_reference.py does the same)."""
    try:
        import torchvision  # noqa: F401
        return
    except ImportError:
        pass
    import enum
    import types

    class Anything(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith('__'):
                raise AttributeError(name)
            return type(name, (), {'__init__': lambda self, *a, **k: None})

    class InterpolationMode(enum.Enum):
        NEAREST, NEAREST_EXACT, BILINEAR, BICUBIC, BOX, HAMMING, LANCZOS = (
            'nearest', 'nearest-exact', 'bilinear', 'bicubic', 'box', 'hamming', 'lanczos')

    for name in ['torchvision', 'torchvision.ops', 'torchvision.ops.misc', 'torchvision.datasets', 'torchvision.transforms',
                 'torchvision.transforms.functional', 'torchvision.transforms.v2', 'torchvision.io', 'torchvision.models',
                 'torchvision.models.feature_extraction', 'torchvision.utils']:
        sys.modules[name] = Anything(name)
    for name in list(sys.modules):
        if name.startswith('torchvision.'):
            parent, _, child = name.rpartition('.')
            setattr(sys.modules[parent], child, sys.modules[name])
    for name in ['torchvision.transforms', 'torchvision.transforms.functional']:
        sys.modules[name].InterpolationMode = InterpolationMode


def import_libraries():
    """(timm, lightly) imported, or a RunError saying which is missing and what to do."""
    _stub_torchvision()
    mods = []
    for lib in ('timm', 'lightly'):
        try:
            mods.append(__import__(lib))
        except Exception as e:  # noqa: BLE001 -- any import failure: the library is not usable here
            raise RunError(f'{lib} is not importable ({type(e).__name__}: {e}): install it, put its sources on '
                           'PYTHONPATH, or pass --standin for the same modules in plain torch')
    import lightly.models.utils  # noqa: F401
    return mods


def standin():
    """The modules of timm / lightly this script uses, in plain torch under their keys and with
    their arithmetic: VisionTransformer (and lightly's MaskedCausalVisionTransformer), lightly's
    MaskedVisionTransformerTIMM, MaskedVisionTransformerDecoderTIMM, AIMPredictionHead, and the
    lightly.models.utils functions the losses use."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import vitrine_dump

    sdpa = getattr(F, 'scaled_dot_product_attention', None) or vitrine_dump.sdpa_math

    class Attention(nn.Module):
        def __init__(self, dim, heads, qkv_bias=True, qk_norm=False, causal=False):
            super().__init__()
            self.num_heads, self.head_dim, self.causal = heads, dim // heads, causal
            self.scale = self.head_dim ** -0.5
            self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
            self.q_norm = nn.LayerNorm(self.head_dim, eps=1e-6) if qk_norm else nn.Identity()
            self.k_norm = nn.LayerNorm(self.head_dim, eps=1e-6) if qk_norm else nn.Identity()
            self.proj = nn.Linear(dim, dim)

        def forward(self, x, mask=None):
            B, N, C = x.shape
            q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
            q, k = self.q_norm(q), self.k_norm(k)
            if self.causal:  # lightly MaskedCausalAttention: SDPA with its prefix-causal mask
                m = None
                if mask is not None:
                    m = x.new_ones(size=(B, N, N), dtype=torch.bool).tril(diagonal=0)
                    m = torch.logical_or(m, (~mask).unsqueeze(1).expand(B, N, N).bool()).unsqueeze(1)
                x = sdpa(q, k, v, attn_mask=m)
            elif hasattr(F, 'scaled_dot_product_attention'):  # timm's fused path
                x = F.scaled_dot_product_attention(q, k, v)
            else:  # timm's explicit path (torch < 2)
                x = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1) @ v
            return self.proj(x.transpose(1, 2).reshape(B, N, C))

    class LayerScale(nn.Module):
        def __init__(self, dim, init):
            super().__init__()
            self.gamma = nn.Parameter(init * torch.ones(dim))

        def forward(self, x):
            return x * self.gamma

    class Mlp(nn.Module):
        def __init__(self, dim, hidden, bias=True):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden, bias=bias), nn.GELU(), nn.Linear(hidden, dim, bias=bias)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self, dim, heads, mlp_ratio, qkv_bias=True, qk_norm=False, init_values=None, causal=False, eps=1e-6):
            super().__init__()
            self.norm1 = nn.LayerNorm(dim, eps=eps)
            self.attn = Attention(dim, heads, qkv_bias, qk_norm, causal)
            self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
            self.norm2 = nn.LayerNorm(dim, eps=eps)
            self.mlp = Mlp(dim, int(dim * mlp_ratio))
            self.ls2 = LayerScale(dim, init_values) if init_values else nn.Identity()

        def forward(self, x, mask=None):
            x = x + self.ls1(self.attn(self.norm1(x), mask=mask) if mask is not None else self.attn(self.norm1(x)))
            return x + self.ls2(self.mlp(self.norm2(x)))

    class PatchEmbed(nn.Module):
        def __init__(self, img, patch, chans, dim):
            super().__init__()
            self.proj = nn.Conv2d(chans, dim, patch, patch)
            self.num_patches = (img // patch) ** 2

        def forward(self, x):
            return self.proj(x).flatten(2).transpose(1, 2)

    class VisionTransformer(nn.Module):
        """timm's VisionTransformer (no dropout, no dynamic size); causal=True: lightly's
        MaskedCausalVisionTransformer (forward_features takes the prefix mask)."""

        def __init__(self, img_size=224, patch_size=16, in_chans=3, num_classes=1000, global_pool='token',
                     embed_dim=768, depth=12, num_heads=12, mlp_ratio=4.0, qkv_bias=True, qk_norm=False,
                     init_values=None, class_token=True, reg_tokens=0, no_embed_class=False, pos_embed='learn',
                     causal=False):
            super().__init__()
            D = embed_dim
            self.global_pool, self.no_embed_class = global_pool, no_embed_class
            self.num_prefix_tokens = int(class_token) + reg_tokens
            self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, D)
            n = self.patch_embed.num_patches
            self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if class_token else None
            self.reg_token = nn.Parameter(torch.zeros(1, reg_tokens, D)) if reg_tokens else None
            rows = n if no_embed_class else n + self.num_prefix_tokens
            self.pos_embed = nn.Parameter(torch.zeros(1, rows, D)) if pos_embed not in ('', 'none') else None
            self.blocks = nn.Sequential(*[Block(D, num_heads, mlp_ratio, qkv_bias, qk_norm, init_values, causal)
                                          for _ in range(depth)])
            fc = global_pool in ('avg', 'avgmax', 'max')
            self.norm = nn.Identity() if fc else nn.LayerNorm(D, eps=1e-6)
            self.fc_norm = nn.LayerNorm(D, eps=1e-6) if fc else nn.Identity()
            self.head = nn.Linear(D, num_classes) if num_classes else nn.Identity()

        def _pos_embed(self, x):
            cat = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.reg_token) if t is not None]
            if self.pos_embed is None:
                return torch.cat(cat + [x], dim=1)
            if self.no_embed_class:
                x = x + self.pos_embed
                return torch.cat(cat + [x], dim=1) if cat else x
            return (torch.cat(cat + [x], dim=1) if cat else x) + self.pos_embed

        def forward_features(self, x, mask=None):
            x = self._pos_embed(self.patch_embed(x))
            for blk in self.blocks:
                x = blk(x, mask=mask)
            return self.norm(x)

        def forward_head(self, x):
            gp, P = self.global_pool, self.num_prefix_tokens
            if gp == 'token':
                x = x[:, 0]
            elif gp:
                x = x[:, P:]
                x = x.mean(dim=1) if gp == 'avg' else x.amax(dim=1) if gp == 'max' else 0.5 * (x.amax(dim=1) + x.mean(dim=1))
            return self.head(self.fc_norm(x))

        def forward(self, x):
            return self.forward_head(self.forward_features(x))

    class utils:  # lightly.models.utils, the functions the objectives call (same definitions)
        @staticmethod
        def expand_index_like(index, tokens):
            return index.unsqueeze(-1).expand(-1, -1, tokens.shape[-1])

        @staticmethod
        def get_at_index(tokens, index):
            return torch.gather(tokens, 1, utils.expand_index_like(index, tokens))

        @staticmethod
        def set_at_index(tokens, index, value):
            return torch.scatter(tokens, 1, utils.expand_index_like(index, tokens), value)

        @staticmethod
        def mask_at_index(tokens, index, mask_token):
            mask = utils.set_at_index(tokens.new_zeros(tokens.shape), index, 1)
            return (1 - mask) * tokens + mask * mask_token

        @staticmethod
        def patchify(images, patch_size):
            N, C, H, W = images.shape
            g = H // patch_size
            p = images.reshape(shape=(N, C, g, patch_size, g, patch_size))
            return torch.einsum('nchpwq->nhwpqc', p).reshape(shape=(N, g * g, patch_size ** 2 * C))

        @staticmethod
        def normalize_mean_var(x, dim=-1, eps=1.0e-6):
            return (x - x.mean(dim=dim, keepdim=True)) / (x.var(dim=dim, keepdim=True) + eps).sqrt()

        @staticmethod
        def random_token_mask(size, mask_ratio=0.6, mask_class_token=False, device=None):
            B, L = size
            n_keep = int((L - int(not mask_class_token)) * (1 - mask_ratio))
            noise = torch.rand(B, L, device=device)
            if not mask_class_token and L > 0:
                noise[:, 0] = -1
                n_keep = max(1, n_keep + 1)
            order = torch.argsort(noise, dim=1)
            return order[:, :n_keep], order[:, n_keep:]

        @staticmethod
        def random_prefix_mask(size, max_prefix_length, device=None):
            B, N = size
            r = torch.randint(0, max_prefix_length, (B, 1), device=device)
            return torch.arange(N, device=device).unsqueeze(0).expand(B, N) >= r

    class MaskedVisionTransformerTIMM(nn.Module):
        def __init__(self, vit):
            super().__init__()
            self.vit = vit
            self.mask_token = nn.Parameter(torch.zeros(1, 1, vit.patch_embed.proj.out_channels))

        @property
        def sequence_length(self):
            return self.vit.patch_embed.num_patches + self.vit.num_prefix_tokens

        def encode(self, images, idx_mask=None, idx_keep=None):
            v = self.vit
            x = v.patch_embed(images)
            cat = [t.expand(x.shape[0], -1, -1) for t in (v.cls_token, v.reg_token) if t is not None]
            x = torch.cat(cat + [x], dim=1) if cat else x
            if idx_mask is not None:
                x = utils.mask_at_index(x, idx_mask, self.mask_token)
            P = v.num_prefix_tokens
            if v.no_embed_class:
                x = torch.cat((x[:, :P], x[:, P:] + v.pos_embed), dim=1) if P else x + v.pos_embed
            else:
                x = x + v.pos_embed
            if idx_keep is not None:
                x = utils.get_at_index(x, idx_keep)
            return v.norm(v.blocks(x))

    class MaskedVisionTransformerDecoderTIMM(nn.Module):
        def __init__(self, num_patches, embed_dim, depth, num_heads, num_prefix_tokens=1, mlp_ratio=4.0):
            super().__init__()
            self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
            self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + num_prefix_tokens, embed_dim), requires_grad=False)
            self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, mlp_ratio) for _ in range(depth)])
            self.norm = nn.LayerNorm(embed_dim, eps=1e-6)

        def forward(self, x, idx_mask=None):
            if idx_mask is not None:
                x = utils.mask_at_index(x, idx_mask, self.mask_token)
            return self.norm(self.blocks(x + self.pos_embed))

    class AIMPredictionHeadBlock(nn.Module):
        def __init__(self, dim, mlp_ratio):
            super().__init__()
            self.norm = nn.LayerNorm(dim)  # torch's default eps 1e-5, as lightly's
            self.mlp = Mlp(dim, int(dim * mlp_ratio), bias=False)

        def forward(self, x):
            return x + self.mlp(self.norm(x))

    class AIMPredictionHead(nn.Module):
        def __init__(self, input_dim, output_dim, hidden_dim=2048, num_blocks=12, mlp_ratio=4.0):
            super().__init__()
            self.blocks = nn.Sequential(nn.Linear(input_dim, hidden_dim, bias=False),
                                        *[AIMPredictionHeadBlock(hidden_dim, mlp_ratio) for _ in range(num_blocks)],
                                        nn.LayerNorm(hidden_dim), nn.Linear(hidden_dim, output_dim, bias=False))

        def forward(self, x):
            return self.blocks(x)

    def causal_vit(**kw):
        return VisionTransformer(causal=True, **kw)

    def label_smoothing_ce(smoothing):
        def loss(x, target):  # timm.loss.LabelSmoothingCrossEntropy
            logprobs = F.log_softmax(x, dim=-1)
            nll = -logprobs.gather(dim=-1, index=target.unsqueeze(1)).squeeze(1)
            return ((1.0 - smoothing) * nll + smoothing * -logprobs.mean(dim=-1)).mean()
        return loss

    return {'VisionTransformer': VisionTransformer, 'MaskedCausalVisionTransformer': causal_vit,
            'MaskedVisionTransformerTIMM': MaskedVisionTransformerTIMM,
            'MaskedVisionTransformerDecoderTIMM': MaskedVisionTransformerDecoderTIMM,
            'AIMPredictionHead': AIMPredictionHead, 'utils': utils, 'LabelSmoothingCrossEntropy': label_smoothing_ce,
            'source': 'stand-in (plain torch, timm / lightly keys)'}


def real_modules():
    """The same names from timm and lightly themselves."""
    timm, lightly = import_libraries()
    from timm.models.vision_transformer import VisionTransformer
    from timm.loss import LabelSmoothingCrossEntropy
    from lightly.models import utils
    from lightly.models.modules import (AIMPredictionHead, MaskedCausalVisionTransformer,
                                        MaskedVisionTransformerDecoderTIMM, MaskedVisionTransformerTIMM)
    return {'VisionTransformer': VisionTransformer, 'MaskedCausalVisionTransformer': MaskedCausalVisionTransformer,
            'MaskedVisionTransformerTIMM': MaskedVisionTransformerTIMM,
            'MaskedVisionTransformerDecoderTIMM': MaskedVisionTransformerDecoderTIMM,
            'AIMPredictionHead': AIMPredictionHead, 'utils': utils, 'LabelSmoothingCrossEntropy': LabelSmoothingCrossEntropy,
            'source': f'timm {timm.__version__}, lightly {lightly.__version__}'}


def build_objective(run, lib):
    """The run's model with its loss as forward(): lightly's MAE / AIM example, timm's classifier."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    obj, m = run['objective'], run['model']
    kw = dict(m['timm_kwargs'])
    u = lib['utils']
    p, C = kw['patch_size'], kw['in_chans']

    class MAE(nn.Module):  # lightly examples/pytorch/mae.py (vitrine src/objectives.c mae_forward)
        def __init__(self):
            super().__init__()
            vit = lib['VisionTransformer'](**kw)
            d = m['decoder']
            self.backbone = lib['MaskedVisionTransformerTIMM'](vit=vit)
            self.decoder_embed = nn.Linear(kw['embed_dim'], d['decoder_dim'])
            self.decoder = lib['MaskedVisionTransformerDecoderTIMM'](
                num_patches=vit.patch_embed.num_patches, embed_dim=d['decoder_dim'], depth=d['decoder_depth'],
                num_heads=d['decoder_heads'], num_prefix_tokens=vit.num_prefix_tokens, mlp_ratio=d['decoder_mlp_ratio'])
            self.prediction_head = nn.Linear(d['decoder_dim'], p * p * C)
            self.norm_pix_loss, self.P = run['loss']['norm_pix_loss'], vit.num_prefix_tokens

        def forward(self, images, idx_keep, idx_mask):
            x = self.decoder_embed(self.backbone.encode(images=images, idx_keep=idx_keep))
            full = u.set_at_index(x.new_zeros(x.shape[0], self.backbone.sequence_length, x.shape[-1]), idx_keep, x)
            x = self.decoder(full, idx_mask=idx_mask)
            pred = self.prediction_head(u.get_at_index(x, idx_mask))
            target = u.get_at_index(u.patchify(images, p), idx_mask - self.P)
            if self.norm_pix_loss:
                target = u.normalize_mean_var(target, dim=-1)
            return F.mse_loss(pred, target)

        def state_module(self):
            return self

    class AIM(nn.Module):  # lightly examples/pytorch/aim.py (vitrine src/objectives.c aim_forward)
        def __init__(self):
            super().__init__()
            h = m['head']
            self.backbone = lib['MaskedCausalVisionTransformer'](**kw)
            self.projection_head = lib['AIMPredictionHead'](
                input_dim=kw['embed_dim'], output_dim=p * p * C, hidden_dim=h['head_hidden_dim'],
                num_blocks=h['head_blocks'], mlp_ratio=h['head_mlp_ratio'])

        def forward(self, images, mask):
            x = self.backbone.forward_features(images, mask=mask)
            pred = self.projection_head(self.backbone._pos_embed(x))
            return F.mse_loss(pred, u.normalize_mean_var(u.patchify(images, p), dim=-1))

        def state_module(self):
            return self

    class Classifier(nn.Module):  # timm's VisionTransformer, cross-entropy with timm's label smoothing
        def __init__(self):
            super().__init__()
            self.vit = lib['VisionTransformer'](**kw)
            s = run['loss']['label_smoothing']
            self.loss = lib['LabelSmoothingCrossEntropy'](smoothing=s) if s > 0 else F.cross_entropy

        def forward(self, images, labels):
            return self.loss(self.vit(images), labels)

        def state_module(self):
            return self.vit

    return {'mae': MAE, 'aim': AIM, 'classify': Classifier}[obj]()


# ---- the run's files ---------------------------------------------------------------------------

def need(doc, path, kind, where='run.json'):
    v = doc
    for k in path.split('.'):
        v = v.get(k) if isinstance(v, dict) else None
    ok = {'int': lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0,
          'num': lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0,
          'str': lambda x: isinstance(x, str) and x != '', 'dict': lambda x: isinstance(x, dict),
          'list': lambda x: isinstance(x, list), 'bool': lambda x: isinstance(x, bool)}[kind]
    if not ok(v):
        raise RunError(f'{where}: {path}: {json.dumps(v)[:60] if v is not None else "missing"} is not {kind_text(kind)}')
    return v


def kind_text(k):
    return {'int': 'a whole number >= 0', 'num': 'a number >= 0', 'str': 'text', 'dict': 'an object',
            'list': 'a list', 'bool': 'true / false'}[k]


def read_run(d):
    """run.json, the state_dict and the optimizer tensors of a torch run folder, checked."""
    import vitrine_dump as vd
    path = os.path.join(d, 'run.json')
    try:
        with open(path, 'rb') as f:
            run = json.loads(f.read())
    except FileNotFoundError:
        raise RunError(f'{d}: no run.json (a run of vitrine export --torch holds run.json, model.safetensors, optimizer.safetensors)')
    except (OSError, ValueError) as e:
        raise RunError(f'{path}: cannot read it as JSON ({e})')
    if not isinstance(run, dict) or run.get('format') != FORMAT:
        raise RunError(f'{path}: format {json.dumps(run.get("format") if isinstance(run, dict) else None)} is not {FORMAT}')
    if run.get('objective') not in ('mae', 'aim', 'classify'):
        raise RunError(f'{path}: objective {json.dumps(run.get("objective"))} is not mae, aim or classify')
    step = need(run, 'step', 'int')
    for k in ('model.timm_kwargs', 'optimizer.state_dict', 'schedule', 'loss', 'batch', 'data', 'masks'):
        need(run, k, 'dict')
    for k in ('schedule.lr', 'schedule.min_lr', 'schedule.clip_norm'):
        need(run, k, 'num')
    for k in ('schedule.warmup_steps', 'schedule.total_steps', 'batch.batch', 'batch.grad_accum', 'data.n'):
        need(run, k, 'int')
    for k in ('data.source', 'data.order.seed', 'masks.state'):
        need(run, k, 'str')
    for k in ('data.mean', 'data.std'):
        need(run, k, 'list')
    for k in ('img_size', 'patch_size', 'in_chans', 'embed_dim'):
        need(run, f'model.timm_kwargs.{k}', 'int')
    need(run, 'optimizer.state_dict.param_groups', 'list')
    if run['objective'] == 'mae':
        need(run, 'model.decoder', 'dict')
        need(run, 'loss.mask_ratio', 'num')
    if run['objective'] == 'aim':
        need(run, 'model.head', 'dict')
    if run['objective'] == 'classify':
        need(run, 'loss.label_smoothing', 'num')
    if run['batch']['batch'] < 1 or run['batch']['grad_accum'] < 1 or run['data']['n'] < 1:
        raise RunError(f'{path}: batch.batch, batch.grad_accum and data.n must be >= 1')
    tensors = {}
    for f in ('model.safetensors', 'optimizer.safetensors'):
        p = os.path.join(d, f)
        if not os.path.isfile(p):
            raise RunError(f'{d}: no {f}')
        try:
            t, meta = vd.read_safetensors(p)
        except (vd.DumpError, OSError, ValueError, KeyError, TypeError) as e:
            raise RunError(f'{p}: not a safetensors file ({e})')
        if meta.get('step') != str(step):
            raise RunError(f'{p} is of step {meta.get("step")!r}, run.json of step {step} (a run written in part: use a complete one)')
        tensors[f] = t
    return run, tensors['model.safetensors'], tensors['optimizer.safetensors']


def write_run(out, run, model_sd, order, opt_tensors):
    """OUT's three files, each atomically, run.json last (it names the step the others carry)."""
    import vitrine_dump as vd
    os.makedirs(out, exist_ok=True)
    tag = {'format': 'pt', 'run': FORMAT, 'step': str(run['step'])}
    vd.write_safetensors(os.path.join(out, 'model.safetensors'), {k: model_sd[k] for k in order}, tag)
    vd.write_safetensors(os.path.join(out, 'optimizer.safetensors'), opt_tensors, tag)
    tmp = os.path.join(out, f'.run.json.tmp-{os.getpid()}')
    with open(tmp, 'w') as f:
        f.write(json.dumps(run, indent=1) + '\n')
    os.replace(tmp, os.path.join(out, 'run.json'))


# ---- training ------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, as every other failure
        _say(f'{message} (--help lists the options)')
        sys.exit(2)


def main(argv=None):
    ap = _Parser(
        prog='vitrine_continue.py', description='Continue a vitrine training run (vitrine export --torch DIR) in '
        'PyTorch with timm + lightly, on one process or under torchrun (DistributedDataParallel), and write it '
        'back for vitrine train --resume. Exit status: 0 done, 1 failed, 2 usage. docs/scale-out.md.')
    ap.add_argument('run', metavar='DIR', help='the run (vitrine export --torch DIR, or an --out of this script)')
    ap.add_argument('--data', help='fashion-mnist[:DIR of its .gz files] (the default for a Fashion-MNIST run), or the '
                    'folder of images the run trained on')
    ap.add_argument('--out', help='where to write the run (default: DIR itself)')
    ap.add_argument('--steps', type=int, help='steps to take (default: to the end of the schedule)')
    ap.add_argument('--stop-at', type=int, help='stop when the run reaches this step')
    ap.add_argument('--save-every', type=int, default=200, help='write OUT every N steps (default 200; and at the end)')
    ap.add_argument('--masks', choices=['vitrine', 'torch'], default='vitrine',
                    help="vitrine: vitrine's generator, the masks vitrine would draw (default); torch: lightly's, on the device")
    ap.add_argument('--val-split', type=float, help="a classifier on a folder: the share held out as vitrine's run did (default: found from the run's image count)")
    ap.add_argument('--device', default='auto', help='auto (cuda:LOCAL_RANK when there is a GPU), cpu, cuda')
    ap.add_argument('--threads', type=int, help='torch.set_num_threads')
    ap.add_argument('--tf32', action='store_true', help='allow TF32 matmuls on GPUs (vitrine computes float32)')
    ap.add_argument('--float64', action='store_true', help='compute in float64 from the float32 state (writes float32): '
                    'the yardstick of how far float32 itself strays (tests/node/torch-run.test.mjs)')
    ap.add_argument('--standin', action='store_true', help='the timm / lightly modules in plain torch (no timm / lightly needed)')
    ap.add_argument('--log-every', type=int, default=1, help='a line every N steps (default 1)')
    ap.add_argument('--json', action='store_true', help='a JSON line per step (step, loss, lr) and one at the end, on stdout (rank 0)')
    a = ap.parse_args(argv)
    for k in ('steps', 'stop_at', 'save_every', 'threads', 'log_every'):
        v = getattr(a, k)
        if v is not None and v < (0 if k == 'steps' else 1):
            _say(f'--{k.replace("_", "-")}: {v} is out of range')
            return 2
    if a.val_split is not None and not 0 <= a.val_split < 1:
        _say(f'--val-split: {a.val_split} is not in [0, 1)')
        return 2
    try:
        import torch  # noqa: F401
    except ImportError as e:
        _say(f'torch is not importable ({e}): install PyTorch (Debian: apt-get install python3-torch)')
        return 1
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        return train(a)
    except RunError as e:
        _say(str(e))
        return 1
    except KeyboardInterrupt:
        _say('interrupted; the last run written is the one to continue')
        return 130
    except Exception as e:  # noqa: BLE001 -- one line, whatever went wrong
        if os.environ.get('VITRINE_DEBUG'):
            raise
        _say(f'{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""} (VITRINE_DEBUG=1 for the traceback)')
        return 1


def train(a):
    import numpy as np
    import torch
    import torch.distributed as dist
    import vitrine_dump as vd

    world, rank = int(os.environ.get('WORLD_SIZE', '1')), int(os.environ.get('RANK', '0'))
    local = int(os.environ.get('LOCAL_RANK', str(rank)))
    if world < 1 or not 0 <= rank < world:
        raise RunError(f'RANK {rank} / WORLD_SIZE {world}: not a rank of the world')
    if a.device == 'auto':
        dev = torch.device(f'cuda:{local}') if torch.cuda.is_available() else torch.device('cpu')
    elif a.device in ('cpu', 'cuda') or a.device.startswith('cuda:'):
        dev = torch.device(f'cuda:{local}' if a.device == 'cuda' else a.device)
        if dev.type == 'cuda' and not torch.cuda.is_available():
            raise RunError('--device cuda: torch sees no GPU here')
    else:
        raise RunError(f'--device {a.device!r}: auto, cpu, cuda or cuda:N')
    if dev.type == 'cuda':
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(a.tf32)
    if a.threads:
        torch.set_num_threads(a.threads)
    say = _say if rank == 0 else (lambda m: None)

    run, sd, opt_t = read_run(a.run)
    obj, step0 = run['objective'], run['step']
    B, K = run['batch']['batch'], run['batch']['grad_accum']
    if B % world:
        raise RunError(f'batch {B} does not split over {world} processes (each takes batch / WORLD_SIZE images)')
    b = B // world
    sched, total = run['schedule'], run['schedule']['total_steps']
    stop = total if total > 0 else step0 + (a.steps or 0)
    if a.steps is not None:
        stop = min(stop, step0 + a.steps) if total > 0 else step0 + a.steps
    if a.stop_at is not None:
        stop = min(stop, a.stop_at)
    if stop <= step0:
        raise RunError(f'the run is at step {step0}{f" of {total}" if total else ""}: nothing to do (--steps / --stop-at)')

    # the data, in vitrine's order
    src = run['data']['source']
    data = a.data if a.data is not None else ('fashion-mnist' if src == 'fashion-mnist' else None)
    if data is None:
        raise RunError(f'the run trained on a folder of images ({src}); name it with --data DIR')
    if (src == 'fashion-mnist') != data.startswith('fashion-mnist'):
        raise RunError(f'--data {data}: the run trained on {src}')
    source = FashionMNIST(data.split(':', 1)[1] if data.startswith('fashion-mnist:') else FMNIST_DIR) \
        if data.startswith('fashion-mnist') else ImageFolder(data)
    n, tmax = run['data']['n'], run['data'].get('train_max')
    # the training images as vitrine chose them: all, or a classifier's share left after a held-out
    # fraction (its default 0.2 when no other validation data was named), then the first train_max
    fractions = [a.val_split] if a.val_split is not None else ([0.0, 0.2] if obj == 'classify' else [0.0])
    train_idx = None
    for f in fractions:
        idx = split_fraction(source.n, f) if f else list(range(source.n))
        idx = idx[:tmax] if tmax else idx
        if len(idx) == n:
            train_idx = idx
            break
    if train_idx is None:
        raise RunError(f'the run trained on {n} images; {source.name} gives {len(idx)}'
                       f'{"" if a.val_split is not None else " (a classifier held out another share: --val-split F)"}')
    if obj == 'classify' and source.labels is None:
        raise RunError(f'{source.name}: no classes (a classifier needs a sub-folder per class)')
    if obj == 'classify' and run['data'].get('classes') and source.classes != run['data']['classes']:
        raise RunError(f'the run trained on the classes {run["data"]["classes"]}; {source.name} has {source.classes}')
    kw = run['model']['timm_kwargs']
    S, C = kw['img_size'], kw['in_chans']
    mean, std = run['data']['mean'], run['data']['std']
    batches = Batches(source, S, C, mean, std, run['data'].get('augment', 'none'), run['data'].get('augment_seed', '0'))
    order = DataOrder(n, int(run['data']['order']['seed']))

    # the model, its state, AdamW with vitrine's groups
    lib = standin() if a.standin else real_modules()
    torch.manual_seed(0)  # construction's own init is overwritten by the state below
    objective = build_objective(run, lib)
    mod = objective.state_module()
    try:
        mod.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        lines = [l.strip() for l in str(e).splitlines() if l.strip()]
        raise RunError(f'model.safetensors does not fit {lib["source"]}\'s {run["model"]["module"]}: {" ".join(lines[1:3])[:300]}')
    dtype = torch.float64 if a.float64 else torch.float32
    objective.to(dev, dtype)
    named = dict(mod.named_parameters())
    groups_in = run['optimizer']['state_dict']['param_groups']
    trainable = [nm for g in groups_in for nm in need(g, 'param_names', 'list', 'run.json param group')]
    for nm in trainable:
        if nm not in named:
            raise RunError(f'run.json: param group names {nm}, which the model has not')
    for nm, p in named.items():
        p.requires_grad_(nm in trainable)
    groups = []
    for g in groups_in:
        betas = need(g, 'betas', 'list', 'run.json param group')
        groups.append({'params': [named[nm] for nm in g['param_names']], 'lr': schedule_lr(sched, step0),
                       'betas': (float(betas[0]), float(betas[1])), 'eps': need(g, 'eps', 'num', 'run.json param group'),
                       'weight_decay': need(g, 'weight_decay', 'num', 'run.json param group')})
    opt = torch.optim.AdamW(groups, foreach=False)
    state_in = run['optimizer']['state_dict'].get('state', {})
    sd_opt = opt.state_dict()
    sd_opt['state'] = {}
    for gi, g in enumerate(groups_in):
        sd_opt['param_groups'][gi]['initial_lr'] = g.get('initial_lr', sched['lr'])
        for j, i in enumerate(g['params']):
            s = state_in.get(str(i))
            if not isinstance(s, dict) or s.get('step') != step0:
                raise RunError(f'run.json: optimizer state {i} ({g["param_names"][j]}): step {s.get("step") if isinstance(s, dict) else None}, the run\'s is {step0}')
            ea, eq = opt_t.get(f'state.{i}.exp_avg'), opt_t.get(f'state.{i}.exp_avg_sq')
            if ea is None or eq is None:
                raise RunError(f'optimizer.safetensors: no state.{i}.exp_avg / exp_avg_sq ({g["param_names"][j]})')
            new_id = sd_opt['param_groups'][gi]['params'][j]
            sd_opt['state'][new_id] = {'step': torch.tensor(float(step0)), 'exp_avg': ea, 'exp_avg_sq': eq}
    try:
        opt.load_state_dict(sd_opt)
    except (ValueError, RuntimeError) as e:
        raise RunError(f'optimizer.safetensors does not fit the model: {e}')
    params = [p for g in opt.param_groups for p in g['params']]
    for p in params:  # every trainable parameter steps every step, as vitrine's (a token no loss reaches: zero)
        p.grad = torch.zeros_like(p)

    if world > 1:
        backend = 'nccl' if dev.type == 'cuda' else 'gloo'
        try:
            dist.init_process_group(backend, init_method='env://', world_size=world, rank=rank)
        except Exception as e:  # noqa: BLE001 -- the rendezvous' own complaint, one line
            raise RunError(f'init_process_group({backend}, env://) failed: {str(e).splitlines()[0] if str(e) else type(e).__name__} '
                           '(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)')
        net = torch.nn.parallel.DistributedDataParallel(objective, device_ids=[dev.index] if dev.type == 'cuda' else None,
                                                        find_unused_parameters=True)
    else:
        net = objective
    sdpa = vd._SdpaFallback([objective]) if obj == 'aim' and not a.standin else None

    masks = Xoshiro(need(run, 'masks.state', 'str')) if obj != 'classify' and a.masks == 'vitrine' else None
    if obj != 'classify' and a.masks == 'torch':
        torch.manual_seed(hash32(*seed_words(run['data']['order']['seed']), step0, rank))
    # the sequence the masks cover: patches and prefix tokens (src/objectives.c: the model's T_full)
    L = (kw['img_size'] // kw['patch_size']) ** 2 + int(kw.get('class_token', True)) + kw.get('reg_tokens', 0)
    labels = torch.as_tensor(np.asarray(source.labels), dtype=torch.int64) if obj == 'classify' else None
    out = a.out or a.run
    say(f'{obj.upper()} {run["model"]["module"]} ({lib["source"]}) at step {step0} of {total}, {world} process'
        f'{"es" if world > 1 else ""} on {dev.type} ({"gloo" if dev.type == "cpu" else "nccl"} when > 1), batch {B}'
        f'{f" x {K}" if K > 1 else ""} ({b} per process), masks {a.masks if obj != "classify" else "-"}, to step {stop}; writing {out}')

    def save(step):
        if rank == 0:
            msd = {k: v.detach().float().cpu().contiguous() for k, v in mod.state_dict().items()}
            osd = opt.state_dict()
            ot = {}
            st_json = {}
            for gi, g in enumerate(osd['param_groups']):
                for j, i in enumerate(g['params']):
                    s = osd['state'][i]
                    st_json[str(i)] = {'step': int(s['step'].item())}
                    ot[f'state.{i}.exp_avg'] = s['exp_avg'].detach().float().cpu().contiguous()
                    ot[f'state.{i}.exp_avg_sq'] = s['exp_avg_sq'].detach().float().cpu().contiguous()
                groups_in[gi]['params'] = list(g['params'])
                groups_in[gi]['lr'] = schedule_lr(sched, step)
            run['optimizer']['state_dict']['state'] = st_json
            run['step'] = step
            run['schedule']['next_lr'] = schedule_lr(sched, step)
            seen = step * B * K
            run['data']['position'] = {'images_seen': seen, 'epoch': seen // n, 'index': seen % n}
            if masks is not None:
                run['masks']['state'] = masks.hex()
            hist['to_step'] = step
            write_run(out, run, msd, list(sd.keys()), ot)
        if world > 1:
            dist.barrier()

    t0, loss_v = time.time(), None
    hist = {'by': TOOL, 'modules': lib['source'], 'torch': torch.__version__, 'world_size': world, 'device': dev.type,
            'masks': a.masks if obj != 'classify' else None, 'from_step': step0}
    run.setdefault('history', []).append(hist)
    step = step0
    try:
        while step < stop:
            lr = schedule_lr(sched, step)
            for g in opt.param_groups:
                g['lr'] = lr
            slots = list(range(B * K))
            pos = [train_idx[order.at(step * B * K + j)] for j in slots]
            if masks is not None and obj == 'mae':
                mk, mm = vitrine_token_masks(masks, B * K, L, run['loss']['mask_ratio'])
            elif masks is not None and obj == 'aim':
                mp = vitrine_prefix_masks(masks, B * K, L, L - 1 if L > 1 else 1)
            total_loss = 0.0
            for k in range(K):
                rows = list(range(k * B + rank * b, k * B + (rank + 1) * b))
                x = torch.from_numpy(batches.images([pos[r] for r in rows], step, rows)).to(dev, dtype)
                if obj == 'mae':
                    if masks is not None:
                        ik = torch.tensor([mk[r] for r in rows], dtype=torch.int64, device=dev)
                        im = torch.tensor([mm[r] for r in rows], dtype=torch.int64, device=dev)
                    else:
                        ik, im = lib['utils'].random_token_mask(size=(b, L), mask_ratio=run['loss']['mask_ratio'], device=dev)
                    args = (x, ik, im)
                elif obj == 'aim':
                    if masks is not None:
                        pm = torch.tensor([mp[r] for r in rows], dtype=torch.bool, device=dev)
                    else:
                        pm = lib['utils'].random_prefix_mask(size=(b, L), max_prefix_length=L - 1, device=dev)
                    args = (x, pm)
                else:
                    args = (x, labels[[pos[r] for r in rows]].to(dev))
                sync = world > 1 and k < K - 1
                with (net.no_sync() if sync else _Nothing()), (sdpa if sdpa else _Nothing()):
                    loss = net(*args)
                    (loss / K if K > 1 else loss).backward()
                total_loss += float(loss.detach())
            lt = torch.tensor([total_loss / K], dtype=torch.float64)
            if world > 1:
                dist.all_reduce(lt)
                lt /= world
            loss_v = float(lt)
            clip = sched['clip_norm']
            if clip > 0:
                norm = torch.nn.utils.clip_grad_norm_(params, clip)
            else:
                norm = torch.norm(torch.stack([torch.norm(p.grad.detach(), 2) for p in params]), 2)
            if not (math.isfinite(loss_v) and math.isfinite(float(norm))):
                raise RunError(f'training stopped at step {step + 1}: the {"loss" if not math.isfinite(loss_v) else "gradient norm"} '
                               f'is not finite; the last good state is the last one written ({out})')
            opt.step()
            opt.zero_grad(set_to_none=False)
            step += 1
            if a.json and rank == 0:
                print(json.dumps({'step': step, 'loss': loss_v, 'lr': lr}), flush=True)
            if step % a.log_every == 0 or step == stop:
                say(f'step {step}/{total} loss {loss_v:.6f} lr {lr:.4g} ({(time.time() - t0) / (step - step0):.3f} s/step)')
            if step % a.save_every == 0 and step < stop:
                save(step)
        save(step)
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()
    if a.json and rank == 0:
        print(json.dumps({'step': step, 'loss': loss_v, 'out': out, 'world_size': world,
                          'seconds': round(time.time() - t0, 3)}))
    say(f'wrote {out} at step {step}: vitrine train --resume {out} continues it')
    return 0


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == '__main__':
    sys.exit(main())
