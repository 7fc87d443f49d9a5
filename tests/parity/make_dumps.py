#!/usr/bin/env python3
"""make_dumps.py: the parity files of tests/parity/, made again from the real timm and lightly.

Every option of timm's VisionTransformer that vitrine computes, and the families built on it
(CLIP OpenAI / OpenCLIP, SigLIP, DeiT and DeiT-distilled, DINOv2 with registers), dumped by
python/vitrine_dump.py at small widths and depth 1-2: forward and every gradient. CI cannot import
timm, so the files are committed; tests/test_parity_dir (ctest parity_dir*) and
tests/node/parity-options.test.mjs run each through `vitrine parity` natively and in every wasm
build. --wide writes the same families at real widths (ViT-B/16 at 224, depth 1-2) instead, for
a local check (not committed: tens of MB).

    /usr/bin/python3 tests/parity/make_dumps.py --timm PATH/pytorch-image-models --lightly PATH/lightly \\
        [--out DIR] [--wide] [NAME ...]

timm imports torchvision at module level for data transforms a model never calls; without it a
stub stands in (tools/timm_finetune_reference.py). Files are written as <NAME>.safetensors.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def small(**kw):
    """kwargs of a small ViT (D 16, 2 heads, mlp_ratio 2, depth 1, 16 px, patch 4, 3 classes) plus kw"""
    return json.dumps({'img_size': 16, 'patch_size': 4, 'embed_dim': 16, 'depth': 1, 'num_heads': 2,
                       'mlp_ratio': 2.0, 'num_classes': 3, **kw})


def named(name, **kw):
    """a timm name at small widths: the name's own options (pre_norm, act_layer, ...) kept"""
    return ['--name', name, '--kwargs', small(**kw)]


