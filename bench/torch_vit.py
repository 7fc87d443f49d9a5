"""torch_vit.py: the PyTorch side of bench/run.mjs -- the ViT classifier training step of
bench/step_bench.mjs (--job vit) on the CPU, at a stated thread configuration.

The model is timm's VisionTransformer written out in plain torch (no timm): ViT-Ti/16 =
vit_tiny_patch16_224 (D 192, depth 12, 3 heads), ViT-S/16 = vit_small_patch16_224 (D 384, 6 heads):
16x16 patch embedding (Conv2d), class token, learned pos_embed, pre-norm blocks (LayerNorm eps
1e-6, fused qkv Linear with bias, softmax(q k^T / sqrt(hd)) v, proj, MLP fc1 -> exact GELU -> fc2),
final LayerNorm, the [CLS] token into a 1000-class head. One step: forward, cross-entropy, backward,
AdamW (lr 1.5e-4, betas 0.9/0.95, weight decay 0.05), zero_grad -- vitrine's trainStepLabels.

Threads, stated, never left to defaults: --torch-threads T (torch.set_num_threads: its OpenMP
intra-op pool; interop 1) and --blas-threads O (OpenBLAS's own pthread pool, which
torch.set_num_threads does not limit: OPENBLAS_NUM_THREADS must be set before the library loads,
so this script re-executes itself with it). The caller pins the process to cores (taskset). The
CPU time the process used during the timed steps over their wall time is reported, so that a
"1 core" run that used more than one is seen. --clock cpu times each step by the process's CPU
time (all its threads) instead of wall time: for a process pinned to one core of a busy machine.

Run with Debian's /usr/bin/python3 and python3-torch (1.13); its BLAS is whatever libblas.so.3
points to: libopenblas0-pthread's OpenBLAS once installed (checked: the reference BLAS is ~20x
slower). Prints one JSON object.
    taskset -c 0 /usr/bin/python3 bench/torch_vit.py --torch-threads 1 --blas-threads 1 --batch 1

--check IN --check-out OUT: the reference a JS peer's step is checked against before it is timed
(bench/peers/torch_check.mjs): the same model from IN's weights (param/<state_dict key>), images
and labels, two steps in float64 (the truth) and float32; OUT gets the first step's gradients and
both steps' losses (safetensors, as ../shared/docs/parity-format.md's expect/ and torch32/).
"""
import argparse
import ctypes
import json
import os
import sys
import time

PRESETS = {"vit_tiny_patch16_224": (192, 12, 3), "vit_small_patch16_224": (384, 12, 6),
           "vit_base_patch16_224": (768, 12, 12)}


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="vit_tiny_patch16_224")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--torch-threads", type=int, default=1)
    ap.add_argument("--blas-threads", type=int, default=1)
    ap.add_argument("--policy", default="none", choices=["none", "block"])
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="cpu: each step's process CPU time (one core on a busy machine), not wall time")
    ap.add_argument("--check", metavar="IN",
                    help="the reference for a peer's step (bench/vit_peers.mjs): weights and inputs from IN")
    ap.add_argument("--check-out", metavar="OUT", help="with --check: where the losses and gradients go")
    return ap.parse_args()


