#!/usr/bin/env python3
"""A short PyTorch reference of the HF transformers Qwen2 decoder; it writes the test cases that the C++
model, loss and optimizer tests compare against. Run it with /usr/bin/python3 (torch 1.13, CPU).

  torch_qwen2.py make-case OUTDIR [--seed 0 --vocab 97 --hidden 32 --intermediate 48 --layers 2 --heads 4
      --kv-heads 2 --head-dim H/heads --tied 1 --rope-theta 10000 --eps 1e-6 --batch 3 --seq 11
      --lengths 11,8,5 --adam-steps 3 --lr 1e-2 --weight-decay 0.01 --max-grad-norm 1.0 --clip-eps 0.2
      --entropy-coeff 0.01]
  torch_qwen2.py check          finite-difference check of the float64 gradients (prints, stores nothing)

Model (per layer, pre-norm): n = rms(x)*w_in; q,k,v = n W^T + b; RoPE half-split (NeoX) on q and k with
inv_freq[i] = theta^(-2i/d), i < d/2, angle = pos*inv_freq, emb = cat(angle, angle), q' = q cos + rotate_half(q) sin,
rotate_half(x) = cat(-x[d/2:], x[:d/2]), positions 0..T-1 in every row; causal softmax(q k^T * d^-0.5) v with GQA
(kv head j serves q heads [j*g, (j+1)*g)); h = x + a Wo^T; m = rms(h)*w_post; x' = h + (silu(m Wg^T)*(m Wu^T)) Wd^T;
rms(x) = x * rsqrt(mean(x^2) + eps); RoPE angles in float64 (HF: fp32). Then logits = (rms(x)*w_norm) lm_head^T, lm_head = embed_tokens when tied.

Files: OUTDIR/model/{config.json, model.safetensors} (HF layout, F32 weights, "head_dim" in the config only when
--head-dim is given; tied checkpoints have no lm_head.weight) and OUTDIR/expected.safetensors, all F32, with
every expected value computed in float64 from the exact float32 weights, then rounded to float32:
  input_ids [B,T], lengths [B]  ids as floats; positions t >= lengths[b] are random padding ids to be ignored;
                                default lengths[b] = max(2, T - ceil(b*T/(B+1))) (11,8,5); --lengths allows 1..T
  logits [B,T,V]                full forward of all T positions (compare t < lengths[b] only)
  logprobs, entropy [B,T]       log softmax(logits[b,t-1])[ids[b,t]] and entropy (nats) of softmax(logits[b,t-1])
                                for 1 <= t < lengths[b]; 0 at t = 0 and on padding
  ce_loss [1]                   -mean of logprobs over all (b,t) with 1 <= t < lengths[b]
  grad.ce.<param> (param shape) d ce_loss / d param; tied: the embedding grad includes the head's part
  response_mask, advantages, old_logprobs [B,T]  PPO inputs: row b's prompt is its first p_b tokens, p_b uniform
                                in [1, len_b-1]; the response is [p_b, len_b) (rows with len_b = 1 have none);
                                advantage: one |N(0,1)| per row on its response, signs alternating +,-,+,... over
                                the rows that have a response; old = logprobs + N(0, 0.3^2) there, redrawn from the
                                same generator until some token is clipped with A > 0 (ratio > 1+eps) and, given
                                two response rows, one with A < 0 (ratio < 1-eps); 0 outside the response
  pg_loss, policy_entropy, policy_loss [1]   veRL token-mean PPO-clip: ratio = exp(clamp(logp-old, -20, 20)),
                                pg = max(-A*ratio, -A*clamp(ratio, 1-clip_eps, 1+clip_eps)),
                                pg_loss = sum(mask*pg)/sum(mask), policy_entropy = sum(mask*entropy)/sum(mask),
                                policy_loss = pg_loss - entropy_coeff*policy_entropy (at least one token is clipped)
  grad.pg.<param>               d policy_loss / d param
  adam.grad_norm [steps]        pre-clip global L2 grad norm of each AdamW step
  adam.step<k>.grad.<param>     the pre-clip gradient of step k = 1..steps (so the optimizer can be checked on
                                exactly these gradients: Adam divides by sqrt(v), which turns the rounding noise
                                of a near-zero gradient into a full-size step, so comparing trajectories driven
                                by two implementations' gradients says little about the optimizer)
  adam.<param>                  params after adam_steps steps of, from the checkpoint weights:
                                g = d ce_loss/d p; g *= min(1, max_norm/(norm+1e-6)) (torch clip_grad_norm_);
                                torch AdamW on ALL params (biases and norms too), step t = 1, 2, ...:
                                p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
                                p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + adam_eps)
  __metadata__                  clip_eps, entropy_coeff, lr, weight_decay, max_grad_norm, adam_steps, betas
                                ("0.9,0.999"), adam_eps, seed, all as strings.
Scalars are stored with shape [1], not 0-dim. With the defaults the grad norm exceeds max_grad_norm, so every
step clips (the summary line reports how many steps clipped).
"""
import argparse
import json
import math
import os
import struct

