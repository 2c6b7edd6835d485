"""Remediation: the policy that maps alerts to actions, the actions' effects on the run's
controls, and the judgement of which checkpoints are healthy."""
