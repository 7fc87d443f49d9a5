"""torch_vit.py: the PyTorch side of bench/run.mjs -- a ViT training step on the CPU, one thread
(--threads N: N intra-op threads, for bench/threads_bench.mjs).

The model is timm's VisionTransformer written out in plain torch (no timm): ViT-Ti/16 =
vit_tiny_patch16_224 (D 192, depth 12, 3 heads), ViT-S/16 = vit_small_patch16_224 (D 384, 6 heads):
16x16 patch embedding (Conv2d), class token, learned pos_embed, pre-norm blocks (LayerNorm eps
1e-6, fused qkv Linear with bias, softmax(q k^T / sqrt(hd)) v, proj, MLP fc1 -> exact GELU -> fc2),
final LayerNorm; the output is forward_features [B, 197, D] (lightly's encode). The training step is
what bench/train_bench.c does for "encode": forward, backward of a fixed random upstream gradient
(normal * 1e-3), AdamW (lr 1.5e-4, betas 0.9/0.95, weight decay 0.05), zero_grad. "block" wraps
each block in torch.utils.checkpoint (timm's set_grad_checkpointing(True)).

Run with Debian's /usr/bin/python3 and python3-torch (1.13); its BLAS is whatever libblas.so.3
points to: libopenblas0-pthread's OpenBLAS once installed (checked below; the reference BLAS is
~20x slower). Prints one JSON object per line.
    /usr/bin/python3 bench/torch_vit.py --preset vit_tiny_patch16_224 --batch 4 --policy none
"""
import argparse
import ctypes
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

PRESETS = {"vit_tiny_patch16_224": (192, 12, 3), "vit_small_patch16_224": (384, 12, 6),
           "vit_base_patch16_224": (768, 12, 12)}


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, T, D = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        att = (q * self.scale) @ k.transpose(-2, -1)
        x = att.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, dim, depth, heads, img=224, patch=16):
        super().__init__()
        n = (img // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.checkpointing = False

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for b in self.blocks:
            x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False) if self.checkpointing else b(x)
        return self.norm(x)


def blas_info():
    """Which BLAS torch's process loaded, OpenBLAS's core name, and a measured sgemm rate."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            if "blas" in line or "lapack" in line:
                libs.add(line.split()[-1])
    core = None
    for lib in libs:
        if "openblas" in lib:
            try:
                fn = ctypes.CDLL(lib).openblas_get_corename
                fn.restype = ctypes.c_char_p
                core = fn().decode()
            except (OSError, AttributeError):
                pass
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    t = time.perf_counter()
    for _ in range(5):
        a @ b
    gf = 5 * 2 * 1024 ** 3 / (time.perf_counter() - t) / 1e9
    return {"libs": sorted(libs), "openblas_core": core, "sgemm1024_gflops": round(gf, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", action="append")
    ap.add_argument("--batch", type=int, action="append")
    ap.add_argument("--policy", action="append")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    info = blas_info()
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), **info}), flush=True)
    for preset in a.preset or ["vit_tiny_patch16_224"]:
        D, depth, H = PRESETS[preset]
        for B in a.batch or [1]:
            model = ViT(D, depth, H)
            opt = torch.optim.AdamW(model.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.05)
            img, g = torch.randn(B, 3, 224, 224), torch.randn(B, 197, D) * 1e-3
            for policy in a.policy or ["none"]:
                model.checkpointing = policy == "block"
                times = []
                for i in range(a.warmup + a.repeat):
                    t0 = time.perf_counter()
                    out = model(img)
                    out.backward(g)
                    opt.step()
                    opt.zero_grad(set_to_none=False)
                    if i >= a.warmup:
                        times.append((time.perf_counter() - t0) * 1e3)
                times.sort()
                n = len(times)
                ms = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
                print(json.dumps({"build": "pytorch", "model": preset, "objective": "encode", "batch": B,
                                  "policy": policy, "repeat": a.repeat, "threads": torch.get_num_threads(),
                                  "ms_per_step": round(ms, 3),
                                  "images_per_s": round(B * 1e3 / ms, 4)}), flush=True)


if __name__ == "__main__":
    main()
