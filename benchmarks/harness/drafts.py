"""What the sections on drafts and on batched engines share (B4, B6, B8, B11): the sentence on
exactness, how a learnt draft policy is recorded and shown, and the table rows of an engine
against the bare loop."""

from __future__ import annotations

from benchmarks.harness.registry import mark

# What every section says about drafts and exactness (B4, B6, B8; README's --speculate row too).
SAME_DISTRIBUTION = (
    "Drafts keep the model's own distribution: every token is the one the run's sampler chain draws "
    "from the model's logits at that position, drafted or not. Greedy outputs agree with plain decoding "
    "up to the engine's batch-shape numerics: a check decodes several tokens in one `llama_decode`, "
    "llama.cpp computes their logits with other kernels than a single-token decode's, and where the "
    "model's two best tokens are closer than that difference the choice can flip."
)


def policy_record(policy) -> dict:
    """What the draft policy learnt: a decode of w tokens costs a + b*w; drafts pay from an
    acceptance of b / (a + b) up."""
    a, b = policy.cost()
    return {
        "a_ms": round(a * 1000, 3),
        "b_ms": round(b * 1000, 3),
        "break_even_acceptance": round(b / (a + b), 3),
        "acceptance": round(policy.acceptance, 3),
    }


def policy_cell(policy: dict) -> str:
    return (
        f"a = {policy['a_ms']} ms, b = {policy['b_ms']} ms per token (drafts pay from an acceptance of "
        f"{policy['break_even_acceptance']}), acceptance {policy['acceptance']}"
    )


def engine_rows(engine: dict, ratio: str) -> str:
    """Table rows of an engine_vs_bare result: `ratio` is time_ratio (B4) or tok_s_ratio (B8)."""
    ok = (lambda r: r <= 1.05) if ratio == "time_ratio" else (lambda r: r >= 0.95)
    return "\n".join(
        f"| {n} | {r['memagent_tok_s']} | {r['bare_tok_s']} | **{r[ratio]}x** {mark(ok(r[ratio]))} |"
        for n, r in engine.items()
        if n.isdigit()
    )
