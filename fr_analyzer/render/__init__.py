"""Renderers: each output of the one analysis result, side by side.

`renderer` is their one contract and registry: every output (`report` text, `report_json`,
`report_html`, the three databases `database` pickle, `database_sqlite`, `database_parquet`,
and `timeline`) is a `Renderer` the CLI picks by flag or by the name's ending, and each
module's `write` renders it. `entries_view` (`--just-print-entries`) and `traces`
(`merge-traces`) render beside them. None imports another. What they share lives in
`presentation` (sentences, records for JSON and the databases, next steps, when/where),
`tables` (the database's one schema) and `output` (atomic writes that never replace what is
not a regular file).
"""
