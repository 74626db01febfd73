"""The bottom layer of the harness: the names every other package codes against.

Nothing here imports another package of this project (only the standard library and third-party
libraries, torch only inside functions), so `reports` or a CI script can import it cheaply.

    contracts.status    the closed vocabularies: Status (+ FAILING, UNFINISHED, ...), stages,
                        Verdict (comparison), Blame, UpstreamSkip
    contracts.records   the records that cross packages: ModelSpec, Case, StageResult,
                        ModelCheck, CaseOutcome, ResultRow (= one results.parquet row), FallbackRow
    contracts.backends  the backend protocol, the adapter registry (entry-point group
                        ``harness.backends``) and the built-in cpu/cuda adapters
    contracts.settings  every HARNESS_* variable and harness default, resolved in one place
    contracts.errors    HarnessError and the contracts' errors; the one exception classifier (status,
                        error class, message, failing op)

Layers (docs/architecture.md): backend -> contracts -> agents, registry, reports -> harness.
"""