# NAME: vitrine_dump.py arguments (the output file first is added)
SMALL = {
    # the families
    'clip_openai_b16': ['--kind', 'timm', *named('vit_base_patch16_clip_quickgelu_224', depth=2), '--call', 'forward'],
    'clip_openai_b32': ['--kind', 'timm', *named('vit_base_patch32_clip_quickgelu_224', img_size=64, patch_size=32,
                                                 in_chans=1), '--call', 'forward'],
    'clip_openclip_b16': ['--kind', 'timm', *named('vit_base_patch16_clip_224', depth=2), '--call', 'forward'],
    'clip_openclip_b32_features': ['--kind', 'timm', *named('vit_base_patch32_clip_224', img_size=32, patch_size=32,
                                                            in_chans=1)],
    'siglip_b16_map': ['--kind', 'timm', *named('vit_base_patch16_siglip_224', depth=2), '--call', 'forward'],
    'deit_b16': ['--kind', 'timm', *named('deit_base_patch16_224'), '--call', 'forward'],
    'deit_distilled_eval': ['--kind', 'timm', *named('deit_base_distilled_patch16_224', depth=2), '--call', 'forward'],
    'deit_distilled_training': ['--kind', 'timm', *named('deit_base_distilled_patch16_224'), '--call', 'forward',
                                '--distilled-training'],
    'deit_distilled_features': ['--kind', 'timm', *named('deit_base_distilled_patch16_224', num_classes=0)],
    'dinov2_reg4': ['--kind', 'timm', *named('vit_base_patch14_reg4_dinov2', img_size=28, patch_size=14, depth=2),
                    '--call', 'forward'],
    # options one by one
    'act_gelu_tanh': ['--kind', 'timm', '--kwargs', small(act_layer='gelu_tanh', depth=2), '--call', 'forward'],
    'act_quick_gelu': ['--kind', 'timm', '--kwargs', small(act_layer='quick_gelu')],
    'norm_rms_qk_scale': ['--kind', 'timm', '--kwargs', small(norm_layer='rmsnorm', qk_norm=True, scale_attn_norm=True,
                                                              scale_mlp_norm=True, global_pool='avg'),
                          '--call', 'forward'],
    'norm_scale_ln': ['--kind', 'timm', '--kwargs', small(scale_attn_norm=True, scale_mlp_norm=True, init_values=0.1),
                      '--call', 'forward'],
    'embed_norm_rms': ['--kind', 'timm', '--kwargs', small(embed_norm_layer='rmsnorm', pre_norm=True), '--call', 'forward'],
    'embed_norm_ln': ['--kind', 'timm', '--kwargs', small(embed_norm_layer='layernorm', reg_tokens=1)],
    'fc_norm_token': ['--kind', 'timm', '--kwargs', small(fc_norm=True), '--call', 'forward'],
    'gap_fc_norm_false': ['--kind', 'timm', '--kwargs', small(class_token=False, global_pool='avg', fc_norm=False),
                          '--call', 'forward'],
    'final_norm_off': ['--kind', 'timm', '--kwargs', small(final_norm=False, global_pool='avgmax'), '--call', 'forward'],
    'proj_bias_off': ['--kind', 'timm', '--kwargs', small(proj_bias=False, qkv_bias=False, depth=2), '--call', 'forward'],
    'pool_include_prefix_avg': ['--kind', 'timm', '--kwargs', small(global_pool='avg', reg_tokens=2,
                                                                    pool_include_prefix=True), '--call', 'forward'],
    'map_cls_include_prefix': ['--kind', 'timm', '--kwargs', small(global_pool='map', pool_include_prefix=True,
                                                                   act_layer='gelu_tanh'), '--call', 'forward'],
    'map_reg_fc_norm': ['--kind', 'timm', '--kwargs', small(global_pool='map', reg_tokens=2, fc_norm=True),
                        '--call', 'forward'],
    'pool_max_pos_none': ['--kind', 'timm', '--kwargs', small(global_pool='max', pos_embed='none', reg_tokens=1, depth=2),
                          '--call', 'forward'],
    'prr_token': ['--kind', 'timm', '--kwargs', small(global_pool='prr'), '--call', 'forward'],
    'prr_avg_reg': ['--kind', 'timm', '--kwargs', small(global_pool='prr', class_token=False, reg_tokens=1),
                    '--call', 'forward'],
    'img_non_square': ['--kind', 'timm', '--kwargs', small(img_size=[16, 24]), '--call', 'forward'],
    'img_floor_grid': ['--kind', 'timm', '--kwargs', small(img_size=[18, 23], global_pool='avg'), '--call', 'forward'],
    'dynamic_size_both_axes': ['--kind', 'timm', '--kwargs', small(dynamic_img_size=True, reg_tokens=1),
                               '--call', 'forward', '--image-size', '24,20'],
    'dynamic_size_one_axis': ['--kind', 'timm', '--kwargs', small(img_size=[16, 24], dynamic_img_size=True,
                                                                  no_embed_class=True), '--image-size', '16,12'],
    'dynamic_size_same_tokens': ['--kind', 'timm', '--kwargs', small(img_size=[8, 32], dynamic_img_size=True),
                                 '--image-size', '16,16'],
    'dynamic_pad': ['--kind', 'timm', '--kwargs', small(dynamic_img_size=True, dynamic_img_pad=True),
                    '--call', 'forward', '--image-size', '19,13'],
    'init_only_kwargs': ['--kind', 'timm', '--kwargs', small(weight_init='jax', fix_init=True), '--call', 'forward'],
    # timm's own forward_intermediates (indices, norm, return_prefix_tokens, stop_early, output_fmt,
    # intermediates_only, output_dict)
    'timm_inter_default': ['--kind', 'timm', '--kwargs', small(depth=2), '--call', 'forward_intermediates'],
    'timm_inter_reg_nlc_norm_prefix': ['--kind', 'timm', '--kwargs', small(depth=3, reg_tokens=2),
                                       '--call', 'forward_intermediates', '--indices', '0,-1', '--norm',
                                       '--return-prefix-tokens', '--output-fmt', 'NLC'],
    'timm_inter_clip_stop_early': ['--kind', 'timm', *named('vit_base_patch16_clip_quickgelu_224', depth=3),
                                   '--call', 'forward_intermediates', '--indices', '1,0', '--stop-early', '--norm'],
    'timm_inter_only_dynamic': ['--kind', 'timm', '--kwargs', small(depth=2, dynamic_img_size=True),
                                '--image-size', '24,20', '--call', 'forward_intermediates', '--indices', '1',
                                '--intermediates-only', '--return-prefix-tokens'],
    'timm_inter_pad_stop_only': ['--kind', 'timm', '--kwargs', small(depth=3, dynamic_img_size=True, dynamic_img_pad=True),
                                 '--image-size', '19,13', '--call', 'forward_intermediates', '--indices', '0,',
                                 '--stop-early', '--intermediates-only', '--norm'],
    'timm_inter_no_prefix_rms_norm': ['--kind', 'timm', '--kwargs', small(depth=2, class_token=False, global_pool='',
                                                                          norm_layer='rmsnorm'),
                                      '--call', 'forward_intermediates', '--indices', '2', '--norm', '--output-fmt', 'NLC'],
    'timm_inter_gap_norm_identity': ['--kind', 'timm', '--kwargs', small(depth=2, class_token=False, reg_tokens=1,
                                                                         global_pool='avg'),
                                     '--call', 'forward_intermediates', '--indices', '0,', '--norm',
                                     '--return-prefix-tokens', '--output-fmt', 'NLC'],
    'timm_inter_deit_distilled_dict': ['--kind', 'timm', *named('deit_base_distilled_patch16_224', depth=2),
                                       '--call', 'forward_intermediates', '--indices', '2', '--norm',
                                       '--return-prefix-tokens', '--output-dict'],
    'timm_inter_dinov2_reg4': ['--kind', 'timm', *named('vit_base_patch14_reg4_dinov2', img_size=28, patch_size=14,
                                                        depth=2),
                               '--call', 'forward_intermediates', '--indices=-1,', '--norm', '--return-prefix-tokens'],
    # lightly's wrappers on the new options
    'lightly_pre_norm_rms_mask': ['--kind', 'lightly', '--kwargs', small(pre_norm=True, norm_layer='rmsnorm', num_classes=0),
                                  '--call', 'encode', '--idx-mask', '--idx-keep'],
    'lightly_map_forward': ['--kind', 'lightly', '--kwargs', small(global_pool='map', num_classes=0), '--call', 'forward'],
    'lightly_floor_grid_intermediates': ['--kind', 'lightly', '--kwargs', small(img_size=18, num_classes=0,
                                                                              act_layer='quick_gelu'),
                                         '--call', 'forward_intermediates', '--norm'],
    'mae_registers': ['--kind', 'mae', '--kwargs', small(reg_tokens=2, num_classes=0),
                      '--decoder', json.dumps({'decoder_dim': 8, 'decoder_depth': 1, 'decoder_heads': 2})],
    'causal_gelu_tanh': ['--kind', 'causal', '--kwargs', small(class_token=False, no_embed_class=True, global_pool='avg',
                                                               act_layer='gelu_tanh', num_classes=0), '--mask'],
}


