#!/usr/bin/env python3
"""Per-GPU memory estimate of the recipes (configs/recipes/README.md), in GB (1e9 bytes).

Every rank is a full replica: bf16 weights (2 B/param) + fp32 master (4) + fp32 grads (4) + Adam m, v (8).
KV cache: bf16 K and V of generation_batch_size sequences of the longest allowed length.
Activations: what backward keeps per token and layer, for micro_batch_size such sequences; with
recomputation only each layer's input is kept, plus one layer's full set during its backward.
"""
MODELS = {  # name: (params, hidden, layers, heads, kv_heads, head_dim, intermediate); Qwen2.5 configs
    "0.5b": (494_032_768, 896, 24, 14, 2, 64, 4864),
    "1.5b": (1_543_714_304, 1536, 28, 12, 2, 128, 8960),
    "3b": (3_085_938_688, 2048, 36, 16, 2, 128, 11008),
    "7b": (7_615_616_512, 3584, 28, 28, 4, 128, 18944),
}
GEN_BATCH = {"0.5b": 128, "1.5b": 64, "3b": 16, "7b": 16}  # generation_batch_size of each recipe
MICRO = {"0.5b": 8, "1.5b": 4, "3b": 2, "7b": 1}  # micro_batch_size of each recipe
SEQ = 6144 + 8096  # max_prompt_tokens + max_response_tokens

for name, (P, h, L, H, KV, hd, inter) in MODELS.items():
    state = 18 * P / 1e9
    zero1 = (2 + 4 + 12 / 8) * P / 1e9  # master weights and Adam sharded over 8 ranks
    kv = GEN_BATCH[name] * SEQ * (2 * L * KV * hd * 2) / 1e9
    per_layer = 2 * (6 * h + (H + 2 * KV) * hd + 2 * inter)  # x, norms, q/k/v, attn out, residual, gate, up
    act = MICRO[name] * SEQ * L * per_layer / 1e9
    act_rc = MICRO[name] * SEQ * (L * 2 * h + per_layer) / 1e9
    print(f"{name}: weights+grads+Adam {state:.1f} (ZeRO-1 over 8: {zero1:.1f})  KV cache ({GEN_BATCH[name]} seqs) {kv:.1f}  "
          f"activations (micro {MICRO[name]}) {act:.1f} kept / {act_rc:.1f} recomputed  "
          f"total with recomputation {state + kv + act_rc:.1f} (ZeRO-1: {zero1 + kv + act_rc:.1f})")
