"""Root causes: from a backend-blamed row to the one aten call that broke it, and its checked repro.

    check_with_root_cause(spec, "neuron")   # harness.rootcause.localize: check, blame, localize
    explain: harness explain RUNDIR          # harness/cli/explain.py

Modules: `calls` (copy a call's inputs to the reference, recompute, judge by the tolerance class,
where it ran), `shadow` (the dispatch mode that shadows every device call), `steps` (the failing
step again under the shadow: eager forward, training step, compiled step), `minify` (the compiled
graphs a dynamo backend is handed, minimized by PyTorch's accuracy minifier), `repro` (a root cause
as a registry entry and a standalone test, verified on the backend and the reference), `localize`
(the routes in order, bounded by a time limit). docs/rootcause.md.
"""
