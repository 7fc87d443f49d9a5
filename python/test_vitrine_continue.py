#!/usr/bin/env python3
"""Tests of vitrine_continue.py: python3 -m unittest -v test_vitrine_continue (from python/).

The script's --standin modules (plain torch under timm's and lightly's keys) against timm and lightly
themselves: the same state_dict loaded into both, the same images and masks, then every objective's
loss and every gradient compared. Skipped, saying which import failed, when timm / lightly are not
importable (PYTHONPATH). tests/node/torch-run.test.mjs runs this file, and the round trips that use
the stand-in where timm is absent.
"""
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vitrine_continue as vc  # noqa: E402
import vitrine_dump as vd  # noqa: E402

try:
    vc.import_libraries()
    NO_LIBS = None
except vc.RunError as e:
    NO_LIBS = str(e)

# encoders at the main job's width (shrunk in depth): the kwargs the stand-in branches on
ENCODERS = {
    'main': dict(img_size=28, patch_size=7, in_chans=1, embed_dim=128, depth=2, num_heads=4, mlp_ratio=2.0),
    'timm options': dict(img_size=32, patch_size=8, in_chans=3, embed_dim=96, depth=2, num_heads=3, mlp_ratio=4.0,
                         qk_norm=True, init_values=1e-5, reg_tokens=2, qkv_bias=False),
}


def run_spec(objective, enc):
    kw = dict(num_classes=0, global_pool='token', **enc)
    run = {'objective': objective, 'model': {'timm_kwargs': kw}, 'loss': {}}
    if objective == 'mae':
        kw['reg_tokens'] = 0  # vitrine's MAE masks patches only (random_token_mask keeps token 0 alone)
        run['model']['decoder'] = dict(decoder_dim=64, decoder_depth=2, decoder_heads=4, decoder_mlp_ratio=4.0)
        run['loss'] = {'mask_ratio': 0.5, 'norm_pix_loss': True}
    elif objective == 'aim':
        kw.update(class_token=False, no_embed_class=True, global_pool='avg', reg_tokens=0)
        run['model']['head'] = dict(head_hidden_dim=128, head_blocks=2, head_mlp_ratio=4.0)
    else:
        kw.update(num_classes=10, global_pool='avg')
        run['loss'] = {'label_smoothing': 0.1}
    return run


def inputs(run, batch=4, seed=0):
    kw = run['model']['timm_kwargs']
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, kw['in_chans'], kw['img_size'], kw['img_size'], generator=g)
    L = (kw['img_size'] // kw['patch_size']) ** 2 + int(kw.get('class_token', True)) + kw.get('reg_tokens', 0)
    gen = vc.Xoshiro('%08x' % (seed + 1) * 4)
    if run['objective'] == 'mae':
        keep, masked = vc.vitrine_token_masks(gen, batch, L, 0.5)
        return x, torch.tensor(keep), torch.tensor(masked)
    if run['objective'] == 'aim':
        return x, torch.tensor(vc.vitrine_prefix_masks(gen, batch, L, L - 1))
    return x, torch.randint(0, 10, (batch,), generator=g)


def grads(loss, model):
    """d loss / d every trainable parameter (zeros for one the loss does not reach: a mask token)."""
    ps = [p for p in model.parameters() if p.requires_grad]
    return [torch.zeros_like(p) if g is None else g for p, g in zip(ps, torch.autograd.grad(loss, ps, allow_unused=True))]


@unittest.skipIf(NO_LIBS, NO_LIBS)
class StandInAgainstTimmLightly(unittest.TestCase):
    def check(self, objective, enc_name):
        run = run_spec(objective, ENCODERS[enc_name])
        torch.manual_seed(0)
        real = vc.build_objective(run, vc.real_modules())
        vd.perturb(real.state_module(), 1)  # no parameter left at a constant: every gradient tested
        sd = real.state_module().state_dict()
        stand = vc.build_objective(run, vc.standin())
        stand.state_module().load_state_dict(sd, strict=True)
        self.assertEqual(list(stand.state_module().state_dict()), list(sd), 'the same keys in the same order')
        frozen = {n for n, p in real.named_parameters() if not p.requires_grad}  # lightly's sin-cos tables
        for n, p in stand.named_parameters():
            p.requires_grad_(n not in frozen)
        args = inputs(run)
        worst = (0.0, '')
        with vd._SdpaFallback([real]):
            lr = real(*args)
            gr = grads(lr, real)
        ls = stand(*args)
        gs = grads(ls, stand)
        names = [n for n, p in real.named_parameters() if p.requires_grad]
        self.assertEqual(names, [n for n, p in stand.named_parameters() if p.requires_grad])
        worst = max([(abs(lr.item() - ls.item()), 'loss')] + [((a - b).abs().max().item(), n) for a, b, n in zip(gr, gs, names)])
        print(f'\n  {objective} ({enc_name}): loss {lr.item():.6f}, largest difference {worst[0]:.3e} ({worst[1]})', file=sys.stderr)
        # the same operations in the same order: the same bits
        self.assertEqual(worst[0], 0.0, f'{worst[1]} differs by {worst[0]}')

    def test_mae(self):
        self.check('mae', 'main')
        self.check('mae', 'timm options')

    def test_aim(self):
        self.check('aim', 'main')
        self.check('aim', 'timm options')

    def test_classifier(self):
        self.check('classify', 'main')
        self.check('classify', 'timm options')


class Generators(unittest.TestCase):
    def test_keep_count_is_vitrines(self):
        # src/init.c: int((float)(L - 1) * (1 - ratio)) + 1 in float32: 196 * 0.25 -> 49 + 1
        self.assertEqual(vc.keep_count(197, 0.75), 50)
        self.assertEqual(vc.keep_count(17, 0.5), 9)

    def test_masks_are_a_partition(self):
        gen = vc.Xoshiro('0123456789abcdef0123456789abcdef')
        keep, masked = vc.vitrine_token_masks(gen, 3, 17, 0.5)
        for k, m in zip(keep, masked):
            self.assertEqual(k[0], 0)
            self.assertEqual(sorted(k + m), list(range(17)))


if __name__ == '__main__':
    unittest.main()
