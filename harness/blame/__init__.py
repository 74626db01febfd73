"""Whose failure is it: the blame rules (`rules`, data in harness/data/blame_rules.yaml) and the
probes that gather evidence for them in the worker (`probe` and the modules it calls)."""
