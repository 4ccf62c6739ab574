"""Renderers: each output of one `Conclusion`, side by side.

`report` (text), `report_json`, `report_html`, `entries_view` (`--just-print-entries`),
`timeline`, `traces` (`merge-traces`) and the three database writers (`database`: pickle,
`database_sqlite`, `database_parquet`) import none of one another. What they share lives in
`presentation` (sentences, records for JSON and the databases, next steps, when/where),
`tables` (the database's one schema) and `output` (atomic writes that never replace what is
not a regular file).
"""
