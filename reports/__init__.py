"""Coverage reports: Parquet tables, HTML, JUnit, run-to-run comparison."""
