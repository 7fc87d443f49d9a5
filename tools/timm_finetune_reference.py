"""timm_finetune_reference.py: a 224-px timm state_dict and what timm computes when it starts a model
from it at 224 px and at other sizes, for tests/node/finetune-timm.test.mjs -- timm's own code.

timm's vit_tiny_patch16_224 is made by timm.create_model (timm's initialisation, seeded) and its
state_dict written as safetensors (timm's keys, no metadata: what `save_file(model.state_dict())`
writes). Then, for each case, timm.create_model('vit_tiny_patch16_224', pretrained=True,
img_size=S, patch_size=P, pretrained_cfg_overlay=dict(file=...)) loads that state_dict as timm
loads a checkpoint into a model of another size (checkpoint_filter_fn: pos_embed and patch_embed
resampled), and its logits on an image are kept: the image's 8-bit pixels, normalised with the
model's pretrained_cfg mean / std (0.5 for the augreg weights) as timm's eval transform does.

timm is imported from its source (--timm DIR, a pytorch-image-models checkout), else as installed
(PYTHONPATH). Its package imports
torchvision at module level for data transforms that are not used here; without torchvision a stub
module stands in for it (it is never called).

Usage: /usr/bin/python3 tools/timm_finetune_reference.py OUT_DIR [--timm DIR] [--arch NAME]
--arch vit_base_patch16_clip_quickgelu_224: OpenAI's CLIP ViT-B/16 image tower at its width with one
block (ARCHS), written as clip_b16_depth1.safetensors and reference_clip_b16_depth1.safetensors.
Writes OUT_DIR/vit_tiny_patch16_224.safetensors (the state_dict) and OUT_DIR/reference.safetensors:
per case c: c/pixels (uint8 [S, S, 4], RGBA), c/logits (float32 [1, 1000]); the cases and timm's
pretrained_cfg mean / std as JSON in the metadata.
"""
import enum
import json
import os
import struct
import sys
import types

import numpy as np
import torch


def stub_torchvision():
    try:
        import torchvision  # noqa: F401
        return
    except ImportError:
        pass

    class Anything(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith('__'):
                raise AttributeError(name)
            return type(name, (), {'__init__': lambda self, *a, **k: None})

    class InterpolationMode(enum.Enum):
        NEAREST = 'nearest'
        NEAREST_EXACT = 'nearest-exact'
        BILINEAR = 'bilinear'
        BICUBIC = 'bicubic'
        BOX = 'box'
        HAMMING = 'hamming'
        LANCZOS = 'lanczos'

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


def write_safetensors(path, tensors, meta=None):
    header, blobs, off = {}, [], 0
    for k, t in tensors.items():
        a = t.detach().contiguous().numpy()
        dtype = {np.dtype('float32'): 'F32', np.dtype('uint8'): 'U8'}[a.dtype]
        b = a.tobytes()
        header[k] = {'dtype': dtype, 'shape': list(a.shape), 'data_offsets': [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if meta:
        header['__metadata__'] = meta
    h = json.dumps(header).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


# the architectures: name -> (file stem, timm kwargs, the (img_size, patch_size) cases)
ARCHS = {
    'vit_tiny_patch16_224': ('vit_tiny_patch16_224', {}, [(224, 16), (112, 16), (160, 16), (112, 8)]),
    # OpenAI's CLIP ViT-B/16 image tower at its width, one block (its 512-wide projection head)
    'vit_base_patch16_clip_quickgelu_224': ('clip_b16_depth1', {'depth': 1, 'num_classes': 512}, [(224, 16), (112, 16)]),
}


def main(out, root=None, arch='vit_tiny_patch16_224'):
    if root:
        sys.path.insert(0, root)
    stub_torchvision()
    import timm
    stem, kwargs, sizes = ARCHS[arch]
    torch.manual_seed(0)
    src = timm.create_model(arch, pretrained=False, **kwargs).eval()
    state = {k: v for k, v in src.state_dict().items()}
    write_safetensors(os.path.join(out, f'{stem}.safetensors'), state)
    pth = os.path.join(out, f'{stem}.pth')
    torch.save(state, pth)  # timm's loader reads .safetensors only through the safetensors package
    cases, tensors, cfg = [], {}, None
    for size, patch in sizes:
        model = timm.create_model(arch, pretrained=True, img_size=size, patch_size=patch, **kwargs,
                                  pretrained_cfg_overlay=dict(file=pth, custom_load=False)).eval()
        cfg = model.pretrained_cfg
        g = torch.Generator().manual_seed(size + patch)
        rgba = torch.randint(0, 256, (size, size, 4), generator=g, dtype=torch.uint8)
        rgba[..., 3] = 255
        mean, std = torch.tensor(cfg['mean']).view(3, 1, 1), torch.tensor(cfg['std']).view(3, 1, 1)
        x = ((rgba[..., :3].permute(2, 0, 1).float() / 255.0 - mean) / std).unsqueeze(0)  # ToTensor + Normalize
        with torch.no_grad():
            logits = model(x)
        name = f'c{size}p{patch}'
        tensors[f'{name}/pixels'], tensors[f'{name}/logits'] = rgba, logits
        cases.append({'name': name, 'img_size': size, 'patch_size': patch})
    write_safetensors(os.path.join(out, 'reference.safetensors' if stem == 'vit_tiny_patch16_224' else f'reference_{stem}.safetensors'), tensors,
                      {'cases': json.dumps(cases), 'mean': json.dumps(list(cfg['mean'])), 'std': json.dumps(list(cfg['std'])),
                       'torch': torch.__version__, 'timm': timm.__version__})
    os.remove(pth)


if __name__ == '__main__':
    args, root, arch = sys.argv[1:], None, 'vit_tiny_patch16_224'
    for flag in ('--timm', '--arch'):
        if flag in args:
            i = args.index(flag)
            v = args[i + 1] if i + 1 < len(args) else None
            del args[i:i + 2]
            if flag == '--timm':
                root = v
            else:
                arch = v
    if len(args) != 1 or ('--timm' in sys.argv and not root) or arch not in ARCHS:
        sys.exit(f'usage: timm_finetune_reference.py OUT_DIR [--timm DIR] [--arch {" | ".join(ARCHS)}]')
    main(args[0], root, arch)
