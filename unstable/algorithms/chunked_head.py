"""The LM head fused with the log-prob of the sampled token, in chunks over tokens.

``logits = hidden @ weight.T`` is ``[N, V]``: for Qwen3's 151,936-token vocabulary and 4,096 scored
tokens its float32 log-softmax alone is 2.5 GB, and autograd keeps it (or a recomputed copy) until
the head's backward, which is exactly when the layers' activations are all still held: the peak of
the update. :func:`chunked_target_logprobs` never holds more than ``chunk_tokens`` rows of it. The
forward computes each chunk's logits, its log-sum-exp, the sampled token's log-prob and the entropy,
and keeps only ``[N]`` values; the backward recomputes the chunk's logits and turns them into the
gradient with respect to the hidden states (and the weight, if it is trained), as Liger kernel's
fused linear cross-entropy does (Hsu et al. 2024, "Liger Kernel", section 3.2; the gradient of
``log softmax`` is ``onehot - p``, of the entropy ``H = -sum p log p`` it is ``-p (log p + H)``).

Why our own ``torch.autograd.Function`` and not the ``liger-kernel`` package: Liger's kernels are
Triton (no CPU path, so the learner on a laptop and every test would need a second implementation
anyway); its fused loss returns a cross-entropy reduced over tokens, while the policy losses need
each token's log-prob (and entropy) at each sample's own temperature; and it would be a dependency
for a few dozen lines of matrix products, which on a GPU are as fast in plain torch (the head's cost
is the ``[chunk, H] x [H, V]`` products, not the elementwise softmax).
"""

from __future__ import annotations

import torch
from torch import Tensor


def chunked_target_logprobs(hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float | Tensor = 1.0,
                            chunk_tokens: int = 512, bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``(log p(targets[i]), entropy)`` of ``softmax((hidden[i] @ weight.T + bias) / temperature[i])``.

    ``hidden`` ``[N, H]`` (any float dtype; the products run in it, the softmax in float32),
    ``weight`` ``[V, H]``, ``targets`` ``[N]``, ``temperature`` a float or ``[N]`` (> 0). Returns two
    ``[N]`` float32 tensors, equal to :func:`~unstable.algorithms.target_logprobs` and
    :func:`~unstable.algorithms.logits_entropy` of the full logits, with gradients to ``hidden``,
    ``weight`` and ``bias`` (those that require them) through either output. At most
    ``chunk_tokens`` rows of the ``[N, V]`` logits exist at once, in the forward and the backward.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden must be [N, H] and weight [V, H]; got {tuple(hidden.shape)} and "
                         f"{tuple(weight.shape)}")
    if targets.shape != (hidden.shape[0],):
        raise ValueError(f"targets must be [N] = ({hidden.shape[0]},), got {tuple(targets.shape)}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if not isinstance(temperature, Tensor):
        temperature = torch.full((hidden.shape[0],), float(temperature))
    if temperature.shape != (hidden.shape[0],):
        raise ValueError(f"temperature must be a float or one per row, shape ({hidden.shape[0]},); "
                         f"got {tuple(temperature.shape)}")
    temperature = temperature.to(device=hidden.device, dtype=torch.float32)
    if not bool((temperature > 0).all()):
        raise ValueError("temperature must be > 0 (for greedy samples pass 1.0)")
    inv_t = 1.0 / temperature
    return _ChunkedHead.apply(hidden, weight, bias, targets, inv_t, chunk_tokens)


def _chunk_stats(h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
                 inv_t: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One chunk's float32 scaled logits' ``(log p, p, log p(target), entropy)``."""
    logits = h @ weight.T
    if bias is not None:
        logits = logits + bias
    scaled = logits.float() * inv_t[:, None]
    logp = torch.log_softmax(scaled, dim=-1)
    p = logp.exp()
    logp = logp.clamp(min=torch.finfo(logp.dtype).min)  # p = 0 adds 0 * (finite) = 0, not NaN
    entropy = -(p * logp).sum(dim=-1)
    return logp, p, logp.gather(-1, targets[:, None]).squeeze(-1), entropy


class _ChunkedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, inv_t, chunk_tokens):
        n = hidden.shape[0]
        out_logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        out_entropy = torch.empty(n, dtype=torch.float32, device=hidden.device)
        with torch.no_grad():
            for start in range(0, n, chunk_tokens):
                sl = slice(start, start + chunk_tokens)
                _, _, out_logp[sl], out_entropy[sl] = _chunk_stats(hidden[sl], weight, bias, targets[sl], inv_t[sl])
        ctx.save_for_backward(hidden, weight, bias, targets, inv_t, out_entropy)
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None: skip its term
        ctx.chunk_tokens = chunk_tokens
        return out_logp, out_entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets, inv_t, entropy = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b else None
        for start in range(0, hidden.shape[0], ctx.chunk_tokens):
            sl = slice(start, start + ctx.chunk_tokens)
            h = hidden[sl]
            logp, p, _, _ = _chunk_stats(h, weight, bias, targets[sl], inv_t[sl])
            grad_z = torch.zeros_like(p)  # d/d(scaled logits), float32
            if grad_logp is not None:
                grad_z -= p * grad_logp[sl, None]
                grad_z.scatter_add_(-1, targets[sl, None], grad_logp[sl, None].float())
            if grad_entropy is not None:
                grad_z -= p * (logp + entropy[sl, None]) * grad_entropy[sl, None]
            grad_logits = grad_z * inv_t[sl, None]  # through the division by the temperature
            if need_h:
                grad_h[sl] = (grad_logits.to(weight.dtype) @ weight).to(hidden.dtype)
            if need_w:
                grad_w += grad_logits.T @ h.float()
            if need_b:
                grad_b += grad_logits.sum(dim=0)
        grad_w = grad_w.to(weight.dtype) if need_w else None
        grad_b = grad_b.to(bias.dtype) if need_b else None
        return grad_h, grad_w, grad_b, None, None, None
