"""Inference backends: batched generation with per-request LoRA adapters and token log-probs."""
