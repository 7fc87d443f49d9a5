#!/usr/bin/env python3
"""Tests of vitrine_dump.py: python3 -m unittest -v test_vitrine_dump (from python/).

With torch alone: the safetensors layout, a dump of a stand-in ViT (timm's VisionTransformer
written out in torch, with timm's keys) and what the tool refuses. With timm / lightly importable
(PYTHONPATH): the configs it reads from real models, the structures it refuses, and the fixtures
of ../shared/fixtures made again from their own parameters and inputs. Those are skipped, saying
which import failed, when timm / lightly are not importable. tests/node/dump.test.mjs runs this
file and passes the dumps through `vitrine parity`.

    python3 test_vitrine_dump.py --standin-dumps DIR   writes the stand-in's dumps into DIR
"""
import copy
import glob
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vitrine_dump as vd  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared', 'fixtures')


def _importable(name):
    try:
        __import__(name)
        return None
    except Exception as e:  # noqa: BLE001 -- any failure means the tests that need it cannot run
        return f'{name} is not importable here ({type(e).__name__}: {e}): put timm / lightly on PYTHONPATH to run these'


NO_TIMM = _importable('timm')
NO_LIGHTLY = NO_TIMM or _importable('lightly')


# ---- a stand-in ViT: timm's VisionTransformer forward_features in plain torch, timm's keys ----