def main():
    a = parse()
    want = str(a.blas_threads)
    if os.environ.get("OPENBLAS_NUM_THREADS") != want or os.environ.get("OMP_NUM_THREADS") != str(a.torch_threads):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=want, OMP_NUM_THREADS=str(a.torch_threads),
                   MKL_NUM_THREADS=str(a.torch_threads))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.utils.checkpoint

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
        def __init__(self, dim, depth, heads, classes=1000, img=224, patch=16):
            super().__init__()
            n = (img // patch) ** 2
            self.patch_embed = nn.Conv2d(3, dim, patch, patch)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
            self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.head = nn.Linear(dim, classes)
            self.checkpointing = False

        def forward(self, x):
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
            for b in self.blocks:
                x = torch.utils.checkpoint.checkpoint(b, x, use_reentrant=False) if self.checkpointing else b(x)
            return self.head(self.norm(x)[:, 0])

    torch.set_num_threads(a.torch_threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    if a.check:
        return check(a, ViT, torch, F)

    # which BLAS this process loaded, OpenBLAS's core name and thread count, an sgemm rate
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            if "blas" in line or "lapack" in line:
                libs.add(line.split()[-1])
    core, blas_threads = None, None
    for lib in libs:
        if "openblas" in lib:
            try:
                so = ctypes.CDLL(lib)
                so.openblas_get_corename.restype = ctypes.c_char_p
                core = so.openblas_get_corename().decode()
                blas_threads = so.openblas_get_num_threads()
            except (OSError, AttributeError):
                pass
    x, y = torch.randn(1024, 1024), torch.randn(1024, 1024)
    x @ y
    t = time.perf_counter()
    for _ in range(5):
        x @ y
    sgemm = 5 * 2 * 1024 ** 3 / (time.perf_counter() - t) / 1e9

    D, depth, H = PRESETS[a.preset]
    model = ViT(D, depth, H)
    model.checkpointing = a.policy == "block"
    opt = torch.optim.AdamW(model.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.05)
    img = torch.randn(a.batch, 3, 224, 224)
    labels = torch.arange(a.batch) * 7 % 1000
    times = []
    cpu0 = wall0 = None
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            cpu0, wall0 = time.process_time(), time.perf_counter()
        t0 = clock()
        loss = F.cross_entropy(model(img), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if i >= a.warmup:
            times.append((clock() - t0) * 1e3)
    cpu_share = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    s = sorted(times)
    n = len(s)
    ms = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    print(json.dumps({"build": "pytorch", "torch": torch.__version__, "model": a.preset, "batch": a.batch,
                      "policy": a.policy, "clock": a.clock, "torch_threads": torch.get_num_threads(),
                      "blas_threads": blas_threads, "openblas_core": core, "libs": sorted(libs),
                      "sgemm1024_gflops": round(sgemm, 2), "cpu_share": round(cpu_share, 3),
                      "affinity": sorted(os.sched_getaffinity(0)),
                      "ms": [round(t, 2) for t in times], "ms_per_step": round(ms, 3)}), flush=True)


def read_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        buf = f.read()
    n = int.from_bytes(buf[:8], "little")
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    types = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    out = {k: np.frombuffer(buf[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]],
                            dtype=types[e["dtype"]]).reshape(e["shape"]) for k, e in header.items()}
    return meta, out


def write_safetensors(path, tensors, meta):
    header, off, blobs = {"__metadata__": meta}, 0, []
    for k, v in tensors.items():
        b = v.astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    text = json.dumps(header)
    text += " " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text.encode() + b"".join(blobs))


def check(a, ViT, torch, F):
    """--check IN --check-out OUT: two steps (forward, cross-entropy, backward, AdamW) from IN's
    weights (param/<state_dict key>) on IN's images and labels, in float64 (the truth) and in
    float32; OUT gets the first step's gradients (expect/grad/<key> from float64, torch32/grad/<key>)
    and both steps' losses (metadata losses64, losses32)."""
    meta, t = read_safetensors(a.check)
    D, depth, H = PRESETS[meta["preset"]]
    depth = int(meta.get("depth", depth))
    images, labels = torch.from_numpy(t["input/images"].copy()), torch.from_numpy(t["input/labels"].copy())
    state = {k[len("param/"):]: torch.from_numpy(v.copy()) for k, v in t.items() if k.startswith("param/")}
    out, losses = {}, {}
    for dtype, side in ((torch.float64, "expect"), (torch.float32, "torch32")):
        model = ViT(D, depth, H).to(dtype)
        model.load_state_dict(state, strict=True)
        opt = torch.optim.AdamW(model.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.05)
        ls = []
        for step in range(2):
            loss = F.cross_entropy(model(images.to(dtype)), labels)
            loss.backward()
            ls.append(loss.item())
            if step == 0:
                for k, p in model.named_parameters():
                    out[f"{side}/grad/{k}"] = p.grad.detach().clone().numpy()  # zero_grad reuses the tensor
            opt.step()
            opt.zero_grad(set_to_none=False)
        losses[side] = ls
    write_safetensors(a.check_out, out, {"losses64": json.dumps(losses["expect"]),
                                         "losses32": json.dumps(losses["torch32"]), "torch": torch.__version__})


if __name__ == "__main__":
    main()
