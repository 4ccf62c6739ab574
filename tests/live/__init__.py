"""Specs for `fr-analyze live`: snapshots of a running job compared, and a real torch job."""