def wide(name, **kw):
    """a timm name at its real width (ViT-B/16 224 unless the name says otherwise), depth 1"""
    return ['--name', name, '--kwargs', json.dumps({'depth': 1, 'num_classes': 10, **kw})]


WIDE = {
    'wide_vit_b16': ['--kind', 'timm', *wide('vit_base_patch16_224'), '--call', 'forward', '--batch', '1'],
    'wide_clip_openai_b16': ['--kind', 'timm', *wide('vit_base_patch16_clip_quickgelu_224', depth=2), '--call', 'forward',
                             '--batch', '1'],
    'wide_clip_openclip_b16': ['--kind', 'timm', *wide('vit_base_patch16_clip_224'), '--call', 'forward', '--batch', '1'],
    'wide_clip_openai_b32': ['--kind', 'timm', *wide('vit_base_patch32_clip_quickgelu_224', depth=2), '--call', 'forward',
                             '--batch', '2'],
    'wide_siglip_b16_map': ['--kind', 'timm', *wide('vit_base_patch16_siglip_224'), '--call', 'forward', '--batch', '1'],
    'wide_deit_b16': ['--kind', 'timm', *wide('deit_base_patch16_224', depth=2), '--call', 'forward', '--batch', '1'],
    'wide_deit_distilled_b16': ['--kind', 'timm', *wide('deit_base_distilled_patch16_224'), '--call', 'forward',
                                '--batch', '1'],
    'wide_deit_distilled_training': ['--kind', 'timm', *wide('deit_base_distilled_patch16_224'), '--call', 'forward',
                                     '--distilled-training', '--batch', '1'],
    'wide_dinov2_reg4_b14': ['--kind', 'timm', *wide('vit_base_patch14_reg4_dinov2', img_size=224), '--call', 'forward',
                             '--batch', '1'],
    'wide_gelu_tanh_rms_scale': ['--kind', 'timm', *wide('vit_base_patch16_224', act_layer='gelu_tanh',
                                                        norm_layer='rmsnorm', scale_attn_norm=True, scale_mlp_norm=True,
                                                        qk_norm=True, global_pool='avg'),
                                 '--call', 'forward', '--batch', '1'],
    'wide_prr_dynamic': ['--kind', 'timm', *wide('vit_base_patch16_224', global_pool='prr', dynamic_img_size=True),
                         '--call', 'forward', '--batch', '1', '--image-size', '192,256'],
    'wide_inter_clip_b16': ['--kind', 'timm', *wide('vit_base_patch16_clip_224', depth=2), '--call',
                            'forward_intermediates', '--indices', '0,1', '--norm', '--return-prefix-tokens',
                            '--batch', '1'],
    'wide_embed_norm_non_square': ['--kind', 'timm', *wide('vit_base_patch16_224', img_size=[224, 160],
                                                          embed_norm_layer='layernorm', fc_norm=True),
                                   '--call', 'forward', '--batch', '1'],
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--timm', required=True, help='a pytorch-image-models checkout')
    ap.add_argument('--lightly', required=True, help='a lightly checkout')
    ap.add_argument('--out', default=HERE, help='where to write (default: this folder)')
    ap.add_argument('--wide', action='store_true', help='the real-width set instead of the small one')
    ap.add_argument('names', nargs='*', help='only these')
    a = ap.parse_args(argv)
    sys.path[:0] = [a.timm, a.lightly, os.path.join(REPO, 'python'), os.path.join(REPO, 'tools')]
    from timm_finetune_reference import stub_torchvision
    stub_torchvision()
    import torch
    import vitrine_dump
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    cases = WIDE if a.wide else SMALL
    unknown = [n for n in a.names if n not in cases]
    if unknown:
        print(f'make_dumps.py: unknown case(s) {", ".join(unknown)} ({", ".join(cases)})', file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    bad = 0
    for name, args in cases.items():
        if a.names and name not in a.names:
            continue
        rc = vitrine_dump.main([os.path.join(a.out, f'{name}.safetensors'), *args])
        bad += rc != 0
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
