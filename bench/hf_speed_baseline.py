#!/usr/bin/env python3
"""The Hugging Face baseline of bench/model_speed_bench.cpp: the same model config, random weights,
the same shapes, on the same device, timed the way users of the Python reference run it.

  decode  transformers' Qwen2ForCausalLM in bf16 (its default attention, sdpa), `generate` with
          do_sample, temperature 1, top_k 0, top_p 1 and min_new_tokens = max_new_tokens = N (no
          early stop), G prompts of P random tokens. tokens_per_s = G*N / seconds, prefill
          included; seconds_one_token is a run with N = 1, so the decode step alone is
          (seconds - seconds_one_token) / (N - 1), as model_speed_bench computes it for azr.
  train   fp32 weights, a step = forward with labels (transformers shifts them and takes the
          token-mean cross entropy), backward, clip_grad_norm_(1.0), AdamW(lr 1e-5, wd 0.01,
          fused on CUDA).step(), zero_grad(set_to_none=True), random ids [B, T]; in two
          precisions: "bf16-autocast" (torch.autocast bf16 over fp32 master weights, what FSDP
          mixed precision does in the reference) and "fp32" (TF32 off, like azr's fp32 GEMMs).
          --recompute turns on transformers' gradient checkpointing. --micro-batches K: K forward/
          backward passes of [B, T] per step, each loss divided by K, the gradients accumulating,
          then one clip and AdamW step (model_speed_bench's). tokens_per_s = B*T*K*steps / s.

Prints one JSON line: {"decode": [...], "train": [...], "versions": {...}}. A workload that fails
(out of memory, say) reports {"error": ...} in its entry instead of stopping the others.

  hf_speed_baseline.py --config CONFIG.json [--device cuda] [--decode-batches 1,64,256]
                       [--prompt-len 128] [--new 128] [--train-batch 4] [--seq 1024] [--steps 3]
                       [--micro-batches 1] [--warmup 1] [--recompute]
"""
import argparse
import json
import sys
import time

import torch


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()


def build(cfg_path, device, dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with open(cfg_path) as f:
        cfg = Qwen2Config(**json.load(f))
    torch.manual_seed(0)
    if hasattr(torch.device, "__enter__"):  # torch >= 2.0: initialise on the device (a 1.5B init on the host is slow)
        with torch.device(device):
            model = Qwen2ForCausalLM(cfg)
    else:
        model = Qwen2ForCausalLM(cfg)
    return model.to(device=device, dtype=dtype), cfg


def decode(args, device):
    from transformers import GenerationConfig

    model, cfg = build(args.config, device, torch.bfloat16)
    model.eval()
    eos = cfg.eos_token_id if cfg.eos_token_id is not None else 0
    g = torch.Generator(device="cpu").manual_seed(1)

    def gen_config(n):
        return GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=n,
                                min_new_tokens=n, eos_token_id=eos, pad_token_id=0)

    def timed(ids, n):
        mask = torch.ones_like(ids)
        sync(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen_config(n))
        sync(device)
        sec = time.perf_counter() - t0
        produced = out.shape[1] - ids.shape[1]
        if produced != n:
            print(f"hf_speed_baseline: generated {produced} tokens per row, expected {n}", file=sys.stderr)
        return sec

    rows = []
    for batch in args.decode_batches:
        try:
            ids = torch.randint(0, cfg.vocab_size, (batch, args.prompt_len), generator=g).to(device)
            timed(ids, min(args.new, 8))  # warm-up
            sec = timed(ids, args.new)
            sec1 = timed(ids, 1)
            rows.append({"batch": batch, "tokens_per_s": batch * args.new / sec, "seconds": sec,
                         "seconds_one_token": sec1,
                         "decode_step_ms": 1e3 * (sec - sec1) / max(1, args.new - 1), "dtype": "bfloat16"})
        except Exception as e:  # noqa: BLE001 - report and go on with the next batch size
            rows.append({"batch": batch, "error": f"{type(e).__name__}: {e}"[:500]})
        free(device)  # after the except block, whose traceback holds the failed call's tensors
        print(f"hf_speed_baseline: decode {rows[-1]}", file=sys.stderr)
    del model
    free(device)
    return rows


def train(args, device, precision):
    model, cfg = build(args.config, device, torch.float32)
    model.train()
    if args.recompute:
        model.gradient_checkpointing_enable()
    fused = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, **fused)
    g = torch.Generator(device="cpu").manual_seed(0)
    k = args.micro_batches
    ids = [torch.randint(0, cfg.vocab_size, (args.train_batch, args.seq), generator=g).to(device) for _ in range(k)]
    autocast = precision == "bf16-autocast"
    loss_value = 0.0

    def step():
        nonlocal loss_value
        total = 0.0
        for batch in ids:  # the gradients accumulate over the micro-batches: their mean loss
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=batch, labels=batch).loss
            (loss / k).backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = (total / k).item()

    for _ in range(args.warmup):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(device)
    sec = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    del model, opt
    free(device)
    return {"precision": precision, "tokens_per_s": args.train_batch * args.seq * k * args.steps / sec, "seconds": sec,
            "loss": loss_value, "recompute": args.recompute, "micro_batches": k, "peak_memory_bytes": peak}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--decode-batches", default="1,64,256", help="comma list; empty = no decode")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--train-batch", type=int, default=4, help="0 = no training step")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--micro-batches", type=int, default=1,
                   help="forward/backward passes per optimizer step, gradients accumulated")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--recompute", action="store_true")
    args = p.parse_args()
    args.decode_batches = [int(x) for x in args.decode_batches.split(",") if x.strip()]
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 step is fp32; autocast is unaffected
        torch.backends.cudnn.allow_tf32 = False

    import transformers

    out = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "decode": decode(args, device) if args.decode_batches else [], "train": []}
    if args.train_batch > 0:
        for precision in ("bf16-autocast", "fp32"):
            try:
                out["train"].append(train(args, device, precision))
            except Exception as e:  # noqa: BLE001 - report and go on
                out["train"].append({"precision": precision, "error": f"{type(e).__name__}: {e}"[:500]})
            free(device)
            print(f"hf_speed_baseline: train {out['train'][-1]}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
