"""What each alert tells a user to do: the paper's recipes, one string per factor.

Shown with every alert (dashboard, `minirl analyze`, webhooks) and audited beside every
automatic action; the policy that acts on them is monitor/remediation/policy.py."""

R_IS = (
    "turn on token-level IS correction with truncation (TIS, cap 5) if it is off; if it is "
    "on, tighten the cap or mask tokens outside a band (MIS/IcePop [0.5, 5]); check the "
    "inference engine's precision and sampler (top-p/top-k/temperature) against training's"
)
R_STALE = (
    "turn clipping on (ε_low 0.2, ε_high 0.27) or tighten ε; use fewer mini-batches per "
    "rollout (less off-policy); for MoE add routing replay"
)
R_ROUTING = (
    "use routing replay: R2 at ≤ 2 mini-batches per rollout, R3 at ≥ 4; on-policy, "
    "R3 brings no gain (arXiv 2512.01374)"
)
R_APPROX = (
    "the first-order approximation is failing: turn off length normalisation, keep IS "
    "correction and clipping on, and reduce off-policy updates (fewer mini-batches)"
)
R_OPTIM = (
    "the optimisation is running away: lower the learning rate (and stop a schedule that "
    "keeps raising it); if the outcome falls, roll back to the last healthy checkpoint"
)
R_COLLAPSE = (
    "roll back to the last checkpoint before the first precursor, apply the fix for the "
    "factor that moved first (IS correction, clipping, routing replay, learning rate)"
)
