"""The shape registry: recorded op calls of real models, stored as Parquet, replayed as the unit tier."""
