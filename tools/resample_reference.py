"""resample_reference.py: what timm computes when it loads a checkpoint into a model of another size,
for tests/node/resample.test.mjs (vitrine's load path against it) -- torch only.

timm's checkpoint_filter_fn (timm/models/vision_transformer.py) resamples with interpolation
'bicubic' and antialias=True:
  pos_embed    timm.layers.resample_abs_pos_embed: prefix rows kept apart, the grid rows as an
               image of embed_dim channels through F.interpolate(size=new, mode='bicubic',
               antialias=True) (align_corners False), rows again;
  patch_embed  timm.layers.resample_patch_embed: R = the resize of every basis kernel
               (_compute_resize_matrix), w_new = w @ pinv(R) (_apply_resampling), in float32.
The same calls are made here. With --timm DIR (a checkout of pytorch-image-models), timm's own
resample_abs_pos_embed and resample_patch_embed are called instead (timm/layers/pos_embed.py and
patch_embed.py, loaded alone: they need only torch), and the file says so (metadata "by").

Usage: /usr/bin/python3 tools/resample_reference.py OUT.safetensors [--timm DIR]
Writes per case c: c/in, c/out (float32) and the cases as JSON in the metadata.
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)


def pos_embed(x, prefix, new):  # timm.layers.resample_abs_pos_embed's steps
    pre, grid = x[:, :prefix], x[:, prefix:]
    old = int(round((grid.shape[1]) ** 0.5))
    d = grid.shape[-1]
    g = grid.reshape(1, old, old, d).permute(0, 3, 1, 2)
    g = F.interpolate(g, size=[new, new], mode='bicubic', antialias=True)
    return torch.cat([pre, g.permute(0, 2, 3, 1).reshape(1, -1, d)], dim=1)


def patch_embed(w, new):  # timm.layers.resample_patch_embed's steps
    old = w.shape[-1]
    eye = torch.eye(old * old).reshape(old * old, 1, old, old)
    r = F.interpolate(eye, size=(new, new), mode='bicubic', antialias=True, align_corners=False)
    r = r.squeeze(1).permute(1, 2, 0).reshape(new * new, old * old)
    o, i = w.shape[:2]
    return (w.reshape(o, i, -1) @ torch.linalg.pinv(r)).reshape(o, i, new, new)


def timm_functions(root):
    """timm's resample_abs_pos_embed and resample_patch_embed from its source, without timm's
    package __init__ (which imports torchvision, absent here): empty parent packages, then the two
    modules with their relative imports (_fx, format, helpers, trace_utils: torch only)."""
    import importlib
    import os
    import types
    for name, sub in (('timm', 'timm'), ('timm.layers', os.path.join('timm', 'layers'))):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, sub)]
        sys.modules[name] = pkg
    pos = importlib.import_module('timm.layers.pos_embed')
    patch = importlib.import_module('timm.layers.patch_embed')
    return (lambda x, prefix, new: pos.resample_abs_pos_embed(x, [new, new], num_prefix_tokens=prefix),
            lambda w, new: patch.resample_patch_embed(w, [new, new]))


def main(out, timm_root=None):
    by = 'timm.layers (%s)' % timm_root if timm_root else 'torch, timm\'s steps'
    pos_fn, patch_fn = timm_functions(timm_root) if timm_root else (pos_embed, patch_embed)
    D = 32
    cases, tensors = [], {}
    # pos_embed: grids 14 -> 7, 16, 10, 28 and 7 -> 14, 16 -> 14, with 0, 1 and 5 prefix rows
    for old, new in [(14, 7), (14, 16), (14, 10), (14, 28), (7, 14), (16, 14)]:
        for prefix in (0, 1, 5):
            name = f'pos{len(cases)}'
            x = torch.randn(1, prefix + old * old, D) * 0.02
            tensors[f'{name}/in'], tensors[f'{name}/out'] = x, pos_fn(x, prefix, new)
            cases.append({'name': name, 'what': 'pos_embed', 'old': old, 'new': new, 'prefix': prefix, 'dim': D})
    # patch_embed: 16 -> 8, 14, 32 and 14 -> 16 (3 input channels)
    for old, new in [(16, 8), (16, 14), (16, 32), (14, 16)]:
        name = f'patch{len(cases)}'
        w = torch.randn(D, 3, old, old) * 0.02
        tensors[f'{name}/in'], tensors[f'{name}/out'] = w, patch_fn(w, new)
        cases.append({'name': name, 'what': 'patch_embed', 'old': old, 'new': new, 'dim': D})
    header, blobs, off = {}, [], 0
    for k, t in tensors.items():
        b = t.detach().numpy().astype(np.float32).tobytes()
        header[k] = {'dtype': 'F32', 'shape': list(t.shape), 'data_offsets': [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header['__metadata__'] = {'cases': json.dumps(cases), 'torch': torch.__version__, 'by': by}
    h = json.dumps(header).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(out, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


if __name__ == '__main__':
    args = sys.argv[1:]
    root = None
    if '--timm' in args:
        i = args.index('--timm')
        root = args[i + 1]
        del args[i:i + 2]
    main(args[0], root)
