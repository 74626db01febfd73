"""The run engine: list a tier's cases, run them in isolated workers (`workers`, `executors`),
journal each outcome, write the tables (`runner`), and the nightly job over every tier (`nightly`).

The engine knows tiers only through the `contracts.tiers.Tier` protocol."""