import torch
import torch.nn.functional as F


def param_shapes(cfg):
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, kv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
    shapes = {"model.embed_tokens.weight": [V, H]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [H],
                       p + "self_attn.q_proj.weight": [nh * d, H], p + "self_attn.q_proj.bias": [nh * d],
                       p + "self_attn.k_proj.weight": [kv * d, H], p + "self_attn.k_proj.bias": [kv * d],
                       p + "self_attn.v_proj.weight": [kv * d, H], p + "self_attn.v_proj.bias": [kv * d],
                       p + "self_attn.o_proj.weight": [H, nh * d], p + "post_attention_layernorm.weight": [H],
                       p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
                       p + "mlp.down_proj.weight": [H, I]})
    shapes["model.norm.weight"] = [H]
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = [V, H]
    return shapes


def head_dim(cfg):
    return cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])


def init_params(cfg, gen):
    """float32 weights: linear/embedding N(0, 0.2^2), q/k/v biases N(0, 0.1^2), norm weights 1 + N(0, 0.1^2)."""
    out = {}
    for name, shape in param_shapes(cfg).items():
        r = torch.randn(shape, generator=gen, dtype=torch.float64)
        out[name] = (1 + 0.1 * r if "norm" in name else 0.1 * r if name.endswith("bias") else 0.2 * r).float()
    return out


class Qwen2Ref:
    """Qwen2ForCausalLM forward in `dtype`; self.params are leaf tensors (requires_grad) for autograd/optimizers."""

    def __init__(self, cfg, params, dtype=torch.float64):
        self.cfg, self.dtype = cfg, dtype
        self.params = {k: v.detach().to(dtype).clone().requires_grad_(True) for k, v in params.items()}

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"]) * w

    def forward(self, ids):
        c, P = self.cfg, self.params
        B, T = ids.shape
        nh, kv, d = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
        inv_freq = c["rope_theta"] ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
        emb = torch.cat([ang, ang], -1)
        cos, sin = emb.cos().to(self.dtype), emb.sin().to(self.dtype)  # [T, d]

        def rope(x):  # x: [B, heads, T, d]
            return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin

        causal = torch.ones(T, T, dtype=torch.bool).tril()
        x = F.embedding(ids, P["model.embed_tokens.weight"])
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            n = self.rms(x, P[p + "input_layernorm.weight"])
            proj = lambda w, heads: F.linear(n, P[p + w + ".weight"], P[p + w + ".bias"]).view(B, T, heads, d).transpose(1, 2)
            q, k, v = rope(proj("self_attn.q_proj", nh)), rope(proj("self_attn.k_proj", kv)), proj("self_attn.v_proj", kv)
            k, v = k.repeat_interleave(nh // kv, dim=1), v.repeat_interleave(nh // kv, dim=1)
            s = (q @ k.transpose(-1, -2) * d ** -0.5).masked_fill(~causal, float("-inf"))
            a = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, nh * d)
            h = x + F.linear(a, P[p + "self_attn.o_proj.weight"])
            m = self.rms(h, P[p + "post_attention_layernorm.weight"])
            x = h + F.linear(F.silu(F.linear(m, P[p + "mlp.gate_proj.weight"])) * F.linear(m, P[p + "mlp.up_proj.weight"]),
                             P[p + "mlp.down_proj.weight"])
        x = self.rms(x, P["model.norm.weight"])
        return F.linear(x, P.get("lm_head.weight", P["model.embed_tokens.weight"]))


def token_stats(logits, ids, lengths):
    """(logprobs [B,T], entropy [B,T], valid [B,T]); position t scores ids[t] with logits[t-1]; 0 where invalid."""
    B, T = ids.shape
    lp = torch.log_softmax(logits[:, :-1], -1)
    valid = (torch.arange(T)[None, :] < lengths[:, None]) & (torch.arange(T)[None, :] >= 1)
    logp = F.pad(lp.gather(-1, ids[:, 1:, None]).squeeze(-1), (1, 0))
    ent = F.pad(-(lp.exp() * lp).sum(-1), (1, 0))
    vf = valid.to(logits.dtype)
    return logp * vf, ent * vf, vf


def ce_loss(model, ids, lengths):
    logp, _, valid = token_stats(model.forward(ids), ids, lengths)
    return -logp.sum() / valid.sum()