class _Attn(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.qkv, self.proj = h, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        B, N, D = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        a = ((q * (D // self.h) ** -0.5) @ k.transpose(-2, -1)).softmax(-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, D))


class _Mlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class _Block(nn.Module):
    def __init__(self, d, h, hidden):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(d, eps=1e-6), _Attn(d, h)
        self.norm2, self.mlp = nn.LayerNorm(d, eps=1e-6), _Mlp(d, hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class _PatchEmbed(nn.Module):
    def __init__(self, c, d, p):
        super().__init__()
        self.proj = nn.Conv2d(c, d, p, p)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class StandInViT(nn.Module):
    """timm.VisionTransformer(class_token=True, pos_embed='learn', num_classes=0).forward_features."""

    def __init__(self, img=16, patch=4, chans=3, dim=32, depth=2, heads=4, mlp_ratio=4.0, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        n = (img // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.1)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.1)
        self.patch_embed = _PatchEmbed(chans, dim, patch)
        self.blocks = nn.Sequential(*[_Block(dim, heads, int(dim * mlp_ratio)) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        vd.perturb(self, seed)
        self.config = {'img_size': img, 'patch_size': patch, 'in_chans': chans, 'embed_dim': dim, 'depth': depth,
                       'num_heads': heads, 'mlp_ratio': mlp_ratio, 'qkv_bias': True, 'class_token': True,
                       'reg_tokens': 0, 'no_embed_class': False, 'global_pool': 'token', 'num_classes': 0,
                       'init_values': None}

    def forward_features(self, x):
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        return self.norm(self.blocks(x))


def standin_dump(path, seed=0, frozen=(), batch=2, **kw):
    m = StandInViT(seed=seed, **kw)
    for k, p in m.named_parameters():
        if k.startswith(tuple(frozen)):
            p.requires_grad_(False)
    images = torch.randn(batch, 3, m.config['img_size'], m.config['img_size'], generator=torch.Generator().manual_seed(seed + 1))
    return m, vd.dump(m, images, path, 'forward_features', module='timm.VisionTransformer', config=m.config, seed=seed,
                      warn=lambda s: None)


def read_raw(path):
    with open(path, 'rb') as f:
        raw = f.read()
    n = struct.unpack('<Q', raw[:8])[0]
    return raw, n, json.loads(raw[8:8 + n])


class Format(unittest.TestCase):
    def test_safetensors_layout(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, 'x.safetensors')
            t = {'a': torch.tensor([[1.5, -2.0], [3.25, 0.0]]), 'i': torch.tensor([[7, -1]]),
                 'b': torch.tensor([True, False, True])}
            vd.write_safetensors(p, t, {'format': 'vitrine-parity/1', 'config': '{"k": 1}'})
            raw, n, h = read_raw(p)
            self.assertEqual((8 + n) % 8, 0, 'data start at a multiple of 8')
            text = raw[8:8 + n].decode()
            self.assertEqual(text, text.rstrip() + ' ' * (len(text) - len(text.rstrip())))
            self.assertNotIn(', ', text.rstrip()[:text.index('__metadata__')], 'compact JSON')
            self.assertEqual(list(h), ['a', 'i', 'b', '__metadata__'])
            self.assertEqual(h['a'], {'dtype': 'F32', 'shape': [2, 2], 'data_offsets': [0, 16]})
            self.assertEqual(h['i'], {'dtype': 'I64', 'shape': [1, 2], 'data_offsets': [16, 32]})
            self.assertEqual(h['b'], {'dtype': 'BOOL', 'shape': [3], 'data_offsets': [32, 35]})
            self.assertEqual(len(raw), 8 + n + 35)
            data = raw[8 + n:]
            self.assertEqual(struct.unpack('<4f', data[:16]), (1.5, -2.0, 3.25, 0.0))
            self.assertEqual(struct.unpack('<2q', data[16:32]), (7, -1))
            self.assertEqual(data[32:], b'\x01\x00\x01')
            back, meta = vd.read_safetensors(p)
            self.assertEqual(meta, {'format': 'vitrine-parity/1', 'config': '{"k": 1}'})
            for k in t:
                self.assertTrue(torch.equal(back[k], t[k]), k)
            with self.assertRaisesRegex(vd.DumpError, 'x: dtype torch.float16'):
                vd.write_safetensors(p, {'x': torch.zeros(2, dtype=torch.float16)}, {})

    def test_noise_around_zero(self):
        f64 = lambda *v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
        e = {'out': f64(1e-20, 0.5), 'grad/a': f64(1.0, -2.0), 'grad/b': f64(1e-17, -3e-18), 'grad/c': f64(0, 0), 'grad/d': f64(1e-9, 0)}
        self.assertEqual(vd._zero_noise(e), ['grad/b'])
        self.assertTrue(torch.equal(e['grad/b'], torch.zeros(2)))
        self.assertTrue(torch.equal(e['out'], f64(1e-20, 0.5)) and torch.equal(e['grad/d'], f64(1e-9, 0)))

    def test_sdpa_math(self):
        g = torch.Generator().manual_seed(3)
        q, k, v = (torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
        mask = torch.rand(2, 1, 5, 5, generator=g) > 0.3
        mask |= torch.eye(5, dtype=torch.bool)
        ref = ((q @ k.transpose(-2, -1)) / math.sqrt(8)).masked_fill(~mask, float('-inf')).softmax(-1) @ v
        self.assertLess((vd.sdpa_math(q, k, v, attn_mask=mask) - ref).abs().max().item(), 1e-12)
        causal = ((q @ k.transpose(-2, -1)) / math.sqrt(8)).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), float('-inf')).softmax(-1) @ v
        self.assertLess((vd.sdpa_math(q, k, v, is_causal=True) - causal).abs().max().item(), 1e-12)


class StandIn(unittest.TestCase):
    """dump() on a torch-only model that computes timm's forward_features (module and config given)."""

    def test_dump(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, 's.safetensors')
            m, s = standin_dump(p)
            t, meta = vd.read_safetensors(p)
            keys = [k for k, _ in m.named_parameters()]
            want = [f'param/{k}' for k in keys] + ['input/images', 'input/dout/out', 'expect/out'] + \
                [f'expect/grad/{k}' for k in keys] + ['expect/grad/input/images', 'torch32/out'] + \
                [f'torch32/grad/{k}' for k in keys] + ['torch32/grad/input/images']
            self.assertEqual(list(t), want)
            self.assertTrue(all(v.dtype == torch.float32 for v in t.values()))
            for k, p_ in m.named_parameters():
                self.assertTrue(torch.equal(t[f'param/{k}'], p_.detach()), k)
                self.assertEqual(t[f'expect/grad/{k}'].shape, p_.shape)
            self.assertEqual(t['expect/out'].shape, (2, 17, 32))
            self.assertEqual(meta['format'], 'vitrine-parity/1')
            self.assertEqual(meta['module'], 'timm.VisionTransformer')
            self.assertEqual(json.loads(meta['config']), m.config)
            self.assertEqual(meta['call'], '{"fn": "forward_features"}')
            self.assertEqual(meta['reference'], f'torch {torch.__version__}')
            self.assertEqual(meta['tool'], vd.TOOL)
            # expect/ is the float64 run rounded to float32; torch32/ the float32 run
            m64 = copy.deepcopy(m).double()
            x = t['input/images'].double().requires_grad_(True)
            out = m64.forward_features(x)
            (out * t['input/dout/out'].double()).sum().backward()
            self.assertTrue(torch.equal(t['expect/out'], out.float()))
            self.assertTrue(torch.equal(t['expect/grad/input/images'], x.grad.float()))
            self.assertTrue(torch.equal(t['expect/grad/blocks.1.mlp.fc1.weight'], m64.blocks[1].mlp.fc1.weight.grad.float()))
            self.assertTrue(torch.equal(t['torch32/out'], m.forward_features(t['input/images'])))
            self.assertFalse(torch.equal(t['torch32/grad/blocks.0.attn.qkv.weight'], t['expect/grad/blocks.0.attn.qkv.weight']))
            self.assertLess(s['max_torch32_err'], 1e-5)
            self.assertGreater(s['max_torch32_err'], 0)

    def test_frozen_deterministic_and_untouched(self):
        with tempfile.TemporaryDirectory() as d:
            a, b, c = (os.path.join(d, f'{n}.safetensors') for n in 'abc')
            m, _ = standin_dump(a, frozen=('patch_embed.', 'cls_token'))
            standin_dump(b, frozen=('patch_embed.', 'cls_token'))
            with open(a, 'rb') as fa, open(b, 'rb') as fb:
                self.assertEqual(fa.read(), fb.read(), 'the same seed writes the same bytes')
            standin_dump(c, seed=1)
            self.assertNotEqual(vd.read_safetensors(a)[0]['input/dout/out'].sum(), vd.read_safetensors(c)[0]['input/dout/out'].sum())
            t, _ = vd.read_safetensors(a)
            self.assertIn('frozen/patch_embed.proj.weight', t)
            self.assertIn('frozen/cls_token', t)
            self.assertNotIn('param/cls_token', t)
            self.assertFalse(any(k.startswith(('expect/grad/patch_embed', 'expect/grad/cls_token')) for k in t))
            self.assertIn('expect/grad/pos_embed', t)
            # the model keeps its mode, its parameters and its (absent) gradients
            m.train()
            before = {k: v.clone() for k, v in m.state_dict().items()}
            vd.dump(m, t['input/images'], c, 'forward_features', module='timm.VisionTransformer', config=m.config, warn=lambda s: None)
            self.assertTrue(m.training)
            self.assertTrue(all(torch.equal(before[k], v) for k, v in m.state_dict().items()))
            self.assertTrue(all(p.grad is None for p in m.parameters()))

    def test_refusals(self):
        m = StandInViT()
        x = torch.randn(2, 3, 16, 16)
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, 'r.safetensors')

            def refused(pattern, *args, **kw):
                kw = {'module': 'timm.VisionTransformer', 'config': m.config, 'warn': lambda s: None, **kw}
                with self.assertRaisesRegex(vd.DumpError, pattern):
                    vd.dump(*args, **kw)
                self.assertFalse(os.path.exists(p), 'nothing is written')

            refused(r'images: \(2, 3, 8, 8\); the model takes \[B, 3, 16, 16\]', m, torch.randn(2, 3, 8, 8), p, 'forward_features')
            refused(r'images: must be finite', m, x.masked_fill(x > 2, float('nan')), p, 'forward_features')
            refused(r"has no call 'encode' here \(forward_features, forward, forward_intermediates\)", m, x, p, 'encode')
            refused(r'takes no idx_mask', m, x, p, 'forward_features', idx_mask=torch.zeros(2, 3, dtype=torch.int64))
            refused(r"module 'lightly.Foo'", m, x, p, 'encode', module='lightly.Foo')
            refused(r'module= and config= go together', m, x, p, config=None, module='timm.VisionTransformer')
            bad = copy.deepcopy(m)
            with torch.no_grad():
                bad.norm.weight[3] = float('inf')
            refused(r'expect/out: the float64 run computed (NaN|Inf)', bad, x, p, 'forward_features')
            m2 = copy.deepcopy(m)
            m2.register_buffer('scale', torch.ones(1))
            refused(r'scale: a buffer', m2, x, p, 'forward_features')
            with self.assertRaisesRegex(vd.DumpError, r'Linear: not a model this tool knows.*pass module= and config='):
                vd.dump(nn.Linear(2, 2), x, p)

    def test_cli_usage(self):
        with open(os.devnull, 'w') as null:
            err, sys.stderr = sys.stderr, null
            try:
                self.assertEqual(vd.main([]), 2)
                self.assertEqual(vd.main(['x.safetensors', '--kind', 'timm', '--batch', '0']), 2)
                self.assertEqual(vd.main(['/nonexistent-dir/x.safetensors', '--kind', 'timm', '--kwargs', '[1]']), 2)
            finally:
                sys.stderr = err

    def test_without_torch_one_line(self):
        """PyTorch missing: one line naming it, exit 2, no traceback"""
        code = ('import runpy, sys; sys.modules["torch"] = None; sys.argv = ["vitrine_dump.py", "x", "--kind", "timm"]; '
                f'runpy.run_path({os.path.join(os.path.dirname(os.path.abspath(__file__)), "vitrine_dump.py")!r}, run_name="__main__")')
        r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertRegex(r.stderr, r'^vitrine_dump.py: PyTorch is not importable')


# ---- with timm / lightly ---------------------------------------------------------------------

@unittest.skipIf(NO_TIMM, NO_TIMM)
class Timm(unittest.TestCase):
    def vit(self, **kw):
        from timm.models.vision_transformer import VisionTransformer
        return VisionTransformer(**{'img_size': 32, 'patch_size': 8, 'embed_dim': 48, 'depth': 2, 'num_heads': 3, **kw})

    def test_config_of_real_models(self):
        base = {'img_size': 32, 'patch_size': 8, 'in_chans': 3, 'embed_dim': 48, 'depth': 2, 'num_heads': 3, 'mlp_ratio': 4.0,
                'qkv_bias': True, 'qk_norm': False, 'class_token': True, 'reg_tokens': 0, 'no_embed_class': False,
                'global_pool': 'token', 'num_classes': 1000, 'init_values': None}
        for kw in [{}, {'num_classes': 0}, {'reg_tokens': 2, 'no_embed_class': True, 'qk_norm': True},
                   {'global_pool': 'avg', 'class_token': False, 'num_classes': 5}, {'mlp_ratio': 2.5, 'qkv_bias': False},
                   {'init_values': 0.1, 'in_chans': 1, 'global_pool': ''}]:
            v = self.vit(**kw)
            if 'init_values' in kw:
                v._vitrine_init_values = kw['init_values']
            self.assertEqual(vd.vit_config(v), {**base, **kw}, kw)
        self.assertEqual(vd.vit_config(self.vit(pos_embed='none'))['pos_embed'], 'none')

    def test_config_of_the_rest_of_timm(self):
        import functools
        from timm.layers import LayerNorm
        cases = [({'pre_norm': True}, {'pre_norm': True}),
                 ({'act_layer': 'gelu_tanh'}, {'act_layer': 'gelu_tanh'}),
                 ({'act_layer': 'quick_gelu'}, {'act_layer': 'quick_gelu'}),
                 ({'norm_layer': functools.partial(LayerNorm, eps=1e-5)}, {'norm_eps': 1e-5}),
                 ({'norm_layer': 'rmsnorm', 'qk_norm': True}, {'norm_layer': 'rmsnorm', 'qk_norm': True}),
                 ({'fc_norm': True}, {'fc_norm': True}),
                 ({'global_pool': 'avg', 'fc_norm': False}, {'global_pool': 'avg', 'fc_norm': False}),
                 ({'final_norm': False}, {'final_norm': False}),
                 ({'proj_bias': False}, {'proj_bias': False}),
                 ({'scale_attn_norm': True, 'scale_mlp_norm': True}, {'scale_attn_norm': True, 'scale_mlp_norm': True}),
                 ({'global_pool': 'map'}, {'global_pool': 'map'}),
                 ({'global_pool': 'prr'}, {'global_pool': 'prr'}),
                 ({'global_pool': 'avg', 'pool_include_prefix': True}, {'global_pool': 'avg', 'pool_include_prefix': True}),
                 ({'img_size': (32, 48)}, {'img_size': [32, 48]}),
                 ({'img_size': 36}, {'img_size': 36}),
                 ({'dynamic_img_size': True, 'dynamic_img_pad': True}, {'dynamic_img_size': True, 'dynamic_img_pad': True}),
                 ({'embed_norm_layer': 'rmsnorm'}, {'embed_norm_layer': 'rmsnorm'}),
                 ({'weight_init': 'jax', 'fix_init': True}, {})]
        for kw, want in cases:
            cfg = vd.vit_config(self.vit(**kw))
            for k, v in want.items():
                self.assertEqual(cfg.get(k), v, f'{kw}: {k}')
            extra = set(cfg) - {'img_size', 'patch_size', 'in_chans', 'embed_dim', 'depth', 'num_heads', 'mlp_ratio',
                                'qkv_bias', 'qk_norm', 'class_token', 'reg_tokens', 'no_embed_class', 'global_pool',
                                'num_classes', 'init_values'}
            self.assertEqual(extra, set(want) - {'qk_norm', 'global_pool', 'img_size'}, f'{kw}: only non-defaults written')

    def test_distilled(self):
        import timm
        v = timm.create_model('deit_tiny_distilled_patch16_224', img_size=32, embed_dim=16, depth=1, num_heads=2)
        module, cfg = vd.describe(v)
        self.assertEqual((module, cfg['distilled']), ('timm.VisionTransformerDistilled', True))
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, 'd.safetensors')
            vd.dump(vd.perturb(v), torch.randn(2, 3, 32, 32), p, 'forward', distilled_training=True, warn=lambda s: None)
            t, meta = vd.read_safetensors(p)
        self.assertEqual(json.loads(meta['call']), {'fn': 'forward', 'distilled_training': True})
        self.assertEqual((t['expect/out'].shape, t['expect/out_dist'].shape), ((2, 1000), (2, 1000)))
        self.assertIn('param/dist_token', t)
        self.assertIn('param/head_dist.weight', t)

    def test_refuses_what_vitrine_does_not_compute(self):
        from timm.models.vision_transformer import ResPostBlock
        from timm.layers import SwiGLU
        for kw, pattern in [({'block_fn': ResPostBlock}, r"timm's Block \(block_fn\)"),
                            ({'mlp_layer': SwiGLU}, "timm's Mlp"),
                            ({'act_layer': 'silu'}, 'exact GELU, gelu_tanh and quick_gelu'),
                            ({'patch_size': (8, 4)}, 'square images and patches'),
                            ({'attn_layer': 'diff'}, r"timm's Attention \(attn_layer\)")]:
            try:
                v = self.vit(**kw)
            except (TypeError, AssertionError, KeyError) as e:  # an option this timm does not have
                self.skipTest(f'{kw}: {e}')
            with self.assertRaisesRegex(vd.DumpError, pattern, msg=str(kw)):
                vd.vit_config(v)

    def cli(self, *args):
        r = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'vitrine_dump.py'),
                            os.path.join(tempfile.gettempdir(), 'vitrine-dump-refused.safetensors'), *args],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertNotIn('Traceback', r.stderr)
        return r.stderr

    def test_cli_refusals_in_one_line(self):
        self.assertRegex(self.cli('--kind', 'timm', '--name', 'vit_nonexistent_patch16'), 'has no model of that name')
        self.assertRegex(self.cli('--kind', 'timm', '--kwargs', '{"img_size": 16, "depthh": 1}'), 'depthh')
        self.assertRegex(self.cli('--kind', 'timm', '--name', 'vit_tiny_patch16_224', '--kwargs', '{"foo": 1}'), 'foo')
        self.assertRegex(self.cli('--kind', 'timm', '--name', 'vit_tiny_r_s16_p8_224', '--kwargs', '{"img_size": 64}'),
                         'hybrid backbone')
        self.assertRegex(self.cli('--kind', 'timm', '--name', 'swin_tiny_patch4_window7_224'), 'not a model this tool knows')
        self.assertRegex(self.cli('--kind', 'lightly', '--name', 'deit_tiny_distilled_patch16_224', '--kwargs',
                                  '{"img_size": 32, "depth": 1}'), 'dist_token')

    def test_key_norm_bias_gradient_written_as_zero(self):
        v = vd.perturb(self.vit(qk_norm=True, num_classes=0))
        with tempfile.TemporaryDirectory() as d:
            s = vd.dump(v, torch.randn(2, 3, 32, 32), os.path.join(d, 'q.safetensors'), warn=lambda s: None)
            t, _ = vd.read_safetensors(os.path.join(d, 'q.safetensors'))
        self.assertEqual(sorted(s['zeroed']), ['grad/blocks.0.attn.k_norm.bias', 'grad/blocks.1.attn.k_norm.bias'])
        self.assertEqual(t['expect/grad/blocks.0.attn.k_norm.bias'].abs().max().item(), 0)
        self.assertGreater(t['expect/grad/blocks.0.attn.q_norm.bias'].abs().max().item(), 0)

    def test_timm_forward_intermediates(self):
        """timm's own forward_intermediates: its outputs named as the engine names them (out,
        intermediates.<k>, intermediates_prefix.<k>; output_dict the same), its options written into
        the call as given, bad options refused in one line."""
        v = self.vit(reg_tokens=1, depth=3, num_classes=0)
        x = torch.randn(2, 3, 32, 32)
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, 'i.safetensors')
            for opts, want in [({}, ['out'] + [f'intermediates.{k}' for k in range(3)]),
                               ({'indices': [0, -1], 'return_prefix_tokens': True, 'norm': True, 'output_fmt': 'NLC'},
                                ['out', 'intermediates.0', 'intermediates.1', 'intermediates_prefix.0',
                                 'intermediates_prefix.1']),
                               ({'indices': 1, 'intermediates_only': True, 'stop_early': True}, ['intermediates.0']),
                               ({'indices': (1,), 'output_dict': True, 'return_prefix_tokens': True},
                                ['out', 'intermediates.0', 'intermediates_prefix.0'])]:
                s = vd.dump(v, x, f, 'forward_intermediates', intermediates=opts, warn=lambda s: None)
                t, meta = vd.read_safetensors(f)
                outs = sorted(k[7:] for k in t if k.startswith('expect/') and not k.startswith('expect/grad/'))
                self.assertEqual(outs, sorted(want), opts)
                call = json.loads(meta['call'])
                self.assertEqual({k: v for k, v in call.items() if k != 'fn'},
                                 {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()})
                nchw = opts.get('output_fmt', 'NCHW') == 'NCHW'
                self.assertEqual(list(t['expect/intermediates.0'].shape), [2, 48, 4, 4] if nchw else [2, 16, 48])
                self.assertTrue(s['tensors'])
            for opts, pattern in [({'indices': 4}, r'last-n is out of range \(1 to 3\)'),
                                  ({'indices': [3]}, r'feature index 3 is out of range'),
                                  ({'indices': []}, 'non-empty list'),
                                  ({'output_fmt': 'NHWC'}, 'NCHW or NLC'),
                                  ({'stop_early': 1}, 'True or False'),
                                  ({'attn_mask': None}, "attn_mask is not an option of timm's forward_intermediates")]:
                with self.assertRaisesRegex(vd.DumpError, pattern):
                    vd.dump(v, x, f, 'forward_intermediates', intermediates=opts, warn=lambda s: None)
            with self.assertRaisesRegex(vd.DumpError, 'takes no indices'):
                vd.dump(v, x, f, 'forward_features', intermediates={'indices': 1}, warn=lambda s: None)


@unittest.skipIf(NO_LIGHTLY, NO_LIGHTLY)
class Lightly(unittest.TestCase):
    @unittest.skipUnless(os.path.isdir(FIXTURES), f'no fixtures at {FIXTURES}')
    def test_fixtures_made_again(self):
        """Each model fixture's parameters and inputs through dump(): the same keys, dtypes, shapes
        and call, and expect/ equal bit for bit -- except gradients PyTorch computes as rounding noise
        around zero (the key part of the qkv bias: softmax does not depend on it)."""
        kinds = {v: k for k, v in vd.KINDS.items()}
        checked = 0
        for f in sorted(glob.glob(os.path.join(FIXTURES, '*.safetensors'))):
            t, meta = vd.read_safetensors(f)
            if meta['module'] not in kinds:
                continue
            kind, cfg, call = kinds[meta['module']], json.loads(meta['config']), json.loads(meta['call'])
            if kind == 'causal' and call.get('mask') and call.get('is_causal') is False:
                continue  # this lightly ignores is_causal (Lightly.test_is_causal_false_refused)
            enc = dict(cfg['encoder'] if kind in ('mae', 'aim') else cfg)
            enc.pop('mask_token', None)
            enc.setdefault('num_classes', 0)
            rest = {k: v for k, v in cfg.items() if k != 'encoder'} if kind in ('mae', 'aim') else None
            model = vd.build(kind, None, enc, 0, 'library', decoder=rest if kind == 'mae' else None, head=rest if kind == 'aim' else None)
            model.load_state_dict({k.split('/', 1)[1]: v for k, v in t.items() if k.startswith(('param/', 'frozen/'))})
            for k, p in model.named_parameters():
                p.requires_grad_(f'param/{k}' in t)
            inputs = {k[6:]: v for k, v in t.items() if k.startswith('input/') and not k.startswith('input/dout/')}
            douts = {k[11:]: v for k, v in t.items() if k.startswith('input/dout/')}
            opts = {k: call[k] for k in ('is_causal', 'norm') if k in call}
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, 'f.safetensors')
                vd.dump(model, inputs.pop('images'), out, call['fn'], douts=douts or None, warn=lambda s: None, **inputs, **opts)
                u, m2 = vd.read_safetensors(out)
            name = os.path.basename(f)
            self.assertEqual(sorted(u), sorted(t), name)
            for k in t:
                self.assertEqual((u[k].dtype, u[k].shape), (t[k].dtype, t[k].shape), f'{name} {k}')
            self.assertEqual({k: v for k, v in json.loads(m2['call']).items() if v is not False},
                             {k: v for k, v in call.items() if v is not False}, name)
            for k in (k for k in t if k.startswith('expect/')):
                if torch.equal(u[k], t[k]):
                    continue
                self.assertRegex(k, r'attn\.qkv\.bias$', f'{name} {k} differs')
                D = u[k].numel() // 3  # q, k, v thirds: the k third is noise around zero
                scale = t[k].abs().max().item()
                self.assertTrue(torch.equal(u[k][:D], t[k][:D]) and torch.equal(u[k][2 * D:], t[k][2 * D:]), f'{name} {k}')
                self.assertLess((u[k][D:2 * D] - t[k][D:2 * D]).abs().max().item(), 1e-12 * scale + 1e-12, f'{name} {k}')
            checked += 1
        self.assertGreaterEqual(checked, 12)

    def test_mae_mask_over_patches_only(self):
        model = vd.build('mae', None, {'img_size': 16, 'patch_size': 4, 'embed_dim': 16, 'depth': 1, 'num_heads': 2,
                                       'reg_tokens': 2, 'num_classes': 0},
                         decoder={'decoder_dim': 8, 'decoder_depth': 1, 'decoder_heads': 2})
        x = vd.make_inputs(model, 3, 0, idx_mask=True, idx_keep=True)
        self.assertTrue(torch.equal(x['idx_keep'][:, :3], torch.arange(3).expand(3, 3)), 'every prefix token kept')
        self.assertGreaterEqual(x['idx_mask'].min().item(), 3, 'only patches masked')
        self.assertEqual(x['idx_keep'].shape[1] + x['idx_mask'].shape[1], 19)
        with tempfile.TemporaryDirectory() as d:
            vd.dump(model, x.pop('images'), os.path.join(d, 'm.safetensors'), warn=lambda s: None, **x)

    def test_lightly_no_embed_class_with_prefix_explained(self):
        with self.assertRaisesRegex(vd.DumpError, 'no_embed_class'):
            vd.build('lightly', None, {'img_size': 16, 'patch_size': 4, 'embed_dim': 16, 'depth': 1, 'num_heads': 2,
                                       'no_embed_class': True})

    def test_is_causal_false_refused(self):
        model = vd.build('causal', None, {'img_size': 16, 'patch_size': 4, 'embed_dim': 32, 'depth': 1, 'num_heads': 2,
                                          'class_token': False, 'global_pool': 'avg', 'no_embed_class': True})
        x = vd.make_inputs(model, 2, 0, mask=True)
        probe = copy.deepcopy(model)
        with vd._SdpaFallback([probe]), torch.no_grad():
            a = probe.forward_features(x['images'], mask=x['mask'], is_causal=False)
            b = probe.forward_features(x['images'])
        if vd._rel_err(a, b) <= 1e-4:
            self.skipTest('this lightly honours is_causal=False')
        with self.assertRaisesRegex(vd.DumpError, 'ignores is_causal=False'):
            vd.dump(model, x['images'], os.devnull, mask=x['mask'], is_causal=False)


def _standin_dumps(d):
    os.makedirs(d, exist_ok=True)
    standin_dump(os.path.join(d, 'standin_forward_features.safetensors'))
    standin_dump(os.path.join(d, 'standin_frozen_preprocessing.safetensors'), seed=1,
                 frozen=('cls_token', 'pos_embed', 'patch_embed.'), batch=3, img=24, patch=6, dim=48, heads=3, depth=3, mlp_ratio=2.0)
    print(d)


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--standin-dumps':
        _standin_dumps(sys.argv[2])
    else:
        unittest.main()
