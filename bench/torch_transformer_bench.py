#!/usr/bin/env python3
"""PyTorch (CPU, fp32) baseline for bench/transformer_bench.cpp: the same Qwen2 decoder written as idiomatic,
efficient eager PyTorch (nn.Linear / nn.Embedding, HF-style RMSNorm, half-split RoPE, GQA, causal attention by hand
with a mask + softmax as HF's eager attention does), timed on the same workloads. Run with /usr/bin/python3
(Debian torch 1.13.1: no scaled_dot_product_attention, no torch.compile).

  torch_transformer_bench.py --config CONFIG.json --threads N train --batch B --seq T [--warmup 2 --steps 5]
  torch_transformer_bench.py --config CONFIG.json --threads N generate --prompts G --prompt-len P --new N [--warmup 1]
  torch_transformer_bench.py ... [--profile]   (train: also prints torch.autograd.profiler's table to stderr)

CONFIG.json is a Hugging Face config.json (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
num_key_value_heads, vocab_size, rms_norm_eps, rope_theta, tie_word_embeddings; head_dim optional).

train: random ids [B, T]; one step = forward, log_softmax, token-mean cross entropy over positions 0..T-2
predicting 1..T-1, backward, clip_grad_norm_(1.0), AdamW(lr 1e-5, wd 0.01).step(), zero_grad(set_to_none=True).
tokens/s = B*T*steps / seconds. Phases (forward incl. loss / backward / clip+AdamW) are timed on the same steps.
generate: G prompts of P random tokens; prefill once, then one token per step with a KV cache, sampling from
softmax(logits) (temperature 1) with torch.multinomial; new tokens/s = G*N / seconds, prefill included.
Prints one JSON line.
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):  # as HF Qwen2RMSNorm
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.nh, self.kv = c["num_attention_heads"], c["num_key_value_heads"]
        self.d = c.get("head_dim") or H // self.nh
        self.q_proj = nn.Linear(H, self.nh * self.d, bias=True)
        self.k_proj = nn.Linear(H, self.kv * self.d, bias=True)
        self.v_proj = nn.Linear(H, self.kv * self.d, bias=True)
        self.o_proj = nn.Linear(self.nh * self.d, H, bias=False)

    def forward(self, x, cos, sin, mask, cache=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:  # (k_cache, v_cache) [B, kv, cap, d], filled up to `pos`
            kc, vc, pos = cache
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            k, v = kc[:, :, :pos + T], vc[:, :, :pos + T]
        g = self.nh // self.kv
        if g > 1:
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
        att = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(self.d))
        if mask is not None:
            att = att + mask
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, self.nh * self.d)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        H, V = c["hidden_size"], c["vocab_size"]
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(H, c["rms_norm_eps"])
        self.lm_head = nn.Linear(H, V, bias=False)
        if c.get("tie_word_embeddings", True):
            self.lm_head.weight = self.embed_tokens.weight
        for m in self.modules():  # transformers' init
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)
        d = c.get("head_dim") or H // c["num_attention_heads"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.register_buffer("inv_freq", inv, persistent=False)

    def rope(self, pos0, T):
        t = torch.arange(pos0, pos0 + T, dtype=torch.float32)
        f = torch.outer(t, self.inv_freq)
        emb = torch.cat((f, f), dim=-1)
        return emb.cos()[None, None], emb.sin()[None, None]  # [1, 1, T, d]

    def forward(self, ids, caches=None, pos0=0):
        B, T = ids.shape
        x = self.embed_tokens(ids)
        cos, sin = self.rope(pos0, T)
        mask = None
        if T > 1:  # causal mask over [pos0 + T] keys, as HF eager
            S = pos0 + T
            mask = torch.full((T, S), float("-inf")).triu(pos0 + 1)[None, None]
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, None if caches is None else (caches[i][0], caches[i][1], pos0))
        return self.lm_head(self.norm(x))


def train_bench(model, a):
    V = model.c["vocab_size"]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, V, (a.batch, a.seq), generator=g)
    phases = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}

    def step(timed):
        t0 = time.perf_counter()
        logits = model(ids)
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        loss = -logp.gather(-1, ids[:, 1:, None]).mean()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        if timed:
            phases["forward"] += t1 - t0
            phases["backward"] += t2 - t1
            phases["optimizer"] += t3 - t2
        return loss.item()

    for _ in range(a.warmup):
        step(False)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step(True)
    sec = time.perf_counter() - t0
    if a.profile:
        with torch.autograd.profiler.profile() as prof:
            step(False)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
    return {"tokens_per_s": a.batch * a.seq * a.steps / sec, "seconds": sec, "steps": a.steps, "loss": loss,
            "phase_ms_per_step": {k: 1e3 * v / a.steps for k, v in phases.items()}}


@torch.no_grad()
def generate(model, prompts, n_new):
    c = model.c
    G, P = prompts.shape
    kv, d = c["num_key_value_heads"], c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    caches = [(torch.empty(G, kv, P + n_new, d), torch.empty(G, kv, P + n_new, d))
              for _ in range(c["num_hidden_layers"])]
    logits = model(prompts, caches, 0)[:, -1]
    out = []
    pos = P
    for i in range(n_new):
        tok = torch.multinomial(torch.softmax(logits, dim=-1), 1)  # temperature 1
        out.append(tok)
        if i + 1 == n_new:
            break
        logits = model(tok, caches, pos)[:, -1]
        pos += 1
    return torch.cat(out, dim=1)


def generate_bench(model, a):
    V = model.c["vocab_size"]
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, V, (a.prompts, a.prompt_len), generator=g)
    for _ in range(a.warmup):
        generate(model, prompts, min(a.new, 8))
    t0 = time.perf_counter()
    out = generate(model, prompts, a.new)
    sec = time.perf_counter() - t0
    assert out.shape == (a.prompts, a.new)
    return {"tokens_per_s": a.prompts * a.new / sec, "seconds": sec, "includes_prefill": True}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--profile", action="store_true")
    sub = p.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("train")
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--seq", type=int, default=256)
    t.add_argument("--warmup", type=int, default=2)
    t.add_argument("--steps", type=int, default=5)
    gen = sub.add_parser("generate")
    gen.add_argument("--prompts", type=int, default=8)
    gen.add_argument("--prompt-len", type=int, default=32)
    gen.add_argument("--new", type=int, default=128)
    gen.add_argument("--warmup", type=int, default=1)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(a.config) as f:
        c = json.load(f)
    model = Qwen2(c)
    n_params = sum(x.numel() for x in model.parameters())
    r = train_bench(model, a) if a.mode == "train" else generate_bench(model, a)
    r.update({"engine": "torch", "torch": torch.__version__, "threads": torch.get_num_threads(), "mode": a.mode,
              "params": n_params})
    print(json.dumps(r))


if __name__ == "__main__":
    main()