def ppo_loss(logp, ent, old, adv, mask, clip_eps, entropy_coeff):
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    pg1, pg2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
    pg_loss = (mask * torch.maximum(pg1, pg2)).sum() / mask.sum()
    ent_mean = (mask * ent).sum() / mask.sum()
    n_clipped = int(((pg2 > pg1) & (mask > 0)).sum())
    return pg_loss - entropy_coeff * ent_mean, pg_loss, ent_mean, n_clipped


def grads(model, loss):
    names = list(model.params)
    return dict(zip(names, torch.autograd.grad(loss, [model.params[k] for k in names], retain_graph=True)))


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: tensor}, stored as F32, laid out sorted by name, header space-padded to 8 bytes."""
    header, blobs, pos = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        data = struct.pack(f"<{t.numel()}f", *t.flatten().tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [pos, pos + len(data)]}
        blobs.append(data)
        pos += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def make_config(a):
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": a.vocab,
           "hidden_size": a.hidden, "intermediate_size": a.intermediate, "num_hidden_layers": a.layers,
           "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
           "max_position_embeddings": max(128, 2 * a.seq), "rms_norm_eps": a.eps, "rope_theta": a.rope_theta,
           "tie_word_embeddings": bool(a.tied), "hidden_act": "silu", "use_sliding_window": False,
           "attention_dropout": 0.0, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
    if a.head_dim is not None:
        cfg["head_dim"] = a.head_dim
    assert a.heads % a.kv_heads == 0 and head_dim(cfg) % 2 == 0 and a.vocab > 2
    return cfg


def build_case(a):
    """Everything of a case in memory: (cfg, float32 params, expected tensors, metadata, summary)."""
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    cfg = make_config(a)
    params = init_params(cfg, gen)
    B, T = a.batch, a.seq
    lengths = [int(s) for s in a.lengths.split(",")] if a.lengths else \
        [max(2, T - math.ceil(b * T / (B + 1))) if T >= 2 else T for b in range(B)]
    assert len(lengths) == B and all(1 <= n <= T for n in lengths), lengths
    lengths = torch.tensor(lengths)
    ids = torch.randint(0, a.vocab, (B, T), generator=gen)

    model = Qwen2Ref(cfg, params, torch.float64)
    logits = model.forward(ids)
    logp, ent, valid = token_stats(logits, ids, lengths)
    ce = -logp.sum() / valid.sum()
    ex = {"input_ids": ids.double(), "lengths": lengths.double(), "logits": logits, "logprobs": logp,
          "entropy": ent, "ce_loss": ce.reshape(1)}
    ex.update({"grad.ce." + k: g for k, g in grads(model, ce).items()})

    # PPO inputs; redraw the noise until at least one token is clipped (deterministic given the seed).
    mask = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        if lengths[b] >= 2:
            mask[b, int(torch.randint(1, int(lengths[b]), (1,), generator=gen)):int(lengths[b])] = 1
    rows = (mask.sum(1) > 0).nonzero().flatten()
    assert len(rows) > 0, "no sequence has a response token (all lengths are 1)"
    sign = torch.zeros(B, 1, dtype=torch.float64)
    sign[rows] = torch.tensor([1.0 - 2 * (r % 2) for r in range(len(rows))], dtype=torch.float64)[:, None]
    for _ in range(1000):
        adv = torch.randn(B, 1, generator=gen, dtype=torch.float64).abs() * sign * mask
        old = logp.detach() + 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64) * mask
        loss, pg_loss, ent_mean, n_clipped = ppo_loss(logp, ent, old, adv, mask, a.clip_eps, a.entropy_coeff)
        r = torch.exp(logp.detach() - old)
        kinds = [bool(((adv > 0) & (r > 1 + a.clip_eps)).any()), bool(((adv < 0) & (r < 1 - a.clip_eps)).any())]
        if all(kinds[:min(2, len(rows))]):
            break
    assert n_clipped > 0, "no clipped token; try another seed"
    ex.update({"response_mask": mask, "advantages": adv, "old_logprobs": old, "policy_loss": loss.reshape(1),
               "pg_loss": pg_loss.reshape(1), "policy_entropy": ent_mean.reshape(1)})
    ex.update({"grad.pg." + k: g for k, g in grads(model, loss).items()})

    # AdamW on the CE loss with global grad-norm clipping.
    opt_model = Qwen2Ref(cfg, params, torch.float64)
    plist = list(opt_model.params.values())
    opt = torch.optim.AdamW(plist, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay)
    norms = []
    for step in range(1, a.adam_steps + 1):
        opt.zero_grad()
        ce_loss(opt_model, ids, lengths).backward()
        ex.update({f"adam.step{step}.grad.{k}": v.grad.detach().clone() for k, v in opt_model.params.items()})
        norms.append(float(torch.nn.utils.clip_grad_norm_(plist, a.max_grad_norm)))
        opt.step()
    ex["adam.grad_norm"] = torch.tensor(norms, dtype=torch.float64)
    ex.update({"adam." + k: v for k, v in opt_model.params.items()})

    meta = {"clip_eps": repr(a.clip_eps), "entropy_coeff": repr(a.entropy_coeff), "lr": repr(a.lr),
            "weight_decay": repr(a.weight_decay), "max_grad_norm": repr(a.max_grad_norm),
            "adam_steps": str(a.adam_steps), "betas": "0.9,0.999", "adam_eps": "1e-08", "seed": str(a.seed)}
    summary = {"B": B, "T": T, "V": a.vocab, "max_abs_logit": float(logits.abs().max()), "ce_loss": float(ce),
               "policy_loss": float(loss), "clipped_tokens": n_clipped, "response_tokens": int(mask.sum()),
               "adam_grad_norms": norms, "adam_clipped_steps": sum(n > a.max_grad_norm for n in norms)}
    return cfg, params, ex, meta, summary


def make_case(a):
    cfg, params, ex, meta, summary = build_case(a)
    os.makedirs(os.path.join(a.outdir, "model"), exist_ok=True)
    with open(os.path.join(a.outdir, "model", "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    paths = {"config": os.path.join(a.outdir, "model", "config.json"),
             "model": os.path.join(a.outdir, "model", "model.safetensors"),
             "expected": os.path.join(a.outdir, "expected.safetensors")}
    write_safetensors(paths["model"], params, {"format": "pt"})
    write_safetensors(paths["expected"], ex, meta)
    print(json.dumps({**paths, **summary}))


def check(a):
    """Central finite differences of ce_loss and policy_loss against autograd, on a few elements of some params."""
    a.batch, a.seq, a.lengths = 2, 6, "6,4"
    cfg, params, ex, _, _ = build_case(a)
    ids, lengths = ex["input_ids"].long(), ex["lengths"].long()
    mask, adv, old = ex["response_mask"], ex["advantages"], ex["old_logprobs"]

    def losses(model):
        logp, ent, valid = token_stats(model.forward(ids), ids, lengths)
        return {"ce": -logp.sum() / valid.sum(),
                "pg": ppo_loss(logp, ent, old, adv, mask, a.clip_eps, a.entropy_coeff)[0]}

    def shifted(name, j, h):
        m = Qwen2Ref(cfg, params)
        m.params[name].view(-1)[j] += h
        return m

    names = ["model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.bias", "model.layers.1.input_layernorm.weight",
             "model.layers.0.mlp.down_proj.weight", "model.norm.weight"] + (["lm_head.weight"] if not a.tied else [])
    worst = 0.0
    with torch.no_grad():
        for name in names:
            for j in torch.randperm(params[name].numel())[:3].tolist():
                lp, lm = (losses(shifted(name, j, h)) for h in (1e-6, -1e-6))
                for key in ("ce", "pg"):
                    fd = float(lp[key] - lm[key]) / 2e-6
                    an = float(ex[f"grad.{key}.{name}"].reshape(-1)[j])
                    worst = max(worst, abs(fd - an) / max(1e-3, abs(an)))
                    print(f"{key} {name}[{j}]: autograd {an:+.9e} finite-diff {fd:+.9e}")
    print(f"worst relative error {worst:.2e}")
    assert worst < 1e-5


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["make-case", "check"])
    ap.add_argument("outdir", nargs="?")
    for flag, typ, default in [("seed", int, 0), ("vocab", int, 97), ("hidden", int, 32), ("intermediate", int, 48),
                               ("layers", int, 2), ("heads", int, 4), ("kv-heads", int, 2), ("head-dim", int, None),
                               ("tied", int, 1), ("rope-theta", float, 10000.0), ("eps", float, 1e-6),
                               ("batch", int, 3), ("seq", int, 11), ("lengths", str, None), ("adam-steps", int, 3),
                               ("lr", float, 1e-2), ("weight-decay", float, 0.01), ("max-grad-norm", float, 1.0),
                               ("clip-eps", float, 0.2), ("entropy-coeff", float, 0.01)]:
        ap.add_argument("--" + flag, type=typ, default=default)
    a = ap.parse_args()
    if a.cmd == "make-case":
        if not a.outdir:
            ap.error("make-case needs OUTDIR")
        make_case(a)
    else:
        check(a)


if __name__ == "__main__":
    main()
