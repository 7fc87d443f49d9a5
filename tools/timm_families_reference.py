"""timm_families_reference.py: each family's state_dict as timm saves it, at the family's real width
with one block, and timm's forward of it, for tests/node/families.test.mjs -- timm's own code.

For each name of FAMILIES, timm.create_model(name, pretrained=False, depth=1, num_classes=3) (timm's
initialisation, seeded) is written as safetensors (timm's keys, no metadata: what
`save_file(model.state_dict())` writes) to OUT_DIR/<name>.safetensors, and its eval forward of one
N(0, 1) image of the model's size goes to OUT_DIR/reference.safetensors as <name>/images and
<name>/logits (the names in the metadata). timm is imported from --timm DIR (a pytorch-image-models
checkout) or as installed; without torchvision a stub stands in (tools/timm_finetune_reference.py).

Usage: /usr/bin/python3 tools/timm_families_reference.py OUT_DIR [--timm DIR]
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timm_finetune_reference import stub_torchvision, write_safetensors  # noqa: E402

FAMILIES = [
    'vit_base_patch16_clip_224', 'vit_base_patch32_clip_224', 'vit_base_patch16_clip_quickgelu_224',
    'vit_base_patch32_clip_quickgelu_224', 'vit_base_patch16_siglip_224', 'deit_tiny_patch16_224',
    'deit_small_patch16_224', 'deit_base_patch16_224', 'deit_tiny_distilled_patch16_224',
    'deit_small_distilled_patch16_224', 'deit_base_distilled_patch16_224', 'vit_small_patch14_reg4_dinov2',
    'vit_base_patch14_reg4_dinov2',
]


def main(out, root=None):
    if root:
        sys.path.insert(0, root)
    stub_torchvision()
    import timm
    tensors = {}
    for i, name in enumerate(FAMILIES):
        torch.manual_seed(i)
        # DINOv2 at 224 px (its 518 is a pos_embed of 37 x 37 rows, the same code)
        extra = {'img_size': 224} if 'dinov2' in name else {}
        model = timm.create_model(name, pretrained=False, depth=1, num_classes=3, **extra).eval()
        write_safetensors(os.path.join(out, f'{name}.safetensors'), dict(model.state_dict()))
        size = model.patch_embed.img_size
        x = torch.randn(1, 3, size[0], size[1], generator=torch.Generator().manual_seed(100 + i))
        with torch.no_grad():
            tensors[f'{name}/images'], tensors[f'{name}/logits'] = x, model(x)
    write_safetensors(os.path.join(out, 'reference.safetensors'), tensors,
                      {'names': json.dumps(FAMILIES), 'torch': torch.__version__, 'timm': timm.__version__})


if __name__ == '__main__':
    args, root = sys.argv[1:], None
    if '--timm' in args:
        i = args.index('--timm')
        root = args[i + 1] if i + 1 < len(args) else None
        del args[i:i + 2]
    if len(args) != 1 or ('--timm' in sys.argv and not root):
        sys.exit('usage: timm_families_reference.py OUT_DIR [--timm DIR]')
    main(args[0], root)
