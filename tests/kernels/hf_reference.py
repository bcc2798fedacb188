#!/usr/bin/env python3
"""Hugging Face transformers as the reference for the model on the GPU, on real Qwen2.5 configs.

For each config.json given, writes OUT/<name>/: the model with random weights (fp32 safetensors in
HF naming, as transformers saves it) and reference.json, the per-token log-probs and entropies of
a few random sequences under transformers (fp32, eager attention, TF32 off). cuda_model_test's
CudaHfReference test loads each directory on the GPU and compares (AZR_HF_REFERENCE_DIR=OUT).
Runs where PyTorch, transformers and a GPU are (scripts/gpu_check.sh on the GPU machine).

    python3 tests/kernels/hf_reference.py OUT tests/model/configs/qwen2.5-0.5b.json ...
"""
import json
import os
import sys

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def main():
    out, configs = sys.argv[1], sys.argv[2:]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for path in configs:
        name = os.path.splitext(os.path.basename(path))[0]
        cfg = Qwen2Config(**json.load(open(path)), attn_implementation="eager")
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(cfg).to(device=device, dtype=torch.float32).eval()
        d = os.path.join(out, name)
        model.save_pretrained(d)  # safetensors: the default since 4.35, the only format in 5.x
        g = torch.Generator().manual_seed(1)
        seqs = []
        for length in (37, 64, 5):  # ragged when batched, one past two attention tiles
            ids = torch.randint(0, cfg.vocab_size, (length,), generator=g).tolist()
            with torch.no_grad():
                logits = model(torch.tensor([ids], device=device)).logits[0].float()
            lp = torch.log_softmax(logits, dim=-1)
            logp = [lp[t - 1, ids[t]].item() for t in range(1, length)]
            ent = [-(lp[t - 1].exp() * lp[t - 1]).sum().item() for t in range(1, length)]
            seqs.append({"ids": ids, "logp": logp, "entropy": ent})
        json.dump({"config": path, "transformers": __import__("transformers").__version__,
                   "torch": torch.__version__, "sequences": seqs}, open(os.path.join(d, "reference.json"), "w"))
        print(f"hf_reference: {name}: {sum(p.numel() for p in model.parameters())} parameters -> {d}")
        del model
        torch.cuda.empty_cache() if device == "cuda" else None


if __name__ == "__main__":
    main()
